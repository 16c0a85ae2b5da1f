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
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def find_address(obj: Any, where: str = "") -> str | None:
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


def scrub(obj: Any) -> Any:
    """Replace addresses, URLs and host names (what `find_address` finds) inside strings by
    `<host>`."""
    return jsonfile.map_strings(obj, lambda s: _SCRUB.sub("<host>", s))


def line_for(record: dict[str, Any]) -> dict[str, Any]:
    """The ledger's fields of a batch record."""
    models = {}
    for alias, m in record["models"].items():
        models[alias] = {k: m.get(k) for k in ("tier", "candidates", "compiled", "best", "tokens_in", "tokens_out",
                                               "gpu_s", "draw_s", "status", "error", "rate_limited",
                                               "gateway_waits", "calls", "constraints")}
        # each answered call's queue wait, request sent to first byte (rig/queues.py reads them)
        models[alias]["first_byte_s"] = [c["first_byte_s"] for c in record.get("calls") or []
                                         if c.get("alias") == alias
                                         and isinstance(c.get("first_byte_s"), int | float)]
    line = {"batch": record["batch"], "function": record["function"], "round": record["round"],
            "escalated": record["escalated"], "start": record["start"], "end": record["end"],
            "lane_cpu_s": record["lane_cpu_s"], "candidates": record["candidates"],
            "unique": record["unique"], "compiled": record["compiled"], "best": record["best"],
            "cases_run": record["cases_run"], "passed": record["passed"], "models": models}
    if record.get("budget"):
        line["budget"] = record["budget"]
    return scrub(line)


def append(path: Path, line: dict[str, Any]) -> None:
    where = find_address(line)
    if where:
        raise ConfigError(f"ledger line field {where} holds a host address; nothing written")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")


# What a ledger line's fields may hold (line_for writes them): counts are whole numbers >= 0,
# seconds numbers >= 0, the rest text; null (or absent) for any of them.
_COUNTS = ("round", "candidates", "unique", "compiled", "best", "cases_run")
_MODEL_COUNTS = ("candidates", "compiled", "best", "tokens_in", "tokens_out", "rate_limited", "gateway_waits", "calls")
_MODEL_SECONDS = ("gpu_s", "draw_s")
_TEXT = ("batch", "function", "start", "end")


# Bounds no real batch comes near (a trillion tokens or calls; about three years of seconds): a
# line past them was not written by a batch, and summing it would make any budget meaningless.
MAX_COUNT = 10**12
MAX_SECONDS = 10**8


def _count(f: jsonfile.Fields, o: dict[str, Any], key: str, where: str, whole: bool) -> None:
    v = f.get(o, key, int if whole else (int, float), where, required=False)
    if v is None:
        return
    top = MAX_COUNT if whole else MAX_SECONDS
    if not 0 <= v <= top:
        name = f"{where}.{key}" if where else key
        raise f.fail(name, f"must be between 0 and {top:g}, not {v:g}")


def parse_line(f: jsonfile.Fields, obj: Any) -> dict[str, Any]:
    """One ledger line, checked where it is read (pure): an object whose counts are whole numbers
    >= 0 and whose seconds are numbers >= 0, so nothing negative or not a number is ever summed into
    a spend or a budget. ConfigError naming the field otherwise."""
    o = f.obj(obj, "(line)")
    for k in _COUNTS:
        _count(f, o, k, "", True)
    _count(f, o, "lane_cpu_s", "", False)
    for k in _TEXT:
        f.get(o, k, str, "", required=False)
    for k in ("passed", "escalated"):
        f.get(o, k, bool, "", required=False)
    for alias, m in (f.get(o, "models", dict, "", required=False) or {}).items():
        where = f"models.{alias}"
        m = f.obj(m, where)
        for k in _MODEL_COUNTS:
            _count(f, m, k, where, True)
        for k in _MODEL_SECONDS:
            _count(f, m, k, where, False)
        for k in ("status", "error", "tier"):
            f.get(m, k, str, where, required=False)
        f.get(m, "constraints", dict, where, required=False)
        for i, v in enumerate(f.get(m, "first_byte_s", list, where, required=False) or []):
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= MAX_SECONDS:
                raise f.fail(f"{where}.first_byte_s[{i}]",
                             f"must be seconds between 0 and {MAX_SECONDS:g}")
    budget = f.get(o, "budget", dict, "", required=False)
    if budget is not None:
        _count(f, budget, "tokens", "budget", True)
        _count(f, budget, "spent_tokens", "budget", True)
        _count(f, budget, "gpu_s", "budget", False)
        _count(f, budget, "spent_gpu_s", "budget", False)
        f.get(budget, "bound", str, "budget", required=False)
    return o


def read(path: Path) -> list[dict[str, Any]]:
    """Every line of a ledger file, each checked (`parse_line`); a bad line is one ConfigError naming
    the file, the line and the field (the ledger is append-only: fix that line by hand)."""
    return [parse_line(jsonfile.Fields(f"{path}: line {n}"), obj)
            for n, obj in jsonfile.load_lines(path, "ledger", missing=[])]


