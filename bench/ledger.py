"""The ledger: one JSON line per model batch in `ledger/<worktree>.jsonl` on the share.

Each line: the batch id, function, round, start and end time, lane CPU-seconds, the run's budget
and spend (`budget`: tokens and GPU-seconds, and `bound` when the budget stopped the draw), and per
model the candidates, compiled count, best score, tokens, GPU-seconds, draw seconds, which
constraint bound it for how long (`constraints`) and each answered call's queue wait, request sent
to first byte (`first_byte_s`). No host names or addresses: a line that carries
one is refused before it is written (the share is open to the subnet).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from lanes.base import jsonfile, settings
from lanes.base.errors import ConfigError

_ADDR = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b|://|\b[a-z0-9-]{1,63}\.(?:local|lan|internal|com|net|org)\b", re.I)


def share_root() -> Path:
    """The share: NEV_LANE_SHARED on a lane or when set; on the dev box, the lanes file's `nas`."""
    from lanes import lanesfile

    if not settings.get(settings.ON_LANE) and not settings.given(settings.LANE_SHARED):
        path = lanesfile.lanes_file_path()
        if path.exists():
            nas = lanesfile.load(path).nas
            if nas:
                return Path(nas).expanduser()
    return settings.path(settings.LANE_SHARED)


def ledger_dir(shared: Path | None = None) -> Path:
    return (shared or share_root()) / "ledger"


def find_address(obj: object, where: str = "") -> str | None:
    """The first field holding a host address or URL, or None."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            got = find_address(v, f"{where}.{k}" if where else str(k))
            if got:
                return got
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            got = find_address(v, f"{where}[{i}]")
            if got:
                return got
    elif isinstance(obj, str) and _ADDR.search(obj):
        return where
    return None


_SCRUB = re.compile(r"\S*://\S*|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"
                    r"|\b(?:[a-z0-9-]{1,63}\.)+(?:local|lan|internal|com|net|org)\b", re.I)


_J = TypeVar("_J")


def scrub(obj: _J) -> _J:
    """Replace addresses, URLs and host names (what `find_address` finds) inside strings by
    `<host>`."""
    return jsonfile.map_strings(obj, lambda s: _SCRUB.sub("<host>", s))


def line_for(record: dict[str, object]) -> LedgerLine:
    """The ledger's line of a batch record (a `bench.rounds.RoundRecord`'s JSON form)."""
    return LedgerLine.from_json(jsonfile.Fields("the batch's ledger line"), _line_json(record))


def _line_json(record: dict) -> dict[str, object]:
    """The ledger's fields of a batch record, scrubbed (the JSON document the line is read from)."""
    models: dict[str, dict[str, object]] = {}
    for alias, m in record["models"].items():
        models[alias] = {k: m.get(k) for k in ("tier", "candidates", "compiled", "best", "tokens_in", "tokens_out",
                                               "gpu_s", "draw_s", "status", "error", "rate_limited",
                                               "gateway_waits", "calls", "constraints")}
        # each answered call's queue wait, request sent to first byte (rig/queues.py reads them)
        models[alias]["first_byte_s"] = [c["first_byte_s"] for c in record.get("calls") or []
                                         if c.get("alias") == alias
                                         and isinstance(c.get("first_byte_s"), int | float)]
    line: dict[str, object] = {
            "batch": record["batch"], "function": record["function"], "round": record["round"],
            "escalated": record["escalated"], "start": record["start"], "end": record["end"],
            "lane_cpu_s": record["lane_cpu_s"], "candidates": record["candidates"],
            "unique": record["unique"], "compiled": record["compiled"], "best": record["best"],
            "cases_run": record["cases_run"], "passed": record["passed"], "models": models}
    if record.get("budget"):
        line["budget"] = record["budget"]
    return scrub(line)


def append(path: Path, line: LedgerLine) -> None:
    data = line.to_json()
    where = find_address(data)
    if where:
        raise ConfigError(f"ledger line field {where} holds a host address; nothing written")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(data, sort_keys=True) + "\n")


