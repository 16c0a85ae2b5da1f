"""B12: two batches on two lanes sharing one alias, against one batch with the alias's whole limit.

Figure: completions per second of two batches drawing at once from one alias, on lane 0 and
lane 1, each asking for the alias's whole in-flight limit, so the gateway's limit
(`max_parallel_requests`, generated from bench/folknet.json) is what shares the slots; the split
between the two; the most calls the stand-in pool saw at once. Baseline in the same run: one
batch on lane 0 alone at the same limit. Goal: ratio >= 0.9 (and each batch >= a third).

Each batch is the lane's own nev (its gateway client: pacer, 429 handling, in-flight slots),
installed on the lane (`nev lane install`), drawing n=1 calls for a fixed time; completions are
counted inside that window. The pool answers after a fixed delay (the stand-in's "GPU time"):
2 s by default, a short generation. With much shorter calls (0.5 s) the gateway's own CPU is
what bound on 2 shared cores with the first back-off (ratio 0.82 measured 2026-12-01, against
0.96 at 2 s); with the fairer back-off the same runs gave 1.05 and 1.00 (docs/batch.md, B12).

Run (as root, the box up or brought up here):
    NEV_BOX_NAME=bbox NEV_BOX_NET=198.18.70 .venv/bin/python bench/perf/b12_sharing.py [--seconds 30] [--delay 2]
Appends a JSON line to bench/perf/results.jsonl and prints the ratio last.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import folknet as fk  # noqa: E402
from bench.perf import lanedraw  # noqa: E402
from bench.perf.common import (  # noqa: E402
    CHECK,
    CHECK_HELP,
    box_with_lanes,
    check_settings,
    own_peak_rss_mb,
    publish,
    run_checked,
)
from rig.box.poolctl import pool_control  # noqa: E402

ALIAS = "qwen3.8-27b-fast"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0, help="how long each batch draws")
    ap.add_argument("--delay", type=float, default=2.0, help="the pool answers after this many seconds")
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    a = ap.parse_args()
    if a.check:
        check_settings(box=True, seconds=a.seconds, delay=a.delay)
        return
    b, info = box_with_lanes(2)
    assert info.folknet_file is not None
    limit = fk.load(info.folknet_file).aliases[ALIAS].max_inflight
    pool = info.aliases[ALIAS]
    conns = lanedraw.prepare(info, [0, 1], info.keys["batch"])

    def run(cs: list) -> tuple[list[lanedraw.Drawn], dict]:
        pool_control(info, pool, reset=True)
        pool_control(info, pool, delay=a.delay, max_inflight=4 * limit)   # the pool itself never the limit
        got = lanedraw.draw(info, cs, ALIAS, limit, a.seconds)
        return got, pool_control(info, pool)

    try:
        run(conns[:1])                                          # warm the path (LiteLLM's first calls)
        one, pool_one = run(conns[:1])
        two, pool_two = run(conns)
    finally:
        pool_control(info, pool, reset=True)
        for c in conns:
            c.close()
    w = a.seconds
    one_n = one[0].within(w)
    two_n = [d.within(w) for d in two]
    figures = {
        "alias": ALIAS, "gateway_limit": limit, "seconds": w, "pool_delay_s": a.delay,
        "one_completions": one_n, "one_completions_per_s": round(one_n / w, 2),
        "one_pool_max_in_flight": pool_one["max_inflight_seen"],
        "two_completions": two_n, "two_completions_per_s": round(sum(two_n) / w, 2),
        "two_split": [round(n / max(1, sum(two_n)), 3) for n in two_n],
        "two_gateway_429": [d.gateway_waits for d in two], "two_failed": [d.failed for d in two],
        "two_pool_max_in_flight": pool_two["max_inflight_seen"],
        "peak_rss_mb": {"this_client": own_peak_rss_mb()},
        "ratio_two_vs_one": round(sum(two_n) / max(1, one_n), 3),
    }
    publish("B12", figures)


if __name__ == "__main__":
    sys.exit(run_checked(main))