def _checked(path: Path, text: str, on_bad: Callable[[ConfigError], None]) -> list[dict[str, Any]]:
    """The lines of a ledger's `text` that pass `parse_line`; each other one to `on_bad`."""
    good: list[dict[str, Any]] = []
    for n, raw in enumerate(text.split("\n"), 1):
        if not raw.strip():
            continue
        where = f"{path}: line {n}"
        try:
            good.append(parse_line(jsonfile.Fields(where), jsonfile.parse(raw, where, "ledger")))
        except ConfigError as e:
            on_bad(e)
    return good


def read_for_budget(path: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The lines of a ledger file a budget may count: each checked (`parse_line`); a line that does
    not parse or is out of bounds is named to `say` (file, line, field) and skipped, never summed.
    A ledger that cannot be read at all is a ConfigError (nothing is known of the spend)."""
    if not path.exists():
        return []
    text = jsonfile.read_text(path, "ledger", "")
    return _checked(path, text,
                    lambda e: say(f"{e}; that line is skipped, not counted against the budget"))


def read_lenient(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The lines of a ledger file that pass `parse_line`, and how many did not (or 1 for a file
    that cannot be read at all): for views that show the rest (the dashboard, `--list`)."""
    try:
        text = jsonfile.read_text(path, "ledger", "")
    except ConfigError:
        return [], 1
    bad: list[ConfigError] = []
    return _checked(path, text, bad.append), len(bad)


def last_time(line: dict[str, Any]) -> str | None:
    """When a batch ended (else started), as written (ISO, UTC)."""
    t = line.get("end") or line.get("start")
    return t if isinstance(t, str) and t else None


def ledgers(folder: Path) -> list[dict[str, Any]]:
    """Every ledger in `folder` (one per worktree or job, `<name>.jsonl`): its batches, the last
    batch's time and the lines it could not read; the most recent first."""
    out = []
    for f in sorted(folder.glob("*.jsonl")):
        lines, bad = read_lenient(f)
        times = [t for t in map(last_time, lines) if t]
        out.append({"worktree": f.stem, "batches": len(lines),
                    "last": max(times) if times else None,
                    "unreadable_lines": bad, "file": str(f)})
    return sorted(out, key=lambda r: (r["last"] or "", r["worktree"]), reverse=True)


def ledgers_table(rows: list[dict[str, Any]]) -> list[str]:
    w = max([len("worktree"), *(len(r["worktree"]) for r in rows)])
    out = [f"{'worktree':<{w}}  {'batches':>7}  last batch"]
    for r in rows:
        bad = f"  ({r['unreadable_lines']} unreadable line(s))" if r["unreadable_lines"] else ""
        out.append(f"{r['worktree']:<{w}}  {r['batches']:>7}  {r['last'] or '-'}{bad}")
    return out


def table(lines: list[dict[str, Any]]) -> list[str]:
    """One row per model of each batch."""
    rows = [f"{'start':20} {'batch':34} {'function':13} {'rd':>2} {'model':22} {'cand':>4} {'comp':>4} "
            f"{'best':>9} {'tok in/out':>13} {'draw s':>7} {'cpu s':>6}  status"]
    for ln in lines:
        for alias, m in sorted((ln.get("models") or {}).items()):
            best = f"{m.get('best') if m.get('best') is not None else '-'}/{ln.get('cases_run') or '-'}"
            tok = f"{m.get('tokens_in') or 0}/{m.get('tokens_out') or 0}"
            status = m.get("status") or "-"
            if m.get("error"):
                status += f" ({m['error']})"
            bound = (m.get("constraints") or {}).get("bound")
            if bound:
                status += f", bound by {bound}"
            rows.append(f"{str(ln.get('start', ''))[:19]:20} {str(ln.get('batch', ''))[:34]:34} "
                        f"{str(ln.get('function', ''))[:13]:13} {ln.get('round', 0):>2} {alias[:22]:22} "
                        f"{m.get('candidates') or 0:>4} {m.get('compiled') or 0:>4} {best:>9} {tok:>13} "
                        f"{m.get('draw_s') or 0:>7.1f} {ln.get('lane_cpu_s') or 0:>6.1f}  {status}")
    return rows


def spend(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The file's spend (tokens in + out, GPU-seconds) and the budget its last batch ran under,
    with whether a budget bound (pure)."""
    from bench.budget import spent_in

    tokens, gpu = spent_in(lines)
    last = next((ln["budget"] for ln in reversed(lines) if isinstance(ln.get("budget"), dict)), None)
    bound = next((ln["budget"].get("bound") for ln in reversed(lines)
                  if isinstance(ln.get("budget"), dict) and ln["budget"].get("bound")), None)
    return {"tokens": tokens, "gpu_s": gpu, "budget_tokens": (last or {}).get("tokens"),
            "budget_gpu_s": (last or {}).get("gpu_s"), "bound": bound}


def spend_line(s: dict[str, Any]) -> str:
    def of(limit: Any) -> str:
        return f" of {limit:g}" if isinstance(limit, int | float) else ""

    out = f"spent: {s['tokens']} tokens{of(s['budget_tokens'])}, {s['gpu_s']:g} GPU-s{of(s['budget_gpu_s'])}"
    return out + (f"; the budget bound ({s['bound']})" if s["bound"] else "")


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