# What a ledger line's fields may hold (line_for writes them): counts are whole numbers >= 0,
# seconds numbers >= 0, the rest text; null (or absent) for any of them.
_COUNTS = ("round", "candidates", "unique", "compiled", "best", "cases_run")
_MODEL_COUNTS = ("candidates", "compiled", "best", "tokens_in", "tokens_out", "rate_limited", "gateway_waits", "calls")
_MODEL_SECONDS = ("gpu_s", "draw_s")
_TEXT = ("batch", "function", "start", "end")
_MODEL_TEXT = ("status", "error", "tier")
_BUDGET_KEYS = ("tokens", "gpu_s", "spent_tokens", "spent_gpu_s", "bound", "why")


# Bounds no real batch comes near (a trillion tokens or calls; about three years of seconds): a
# line past them was not written by a batch, and summing it would make any budget meaningless.
MAX_COUNT = 10**12
MAX_SECONDS = 10**8

# `object` below is a JSON value passed through as read and written back unchanged: a key this
# version does not know (`extra`), the meter's `why`, a model's `constraints` mapping.


def _count(f: jsonfile.Fields, o: dict, key: str, where: str, whole: bool) -> float | None:
    v: float | None = f.get(o, key, int if whole else (int, float), where, required=False)
    if v is None:
        return None
    top = MAX_COUNT if whole else MAX_SECONDS
    if not 0 <= v <= top:
        name = f"{where}.{key}" if where else key
        raise f.fail(name, f"must be between 0 and {top:g}, not {v:g}")
    return v


def _int(f: jsonfile.Fields, o: dict, key: str, where: str) -> int | None:
    v = _count(f, o, key, where, True)
    return None if v is None else int(v)


def _text(f: jsonfile.Fields, o: dict, key: str, where: str) -> str | None:
    v: str | None = f.get(o, key, str, where, required=False)
    return v


def _back(values: dict[str, object], absent: frozenset[str],
          extra: dict[str, object]) -> dict[str, object]:
    """A record's JSON as it was read: its keys, a null one left out when the line had no such key,
    and the keys this version does not know."""
    return {**{k: v for k, v in values.items() if v is not None or k not in absent}, **extra}


def _shape(o: dict, known: tuple[str, ...]) -> tuple[frozenset[str], dict[str, object]]:
    return (frozenset(k for k in known if k not in o),
            {str(k): v for k, v in o.items() if k not in known})


_MODEL_KEYS = ("tier", *_MODEL_COUNTS, *_MODEL_SECONDS, "status", "error", "constraints",
               "first_byte_s")
_LINE_KEYS = (*_TEXT, *_COUNTS, "lane_cpu_s", "passed", "escalated", "models", "budget")


@dataclass(frozen=True)
class ModelLine:
    """One model's part of a batch's ledger line."""

    tier: str | None = None
    candidates: int | None = None
    compiled: int | None = None
    best: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    rate_limited: int | None = None
    gateway_waits: int | None = None
    calls: int | None = None
    gpu_s: float | None = None
    draw_s: float | None = None
    status: str | None = None
    error: str | None = None
    #: the round's plan for the model and what bound it ({"bound", "seconds", ...}: bench.batch)
    constraints: dict[str, object] | None = None
    #: each answered call's queue wait, request sent to first byte (rig/queues.py reads them)
    first_byte_s: tuple[float, ...] | None = None
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    extra: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, f: jsonfile.Fields, obj: object, where: str) -> ModelLine:
        m = f.obj(obj, where)
        # checked in the order the fields were always checked (the first bad one is named)
        c = [_int(f, m, k, where) for k in _MODEL_COUNTS]
        s = [_count(f, m, k, where, False) for k in _MODEL_SECONDS]
        t = [_text(f, m, k, where) for k in _MODEL_TEXT]
        constraints = f.get(m, "constraints", dict, where, required=False)
        waits = f.get(m, "first_byte_s", list, where, required=False)
        for i, v in enumerate(waits or []):
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= MAX_SECONDS:
                raise f.fail(f"{where}.first_byte_s[{i}]",
                             f"must be seconds between 0 and {MAX_SECONDS:g}")
        absent, extra = _shape(m, _MODEL_KEYS)
        return cls(candidates=c[0], compiled=c[1], best=c[2], tokens_in=c[3], tokens_out=c[4],
                   rate_limited=c[5], gateway_waits=c[6], calls=c[7], gpu_s=s[0], draw_s=s[1],
                   status=t[0], error=t[1], tier=t[2], constraints=constraints,
                   first_byte_s=None if waits is None else tuple(waits), absent=absent, extra=extra)

    def to_json(self) -> dict[str, object]:
        values: dict[str, object] = {
            "tier": self.tier, "candidates": self.candidates, "compiled": self.compiled,
            "best": self.best, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
            "gpu_s": self.gpu_s, "draw_s": self.draw_s, "status": self.status, "error": self.error,
            "rate_limited": self.rate_limited, "gateway_waits": self.gateway_waits,
            "calls": self.calls,
            "constraints": self.constraints,
            "first_byte_s": None if self.first_byte_s is None else list(self.first_byte_s)}
        return _back(values, self.absent, self.extra)


