"""B9: a job's Dagu enqueue to its first stage running, and its resume after `kill -9` mid-stage,
each against the same stage run by hand (baselines run in the same run).

A. On the rig-in-a-box (NEV_BOX_NAME, default "bnine", net NEV_BOX_NET, default 198.18.63; up here
   and down at the end unless NEV_BOX_KEEP=1): `nev job submit` of a one-stage job to lane0's real
   Dagu 1.30.2; the time from the enqueue call to the stage's `stage-started` event (read from the
   archived events.jsonl on the NAS), split at the runner's start. Baseline: the dev box starting
   the same stage command on the lane by hand over SSH (connect + run).
B. Here: `nev job run` of a two-stage job, SIGKILLed while stage 2 (`sleep S`) runs, then resumed;
   the resume's wall time to the job's end against stage 2's command run by hand (`bash -c`).

    .venv/bin/python bench/perf/b09_jobs.py [--reps 3] [--sleep 1.0]

Prints the figures, appends a JSON line to bench/perf/results.jsonl, prints the ratios last.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import yaml  # noqa: E402

from bench.perf.common import ROOT, git, publish, run_measured  # noqa: E402
from jobs.state import parse_iso  # noqa: E402

DAGU = "/opt/nev/dagu-1.30.2/dagu"


# -- B: resume after kill -9 -----------------------------------------------------------------------

def resume_once(tmp: Path, sleep_s: float) -> dict:
    work = tmp / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "README.md").write_text("b9\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "base")
    base = git(work, "rev-parse", "HEAD")
    stage2 = f"sleep {sleep_s}; echo two > two.txt"
    m = tmp / "job.yaml"
    m.write_text(yaml.safe_dump({"name": "bnine", "base": base, "spec": "specs/bnine.md", "stages": [
        {"name": "one", "kind": "command", "command": "echo one > one.txt"},
        {"name": "two", "kind": "command", "command": stage2}]}))
    share = tmp / "share"
    (share / "archive").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update({"PYTHONPATH": str(ROOT), "NEV_LANE_SHARED": str(share), "NEV_JOB_MIN_FREE_GB": "0",
                "NEV_STATE_DIR": str(tmp / "st")})
    state = tmp / "state"
    argv = [sys.executable, "-m", "rig.cli", "job", "run", str(m), "--workdir", str(work), "--state", str(state)]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            st = json.loads((state / "state.json").read_text())
            if st["stages"].get("two", {}).get("status") == "running":
                break
        except (OSError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.02)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    t_launch = time.time()
    code, wall, peak_kib = run_measured(argv, env, ROOT)
    assert code == 0, f"resume exit {code}"
    evs = [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]
    restart = [e for e in evs if e["event"] == "stage-started" and e["stage"] == "two"][-1]
    ones = sum(1 for e in evs if e["event"] == "stage-started" and e["stage"] == "one")
    _, hand, _ = run_measured(["bash", "-c", stage2], env, work)
    return {"resume_wall_s": round(wall, 3), "resume_to_stage_restart_s": round(parse_iso(restart["time"]) - t_launch, 3),
            "by_hand_s": round(hand, 3), "stage_one_runs": ones,
            "resume_peak_rss_mb": None if peak_kib is None else round(peak_kib / 1024, 1)}


# -- A: enqueue to the first stage, on the box --------------------------------------------------------

def enqueue_once(box, env: dict[str, str], dev: Path, n: int) -> dict:
    from dagu import runs
    from jobs import submit

    name = f"bnine{n}"
    (dev / "specs" / f"{name}.md").write_text(f"---\ntouches:\n  - out/{name}/**\n---\n")
    git(dev, "add", "-A")
    git(dev, "commit", "-qm", name)
    m = dev.parent / f"{name}.yaml"
    stage = "echo started"
    m.write_text(yaml.safe_dump({"name": name, "base": git(dev, "rev-parse", "HEAD"), "spec": f"specs/{name}.md",
                                 "stages": [{"name": "s", "kind": "command", "command": stage}]}))
    mark: dict[str, float] = {}
    real = runs.submit

    def timed(api, wf, params, *args, **kw):  # the enqueue call itself is what is timed
        mark["enqueue"] = time.time()
        return real(api, wf, params, *args, **kw)

    runs.submit = timed  # type: ignore[assignment]
    old = dict(os.environ)
    os.environ.update(env)
    try:
        submit.submit(m, None, dev)
    finally:
        runs.submit = real
        os.environ.clear()
        os.environ.update(old)
    rec = json.loads((Path(env["NEV_STATE_DIR"]) / "job-results.json").read_text())["jobs"][name]
    ev_file = box.nas / "archive" / "job-logs" / name / rec["run_id"] / "events.jsonl"
    t0 = time.monotonic()
    while not ev_file.exists() and time.monotonic() - t0 < 120:
        time.sleep(0.2)
    evs = [json.loads(line) for line in ev_file.read_text().splitlines()]
    runner = next(e for e in evs if e["event"] == "run-started")
    first = next(e for e in evs if e["event"] == "stage-started")
    from lanes.base.ssh import Connection, Target

    t = time.monotonic()
    with Connection(Target.parse(box.lanes[0].ssh), box.known_hosts, box.ssh_key, jump=Target.parse(box.jump)) as c:
        c.run(["bash", "-c", stage], check=True)
    hand = time.monotonic() - t
    return {"enqueue_to_runner_s": round(parse_iso(runner["time"]) - mark["enqueue"], 3),
            "runner_to_stage_s": round(parse_iso(first["time"]) - parse_iso(runner["time"]), 3),
            "enqueue_to_stage_s": round(parse_iso(first["time"]) - mark["enqueue"], 3),
            "by_hand_ssh_s": round(hand, 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=1.0)
    a = ap.parse_args()
    resumes = []
    for _ in range(a.reps):
        with tempfile.TemporaryDirectory(prefix="b09-") as d:
            resumes.append(resume_once(Path(d), a.sleep))
    print("resume after kill -9:", json.dumps(resumes))

    from lanes.base import settings
    from rig.box import Box

    benv = dict(os.environ)
    benv.setdefault("NEV_BOX_DIR", str(ROOT / ".box"))
    box_obj = Box.from_settings(benv, default_name="bnine", default_net="198.18.63")
    info = box_obj.up(lanes=1)
    enq = []
    try:
        tmp = Path(tempfile.mkdtemp(prefix="b09-box-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
        env.update(info.env)
        env.update({"PYTHONPATH": str(ROOT), "NEV_DAGU_BINARY": DAGU, "NEV_STATE_DIR": str(tmp / "state")})
        env["NEV_LANE_GIT_URL"] = info.forge_create_repo(f"b09-{int(time.time())}")
        archive = info.nas / "archive"
        archive.mkdir(exist_ok=True)
        uid = os.stat(info.lanes[0].host_home).st_uid
        os.chown(archive, uid, uid)
        dev = tmp / "dev"
        git(tmp, "init", "-q", "-b", "main", str(dev))
        (dev / "specs").mkdir()
        (dev / "tracks.json").write_text('{"verify": "true"}\n')
        git(dev, "add", "-A")
        git(dev, "commit", "-qm", "base")
        up = subprocess.run([sys.executable, "-m", "rig.cli", "dagu", "up"], env=env, capture_output=True, text=True)
        assert up.returncode == 0, up.stderr
        for i in range(a.reps):
            enq.append(enqueue_once(info, env, dev, i))
        print("enqueue to first stage:", json.dumps(enq))
        subprocess.run([sys.executable, "-m", "rig.cli", "dagu", "stop"], env=env, capture_output=True)
    finally:
        if not settings.get_flag(settings.BOX_KEEP):
            box_obj.down()

    def med(rows: list[dict], k: str) -> float:
        return round(statistics.median(r[k] for r in rows), 3)

    out = {
        "cpus": os.cpu_count(), "reps": a.reps,
        "stage_sleep_s": a.sleep,
        "enqueue": {k: med(enq, k) for k in enq[0]} if enq else None,
        "resume": {k: med(resumes, k) for k in ("resume_wall_s", "resume_to_stage_restart_s", "by_hand_s")},
        "stage_one_reruns": max(r["stage_one_runs"] for r in resumes) - 1,
        "peak_rss_mb": {"nev_job_run_resume": max((r["resume_peak_rss_mb"] for r in resumes
                                                  if r["resume_peak_rss_mb"] is not None), default=None)},
    }
    if enq:
        out["ratio_enqueue_to_stage_over_by_hand"] = round(out["enqueue"]["enqueue_to_stage_s"]
                                                           / out["enqueue"]["by_hand_ssh_s"], 2)
    out["ratio_resume_over_by_hand"] = round(out["resume"]["resume_wall_s"] / out["resume"]["by_hand_s"], 2)
    publish("B9", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
