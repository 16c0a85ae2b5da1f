"""`nev batch plan` and each round's plan: the in-flight per alias and the batch size, and which
constraint binds (pure; the inputs are read at the edge by `inputs_from_settings`).

Per alias the in-flight is the smallest of these (the first named wins a tie):

| constraint | in flight | from |
|---|---|---|
| `gateway_limit` | `max_inflight`; `rpm` x latency / 60; `tpm` x latency / 60 / tokens per call | `folknet.json` (latency and tokens per call: the sweep at its knee) |
| `pool_knee` | the level past which throughput stops growing | the alias's `nev rig throughput` sweep |
| `lane_cpu` | the lane's candidates/s (CPUs / CPU-seconds per candidate) x latency, split over the aliases by what they ask | the latest round record of the function (`lane_cpus`, `lane_cpu_s` / new unique) |
| `asked` | INFLIGHT of `--models` | the share |

and the batch size is N of the share unless the budget left pays for fewer candidates
(`budget`: each alias gets its share of what is left, in proportion to its N, at its measured
cost: the prompt once per call, scaled to this round's prompt, and the answer per candidate). A
429 in the round before (the pacer froze the alias) makes `cooldown` the binding constraint: the
alias draws at its lowered rate. What binds is, in that order: `cooldown`, `budget`, then the
in-flight's constraint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from bench import folknet as fk
from bench.budget import CHARS_PER_TOKEN, DEFAULT_ANSWER_TOKENS, Budget
from bench.gateway import split_draws
from lanes.base import jsonfile
from lanes.base.errors import ConfigError


class Bound(StrEnum):
    GATEWAY = "gateway_limit"
    KNEE = "pool_knee"
    LANE_CPU = "lane_cpu"
    ASKED = "asked"
    BUDGET = "budget"
    COOLDOWN = "cooldown"


@dataclass(frozen=True)
class Declared:
    """An alias's limits at the gateway (`folknet.json`)."""

    max_inflight: int
    rpm: int | None = None
    tpm: int | None = None


@dataclass(frozen=True)
class Measured:
    """What the alias's latest throughput sweep says (None: not measured)."""

    knee: int | None = None
    latency_s: float | None = None        # p50 at the knee (else at the peak)
    tokens_per_call: float | None = None  # output tokens per request at that level
    peak_output_tok_s: float | None = None

    @classmethod
    def from_sweep(cls, sweep: Mapping[str, object] | None) -> Measured:
        if not sweep:
            return cls()
        k, levels = sweep.get("knee"), sweep.get("levels")
        knee = k if isinstance(k, int) else None
        at = knee if knee is not None else sweep.get("peak_at")
        row = next((r for r in (levels if isinstance(levels, list) else [])
                    if isinstance(r, dict) and r.get("inflight") == at), {})
        lat = row.get("latency_p50_s")
        tok, req = row.get("output_tok_s"), row.get("req_s")
        per_call = tok / req if isinstance(tok, int | float) and isinstance(req, int | float) and req > 0 else None
        peak = sweep.get("peak_output_tok_s")
        return cls(knee, float(lat) if isinstance(lat, int | float) and lat > 0 else None, per_call,
                   float(peak) if isinstance(peak, int | float) and peak > 0 else None)


@dataclass(frozen=True)
class Lane:
    """The lane's CPUs and what compiling and scoring one candidate cost there (None: unknown)."""

    cpus: int | None = None
    cpu_s_per_candidate: float | None = None


@dataclass(frozen=True)
class Ask:
    """One share as asked: N candidates at INFLIGHT."""

    alias: str
    n: int
    inflight: int
    supports_n: bool = True


@dataclass(frozen=True)
class Cost:
    """What drawing costs in tokens: the prompt (once per call) and each answer (per candidate)."""

    prompt_tokens: int
    answer_tokens: int

    def of(self, n: int, inflight: int, supports_n: bool) -> int:
        """N candidates drawn as the batch draws them (`split_draws`: n per call where supported)."""
        return len(split_draws(n, inflight, supports_n)) * self.prompt_tokens + n * self.answer_tokens


@dataclass(frozen=True)
class AliasPlan:
    alias: str
    asked_n: int
    asked_inflight: int
    inflight: int
    n: int
    bound: Bound
    inflight_by: Bound
    why: str
    limits: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"alias": self.alias, "asked_n": self.asked_n, "asked_inflight": self.asked_inflight,
                "inflight": self.inflight, "n": self.n, "bound": self.bound.value,
                "inflight_by": self.inflight_by.value, "why": self.why, "limits": self.limits}

    def line(self) -> str:
        return (f"plan: {self.alias} {self.n} at {self.inflight} (asked {self.asked_n} at {self.asked_inflight}): "
                f"bound by {self.bound.value} ({self.why})")


