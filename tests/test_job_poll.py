"""`nev job poll`: the pure decision per job, results read from a forge, and the tick's schedule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from jobs import poll as poll_mod
from jobs import records as job_records
from jobs import result as result_mod
from jobs import submit as submit_mod
from jobs import tick as tick_mod
from jobs.poll import RunInfo, decide
from jobs.records import JobRecord, JobStatus
from jobs.result import Result
from lanes.base import crontab
from tests.helpers.job_helpers import ROOT, fake_lane_dagu, git, make_checkout, nev, write_manifest

DAGU = "/opt/nev/dagu-1.30.2/dagu"


def _res(outcome: str, code: int, commit: str = "c" * 40) -> Result:
    return Result("demo", outcome, code, "run-1", commit, (), "demo")


def _rec(status: str, **fields) -> JobRecord:
    return JobRecord(job="demo", status=JobStatus(status), **fields)


@pytest.mark.parametrize("rec,res,run,kind", [
    (None, _res("passed", 0), None, "done"),
    (_rec("submitted"), _res("failed", 10), None, "failed"),
    (_rec("submitted"), _res("failed", 9), None, "failed"),
    (_rec("failed", result="c" * 40), _res("failed", 10), None, "done"),
    (_rec("landed", result="c" * 40), _res("passed", 0), None, "done"),
    (_rec("submitted", run_id="r"), None, RunInfo(True, "partially_succeeded", 3, 0), "resend"),
    (_rec("resent", run_id="r"), None, RunInfo(True, "failed", 0, 7), "resend"),
    (_rec("submitted", run_id="r"), None, RunInfo(False, "running"), "wait"),
    (_rec("submitted", run_id="r"), None, RunInfo(False, "queued"), "wait"),
    (_rec("submitted", run_id="r"), None, None, "wait"),
    (_rec("submitted", run_id="r"), None, RunInfo(True, "failed", None, None), "failed"),
    (_rec("landed"), None, None, "done"),
])
def test_decide(rec, res, run, kind):
    assert decide(rec, res, run).kind == kind


CUT = "step run was left running when the run ended failed"


def test_a_run_cut_off_is_resent_once_and_counted_then_a_second_cut_off_is_failed():
    first = decide(_rec("submitted", run_id="r"), None, RunInfo(True, "failed", None, None, CUT))
    assert first.kind == "resend" and first.cut_off and CUT in first.why
    second = decide(_rec("resent", run_id="r2", resends=1, cutoffs=1), None, RunInfo(True, "failed", None, None, CUT))
    assert second.kind == "failed" and not second.cut_off
    assert "cut off again" in second.why and "not resent again" in second.why
    # a resend for exit 3 does not use up the cut-off's one resend
    third = decide(_rec("resent", run_id="r3", resends=1, cutoffs=0), None, RunInfo(True, "failed", None, None, CUT))
    assert third.kind == "resend" and third.cut_off


@pytest.mark.parametrize("status,steps,cut", [
    # Dagu's zombie check ended the run while the run step's process was gone with the lane
    ("failed", [("prepare", "succeeded", "0"), ("run", "running", "-"), ("publish", "not_started", "-")], True),
    # the runner killed by a signal (the lane's Dagu killed under it)
    ("failed", [("prepare", "succeeded", "0"), ("run", "failed", "-"), ("publish", "succeeded", "0")], True),
    # a failed prepare (exit 1): later steps never started; not a cut-off
    ("failed", [("prepare", "failed", "1"), ("run", "not_started", "-"), ("publish", "not_started", "-")], False),
    # a run that published its result, then archive failed
    ("partially_succeeded", [("run", "failed", "1"), ("publish", "succeeded", "0"), ("archive", "failed", "2")], False),
    # stopped by a person (`nev dagu stop-run`): never a cut-off
    ("aborted", [("prepare", "succeeded", "0"), ("run", "aborted", "-")], False),
    ("succeeded", [("run", "succeeded", "0")], False),
])
def test_cut_off_is_a_step_left_running_or_killed_by_a_signal(status, steps, cut):
    assert (poll_mod.cut_off(status, steps) is not None) is cut


def _forge_with_result(tmp: Path, outcome: str, code: int, spec_on_main: bool = False,
                       verify: str | None = None) -> tuple[Path, Path]:
    forge = tmp / "forge.git"
    git(tmp, "init", "-q", "--bare", str(forge))
    dev = tmp / "dev"
    make_checkout(dev)
    if spec_on_main:
        (dev / "specs").mkdir()
        (dev / "specs" / "demo.md").write_text("---\ntouches:\n  - out/**\n---\n# demo\n")
        if verify is not None:
            tracks = json.loads((dev / "tracks.json").read_text())
            (dev / "tracks.json").write_text(json.dumps({**tracks, "verify": verify}))
        git(dev, "add", "-A")
        git(dev, "commit", "-qm", "spec")
    git(dev, "push", "-q", str(forge), "HEAD:refs/heads/main")
    git(dev, "checkout", "-q", "-b", "work")
    (dev / "out").mkdir()
    (dev / "out" / "x.txt").write_text("x\n")
    git(dev, "add", "-A")
    git(dev, "commit", "-qm", "job work")
    git(dev, "commit", "-q", "--allow-empty", "-m", result_mod.message("demo", outcome, code, "run-1", [], "demo"))
    git(dev, "push", "-q", str(forge), "HEAD:refs/heads/result/demo", "HEAD:refs/heads/job/demo")
    git(dev, "checkout", "-q", "main")
    git(dev, "branch", "-q", "-D", "work")
    # submitted from this state folder (`nev job submit` records it): only its submitter lands it
    with job_records.locked({"NEV_STATE_DIR": str(tmp / "state")}) as recs:
        recs.jobs["demo"] = JobRecord(job="demo", sends=1, run_id="run-1", spec="demo")
    return forge, dev


def _env(tmp: Path, forge: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update({"NEV_LANE_GIT_URL": str(forge), "NEV_STATE_DIR": str(tmp / "state"), "PYTHONPATH": str(ROOT),
                # the landing's gate runs in the sandbox: the test's control folder is the harness's
                "NEV_SANDBOX_WRITE": str(tmp)})
    return env


def test_poll_records_a_refused_result_as_failed_once_and_never_resends_it(tmp_path):
    forge, dev = _forge_with_result(tmp_path, "failed", 10)
    env = _env(tmp_path, forge)
    r = nev(["job", "poll", "--repo", str(dev)], env)
    assert r.returncode == 1 and "demo: failed: result failed (exit 10); not resent" in r.stderr
    rec = json.loads((tmp_path / "state" / "job-results.json").read_text())["jobs"]["demo"]
    assert rec["status"] == "failed" and rec["exit"] == 10 and rec.get("resends", 0) == 0
    r = nev(["job", "poll", "--repo", str(dev)], env)
    assert r.returncode == 0 and "demo" not in r.stderr  # recorded already: nothing to do
    assert git(forge, "rev-parse", "--verify", "-q", "refs/heads/result/demo")  # kept for a person
    st = nev(["job", "status", "demo"], env)
    assert "demo: failed" in st.stdout


def test_poll_does_not_land_without_the_spec_on_main(tmp_path):
    forge, dev = _forge_with_result(tmp_path, "passed", 0)
    r = nev(["job", "poll", "--repo", str(dev)], _env(tmp_path, forge))
    assert "demo: not-landed: specs/demo.md is not on main" in r.stderr
    assert git(dev, "rev-parse", "main") == git(forge, "rev-parse", "main")
    assert subprocess.run(["git", "-C", str(dev), "rev-parse", "--verify", "-q", "refs/heads/demo"]).returncode != 0


@pytest.mark.parts  # a real landing with a 10 s gate
def test_submit_and_a_second_tick_return_while_poll_is_landing_a_result(tmp_path, monkeypatch):
    """Acceptance: the tick holds the job records only to read them and to write each outcome,
    never during a landing, so a submission in the middle of a gate does not wait for it. The
    landing is real (the tick's process, a real repository, a gate of 10 s run here); the
    submission pushes to the same local forge and records in the same state folder, with only
    its lane and Dagu faked at the edge. A second tick meanwhile does nothing (one tick at a time)."""
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    gate = f"touch {ctl}/gate-started && sleep 10 && touch {ctl}/gate-ended"
    forge, dev = _forge_with_result(tmp_path, "passed", 0, spec_on_main=True, verify=gate)
    # NEV_ON_LANE=1: the 10 s verify runs here, in place (verify is lane-only otherwise)
    env = {**_env(tmp_path, forge), "NEV_LANES_FILE": str(tmp_path / "no-lanes.json"), "NEV_ON_LANE": "1"}
    out, err = (tmp_path / "poll.out").open("w"), (tmp_path / "poll.err").open("w")
    t0 = time.monotonic()
    tick = subprocess.Popen([sys.executable, "-m", "rig.cli", "job", "poll", "--repo", str(dev)], cwd=ROOT,
                            env=env, stdout=out, stderr=err, text=True)
    try:
        while not (ctl / "gate-started").exists():
            assert tick.poll() is None, (tmp_path / "poll.err").read_text()
            assert time.monotonic() - t0 < 60, "the landing's gate never started"
            time.sleep(0.05)
        gate_started = time.monotonic() - t0
        other = tmp_path / "other"
        git(tmp_path, "clone", "-q", "-b", "main", str(forge), str(other))
        manifest = write_manifest(tmp_path / "other.yaml", git(other, "rev-parse", "HEAD"),
                                  [{"name": "a", "kind": "command", "command": "true"}], name="other")
        for k in [k for k in os.environ if k.startswith(("NEV_", "GENERA_"))]:
            monkeypatch.delenv(k)
        fake_lane_dagu(monkeypatch)
        s0 = time.monotonic()
        rc = submit_mod.submit(manifest, repo_path=other, environ={
            "NEV_LANE_GIT_URL": str(forge), "NEV_STATE_DIR": str(tmp_path / "state"), "NEV_JOB_INSTALL_NEV": "0",
            "NEV_FOLKNET_FILE": str(tmp_path / "none.json"), "PATH": os.environ["PATH"]})
        submit_took = time.monotonic() - s0
        assert rc == 0
        # Returned in the middle of the landing: the gate has not ended, the tick still runs.
        assert not (ctl / "gate-ended").exists() and tick.poll() is None, f"submit took {submit_took:.2f} s"
        records = json.loads((tmp_path / "state" / "job-results.json").read_text())["jobs"]
        assert records["other"]["status"] == "submitted"
        assert git(forge, "rev-parse", "refs/heads/job/other") == git(other, "rev-parse", "HEAD")
        second = nev(["job", "poll", "--repo", str(dev)], env)
        assert second.returncode == 0 and f"another tick (PID {tick.pid}) is still running" in second.stderr
        assert not (ctl / "gate-ended").exists() and tick.poll() is None
        assert tick.wait(timeout=120) == 0, (tmp_path / "poll.err").read_text()
        landing_took = time.monotonic() - t0
    finally:
        if tick.poll() is None:
            tick.kill()
            tick.wait()
        out.close()
        err.close()
    print(f"gate started {gate_started:.2f} s into the tick; submit took {submit_took:.2f} s; "
          f"the tick took {landing_took:.2f} s")
    records = json.loads((tmp_path / "state" / "job-results.json").read_text())["jobs"]
    assert records["demo"]["status"] == "landed", (tmp_path / "poll.err").read_text()
    assert records["other"]["status"] == "submitted"  # the tick's write kept the submission
    assert (ctl / "gate-ended").exists()
    assert git(dev, "show", "main:out/x.txt") == "x"


def test_a_credential_in_the_forge_url_is_split_out_and_never_shown(tmp_path):
    """The forge's one rule (`lanes/forge.py`): git is given the URL without it."""
    forge, dev = _forge_with_result(tmp_path, "passed", 0)
    env = {**_env(tmp_path, forge), "NEV_LANE_GIT_URL": "http://nev:tok3n@127.0.0.1:9/git/x.git"}
    r = nev(["job", "poll", "--repo", str(dev)], env)
    # the forge does not answer (nothing on port 9): cannot reach the rig, 3
    assert r.returncode == 3 and "http://127.0.0.1:9/git/x.git" in r.stderr
    assert "tok3n" not in r.stdout + r.stderr


def test_cron_table_replaces_only_this_repositorys_line(tmp_path):
    repo = tmp_path / "r"
    line = tick_mod.cron_line(repo, {"NEV_LANE_STRICT": "1", "PATH": "/usr/bin"}, tmp_path / "log")
    assert line.startswith("* * * * * ") and "NEV_LANE_STRICT=1" in line and "job poll" in line
    other = "0 3 * * * backup # mine\n"
    tag = tick_mod.cron_tag(repo)
    t1 = crontab.table(other, tag, line)
    assert t1 == other + line + "\n"
    assert crontab.table(t1, tag, line) == t1  # idempotent
    assert crontab.table(t1, tag, None) == other
    # another repository's tick (a longer path with this one as prefix) is not ours
    theirs = tick_mod.cron_line(tmp_path / "r2", {}, tmp_path / "log")
    assert crontab.table(t1 + theirs + "\n", tag, None) == other + theirs + "\n"


def test_tick_env_has_poll_env_and_no_secret(tmp_path):
    repo = tmp_path / "r"
    make_checkout(repo)
    tracks = json.loads((repo / "tracks.json").read_text())
    tracks["specWatch"]["pollEnv"] = {"NEV_LANE_STRICT": "1"}
    (repo / "tracks.json").write_text(json.dumps(tracks))
    env = tick_mod.tick_env(repo, {"NEV_FORGE_TOKEN": "s3cr3t-value", "NEV_FORGE_TOKEN_FILE": "/k/f",
                                   "NEV_LANE_GIT_URL": "http://f/x.git", "OTHER": "x", "PATH": "/usr/bin",
                                   "NEV_SSH_KEY": "/k/id", "NEV_MODEL_API_KEY": "sk-1", "NEV_NEW_TOKEN": "t"})
    assert env["NEV_LANE_STRICT"] == "1" and env["NEV_FORGE_TOKEN_FILE"] == "/k/f"
    assert "NEV_FORGE_TOKEN" not in env and "OTHER" not in env and env["PATH"] == "/usr/bin"
    # the lanes' key is a path the tick needs to reach a lane; a secret or a secret-looking name stays out
    assert env["NEV_SSH_KEY"] == "/k/id" and "NEV_MODEL_API_KEY" not in env and "NEV_NEW_TOKEN" not in env


@pytest.mark.parts  # the Dagu binary
def test_installed_tick_is_a_valid_scheduled_dagu_workflow_that_really_ticks(tmp_path):
    """--install --dagu-home writes a `schedule:` workflow; the real Dagu scheduler runs it within a minute."""
    forge, dev = _forge_with_result(tmp_path, "failed", 9)
    env = _env(tmp_path, forge)
    home = tmp_path / "dh"
    r = nev(["job", "poll", "--repo", str(dev), "--install", "--dagu-home", str(home)], env)
    assert r.returncode == 0, r.stderr
    wf = home / "dags" / "nev-job-poll.yaml"
    doc = yaml.safe_load(wf.read_text())
    assert doc["schedule"] == "* * * * *"
    assert {"NEV_LANE_GIT_URL": str(forge)} in doc["env"]
    cp = subprocess.run([DAGU, "validate", str(wf)], capture_output=True, text=True,
                        env={**os.environ, "DAGU_HOME": str(home)})
    assert cp.returncode == 0, cp.stdout + cp.stderr
    sched = subprocess.Popen([DAGU, "scheduler"], env={**os.environ, "DAGU_HOME": str(home)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    records = tmp_path / "state" / "job-results.json"

    def ticked() -> bool:      # the submitter's record is there from the start: its outcome
        try:
            return json.loads(records.read_text())["jobs"]["demo"]["status"] != "submitted"
        except (OSError, ValueError, KeyError):
            return False

    try:
        t0 = time.monotonic()
        while not ticked() and time.monotonic() - t0 < 90:
            time.sleep(1)
    finally:
        sched.terminate()  # the scheduler takes its time over a graceful stop
        try:
            sched.wait(timeout=5)
        except subprocess.TimeoutExpired:
            sched.kill()
            sched.wait(timeout=10)
    assert ticked(), "the scheduled tick did not run within 90 s"
    rec = json.loads(records.read_text())["jobs"]["demo"]
    assert rec["status"] == "failed" and rec["exit"] == 9
    r = nev(["job", "poll", "--repo", str(dev), "--uninstall", "--dagu-home", str(home)], env)
    assert r.returncode == 0 and not wf.exists()


def test_install_and_uninstall_the_crontab_line_keeps_other_lines(tmp_path):
    """The real `crontab`: this repository's tick line is added once, with pollEnv, and removed again."""
    before = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    original = before.stdout if before.returncode == 0 else None
    repo = tmp_path / "r"
    make_checkout(repo)
    tracks = json.loads((repo / "tracks.json").read_text())
    tracks["specWatch"]["pollEnv"] = {"NEV_LANE_STRICT": "1"}
    (repo / "tracks.json").write_text(json.dumps(tracks))
    env = {**_env(tmp_path, tmp_path / "forge.git"), "NEV_FORGE_TOKEN": "tok-should-not-appear"}
    other = f"0 3 * * * true # someone else's line {tmp_path}\n"
    try:
        subprocess.run(["crontab", "-"], input=(original or "") + other, check=True, text=True)
        for _ in range(2):  # idempotent
            r = nev(["job", "poll", "--repo", str(repo), "--install"], env)
            assert r.returncode == 0, r.stderr
        table = subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=True).stdout
        ours = [ln for ln in table.splitlines() if ln.endswith(f"# nev-job-poll {repo}")]
        assert len(ours) == 1 and ours[0].startswith("* * * * * ") and "NEV_LANE_STRICT=1" in ours[0]
        assert "job poll" in ours[0] and "tok-should-not-appear" not in table and other.strip() in table
        r = nev(["job", "poll", "--repo", str(repo), "--uninstall"], env)
        assert r.returncode == 0, r.stderr
        table = subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=True).stdout
        assert f"# nev-job-poll {repo}" not in table and other.strip() in table
    finally:
        if original is None:
            subprocess.run(["crontab", "-r"], capture_output=True)
        else:
            subprocess.run(["crontab", "-"], input=original, text=True)


def test_the_tick_resends_a_cut_off_run_once_then_records_the_second_cut_off_as_failed(tmp_path, monkeypatch):
    """The tick's wiring around `decide`: a real forge with no result and real job records; only
    the lane's Dagu (the runs read, the resend) is faked at the edge."""
    from jobs import records
    from lanes import forge as forge_mod
    from lanes.base.gitrun import Repo

    forge = tmp_path / "forge.git"
    git(tmp_path, "init", "-q", "--bare", str(forge))
    dev = tmp_path / "dev"
    make_checkout(dev)
    env = _env(tmp_path, forge)
    with records.locked(env) as recs:
        recs.jobs["demo"] = JobRecord(job="demo", sends=1, run_id="run-1", spec="demo")
    cut = RunInfo(True, "failed", None, None, "step run was left running when the run ended failed")
    sent: list[str] = []
    monkeypatch.setattr(poll_mod, "read_runs", lambda jobs: {n: cut for n in jobs})
    monkeypatch.setattr(poll_mod, "resend", lambda rec: (sent.append(rec.run_id), f"run-{len(sent) + 1}")[1])
    repo = Repo(dev)
    f = forge_mod.from_settings(env, repo)
    seen: list[dict[str, str]] = []                  # what `nev job poll --json` prints
    assert poll_mod.poll_jobs(repo, f, env, seen) == 0
    rec = records.read(env).jobs["demo"]
    assert sent == ["run-1"] and (rec.status, rec.run_id, rec.resends, rec.cutoffs) == ("resent", "run-2", 1, 1)
    assert [(s["job"], s["action"]) for s in seen] == [("demo", "resent")] and seen[0]["why"]
    assert poll_mod.poll_jobs(repo, f, env, seen) == 1          # cut off again: failed, not resent
    assert [s["action"] for s in seen] == ["resent", "failed"]
    rec = records.read(env).jobs["demo"]
    assert sent == ["run-1"] and (rec.status, rec.resends, rec.cutoffs) == ("failed", 1, 1)
    assert rec.why and "cut off again" in rec.why
    st = nev(["job", "status", "demo"], env)
    assert "demo: failed" in st.stdout and "1 cut-off(s)" in st.stdout and "not resent again" in st.stdout
    assert poll_mod.poll_jobs(repo, f, env) == 0 and sent == ["run-1"]   # recorded: nothing more


def test_resubmitting_a_job_while_the_tick_lands_it_keeps_the_new_job_branch(tmp_path, monkeypatch):
    """A job submitted again under the same name while the tick lands its earlier result: the
    tick's clean-up after the landing deletes job/<name> and result/<name> on the forge only while
    they are still what it landed, so the new submission's branch stays. The landing is real (its
    gate runs here and holds until the submission is done); the submission pushes to the same
    local forge, with only its lane and Dagu faked at the edge."""
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    gate = (f"touch {ctl}/gate-started; i=0; while [ ! -e {ctl}/go ] && [ $i -lt 600 ]; do sleep 0.05; "
            f"i=$((i+1)); done")
    forge, dev = _forge_with_result(tmp_path, "passed", 0, spec_on_main=True, verify=gate)
    landed_job_tip = git(forge, "rev-parse", "refs/heads/job/demo")
    env = {**_env(tmp_path, forge), "NEV_LANES_FILE": str(tmp_path / "no-lanes.json"), "NEV_ON_LANE": "1"}
    err = (tmp_path / "poll.err").open("w")
    tick = subprocess.Popen([sys.executable, "-m", "rig.cli", "job", "poll", "--repo", str(dev)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        t0 = time.monotonic()
        while not (ctl / "gate-started").exists():
            assert tick.poll() is None, (tmp_path / "poll.err").read_text()
            assert time.monotonic() - t0 < 60, "the landing's gate never started"
            time.sleep(0.05)
        other = tmp_path / "other"
        git(tmp_path, "clone", "-q", "-b", "main", str(forge), str(other))
        (other / "again.txt").write_text("a second go\n")
        git(other, "add", "-A")
        git(other, "commit", "-qm", "demo, again")
        manifest = write_manifest(tmp_path / "again.yaml", git(other, "rev-parse", "HEAD"),
                                  [{"name": "a", "kind": "command", "command": "true"}], name="demo")
        for k in [k for k in os.environ if k.startswith(("NEV_", "GENERA_"))]:
            monkeypatch.delenv(k)
        fake_lane_dagu(monkeypatch)
        assert submit_mod.submit(manifest, repo_path=other, environ={
            "NEV_LANE_GIT_URL": str(forge), "NEV_STATE_DIR": str(tmp_path / "state"), "NEV_JOB_INSTALL_NEV": "0",
            "NEV_FOLKNET_FILE": str(tmp_path / "none.json"), "PATH": os.environ["PATH"]}) == 0
        new_tip = git(other, "rev-parse", "HEAD")
        assert git(forge, "rev-parse", "refs/heads/job/demo") == new_tip != landed_job_tip
        (ctl / "go").touch()
        assert tick.wait(timeout=120) == 0, (tmp_path / "poll.err").read_text()
    finally:
        if tick.poll() is None:
            tick.kill()
            tick.wait()
        err.close()
    log = (tmp_path / "poll.err").read_text()
    assert "demo: landed" in log, log
    assert git(dev, "show", "main:out/x.txt") == "x"                        # the earlier result landed
    assert git(forge, "rev-parse", "refs/heads/job/demo") == new_tip, log   # the new submission's branch stays
    assert "job/demo kept: it moved" in log
    rec = json.loads((tmp_path / "state" / "job-results.json").read_text())["jobs"]["demo"]
    assert rec["status"] == "submitted" and rec["tip"] == new_tip           # the new submission's record


def test_poll_leaves_a_result_it_did_not_submit_to_its_submitter():
    # another development box's job on the same forge: no record in this state folder
    for res in (_res("passed", 0), _res("failed", 10)):
        act = decide(None, res, None)
        assert act.kind == "done" and "not submitted from this state folder" in act.why
