"""B3: oracle cases per second per engine, long-lived batched engines against one browser
launch per case (the baseline, same run); then the whole build, alone and as two shards
in parallel. Not a test: it measures. Run: .venv/bin/python bench/perf/b03_oracle.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.oracle import engines as eng  # noqa: E402
from bench.oracle.cases import generator_for  # noqa: E402
from bench.oracle.fleet import Fleet  # noqa: E402
from bench.perf.common import CHECK, CHECK_HELP, ROOT, check_settings, publish, run_checked  # noqa: E402
from lanes.base import procs  # noqa: E402

BATCHED_CASES = int(os.environ.get("B3_CASES", "1000"))
LAUNCH_CASES = int(os.environ.get("B3_LAUNCH_CASES", "3"))
NAV_CASES = 50
BUILD_CASES = int(os.environ.get("B3_BUILD_CASES", "2000"))


def peak_rss_kib(pids: list[int]) -> int | None:
    """The largest VmHWM among the processes of these groups (per process, never summed)."""
    best = None
    groups = set(pids)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        s = procs.stat(int(entry.name))
        if s is None or s.pgrp not in groups:
            continue
        try:
            for line in open(f"/proc/{entry.name}/status"):
                if line.startswith("VmHWM:"):
                    v = int(line.split()[1])
                    best = v if best is None else max(best, v)
        except (OSError, ValueError, IndexError):
            continue
    return best


def docs(n: int, offset: int = 0) -> list[str]:
    g = generator_for("block_width")
    return [g.case(s).html for s in range(offset, offset + n)]


def launch_per_case(name: str) -> dict[str, float]:
    """Baseline: a fresh browser for every case (start, render one document, stop)."""
    t0 = time.monotonic()
    for d in docs(LAUNCH_CASES, 10_000):
        with Fleet([name]) as f:
            f.render_fresh([d])
    secs = time.monotonic() - t0
    return {"cases": LAUNCH_CASES, "seconds": round(secs, 2), "cases_per_s": round(LAUNCH_CASES / secs, 3)}


def long_lived(name: str) -> dict[str, object]:
    """One engine alone, one long-lived process: batched, and navigate-per-case for comparison."""
    t0 = time.monotonic()
    with Fleet([name]) as f:
        start = time.monotonic() - t0
        batch = docs(BATCHED_CASES)
        t1 = time.monotonic()
        for i in range(0, len(batch), 100):
            f.render(batch[i:i + 100])
        batched = time.monotonic() - t1
        nav = docs(NAV_CASES, 20_000)
        t2 = time.monotonic()
        f.render_fresh(nav)
        navigated = time.monotonic() - t2
        rss = peak_rss_kib(f.pids()[name])
    return {"start_s": round(start, 2), "batched_cases_per_s": round(BATCHED_CASES / batched, 1),
            "navigate_cases_per_s": round(NAV_CASES / navigated, 1),
            "peak_rss_mib_largest_process": None if rss is None else round(rss / 1024, 1)}


def nev_build(cwd: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "rig.cli", "oracle", "build", "block_width",
                             "--cases", str(BUILD_CASES), "--json", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def whole_build(shards: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="nev-b3-") as tmp:
        t0 = time.monotonic()
        procs = [nev_build(Path(tmp), *(["--shard", f"{i}/{shards}"] if shards > 1 else []))
                 for i in range(shards)]
        outs = [json.loads(p.communicate()[0]) for p in procs]
        wall = time.monotonic() - t0
        ru = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    agreed = sum(o["manifest"]["cases"] for o in outs)
    return {"shards": shards, "cases": BUILD_CASES, "wall_s": round(wall, 2),
            "cases_per_s_per_engine": round(BUILD_CASES / wall, 1), "agreed": agreed,
            "render_rates_in_build": [o["rates"] for o in outs],
            "peak_rss_mib_largest_descendant": round(ru / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    if ap.parse_args().check:
        check_settings(box=False, cases=BATCHED_CASES, launch_cases=LAUNCH_CASES, build_cases=BUILD_CASES)
        return
    figures: dict[str, object] = {"engines": {n: eng.probe_version(n) for n in eng.ENGINES}}
    per_engine: dict[str, dict[str, object]] = {}
    for n in eng.ENGINES:
        per_engine[n] = {"long_lived": long_lived(n), "launch_per_case": launch_per_case(n)}
        print(n, json.dumps(per_engine[n]), flush=True)
    figures["per_engine"] = per_engine
    figures["build_one"] = whole_build(1)
    print("build, one process:", json.dumps(figures["build_one"]), flush=True)
    figures["build_two_shards"] = whole_build(2)
    print("build, two shards in parallel:", json.dumps(figures["build_two_shards"]), flush=True)
    ratios = {}
    for n, d in per_engine.items():
        ll, lp = d["long_lived"], d["launch_per_case"]
        assert isinstance(ll, dict) and isinstance(lp, dict)
        ratios[n] = round(float(ll["batched_cases_per_s"]) / float(lp["cases_per_s"]), 1)
    figures["ratio_batched_vs_launch_per_case"] = ratios
    # the goal: >= 50 cases/s/engine for the slowest of these
    figures["slowest_cases_per_s_per_engine"] = min(
        float(figures["build_one"]["cases_per_s_per_engine"]),  # type: ignore[index]
        *(float(d["long_lived"]["batched_cases_per_s"]) for d in per_engine.values()))  # type: ignore[index]
    publish("B3", {"figures": figures})


if __name__ == "__main__":
    sys.exit(run_checked(main))