#: one in-flight limit: its constraint, its key in the plan's `limits`, the in-flight it allows, why
_Limit = tuple[Bound, str, float, str]


def _inflight_limits(ask: Ask, d: Declared, m: Measured, lane_share: float | None) -> list[_Limit]:
    out: list[_Limit] = [(Bound.GATEWAY, "max_inflight", float(d.max_inflight),
                          f"the gateway's in-flight limit is {d.max_inflight}")]
    if d.rpm and m.latency_s:
        out.append((Bound.GATEWAY, "rpm", d.rpm * m.latency_s / 60,
                    f"the gateway's {d.rpm} requests/min at {m.latency_s:.2f} s a call"))
    if d.tpm and m.latency_s and m.tokens_per_call:
        out.append((Bound.GATEWAY, "tpm", d.tpm * m.latency_s / 60 / m.tokens_per_call,
                    f"the gateway's {d.tpm} tokens/min at {m.tokens_per_call:.0f} tokens a call"))
    if m.knee is not None:
        out.append((Bound.KNEE, "knee", float(m.knee), f"the pool's throughput stops growing at {m.knee} in flight"))
    if lane_share is not None and m.latency_s:
        out.append((Bound.LANE_CPU, "lane_cpu", lane_share * m.latency_s,
                    f"the lane verifies {lane_share:.2f} candidates/s of this alias"))
    out.append((Bound.ASKED, "asked", float(ask.inflight), f"asked {ask.inflight} in flight"))
    return out


def plan(asks: Sequence[Ask], declared: Mapping[str, Declared], measured: Mapping[str, Measured],
         lane: Lane | None = None, budget_left: Budget | None = None,
         costs: Mapping[str, Cost] | None = None,
         cooldown_s: Mapping[str, float] | None = None) -> list[AliasPlan]:
    """One plan per share (see the module's table)."""
    lane = lane or Lane()
    budget_left = budget_left or Budget()
    cost = costs or {}
    cool = cooldown_s or {}
    lane_rate = (lane.cpus / lane.cpu_s_per_candidate
                 if lane.cpus and lane.cpu_s_per_candidate and lane.cpu_s_per_candidate > 0 else None)
    total_inflight = sum(a.inflight for a in asks) or 1
    total_n = sum(a.n for a in asks) or 1
    out = []
    for ask in asks:
        d = declared.get(ask.alias, Declared(ask.inflight))
        m = measured.get(ask.alias, Measured())
        share = lane_rate * ask.inflight / total_inflight if lane_rate is not None else None
        limits = _inflight_limits(ask, d, m, share)
        by, _key, value, why = min(limits, key=lambda x: x[2])     # min keeps the first of equals
        inflight = max(1, math.floor(value + 1e-9))
        n, bound = ask.n, by
        named: dict[str, float | None] = {key: round(v, 2) for _b, key, v, _w in limits}
        if budget_left.tokens is not None:
            c = cost.get(ask.alias) or cost.get("*")
            if c:
                mine = budget_left.tokens * ask.n // total_n
                afford = next((k for k in range(ask.n, 0, -1) if c.of(k, inflight, ask.supports_n) <= mine), 0)
                named["budget"] = float(afford)
                if afford < ask.n:
                    n, bound = afford, Bound.BUDGET
                    why = (f"{mine} tokens left pay for {afford} of {ask.n} (~{c.prompt_tokens} a call's prompt, "
                           f"~{c.answer_tokens} an answer)")
        if cool.get(ask.alias, 0) > 0:
            bound = Bound.COOLDOWN
            why = f"a 429 froze it for {cool[ask.alias]:.1f} s in the round before; it draws at a lowered rate"
        out.append(AliasPlan(ask.alias, ask.n, ask.inflight, min(inflight, max(n, 1)), n, bound, by, why, named))
    return out


# ---- the edge: what the plan is made from ----

def declared_of(net: fk.Folknet) -> dict[str, Declared]:
    """Every alias's limits as `folknet.json` declares them. `rpm` and `tpm` were validated where
    the file was read (`bench.folknet.load`: absent is no limit; anything but a positive integer is
    refused there, one line naming the alias and the field), so they are taken as they are."""
    return {a.name: Declared(a.max_inflight, a.rpm, a.tpm) for a in net.aliases.values()}