@dataclass(frozen=True)
class LineBudget:
    """The budget a batch ran under and its spend then (`bench.budget.Meter.to_json`)."""

    tokens: int | None = None
    gpu_s: float | None = None
    spent_tokens: int | None = None
    spent_gpu_s: float | None = None
    bound: str | None = None
    why: object = None
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    extra: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, f: jsonfile.Fields, b: dict) -> LineBudget:
        absent, extra = _shape(b, _BUDGET_KEYS)
        return cls(tokens=_int(f, b, "tokens", "budget"),
                   spent_tokens=_int(f, b, "spent_tokens", "budget"),
                   gpu_s=_count(f, b, "gpu_s", "budget", False),
                   spent_gpu_s=_count(f, b, "spent_gpu_s", "budget", False),
                   bound=_text(f, b, "bound", "budget"), why=b.get("why"), absent=absent,
                   extra=extra)

    def to_json(self) -> dict[str, object]:
        values: dict[str, object] = {
            "tokens": self.tokens, "gpu_s": self.gpu_s, "spent_tokens": self.spent_tokens,
            "spent_gpu_s": self.spent_gpu_s, "bound": self.bound, "why": self.why}
        return _back(values, self.absent, self.extra)


@dataclass(frozen=True)
class LedgerLine:
    """One batch's line in the ledger (see the module's text)."""

    batch: str | None = None
    function: str | None = None
    start: str | None = None
    end: str | None = None
    round: int | None = None
    candidates: int | None = None
    unique: int | None = None
    compiled: int | None = None
    best: int | None = None
    cases_run: int | None = None
    lane_cpu_s: float | None = None
    passed: bool | None = None
    escalated: bool | None = None
    models: dict[str, ModelLine] | None = None
    budget: LineBudget | None = None
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    extra: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    def model_lines(self) -> dict[str, ModelLine]:
        return self.models or {}

    @classmethod
    def from_json(cls, f: jsonfile.Fields, obj: object) -> LedgerLine:
        o = f.obj(obj, "(line)")
        # checked in the order the fields were always checked (the first bad one is named)
        c = [_int(f, o, k, "") for k in _COUNTS]
        cpu = _count(f, o, "lane_cpu_s", "", False)
        t = [_text(f, o, k, "") for k in _TEXT]
        passed: bool | None = f.get(o, "passed", bool, "", required=False)
        escalated: bool | None = f.get(o, "escalated", bool, "", required=False)
        raw_models = f.get(o, "models", dict, "", required=False)
        models = None if raw_models is None else {
            str(alias): ModelLine.from_json(f, m, f"models.{alias}")
            for alias, m in raw_models.items()}
        raw_budget = f.get(o, "budget", dict, "", required=False)
        budget = None if raw_budget is None else LineBudget.from_json(f, raw_budget)
        absent, extra = _shape(o, _LINE_KEYS)
        return cls(batch=t[0], function=t[1], start=t[2], end=t[3], round=c[0], candidates=c[1],
                   unique=c[2], compiled=c[3], best=c[4], cases_run=c[5], lane_cpu_s=cpu,
                   passed=passed, escalated=escalated, models=models, budget=budget,
                   absent=absent, extra=extra)

    def to_json(self) -> dict[str, object]:
        values: dict[str, object] = {
            "batch": self.batch, "function": self.function, "round": self.round,
            "escalated": self.escalated, "start": self.start, "end": self.end,
            "lane_cpu_s": self.lane_cpu_s, "candidates": self.candidates, "unique": self.unique,
            "compiled": self.compiled, "best": self.best, "cases_run": self.cases_run,
            "passed": self.passed,
            "models": (None if self.models is None
                       else {a: m.to_json() for a, m in self.models.items()}),
            "budget": None if self.budget is None else self.budget.to_json()}
        return _back(values, self.absent, self.extra)


