"""B5: drawing candidates through the gateway.

Figures: completions per second per alias and in all; the share of the draw each alias spends
at its in-flight limit (goal >= 90%); the per-call latency; the proxy's added latency per call.
Run through the rig-in-a-box's real LiteLLM proxy and HAProxy to the stand-in pools, and, as
the baseline in the same run, the same client straight to the pools. The pools answer after a
fixed delay (a stand-in's "GPU time"), so the difference is what the path adds.

Run (as root, the box up or brought up here):
    NEV_BOX_NAME=bbox NEV_BOX_NET=198.18.70 .venv/bin/python bench/perf/b05_gateway.py [--calls 64] [--delay 0.2]
Peak RSS per process: this client (getrusage), the LiteLLM proxy and each pool (VmHWM from
/proc); missing = null. Appends a JSON line to bench/perf/results.jsonl and prints the ratio last.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import folknet as fk  # noqa: E402
from bench import prompt  # noqa: E402
from bench.gateway import Gateway, read_key  # noqa: E402
from bench.perf.common import (  # noqa: E402
    CHECK,
    CHECK_HELP,
    ROOT,
    box_with_lanes,
    check_settings,
    own_peak_rss_mb,
    publish,
    run_checked,
    vm_hwm_mb,
)
from crates_bridge.workspace import EXAMPLE_ENGINE  # noqa: E402
from rig.box.netns import inside  # noqa: E402
from rig.box.poolctl import pool_control  # noqa: E402

BANK = ROOT / "tests" / "data" / "bank_find.json"


def messages() -> list[dict[str, str]]:
    spec = prompt.load_spec("block_width")
    sig = "pub fn block_width(input: &BlockWidthInput) -> BlockWidthOutput"
    css = (EXAMPLE_ENGINE / "crates/layout/src/css.rs").read_text()
    return prompt.build(spec, sig, prompt.interfaces(css, sig), cases_run=120).messages


def draw(gws: dict[str, Gateway], calls: dict[str, int], msgs: list[dict[str, str]]) -> dict[str, Any]:
    """Every alias at once, each at its in-flight limit, n=1 per call (fan-out)."""
    lat: dict[str, list[float]] = {a: [] for a in calls}
    done: dict[str, int] = dict.fromkeys(calls, 0)
    span: dict[str, float] = {}

    def alias_run(alias: str) -> None:
        g = gws[alias]
        st = g.aliases[alias]
        t0 = time.monotonic()

        def one(i: int) -> None:
            texts, rec = g.call(alias, msgs, 1, 1000 + i)
            lat[alias].append(rec.latency_s)
            done[alias] += len(texts)

        with ThreadPoolExecutor(max_workers=st.inflight) as ex:
            list(ex.map(one, range(calls[alias])))
        span[alias] = time.monotonic() - t0

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(calls)) as ex:
        list(ex.map(alias_run, list(calls)))
    wall = time.monotonic() - t0
    out: dict[str, Any] = {"wall_s": round(wall, 3), "completions": sum(done.values()),
                           "completions_per_s": round(sum(done.values()) / wall, 2), "aliases": {}}
    for a in calls:
        m = gws[a].aliases[a].meter.summary()
        out["aliases"][a] = {"calls": calls[a], "inflight": gws[a].aliases[a].inflight, "completions": done[a],
                             "wall_s": round(span[a], 3), "completions_per_s": round(done[a] / span[a], 2),
                             "at_limit_share": m["at_limit_share"], "max_in_flight": m["max_seen"],
                             "latency_median_s": round(statistics.median(lat[a]), 4),
                             "latency_p90_s": round(sorted(lat[a])[int(0.9 * (len(lat[a]) - 1))], 4)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=64, help="calls of the sampling alias (capacity: a quarter)")
    ap.add_argument("--delay", type=float, default=0.2, help="each pool answers after this many seconds")
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    a = ap.parse_args()
    if a.check:
        check_settings(box=True, calls=a.calls, delay=a.delay)
        return
    b, info = box_with_lanes(1)
    st = b.state()
    net = fk.load(info.folknet_file) if info.folknet_file else None
    assert net is not None
    key = read_key(info.keys["batch"])
    calls = {}
    for alias in info.aliases:
        calls[alias] = a.calls if net.aliases[alias].tier == "sampling" else max(4, a.calls // 4)
    for p in info.pools:
        pool_control(info, p, reset=True)
        pool_control(info, p, bank=str(BANK), delay=a.delay)
    msgs = messages()

    def gateways(direct: bool, one_at_a_time: bool = False) -> dict[str, Gateway]:
        out = {}
        for alias, pool in info.aliases.items():
            pi = info.pools[pool]
            g = Gateway(f"http://{pi.addr}:{pi.port}", None) if direct else Gateway(info.gateway_url, key)
            decl = net.aliases[alias].max_inflight
            g.add_alias(alias, 1 if one_at_a_time else decl, decl, supports_n=False, rate=1000.0)
            out[alias] = g
        return out

    # Both paths from the rig network, where batches run (a lane reaches the gateway and, for the
    # baseline, the pools at their rig addresses); the dev box has no route there.
    with inside(info.rig_netns):
        # warm both paths (LiteLLM's first call loads its model map)
        draw(gateways(False), dict.fromkeys(calls, 2), msgs)
        draw(gateways(True), dict.fromkeys(calls, 2), msgs)
        proxy = draw(gateways(False), calls, msgs)
        direct = draw(gateways(True), calls, msgs)
        sampling = [al for al in calls if net.aliases[al].tier == "sampling"][0]
        serial_p = draw(gateways(False, True), {sampling: 10}, msgs)["aliases"][sampling]["latency_median_s"]
        serial_d = draw(gateways(True, True), {sampling: 10}, msgs)["aliases"][sampling]["latency_median_s"]
    added = {al: round(proxy["aliases"][al]["latency_median_s"] - direct["aliases"][al]["latency_median_s"], 4)
             for al in calls}
    pids = {k: r.pid for k, r in (st.procs.items() if st else [])}
    for p in info.pools:
        pool_control(info, p, reset=True)
    result = {
        "cpus": int(subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip() or 0),
        "pool_delay_s": a.delay, "through_proxy": proxy, "straight_to_pool": direct,
        "proxy_added_latency_median_s": added,
        "proxy_added_latency_one_call_at_a_time_s": round(serial_p - serial_d, 4),
        "peak_rss_mb": {"client": own_peak_rss_mb(),
                        "litellm": vm_hwm_mb(pids.get("gateway.litellm")),
                        **{f"pool_{p}": vm_hwm_mb(pids.get(f"{p}.pool")) for p in info.pools},
                        "haproxy": vm_hwm_mb(pids.get("proxy.haproxy"))},
        "ratio_completions_per_s_proxy_over_direct": round(proxy["completions_per_s"] / direct["completions_per_s"], 3),
    }
    publish("B5", result)


if __name__ == "__main__":
    sys.exit(run_checked(main))
