"""A batch round's record: `target/batch/<batch>/record-rN.json`, with one share per model.

The batch builds a `RoundRecord` after each round and writes it (`write`); `read` loads one back
with every field checked (`lanes.base.jsonfile.Fields`: a bad field is named with its file). The ledger's
line is drawn from the record's JSON form (`bench.ledger.line_for`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from lanes.base import jsonfile
from lanes.base.jsonfile import Fields

_PASS_AT = re.compile(r"pass@\d+")
_NUMBER = (int, float)


class ShareStatus(StrEnum):
    OK = "ok"            # every call of the share answered
    FAILED = "failed"    # a call failed after its retries: no new call of that model started
    BUDGET = "budget"    # the next call would have passed the budget: no new call of that model started


def now() -> str:
    """A round's start or end, a kept version's date: UTC to the second."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def record_path(run_dir: Path, rnd: int) -> Path:
    return run_dir / f"record-r{rnd}.json"


def _pass_at(f: Fields, o: dict[str, object], where: str) -> dict[str, float]:
    return {k: float(f.get(o, k, _NUMBER, where)) for k in o if _PASS_AT.fullmatch(k)}


@dataclass(frozen=True)
class ModelRound:
    """One model's share of a round: what it was asked, what came back, what it cost."""

    tier: str
    n: int
    inflight: int
    note: str | None
    candidates: int
    answers: int
    compiled: int
    passed: int
    best: int | None
    tokens_in: int
    tokens_out: int
    cached_tokens: int
    draw_s: float
    calls: int
    retries: int
    rate_limited: int
    pacer_wait_s: float
    status: ShareStatus
    error: str | None
    inflight_meter: dict[str, object] = field(default_factory=dict)   # the pacer's meter, as JSON
    pass_at: dict[str, float] = field(default_factory=dict)   # pass@k by k, written as "pass@k" keys
    gpu_s: float = 0.0   # estimated from the pool's measured throughput (bench.budget)
    #: the gateway's "slots in use" 429s its calls waited out (not rate limits: `rate_limited` is those)
    gateway_waits: int = 0
    #: the round's plan for the model and what bound it, for how long: {"planned", "why",
    #: "inflight_by", "seconds": {constraint: s}, "bound"} (bench.plan, bench.batch.constraints)
    constraints: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"tier": self.tier, "n": self.n, "inflight": self.inflight, "note": self.note,
                "candidates": self.candidates, "answers": self.answers, "compiled": self.compiled,
                "passed": self.passed, "best": self.best, "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out, "cached_tokens": self.cached_tokens, "draw_s": self.draw_s,
                "calls": self.calls, "retries": self.retries, "rate_limited": self.rate_limited,
                "gateway_waits": self.gateway_waits, "pacer_wait_s": self.pacer_wait_s, "status": self.status.value, "error": self.error,
                "inflight_meter": self.inflight_meter, "gpu_s": self.gpu_s, "constraints": self.constraints,
                **self.pass_at}

    @classmethod
    def from_json(cls, f: Fields, obj: object, where: str) -> ModelRound:
        o = f.obj(obj, where)
        raw = f.get(o, "status", str, where)
        try:
            status = ShareStatus(raw)
        except ValueError:
            raise f.fail(f"{where}.status", f"is {raw!r}, not {', '.join(s.value for s in ShareStatus)}") from None

        def i(key: str) -> int:
            return int(f.get(o, key, int, where))

        return cls(tier=f.get(o, "tier", str, where), n=i("n"), inflight=i("inflight"),
                   note=f.get(o, "note", str, where, required=False), candidates=i("candidates"),
                   answers=i("answers"), compiled=i("compiled"), passed=i("passed"),
                   best=f.get(o, "best", int, where, required=False), tokens_in=i("tokens_in"),
                   tokens_out=i("tokens_out"), cached_tokens=i("cached_tokens"),
                   draw_s=float(f.get(o, "draw_s", _NUMBER, where)), calls=i("calls"), retries=i("retries"),
                   rate_limited=i("rate_limited"), pacer_wait_s=float(f.get(o, "pacer_wait_s", _NUMBER, where)),
                   status=status, error=f.get(o, "error", str, where, required=False),
                   inflight_meter=dict(f.get(o, "inflight_meter", dict, where, required=False, default={})),
                   pass_at=_pass_at(f, o, where),
                   gpu_s=float(f.get(o, "gpu_s", _NUMBER, where, required=False, default=0.0)),
                   gateway_waits=int(f.get(o, "gateway_waits", int, where, required=False, default=0)),
                   constraints=dict(f.get(o, "constraints", dict, where, required=False, default={})))


