"""The ledger: one JSON line per model batch in `ledger/<worktree>.jsonl` on the share.

Each line: the batch id, function, round, start and end time, lane CPU-seconds, the run's budget
and spend (`budget`: tokens and GPU-seconds, and `bound` when the budget stopped the draw), and per
model the candidates, compiled count, best score, tokens, GPU-seconds, draw seconds and which
constraint bound it for how long (`constraints`). No host names or addresses: a line that carries
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


def scrub(obj: Any) -> Any:
    """Replace addresses and URLs inside strings by `<host>`."""
    return jsonfile.map_strings(obj, lambda s: re.sub(r"\S*://\S*|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b",
                                                      "<host>", s))


def line_for(record: dict[str, Any]) -> dict[str, Any]:
    """The ledger's fields of a batch record."""
    models = {}
    for alias, m in record["models"].items():
        models[alias] = {k: m.get(k) for k in ("tier", "candidates", "compiled", "best", "tokens_in", "tokens_out",
                                               "gpu_s", "draw_s", "status", "error", "rate_limited",
                                               "gateway_waits", "calls", "constraints")}
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


def read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if raw.strip():
            try:
                out.append(json.loads(raw))
            except json.JSONDecodeError:
                raise ConfigError(f"{path}: line {n} is not JSON; the ledger is append-only, fix that line") from None
    return out


def table(lines: list[dict[str, Any]]) -> list[str]:
    """One row per model of each batch."""
    rows = [f"{'start':20} {'batch':34} {'function':13} {'rd':>2} {'model':22} {'cand':>4} {'comp':>4} "
            f"{'best':>9} {'tok in/out':>13} {'draw s':>7} {'cpu s':>6}  status"]
    for ln in lines:
        for alias, m in sorted(ln.get("models", {}).items()):
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


def show(path: Path, echo: Callable[[str], None] = print) -> int:
    lines = read(path)
    if not lines:
        echo(f"no batches in {path}")
        return 0
    for r in table(lines):
        echo(r)
    echo(spend_line(spend(lines)))
    return 0
