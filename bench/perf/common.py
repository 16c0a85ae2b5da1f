"""What every benchmark script shares: the commit it measures, git for the throw-away repositories
it builds, a child's wall time and peak RSS, a process's peak RSS, and the result: one line
appended to results.jsonl, and the same figures printed, the ratios last.

A script runs as `python bench/perf/bNN_x.py`; it puts the repository first on `sys.path` and
then imports from this module (`from bench.perf.common import publish`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lanes.base.gitrun import GitError, Repo

if TYPE_CHECKING:
    from rig.box import Box
    from rig.box.state import BoxInfo

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "perf" / "results.jsonl"


CHECK = "--check"
CHECK_HELP = ("check the arguments and every setting the run would use (the box's name and net), "
              "then exit 0 without running anything")


def check_settings(box: bool = True, environ: Mapping[str, str] | None = None,
                   default_name: str | None = None, default_net: str | None = None, **numbers: float) -> int:
    """A benchmark's --check: the box it would use (NEV_BOX_NAME / NEV_BOX_NET, or its own
    defaults) checked as `nev box up` checks them, and each numeric argument positive; one line
    on stdout, 0. A refused setting raises NevError (the caller prints it, exit 1). Nothing runs."""
    from lanes.base.errors import ConfigError

    for name, v in numbers.items():
        if v is None or v < 0:
            raise ConfigError(f"--{name.replace('_', '-')} {v!r}: must be a number >= 0")
    said = ""
    if box:
        from rig.box import Box, plan

        b = Box.from_settings(dict(os.environ if environ is None else environ), default_name=default_name,
                              default_net=default_net)
        plan.check_net(b.net)
        said = f"; box {b.name} on {b.net}.0/24, lanes {b.lane_backend}"
    print(f"settings ok{said}")
    return 0


def run_checked(main: Callable[[], int | None]) -> int:
    """Run a benchmark's main; a refused setting (NevError) is one line and exit 1, never a traceback."""
    from lanes.base.errors import NevError

    try:
        return main() or 0
    except NevError as e:
        print(f"{Path(sys.argv[0]).name}: {e.message}", file=sys.stderr)
        return 1


def box_with_lanes(lanes: int) -> tuple[Box, BoxInfo]:
    """The box of NEV_BOX_NAME/NEV_BOX_NET, brought up with `lanes` lanes when it is down or has
    fewer; a box already up with as many or more is used as it is (never shrunk)."""
    from rig.box import Box

    b = Box.from_settings()
    if b.state() is None or len(b.info().lanes) < lanes:
        return b, b.up(lanes=lanes)
    return b, b.info()


def commit() -> str | None:
    """The repository's short HEAD, the commit a result line belongs to (None outside git)."""
    try:
        return Repo(ROOT).out("rev-parse", "--short", "HEAD") or None
    except GitError:
        return None


def git(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """git in one of a benchmark's own repositories (through the git choke point); its stdout."""
    return Repo(cwd).out(*args, env=env)


def vm_hwm_mb(pid: int | None) -> float | None:
    """The peak RSS of one running process (VmHWM), in MB; None when it is gone or unknown."""
    if not pid:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def own_peak_rss_mb() -> float:
    """This process's peak RSS, in MB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_measured(argv: list[str], env: Mapping[str, str], cwd: Path) -> tuple[int, float, int | None]:
    """Run a child to its end, its output dropped: (exit code, wall seconds, peak RSS in KiB of
    that one process from wait4, None when unknown)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=dict(env), cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, time.monotonic() - t0, (ru.ru_maxrss or None)


def _flat(name: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            yield from _flat(f"{name}.{k}" if name else str(k), v)
    else:
        yield name, value


def report(row: Mapping[str, Any]) -> list[str]:
    """A result as printed: one `figure: value` line per figure (nested ones dotted), in the
    row's order, the ratios last."""
    figures = list(_flat("", row))
    last = sorted(figures, key=lambda f: any(part.startswith("ratio") for part in f[0].split(".")))
    return [f"{name}: {value}" for name, value in last]


def publish(bench: str, figures: Mapping[str, Any]) -> dict[str, Any]:
    """Append one result line (the bench, the commit, the date, then `figures`) to results.jsonl
    and print it (`report`); returns the line as written."""
    row = {"bench": bench, "commit": commit(), "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           **figures}
    with RESULTS.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    print("\n".join(report(row)))
    return row