@dataclass(frozen=True)
class RoundRecord:
    """One round (batch) of a run: its candidates, how many compiled and passed, its phases, every
    model's share and every call as metered."""

    batch: str
    function: str
    round: int
    escalated: bool
    start: str
    end: str
    lane_cpu_s: float
    candidates: int
    unique: int
    new_unique: int
    duplicates: int
    compiled: int
    best: int | None
    cases_run: int | None
    passed: bool
    prompt_prefix_chars: int
    prompt_chars: int
    failing_cases_shown: int
    versions_shown: int
    phases: dict[str, object]          # bench.phases.Phases.to_json(), passed through
    models: dict[str, ModelRound]
    pass_at: dict[str, float]
    calls: list[dict[str, object]] = field(default_factory=list)   # CallRecord.to_json()s
    #: the run's budget and spend after this round (bench.budget.Meter.to_json); {}: none recorded
    budget: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"batch": self.batch, "function": self.function, "round": self.round,
                "escalated": self.escalated, "start": self.start, "end": self.end, "lane_cpu_s": self.lane_cpu_s,
                "candidates": self.candidates, "unique": self.unique, "new_unique": self.new_unique,
                "duplicates": self.duplicates, "compiled": self.compiled, "best": self.best,
                "cases_run": self.cases_run, "passed": self.passed, "prompt_prefix_chars": self.prompt_prefix_chars,
                "prompt_chars": self.prompt_chars, "failing_cases_shown": self.failing_cases_shown,
                "versions_shown": self.versions_shown, "phases": self.phases,
                "models": {a: m.to_json() for a, m in self.models.items()}, **self.pass_at, "budget": self.budget,
                "calls": self.calls}

    @classmethod
    def from_json(cls, f: Fields, obj: object) -> RoundRecord:
        o = f.obj(obj, "(top level)")

        def i(key: str) -> int:
            return int(f.get(o, key, int, ""))

        models = f.get(o, "models", dict, "")
        calls = f.get(o, "calls", list, "", required=False, default=[])
        for n, c in enumerate(calls):
            f.obj(c, f"calls[{n}]")
        return cls(batch=f.get(o, "batch", str, ""), function=f.get(o, "function", str, ""), round=i("round"),
                   escalated=f.get(o, "escalated", bool, ""), start=f.get(o, "start", str, ""),
                   end=f.get(o, "end", str, ""), lane_cpu_s=float(f.get(o, "lane_cpu_s", _NUMBER, "")),
                   candidates=i("candidates"), unique=i("unique"), new_unique=i("new_unique"),
                   duplicates=i("duplicates"), compiled=i("compiled"),
                   best=f.get(o, "best", int, "", required=False),
                   cases_run=f.get(o, "cases_run", int, "", required=False),
                   passed=f.get(o, "passed", bool, ""), prompt_prefix_chars=i("prompt_prefix_chars"),
                   prompt_chars=i("prompt_chars"), failing_cases_shown=i("failing_cases_shown"),
                   versions_shown=i("versions_shown"), phases=dict(f.get(o, "phases", dict, "")),
                   models={a: ModelRound.from_json(f, m, f"models.{a}") for a, m in models.items()},
                   pass_at=_pass_at(f, o, ""), calls=list(calls),
                   budget=dict(f.get(o, "budget", dict, "", required=False, default={})))

    @property
    def pass_at_1(self) -> float:
        return self.pass_at.get("pass@1", 0.0)


def write(run_dir: Path, rec: RoundRecord) -> Path:
    p = record_path(run_dir, rec.round)
    p.write_text(json.dumps(rec.to_json(), indent=1), encoding="utf-8")
    return p


def read(path: Path) -> RoundRecord:
    """A round's record; ConfigError naming the file and the field when it is not JSON or a field is bad."""
    return RoundRecord.from_json(Fields(path), jsonfile.load(path, "batch round record"))
