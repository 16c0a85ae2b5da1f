"""B7: the time `nev land` adds beyond the gate command itself, against a hand
`git merge --ff-only`; and two ticks (`nev land --approved`) racing on one repository.

    .venv/bin/python bench/perf/b07_land.py [--rounds 8]

Each round lands one tiny track (gate: a command that only records its start and end), so
the landing's own work (pins, scope, private worktree, rebase, CAS, tag, cleanup, process
start) is what is measured. The baseline in the same run: `git merge --ff-only` of an
equivalent branch in a twin repository. Peak RSS is per process (wait4), never summed.
Prints the ratio last and appends a JSON line to bench/perf/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.perf.common import (  # noqa: E402
    CHECK,
    CHECK_HELP,
    ROOT,
    check_settings,
    git,
    publish,
    run_checked,
    run_measured,
)

GATE = 'date +%s.%N >> {log}; date +%s.%N >> {log}'


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "GIT_"))}
    e.update({"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
              "GIT_COMMITTER_EMAIL": "b@b", "PYTHONPATH": str(ROOT), "NEV_LAND_LOCK_WAIT": "600",
              "NEV_ON_LANE": "1"})  # the gate in place: verify is lane-only otherwise
    return e


def make_repo(base: Path, names: list[str], log: Path) -> Path:
    repo = base / "primary"
    git(base, "init", "-q", "-b", "main", str(repo))
    (repo / "src").mkdir()
    (repo / "src/a.txt").write_text("a\n")
    (repo / "specs").mkdir()
    for n in names:
        (repo / f"specs/{n}.md").write_text(f"---\ntouches:\n  - src/{n}/**\n---\n")
    (repo / "handoff.md").write_text("## Roster\n" + "".join(f"- {n}\n" for n in names))
    (repo / "tracks.json").write_text(json.dumps({"verify": GATE.format(log=log), "landChecks": [],
                                                 "specWatch": {"pollEnv": {}}}))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo


def add_track(repo: Path, name: str) -> str:
    wt = repo.parent / f"wt-{name}"
    git(repo, "worktree", "add", "-q", "-b", name, str(wt), "main")
    (wt / "src" / name).mkdir(parents=True)
    (wt / "src" / name / "f.txt").write_text(name + "\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", name)
    return git(repo, "rev-parse", name)


def gate_seconds(log: Path) -> list[float]:
    t = [float(x) for x in log.read_text().split()] if log.exists() else []
    return [t[i + 1] - t[i] for i in range(0, len(t) - 1, 2)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    a = ap.parse_args()
    if a.check:
        return check_settings(box=False, rounds=a.rounds)
    nev = [sys.executable, "-m", "rig.cli", "land"]
    with tempfile.TemporaryDirectory(prefix="b07-") as tmp:
        base = Path(tmp)
        # 1. one landing at a time, against a hand fast-forward in a twin repository
        names = [f"t{i}" for i in range(a.rounds)]
        (base / "land").mkdir()
        (base / "ff").mkdir()
        log = base / "gate.log"
        repo = make_repo(base / "land", names, log)
        twin = make_repo(base / "ff", names, base / "unused.log")
        land_s, ff_s, rss = [], [], []
        for n in names:
            tip = add_track(repo, n)
            sha = git(repo, "rev-parse", f"main:specs/{n}.md")
            rc, wall, peak = run_measured([*nev, n, sha, tip], env(), repo)
            if rc != 0:
                print(f"b07: landing {n} failed (exit {rc})", file=sys.stderr)
                return 1
            land_s.append(wall)
            rss.append(peak)
            add_track(twin, n)
            _, wall, _ = run_measured(["git", "merge", "--ff-only", "-q", n], env(), twin)
            ff_s.append(wall)
        gates = gate_seconds(log)
        overhead = [w - g for w, g in zip(land_s, gates, strict=True)]
        # 2. two ticks racing on one repository
        (base / "race").mkdir()
        rlog = base / "race-gate.log"
        rrepo = make_repo(base / "race", ["ra", "rb"], rlog)
        for n in ("ra", "rb"):
            add_track(rrepo, n)
            subprocess.run([*nev, "approve", n], cwd=rrepo, env=env(), check=True, capture_output=True)
        t0 = time.perf_counter()
        procs = [subprocess.Popen([*nev, "--approved"], cwd=rrepo, env=env(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        errs = [p.communicate()[1] for p in procs]
        race_wall = time.perf_counter() - t0
        landed = git(rrepo, "tag", "--list", "spec/*").split()
        waited = sum("waiting for the land lock" in e for e in errs)
        race_ok = len(landed) == 2 and all(p.returncode == 0 for p in procs)
        race_gates = gate_seconds(rlog)
    med_over, med_ff = statistics.median(overhead), statistics.median(ff_s)
    res = {
        "rounds": a.rounds, "land_wall_median_s": round(statistics.median(land_s), 4),
        "gate_median_s": round(statistics.median(gates), 4), "land_overhead_median_s": round(med_over, 4),
        "land_overhead_max_s": round(max(overhead), 4), "ff_only_median_s": round(med_ff, 4),
        "land_peak_rss_kib_max": max((r for r in rss if r is not None), default=None),
        "race_wall_s": round(race_wall, 4), "race_landed": len(landed), "race_ticks_that_waited": waited,
        "race_gates_run": len(race_gates), "race_ok": race_ok,
        "ratio_overhead_vs_ff_only": round(med_over / med_ff, 1) if med_ff > 0 else None,
    }
    publish("B7", res)
    return 0 if race_ok else 1


if __name__ == "__main__":
    sys.exit(run_checked(main))