def read_throughput(directory: Path) -> dict[str, dict[str, object]]:
    """The saved `nev rig throughput` sweeps by alias, each the JSON document as saved (read
    leniently by `Measured.from_sweep`); a file that is not a sweep is skipped."""
    out: dict[str, dict[str, object]] = {}
    if not directory.is_dir():
        return out
    for p in sorted(directory.glob("*.json")):
        try:
            d = jsonfile.load(p, "throughput sweep")
        except ConfigError:
            continue
        if isinstance(d, dict) and isinstance(d.get("alias"), str) and isinstance(d.get("levels"), list):
            out[d["alias"]] = d
    return out


def lane_of(records: Sequence[Mapping[str, object]]) -> Lane:
    """The lane's CPUs and CPU-seconds per verified candidate from round records (newest last)."""
    for r in reversed(records):
        fresh, phases, cpu_s = r.get("new_unique") or 0, r.get("phases"), r.get("lane_cpu_s")
        cpus = (phases.get("cpus") if isinstance(phases, Mapping) else None) or r.get("lane_cpus")
        if isinstance(fresh, int | float) and fresh and isinstance(cpu_s, int | float) and cpu_s > 0:
            return Lane(int(cpus) if isinstance(cpus, int | float) and cpus else None, cpu_s / fresh)
    return Lane()


def cost_of(records: Sequence[Mapping[str, object]], prompt_chars: int | None, default: Cost) -> dict[str, Cost]:
    """By alias, from the calls of round records: the prompt's tokens per character (the most seen)
    times `prompt_chars` (None: the newest record's prompt), and the largest answer per choice;
    "*": for an alias never seen (characters / 3, else `default`)."""
    chars = prompt_chars if prompt_chars is not None else next(
        (pc for r in reversed(records) if isinstance(pc := r.get("prompt_chars"), int)), None)
    ratio: dict[str, float] = {}
    answer: dict[str, int] = {}
    for r in records:
        pc, calls = r.get("prompt_chars"), r.get("calls")
        for c in calls if isinstance(calls, list) else []:
            if not isinstance(c, dict) or c.get("status") != "ok" or not c.get("choices"):
                continue
            a = c["alias"]
            if isinstance(pc, int) and pc > 0:
                ratio[a] = max(ratio.get(a, 0.0), c.get("prompt_tokens", 0) / pc)
            answer[a] = max(answer.get(a, 0), math.ceil(c.get("completion_tokens", 0) / c["choices"]))
    out = {"*": Cost(math.ceil(chars / CHARS_PER_TOKEN) if chars else default.prompt_tokens, default.answer_tokens)}
    for a in answer:
        prompt = math.ceil(ratio[a] * chars) if a in ratio and chars else out["*"].prompt_tokens
        out[a] = Cost(prompt, answer[a])
    return out


def latest_records(workdir: Path, function: str, limit: int = 20) -> list[dict[str, object]]:
    """The function's round records under `target/batch/` (oldest first, the newest `limit`), as
    JSON read leniently: a record of any earlier version informs the plan with what it holds."""
    if not workdir.is_dir():
        return []
    files = sorted(workdir.glob(f"{function}-*/record-r*.json"), key=lambda p: p.stat().st_mtime)[-limit:]
    out = []
    for p in files:
        try:
            d = jsonfile.load(p, "batch round record")
        except ConfigError:
            continue
        if isinstance(d, dict):
            out.append(d)
    return out


def cooldowns(record: Mapping[str, object] | None) -> dict[str, float]:
    """Seconds each alias was frozen by 429s in a round record (its `constraints`)."""
    out: dict[str, float] = {}
    models = (record or {}).get("models")
    for alias, m in models.items() if isinstance(models, Mapping) else ():
        secs = ((m or {}).get("constraints") or {}).get("seconds") or {}
        if isinstance(secs.get("cooldown"), int | float) and secs["cooldown"] > 0:
            out[alias] = float(secs["cooldown"])
    return out


def candidate_cost(path: Path | None = None) -> Cost:
    """A candidate's declared prompt and answer tokens in `capacity.json` (NEV_CAPACITY_FILE): the
    cost before any call was seen."""
    from lanes.base import settings

    try:
        c = jsonfile.load(path or settings.path(settings.CAPACITY_FILE), "capacity file")["candidate"]
        return Cost(int(c["prompt_tokens"]), int(c["answer_tokens"]))
    except (ConfigError, ValueError, KeyError, TypeError):
        return Cost(1800, DEFAULT_ANSWER_TOKENS)


def render(plans: Sequence[AliasPlan]) -> list[str]:
    rows = [f"{'alias':22} {'n':>4} {'in flight':>9} {'asked':>9}  bound by"]
    for p in plans:
        rows.append(f"{p.alias[:22]:22} {p.n:>4} {p.inflight:>9} {f'{p.asked_n} at {p.asked_inflight}':>9}  "
                    f"{p.bound.value}: {p.why}")
    return rows