def parse_line(f: jsonfile.Fields, obj: object) -> LedgerLine:
    """One ledger line, checked where it is read (pure): an object whose counts are whole numbers
    >= 0 and whose seconds are numbers >= 0, so nothing negative or not a number is ever summed into
    a spend or a budget. ConfigError naming the field otherwise."""
    return LedgerLine.from_json(f, obj)


def read(path: Path) -> list[LedgerLine]:
    """Every line of a ledger file, each checked (`parse_line`); a bad line is one ConfigError naming
    the file, the line and the field (the ledger is append-only: fix that line by hand)."""
    return [parse_line(jsonfile.Fields(f"{path}: line {n}"), obj)
            for n, obj in jsonfile.load_lines(path, "ledger", missing=[])]


def _checked(path: Path, text: str, on_bad: Callable[[ConfigError], None]) -> list[LedgerLine]:
    """The lines of a ledger's `text` that pass `parse_line`; each other one to `on_bad`."""
    good: list[LedgerLine] = []
    for n, raw in enumerate(text.split("\n"), 1):
        if not raw.strip():
            continue
        where = f"{path}: line {n}"
        try:
            good.append(parse_line(jsonfile.Fields(where), jsonfile.parse(raw, where, "ledger")))
        except ConfigError as e:
            on_bad(e)
    return good


def read_for_budget(path: Path, say: Callable[[str], None]) -> list[LedgerLine]:
    """The lines of a ledger file a budget may count: each checked (`parse_line`); a line that does
    not parse or is out of bounds is named to `say` (file, line, field) and skipped, never summed.
    A ledger that cannot be read at all is a ConfigError (nothing is known of the spend)."""
    if not path.exists():
        return []
    text = jsonfile.read_text(path, "ledger", "")
    return _checked(path, text,
                    lambda e: say(f"{e}; that line is skipped, not counted against the budget"))


def read_lenient(path: Path) -> tuple[list[LedgerLine], int]:
    """The lines of a ledger file that pass `parse_line`, and how many did not (or 1 for a file
    that cannot be read at all): for views that show the rest (the dashboard, `--list`)."""
    try:
        text = jsonfile.read_text(path, "ledger", "")
    except ConfigError:
        return [], 1
    bad: list[ConfigError] = []
    return _checked(path, text, bad.append), len(bad)


def last_time(line: LedgerLine) -> str | None:
    """When a batch ended (else started), as written (ISO, UTC)."""
    return line.end or line.start or None


@dataclass(frozen=True)
class LedgerFile:
    """One ledger in the share's folder (`nev ledger --list`)."""

    worktree: str
    batches: int
    last: str | None
    unreadable_lines: int
    file: str

    def to_json(self) -> dict[str, object]:
        return {"worktree": self.worktree, "batches": self.batches, "last": self.last,
                "unreadable_lines": self.unreadable_lines, "file": self.file}


def ledgers(folder: Path) -> list[LedgerFile]:
    """Every ledger in `folder` (one per worktree or job, `<name>.jsonl`): its batches, the last
    batch's time and the lines it could not read; the most recent first."""
    out = []
    for f in sorted(folder.glob("*.jsonl")):
        lines, bad = read_lenient(f)
        times = [t for t in map(last_time, lines) if t]
        out.append(LedgerFile(f.stem, len(lines), max(times) if times else None, bad, str(f)))
    return sorted(out, key=lambda r: (r.last or "", r.worktree), reverse=True)


