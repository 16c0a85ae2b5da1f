"""B10: what a drain costs the calls in flight.

Figures: the latency of the calls that were in flight when `nev rig drain` began (median, max),
against the same batch with no drain in the same run (median, max of all its calls); the batch's
wall time both ways; how long the drain waited for its replica; calls lost (must be 0).
A batch keeps 8 calls in flight on the box's two-replica alias (qwen3.8-flash-next, gpu2 r0 and
r1, HAProxy leastconn, maxconn 4 each) through the real LiteLLM proxy and HAProxy from the
development box's forward; each stand-in answers after a fixed delay. The drain takes r0 out
through HAProxy's runtime API a third of the way in; r0 is started again after.

Run (as root, with the box up and its environment set):
    eval "$(nev box env)"; .venv/bin/python bench/perf/b10_drain.py [--calls 48] [--delay 1.0]
Appends a JSON line to bench/perf/results.jsonl and prints the ratio last.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import gateway_http
from bench.gateway import read_key
from bench.gateway_http import Endpoint, Unreachable
from bench.perf.common import CHECK, CHECK_HELP, box_with_lanes, check_settings, run_checked  # noqa: E402
from lanes.base.gitrun import Repo
from rig import rigfile
from rig.box.poolctl import pool_control  # noqa: E402
from rig.serving.actions import run_verb

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ALIAS = "qwen3.8-flash-next"


def batch(ep: Endpoint, total: int, inflight: int, during=None) -> dict:
    """`total` calls, `inflight` at once; `during()` runs once a third of them have been sent.
    Each call's (start, end, status)."""
    calls: list[tuple[float, float, int]] = []
    lock = threading.Lock()
    sent = [0]

    def worker() -> None:
        while True:
            with lock:
                if sent[0] >= total:
                    return
                sent[0] += 1
            t0 = time.monotonic()
            try:
                code = gateway_http.post_json(ep, {"model": ALIAS, "max_tokens": 16, "messages": [
                    {"role": "user", "content": "Write clamp_px in Rust."}]}, timeout=(10, 300)).status
            except Unreachable:
                code = 0
            with lock:
                calls.append((t0, time.monotonic(), code))

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(inflight)]
    for t in threads:
        t.start()
    drain: dict = {}
    if during is not None:
        while sent[0] < total // 3:
            time.sleep(0.05)
        drain = during()
    for t in threads:
        t.join()
    return {"calls": calls, "wall_s": time.monotonic() - t0, **drain}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=48)
    ap.add_argument("--delay", type=float, default=1.0, help="each replica answers after this many seconds")
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    a = ap.parse_args()
    if a.check:
        check_settings(box=True, calls=a.calls, delay=a.delay)
        return
    b, info = box_with_lanes(1)
    assert info.rig_file is not None
    ep = Endpoint(info.gateway_local_url, read_key(info.keys["batch"]))
    rig = rigfile.load(info.rig_file)
    notes = Path(tempfile.mkdtemp(prefix="b10-notes-"))

    def settle() -> None:
        for r in ("r0", "r1"):
            pool_control(info, "gpu2", r, reset=True)
            pool_control(info, "gpu2", r, delay=a.delay)

    def drain() -> dict:
        t = time.monotonic()
        lines: list[str] = []
        run_verb("drain", "gpu2/r0", rig, notes, lines.append, grace=60, force=False, dry_run=False, probe_timeout=60)
        return {"drain_began": t, "drain_s": time.monotonic() - t, "drain_lines": lines}

    settle()
    batch(ep, 8, 8)                                           # warm the path
    base = batch(ep, a.calls, 8)
    drained = batch(ep, a.calls, 8, during=drain)
    run_verb("start", "gpu2/r0", rig, notes, lambda _s: None, grace=60, force=False, dry_run=False, probe_timeout=60)
    settle()
    for r in ("r0", "r1"):
        pool_control(info, "gpu2", r, reset=True)

    def lat(calls: list) -> list[float]:
        return [e - s for s, e, _c in calls]

    began = drained["drain_began"]
    held = [c for c in drained["calls"] if c[0] < began < c[1]]
    base_l, held_l = lat(base["calls"]), lat(held)
    result = {
        "bench": "B10", "commit": Repo(ROOT).out("rev-parse", "--short", "HEAD"),
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "calls": a.calls, "inflight": 8,
        "replica_delay_s": a.delay,
        "no_drain": {"latency_median_s": round(statistics.median(base_l), 3), "latency_max_s": round(max(base_l), 3),
                     "wall_s": round(base["wall_s"], 2), "failed": sum(c[2] != 200 for c in base["calls"])},
        "drain": {"in_flight_at_drain": len(held), "latency_median_s": round(statistics.median(held_l), 3) if held_l else None,
                  "latency_max_s": round(max(held_l), 3) if held_l else None, "wall_s": round(drained["wall_s"], 2),
                  "drain_s": round(drained["drain_s"], 2), "failed": sum(c[2] != 200 for c in drained["calls"])},
        "peak_rss_mb": {"client": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)},
    }
    result["added_latency_median_s"] = (round(result["drain"]["latency_median_s"] - result["no_drain"]["latency_median_s"], 3)
                                        if held_l else None)
    with (HERE / "results.jsonl").open("a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps(result, indent=2))
    print(f"in-flight calls' median latency during a drain / without: "
          f"{result['drain']['latency_median_s']} / {result['no_drain']['latency_median_s']} s")


if __name__ == "__main__":
    sys.exit(run_checked(main))
