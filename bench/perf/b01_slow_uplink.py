"""B1: starting a gate on a lane behind a slow uplink, against `rsync -a` of the same worktree.

On the rig-in-a-box (NEV_BOX_NAME / NEV_BOX_NET; brought up if needed, left up), the dev box
reaches lane 1 as on the real rig: through the jump host, over the box's outside link, which is
shaped like the seed's uplink: ~18.6 KB/s from the dev box, ~435 KB/s back (an HTB class on each
end of the outside link: the dev box's end and the jump host's eth1). The lane still reaches the
forge at rig-network speed, on the rig bridge, as on the real rig.

The worktree holds >= 100 MB (incompressible files pushed to the box forge), a few unpushed
commits, an uncommitted diff and untracked files. Measured, in the same run:
  - nev fresh: an empty lane root (no mirror, no copy), `nev lane run WT true`;
  - nev warm: one more local commit and edit, the same command again (--warm-runs times, the
    median);
  - rsync: `rsync -a --partial` of the worktree (without .git) to the lane, cut after
    --rsync-seconds; its full time is extrapolated from the bytes that arrived (a full copy
    would take over an hour at this rate), then `ssh lane true` is added for the command.
  - the limit of any warm gate: its payload's bytes at the uplink's payload rate, plus one SSH
    handshake by the same route (`ssh -J jump lane true` over the same slow link, the median of 3);
    the goal is a warm gate within 1.5x of it.
Bytes sent are counted by the shaped class (dev box -> lane, headers included) and, for nev,
by the gate's own channel. Prints the figures and the ratios last; appends to results.jsonl.

    NEV_BOX_LANES=netns .venv/bin/python bench/perf/b01_slow_uplink.py [--mb 100] [--rsync-seconds 60] [--warm-runs 5]

(netns lanes: the baseline's rsync runs on the lane, and the LXC lanes' image carries none.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.perf.common import CHECK, CHECK_HELP, check_settings, git, publish, run_checked  # noqa: E402
from lanes import gate, lanesfile, payload  # noqa: E402
from lanes.forge import forge_for  # noqa: E402
from rig.box import Box  # noqa: E402
from rig.box.forge import create_repo  # noqa: E402

UP_KBIT = 156     # dev box -> lane: ~18.6 KB/s of payload (tbf/htb count headers: ~4.6% above)
UP_PAYLOAD_BPS = 18_600   # the same uplink in payload bytes per second: the limit's rate
DOWN_KBIT = 3640  # lane -> dev box: ~435 KB/s


def sh(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def shape(out_dev: str, jump_ns: str) -> None:
    """HTB on both ends of the outside link: everything the dev box sends or gets is slowed."""
    for prefix, dev, rate in ((["tc"], out_dev, UP_KBIT),
                              (["ip", "netns", "exec", jump_ns, "tc"], "eth1", DOWN_KBIT)):
        subprocess.run([*prefix, "qdisc", "del", "dev", dev, "root"], capture_output=True)
        sh([*prefix, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"])
        sh([*prefix, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
            "rate", f"{rate}kbit", "ceil", f"{rate}kbit", "burst", "4k", "cburst", "4k", "quantum", "1514"])


def unshape(out_dev: str, jump_ns: str) -> None:
    subprocess.run(["tc", "qdisc", "del", "dev", out_dev, "root"], capture_output=True)
    subprocess.run(["ip", "netns", "exec", jump_ns, "tc", "qdisc", "del", "dev", "eth1", "root"],
                   capture_output=True)


def class_bytes(veth: str) -> int:
    """Bytes the slow class (dev box -> lane) has sent so far."""
    out = sh(["tc", "-s", "class", "show", "dev", veth]).stdout
    m = re.search(r"class htb 1:10 .*?Sent (\d+) bytes", out, re.S)
    return int(m.group(1)) if m else 0


def make_worktree(info, tmp: Path, tag: str, mb: int) -> tuple[Path, str]:
    url = create_repo(info, f"b01{tag}.git")
    askpass = {"GIT_ASKPASS": str(info.forge_askpass)}
    seed = tmp / "seed"
    (seed / "data").mkdir(parents=True)
    (seed / "src").mkdir()
    git(seed, "init", "-q", "-b", "main")
    for i in range(mb):
        (seed / "data" / f"blob{i:03}.bin").write_bytes(os.urandom(1 << 20))
    for i in range(200):
        (seed / "src" / f"mod{i}.rs").write_text(f"pub fn f{i}() -> u32 {{ {i} }}\n" * 40)
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "seed")
    git(seed, "push", "-q", info.dev_url(url), "main", env=askpass)    # through the dev box's forward
    shutil.rmtree(seed)
    wt = tmp / f"b01{tag}"
    git(tmp, "clone", "-q", info.dev_url(url), str(wt), env=askpass)
    for i in range(3):  # a few unpushed commits
        (wt / "src" / f"new{i}.rs").write_text(f"pub fn n{i}() {{}}\n" * 30)
        (wt / "src" / "mod1.rs").write_text(f"pub fn f1() -> u32 {{ {i + 100} }}\n")
        git(wt, "add", "-A")
        git(wt, "commit", "-qm", f"unpushed {i}")
    (wt / "src" / "mod2.rs").write_text("pub fn f2() -> u32 { 2222 }\n")  # uncommitted diff
    (wt / "notes.txt").write_text("untracked notes\n" * 20)              # untracked files
    (wt / "scratch").mkdir()
    (wt / "scratch" / "case 1.html").write_text("<p>case</p>\n")
    return wt, url


def du_bytes(path: Path, exclude: str | None = None) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        if exclude and exclude in dirnames:
            dirnames.remove(exclude)
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def gate_once(wt: Path) -> tuple[float, gate.Outcome]:
    t0 = time.perf_counter()
    lf = lanesfile.configured()
    picked = gate.pick_lane(lf, 0)
    assert picked is not None, "lane 1 of the box does not answer"
    lane, conn = picked
    w = payload.Worktree.open(wt)
    try:
        out = gate.gate_on_lane(lane, conn, w, ["true"], forge=forge_for(w.repo, lf),
                                on_stdout=lambda b: None, on_stderr=lambda b: None)
    finally:
        conn.close()
    assert out.status == 0
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100, help="size of the committed data (MB)")
    ap.add_argument("--rsync-seconds", type=float, default=60.0, help="cut rsync after this long")
    ap.add_argument("--warm-runs", type=int, default=5, help="warm gates to take the median of")
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    args = ap.parse_args()
    if args.check:
        return check_settings(box=True, mb=args.mb, rsync_seconds=args.rsync_seconds, warm_runs=args.warm_runs)
    info = Box.from_settings().up(lanes=2)
    lane = info.lanes[1]
    veth, netns = f"{info.name}-out", f"{info.name}-jump"     # the dev box's uplink to the jump host
    tag = "-" + secrets.token_hex(2)
    fig: dict = {"up_kbit": UP_KBIT, "down_kbit": DOWN_KBIT, "route": "via jump host"}
    with tempfile.TemporaryDirectory(prefix="nev-b01-") as tmpd:
        tmp = Path(tmpd)
        t0 = time.perf_counter()
        wt, url = make_worktree(info, tmp, tag, args.mb)
        fig["setup_s"] = round(time.perf_counter() - t0, 1)
        fig["worktree_bytes"] = du_bytes(wt)
        fig["worktree_bytes_without_git"] = du_bytes(wt, exclude=".git")
        lanes_file = tmp / "lanes.json"
        data = json.loads(info.lanes_file.read_text())
        data["lanes"], data["git_url"] = [data["lanes"][1]], url
        lanes_file.write_text(json.dumps(data))
        os.environ.update({**info.env, "NEV_LANES_FILE": str(lanes_file), "NEV_LANE_GIT_URL": url})
        # A fresh lane: no mirror, no copies.
        for old in lane.host_root.iterdir():
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        shape(veth, netns)
        try:
            b0 = class_bytes(veth)
            fresh_s, fresh = gate_once(wt)
            fig.update(nev_fresh_s=round(fresh_s, 2), nev_fresh_bytes_link=class_bytes(veth) - b0,
                       nev_fresh_bytes_channel=fresh.bytes_sent, nev_fresh_payload=fresh.payload_sizes,
                       lane_apply_peak_rss_kb=fresh.result.maxrss_kb)
            warm_s, warm_link, warm_channel, warm_payload, warm_agent = [], [], [], [], []
            for i in range(args.warm_runs):
                (wt / "src" / f"warm{i}.rs").write_text("pub fn warm() {}\n")
                git(wt, "add", "-A")
                git(wt, "commit", "-qm", f"one more {i}")
                (wt / "src" / "mod3.rs").write_text(f"pub fn f3() -> u32 {{ {3333 + i} }}\n")
                b0 = class_bytes(veth)
                secs, warm = gate_once(wt)
                warm_s.append(secs)
                warm_link.append(class_bytes(veth) - b0)
                warm_channel.append(warm.bytes_sent)
                warm_payload.append(sum(warm.payload_sizes.values()))
                warm_agent.append(warm.agent_sent)
            fig.update(nev_warm_runs=args.warm_runs, nev_warm_s=round(statistics.median(warm_s), 2),
                       nev_warm_s_all=[round(x, 2) for x in warm_s],
                       nev_warm_bytes_link=statistics.median(warm_link),
                       nev_warm_bytes_channel=statistics.median(warm_channel),
                       nev_warm_payload_bytes=statistics.median(warm_payload),
                       nev_warm_payload=warm.payload_sizes, nev_warm_agent_sent=sum(warm_agent))
            # The baseline: rsync -a of the same worktree, then the same command.
            ssh_cmd = f"ssh -F {info.ssh_config}"
            has = subprocess.run(["ssh", "-F", str(info.ssh_config), f"lane@{lane.addr}", "command -v rsync"],
                                 capture_output=True, text=True)
            if has.returncode != 0:
                raise SystemExit("B1: the rsync baseline needs rsync on the lane and this lane has none (the LXC "
                                 "lanes' image does not carry it): run B1 on netns lanes (NEV_BOX_LANES=netns)")
            dest = f"lane@{lane.addr}:{lane.root}/rsync-copy/"
            b0 = class_bytes(veth)
            t0 = time.perf_counter()
            p = subprocess.Popen(["rsync", "-a", "--partial", "--exclude", ".git", "-e", ssh_cmd,
                                  f"{wt}/", dest], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                p.wait(args.rsync_seconds)
                finished = True
            except subprocess.TimeoutExpired:
                p.terminate()
                p.wait(10)
                finished = False
            rsync_s = time.perf_counter() - t0
            rsync_link = class_bytes(veth) - b0
            arrived = du_bytes(lane.host_root / "rsync-copy")
            t0 = time.perf_counter()
            sh(["ssh", "-F", str(info.ssh_config), f"lane@{lane.addr}", "cd", f"{lane.root}/rsync-copy", "&&", "true"])
            ssh_s = time.perf_counter() - t0
            # The floor of any gate here: one `ssh -J jump lane true` over the same slow link.
            hand = []
            for _ in range(3):
                t0 = time.perf_counter()
                sh(["ssh", "-F", str(info.ssh_config), "-J", f"{info.name}-jump", f"lane@{lane.addr}", "true"])
                hand.append(time.perf_counter() - t0)
            fig["ssh_j_true_s"] = round(statistics.median(hand), 2)
            fig["limit_warm_s"] = round(fig["nev_warm_payload_bytes"] / UP_PAYLOAD_BPS + fig["ssh_j_true_s"], 2)
            total = fig["worktree_bytes_without_git"]
            est = rsync_s if finished else rsync_s * total / max(arrived, 1)
            fig.update(rsync_ran_s=round(rsync_s, 1), rsync_finished=finished, rsync_bytes_arrived=arrived,
                       rsync_bytes_link=rsync_link, rsync_rate_Bps=round(arrived / rsync_s),
                       rsync_full_s_extrapolated=round(est + ssh_s, 1))
        finally:
            unshape(veth, netns)
            shutil.rmtree(lane.host_root / "rsync-copy", ignore_errors=True)
    fig["ratio_rsync_vs_nev_fresh"] = round(fig["rsync_full_s_extrapolated"] / fig["nev_fresh_s"], 1)
    fig["ratio_rsync_vs_nev_warm"] = round(fig["rsync_full_s_extrapolated"] / fig["nev_warm_s"], 1)
    fig["ratio_nev_warm_vs_limit"] = round(fig["nev_warm_s"] / fig["limit_warm_s"], 2)   # goal <= 1.5
    publish("B1", fig)
    return 0


if __name__ == "__main__":
    sys.exit(run_checked(main))