def ledgers_table(rows: Sequence[LedgerFile]) -> list[str]:
    w = max([len("worktree"), *(len(r.worktree) for r in rows)])
    out = [f"{'worktree':<{w}}  {'batches':>7}  last batch"]
    for r in rows:
        bad = f"  ({r.unreadable_lines} unreadable line(s))" if r.unreadable_lines else ""
        out.append(f"{r.worktree:<{w}}  {r.batches:>7}  {r.last or '-'}{bad}")
    return out


def table(lines: Sequence[LedgerLine]) -> list[str]:
    """One row per model of each batch."""
    rows = [f"{'start':20} {'batch':34} {'function':13} {'rd':>2} {'model':22} {'cand':>4} {'comp':>4} "
            f"{'best':>9} {'tok in/out':>13} {'draw s':>7} {'cpu s':>6}  status"]
    for ln in lines:
        for alias, m in sorted(ln.model_lines().items()):
            best = f"{m.best if m.best is not None else '-'}/{ln.cases_run or '-'}"
            tok = f"{m.tokens_in or 0}/{m.tokens_out or 0}"
            status = m.status or "-"
            if m.error:
                status += f" ({m.error})"
            bound = (m.constraints or {}).get("bound")
            if bound:
                status += f", bound by {bound}"
            rnd = 0 if ln.round is None else ln.round
            rows.append(f"{str(ln.start or '')[:19]:20} {str(ln.batch or '')[:34]:34} "
                        f"{str(ln.function or '')[:13]:13} {rnd:>2} {alias[:22]:22} "
                        f"{m.candidates or 0:>4} {m.compiled or 0:>4} {best:>9} {tok:>13} "
                        f"{m.draw_s or 0:>7.1f} {ln.lane_cpu_s or 0:>6.1f}  {status}")
    return rows


def spent_in(lines: Iterable[LedgerLine]) -> tuple[int, float]:
    """Tokens (in + out) and GPU-seconds the ledger lines record (pure)."""
    tokens, gpu = 0, 0.0
    for ln in lines:
        for m in ln.model_lines().values():
            tokens += int(m.tokens_in or 0) + int(m.tokens_out or 0)
            gpu += float(m.gpu_s or 0.0)
    return tokens, round(gpu, 3)


@dataclass(frozen=True)
class Spend:
    """A ledger file's spend (tokens in + out, GPU-seconds), the budget its last batch ran under
    and what bound, if a budget did."""

    tokens: int
    gpu_s: float
    budget_tokens: int | None
    budget_gpu_s: float | None
    bound: str | None

    def to_json(self) -> dict[str, object]:
        return {"tokens": self.tokens, "gpu_s": self.gpu_s, "budget_tokens": self.budget_tokens,
                "budget_gpu_s": self.budget_gpu_s, "bound": self.bound}


def spend(lines: Sequence[LedgerLine]) -> Spend:
    """The file's spend and the budget its last batch ran under, with whether a budget bound
    (pure)."""
    tokens, gpu = spent_in(lines)
    last = next((ln.budget for ln in reversed(lines) if ln.budget is not None), None)
    bound = next((ln.budget.bound for ln in reversed(lines)
                  if ln.budget is not None and ln.budget.bound), None)
    return Spend(tokens, gpu, last.tokens if last else None, last.gpu_s if last else None, bound)


def spend_line(s: Spend) -> str:
    def of(limit: float | None) -> str:
        return f" of {limit:g}" if isinstance(limit, int | float) else ""

    out = f"spent: {s.tokens} tokens{of(s.budget_tokens)}, {s.gpu_s:g} GPU-s{of(s.budget_gpu_s)}"
    return out + (f"; the budget bound ({s.bound})" if s.bound else "")


def show(path: Path, echo: Callable[[str], None] = print, last: int | None = None) -> int:
    """The table of `path`'s batches (with `last`, only the last N), then the whole file's spend."""
    lines = read(path)
    if not lines:
        echo(f"no batches in {path}")
        return 0
    shown = lines[-last:] if last else lines
    for r in table(shown):
        echo(r)
    if len(shown) < len(lines):
        echo(f"(the last {len(shown)} of {len(lines)} batches; the spend is the whole ledger's)")
    echo(spend_line(spend(lines)))
    return 0
