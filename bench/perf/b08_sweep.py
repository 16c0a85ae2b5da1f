"""B8: `nev lane sweep --dry-run` on two lanes holding 20 copies each.

Baseline, in the same run: `du -s` of the same folders over one SSH command per lane (what the
dry run's sizes are checked against). On the rig-in-a-box (NEV_BOX_NAME/NEV_BOX_NET pick it; it
is brought up if needed). Each copy is a real worktree of the lane's mirror with a few hundred
files, under a root of its own (`/srv/lane/b08-<id>`), removed at the end.

Run: .venv/bin/python bench/perf/b08_sweep.py [--copies 20] [--files 300] [--rounds 3]
Peak RSS: this process (getrusage) and, per lane, the survey script and its largest `du`
(reported by the survey itself); never summed. Appends a JSON line to bench/perf/results.jsonl
and prints the ratio last.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.perf.common import CHECK, CHECK_HELP, check_settings, publish, run_checked  # noqa: E402
from lanes import payload  # noqa: E402
from lanes import sweep as sw  # noqa: E402
from lanes.base.gitrun import Repo  # noqa: E402
from lanes.base.ssh import Connection, Target  # noqa: E402
from lanes.lanesfile import Lane  # noqa: E402
from rig.box import Box  # noqa: E402


def setup(conn: Connection, root: str, names: list[str], files: int) -> None:
    script = f"""set -e; mkdir -p {root}; cd {root}
git init -q src; cd src; i=0; while [ $i -lt {files} ]; do head -c $((1000 + i * 37)) /dev/urandom > f$i; i=$((i+1)); done
git add -A; git -c user.name=b -c user.email=b@b commit -qm seed; cd ..
git init -q --bare .git-mirror; git -C src push -q {root}/.git-mirror HEAD:refs/heads/main; rm -rf src
for n in {' '.join(names)}; do git -C .git-mirror worktree add -q --detach ../$n main
  mkdir -p $n/target .payload-$n; head -c 200000 /dev/urandom > $n/target/blob; echo p > .payload-$n/x; done"""
    res = conn.run(["sh", "-c", script])
    if res.exit_status != 0:
        raise SystemExit(f"setup on {conn.target} failed: {res.err.strip()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    a = ap.parse_args()
    if a.check:
        return check_settings(box=True, copies=a.copies, files=a.files, rounds=a.rounds)
    info = Box.from_settings().up(lanes=2)
    os.environ.update(info.env)
    bid = uuid.uuid4().hex[:6]
    root = f"/srv/lane/b08-{bid}"
    lanes = [Lane(i, ln.ssh, root=root, shared=ln.shared, jump=info.jump) for i, ln in enumerate(info.lanes[:2])]
    conns = [Connection(ln.target, info.known_hosts, info.ssh_key, jump=Target.parse(info.jump)).connect() for ln in lanes]
    with tempfile.TemporaryDirectory(prefix="b08-") as tmp:
        primary = Path(tmp) / "engine"
        Repo(Path(tmp)).git("init", "-q", str(primary))
        # named as the primary's worktrees' copies would be (keyed by its repository): its to sweep
        names = [payload.copy_name_of(Repo(primary), f"copy{i:02d}-{bid}") for i in range(a.copies)]
        try:
            for c in conns:
                setup(c, root, names, a.files)
            sweep_s, du_s, rss = [], [], []
            sizes_match = True
            for _ in range(a.rounds):
                t0 = time.monotonic()
                _, results = sw.sweep(dry_run=True, repo=Repo(primary), lanes=lanes)
                sweep_s.append(time.monotonic() - t0)
                rss.append([r.peak_rss_kb for r in results])
                t0 = time.monotonic()   # like `ssh lane du -s ...`: a connection per lane, one du each
                du_out = []
                for ln in lanes:
                    paths = " ".join(shlex.quote(f"{root}/{p}") for n in names for p in (n, f".payload-{n}"))
                    with Connection(ln.target, info.known_hosts, info.ssh_key, jump=Target.parse(info.jump)) as c:
                        du_out.append(c.run(f"du -sb {paths}", check=True).out)
                du_s.append(time.monotonic() - t0)
                for r, out in zip(results, du_out, strict=True):
                    du = {Path(p).name: int(s) for s, p in (ln.split("\t") for ln in out.splitlines())}
                    for d in r.decisions:
                        sizes_match &= d.size == du[d.name] + du[f".payload-{d.name}"]
                assert all(sum(d.remove for d in r.decisions) == a.copies for r in results)
        finally:
            for c in conns:
                c.run(f"rm -rf {root}")
                c.close()
    med_sweep, med_du = statistics.median(sweep_s), statistics.median(du_s)
    row = {
        "cpus": mp.cpu_count(), "lanes": len(lanes), "copies_per_lane": a.copies, "files_per_copy": a.files,
        "box_lanes": Box.from_settings().lane_backend,
        "sweep_dry_run_s": [round(x, 3) for x in sweep_s], "du_s": [round(x, 3) for x in du_s],
        "sweep_dry_run_median_s": round(med_sweep, 3), "du_median_s": round(med_du, 3),
        "sizes_match_du": sizes_match,
        "peak_rss_kb": {"this_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                        "lane_survey_per_round": rss[-1]},
        "ratio_sweep_over_du": round(med_sweep / med_du, 2),
    }
    publish("B8", row)
    return 0


if __name__ == "__main__":
    sys.exit(run_checked(main))
