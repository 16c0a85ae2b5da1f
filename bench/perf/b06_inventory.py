"""B6: time until `collect` sees every host, and one probe round of every alias, against the
slowest single host / alias alone (baselines run in the same run).

Set-up (root needed): the rig-in-a-box (NEV_BOX_NAME, default "bsix", net NEV_BOX_NET, default
198.18.62; brought up here and down at the end unless NEV_BOX_KEEP=1), every host running the
real `nev rig advertise` in its namespace; the box's real LiteLLM gateway and HAProxy in front
of its stand-in pools, gpu1 told to wait DELAY seconds before answering (one slow alias). The
collector and the prober run in this process, with the same code `nev rig collect` and
`nev rig probe` use.

    .venv/bin/python bench/perf/b06_inventory.py [--reps 3]

Prints the figures, appends a JSON line to bench/perf/results.jsonl, and prints the ratios last
(1.0 would mean: every host / every alias costs no more than the slowest one alone).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.folknet import Alias  # noqa: E402
from bench.gateway_http import Endpoint  # noqa: E402
from bench.perf.common import (  # noqa: E402
    CHECK,
    CHECK_HELP,
    check_settings,
    own_peak_rss_mb,
    publish,
    run_checked,
    vm_hwm_mb,
)
from lanes.base import settings  # noqa: E402
from rig.box import Box  # noqa: E402
from rig.box.advertisers import Advertisers  # noqa: E402
from rig.box.netns import inside  # noqa: E402
from rig.box.poolctl import pool_control  # noqa: E402
from rig.inventory import collect, probe  # noqa: E402

DELAY = 0.5   # seconds the slow pool (gpu1) waits before answering
RIG_NETNS: list[str] = [""]   # the box's rig-network namespace, set in main()


def time_collect(bridge: str, names: set[str]) -> float:
    """Seconds from a fresh browser to every named host found and its inventory fetched."""
    t0 = time.monotonic()
    with inside(RIG_NETNS[0]):      # the collector is a host of the rig network (as on a lane)
        b = collect.Browser(bridge)
        try:
            found = [f for f in b.listing(10.0, names=names) if f.name in names]
            fetched = collect.fetch_all(found)
        finally:
            b.close()
    took = time.monotonic() - t0
    up = [u for u, (doc, _err) in fetched.items() if doc is not None]
    if len(up) < len(names):
        raise SystemExit(f"collect saw {len(up)} of {len(names)} hosts: {fetched}")
    return took


def box_pid(box_dir: Path, key: str) -> int | None:
    """A process the box started, from box.json (`procs`)."""
    rec = (json.loads((box_dir / "box.json").read_text()).get("procs") or {}).get(key) or {}
    return rec.get("pid")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    args = ap.parse_args()
    if args.check:
        return check_settings(default_name="bsix", default_net="198.18.62", reps=args.reps)
    tmp = Path(tempfile.mkdtemp(prefix="b06-"))
    rss: dict[str, float | None] = {}
    box = Box.from_settings(dict(os.environ), default_name="bsix", default_net="198.18.62")
    info = box.up(lanes=2)
    RIG_NETNS[0] = info.rig_netns
    adv = Advertisers(info, tmp)
    n_hosts = len(adv.hosts)
    try:
        # -- collect: each host alone, then every host ----------------------
        single = []
        for i, h in enumerate(adv.hosts):
            p = adv.start(h, f"alone{i}", {"role": adv.hosts[h]["role"]})
            adv.wait_for_line(adv.log(h, f"alone{i}"), "advertising")
            single.append(statistics.median(time_collect(info.bridge_addr, {f"{h}-alone{i}"})
                                            for _ in range(args.reps)))
            adv.stop(p)
        procs = adv.start_all("all", lambda h: {"role": adv.hosts[h]["role"]})
        every = {f"{h}-all" for h in adv.hosts}
        all_hosts = statistics.median(time_collect(info.bridge_addr, every) for _ in range(args.reps))
        rss["advertise_max"] = max((vm_hwm_mb(p.pid) or 0.0) for p in procs.values()) or None
        for p in procs.values():
            adv.stop(p)

        # -- probe: each alias alone, then one round of every alias ------------
        key = Path(info.env["NEV_MODEL_KEY_FILE"]).read_text().strip()
        gateway = Endpoint(info.gateway_local_url, key)   # the dev box's forward, as `nev rig probe`
        aliases = [Alias(name=a, pool=pool, max_inflight=1, provider="self-hosted")
                   for a, pool in sorted(info.aliases.items())]
        pool_control(info, "gpu1", delay=DELAY)
        try:
            probe.probe_round(gateway, aliases, 20.0)  # warm the gateway's connections

            def timed(sel: list[Alias]) -> float:
                t0 = time.monotonic()
                outs = probe.probe_round(gateway, sel, 20.0)
                took = time.monotonic() - t0
                bad = {k: o.error for k, o in outs.items() if not o.ok}
                if bad:
                    raise SystemExit(f"probe failed: {bad}")
                return took

            alone = {a.name: statistics.median(timed([a]) for _ in range(args.reps)) for a in aliases}
            round_all = statistics.median(timed(aliases) for _ in range(args.reps))
        finally:
            pool_control(info, "gpu1", reset=True)
        rss["litellm"] = vm_hwm_mb(box_pid(Path(info.dir), "gateway.litellm"))
    finally:
        adv.close()
        if not settings.get_flag(settings.BOX_KEEP):
            box.down()
    rss["bench_process"] = own_peak_rss_mb()

    slowest_host = max(single)
    slowest_alias = max(alone.values())
    rec = {"hosts": n_hosts, "aliases": len(alone), "slow_pool_delay_s": DELAY, "reps": args.reps,
           "collect_all_s": round(all_hosts, 3), "collect_slowest_single_s": round(slowest_host, 3),
           "collect_ratio": round(all_hosts / slowest_host, 2),
           "probe_round_s": round(round_all, 3), "probe_slowest_single_s": round(slowest_alias, 3),
           "probe_ratio": round(round_all / slowest_alias, 2),
           "probe_alone_s": {k: round(v, 3) for k, v in alone.items()}, "peak_rss_mb": rss}
    publish("B6", rec)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(run_checked(main))
