"""`nev job status NAME [--follow]` and the dashboard's jobs on the lanes: a job in flight read from
its lane. The lane is this machine: a real sshd on 127.0.0.2 behind a jump host, another real
sshd (`tests/helpers/local_sshd.py`); the job's stages are run by the real runner (`nev job run`,
as the workflow's run step runs it) in the state folder the workflow gives it (`WORK/<job>/state`);
the development box's side is the real CLI with a submission record naming the lane and WORK,
as `nev job submit` writes it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jobs import archive, laneread, lanestate, records
from jobs import follow as jfollow
from jobs.state import Event, JobState
from lanes.lanesfile import Lane
from tests.helpers import local_sshd
from tests.helpers.job_helpers import (
    ROOT,
    Listener,
    lane_env,
    make_checkout,
    nev,
    nev_popen,
    write_manifest,
)

SECRET = "plain-secret-value-4471"  # no token shape: only the lane's masking hides it
RUN_ID = "run-0001"


class Hosts:
    """The lane behind a jump host, both real sshd on loopback, both pinned in one known_hosts, both
    taking the same key (as the lanes file's `jump` is used: `Lane.connect`)."""

    def __init__(self, tmp: Path) -> None:
        self.jump = local_sshd.start(tmp / "jump")
        self.lane = local_sshd.start(tmp / "lane", addr="127.0.0.2")
        with (tmp / "lane" / "authorized_keys").open("a") as f:
            f.write(self.jump.client_key.with_suffix(".pub").read_text())
        self.known_hosts = tmp / "known_hosts"
        self.known_hosts.write_text(
            self.jump.known_hosts.read_text() + self.lane.known_hosts.read_text()
        )
        self.key = self.jump.client_key
        self.user = self.lane.user

    def lanes(self, jump_port: int | None = None) -> dict:
        return {
            "jump": f"{self.user}@127.0.0.1:{jump_port or self.jump.port}",
            "lanes": [{"ssh": f"{self.user}@127.0.0.2:{self.lane.port}", "root": "/srv/lane"}],
        }

    def stop(self) -> None:
        self.jump.stop()
        self.lane.stop()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    s = Hosts(tmp_path_factory.mktemp("sshd"))
    yield s
    s.stop()


@pytest.fixture
def gateway():
    g = Listener()
    yield g
    g.close()


class Job:
    """One job on the local lane and this box's record of it."""

    def __init__(self, tmp: Path, sshd: Hosts, gateway: Listener, stages: list[dict]) -> None:
        self.tmp = tmp
        self.work = tmp / "lane" / "jobs-work"
        self.src = self.work / "demo" / "src"
        self.state = self.work / "demo" / "state"
        base = make_checkout(self.src)
        self.manifest = write_manifest(tmp / "job.yaml", base, stages, name="demo")
        self.lanes = tmp / "lanes.json"
        self.lanes.write_text(json.dumps(sshd.lanes()))
        self.dev = {
            k: v
            for k, v in lane_env(tmp / "dev", gateway.port).items()
            if k not in ("NEV_ON_LANE", "NEV_LANE_SHARED")
        }
        self.dev.update(
            PATH="/usr/bin:/bin",
            NEV_LANES_FILE=str(self.lanes),
            NEV_KNOWN_HOSTS=str(sshd.known_hosts),
            NEV_SSH_KEY=str(sshd.key),
            NEV_STATE_DIR=str(tmp / "dev-state"),
        )
        with records.locked(self.dev) as recs:
            r = recs.job("demo")
            r.lane, r.run_id, r.sends = 0, RUN_ID, 1
            r.params = {"WORK": str(self.work), "SHARE": str(tmp / "lane" / "share"), "JOB": "demo"}
        self.lane = lane_env(tmp / "lane", gateway.port, NEV_JOB_RUN_ID=RUN_ID, DEMO_TOKEN=SECRET)
        self.runner: subprocess.Popen | None = None

    def run(self) -> subprocess.Popen:
        self.runner = nev_popen(
            [
                "job",
                "run",
                str(self.manifest),
                "--workdir",
                str(self.src),
                "--state",
                str(self.state),
            ],
            self.lane,
        )
        return self.runner

    def log_has(self, stage: str, text: str) -> bool:
        p = self.state / "logs" / f"{stage}.log"
        return p.exists() and text in p.read_text()

    def close(self) -> None:
        if self.runner is not None and self.runner.poll() is None:
            self.runner.kill()
            self.runner.wait()


class Lines:
    """A process's stdout lines as they come, each with the time it came."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.got: list[tuple[float, str]] = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.got.append((time.monotonic(), line.rstrip("\n")))

    def when(self, pred, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.got):
                if pred(line):
                    return t
            time.sleep(0.02)
        raise AssertionError(f"no such line within {timeout} s; got {[x for _, x in self.got]}")

    @property
    def text(self) -> str:
        return "\n".join(x for _, x in self.got)


def wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def readers_on_the_lane() -> list[int]:
    """The lane's job state readers running (`jobs.laneread.REMOTE`: one per open session)."""
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and b"for line in sys.stdin.buffer" in (p / "cmdline").read_bytes():
                out.append(int(p.name))
        except OSError:
            pass
    return out


def follow(job: Job) -> tuple[subprocess.Popen, Lines]:
    p = subprocess.Popen(
        [sys.executable, "-m", "rig.cli", "job", "status", "demo", "--follow"],
        cwd=ROOT,
        env=job.dev,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return p, Lines(p)


def waiting_stage(tmp: Path) -> list[dict]:
    go, end = tmp / "GO", tmp / "END"
    return [
        {
            "name": "one",
            "kind": "command",
            "command": f'echo first; echo "token is $DEMO_TOKEN"; '
            f"while [ ! -e {go} ]; do sleep 0.05; done; "
            f"echo appended-line; while [ ! -e {end} ]; do sleep 0.05; done; echo last-of-one",
        },
        {"name": "two", "kind": "command", "command": "echo two-done"},
    ]


def test_follow_shows_a_new_log_line_within_seconds_masked_and_ends_with_the_job(
    tmp_path, sshd, gateway
):
    job = Job(tmp_path, sshd, gateway, waiting_stage(tmp_path))
    try:
        job.run()
        wait_for(lambda: job.log_has("one", "first"), 30, "stage one to start")
        p, out = follow(job)
        out.when(lambda x: x == "first", 20)  # the running stage's log, from its start
        t0 = time.monotonic()
        (tmp_path / "GO").touch()
        latency = out.when(lambda x: x == "appended-line", 10) - t0
        print(f"follow: a line appended on the lane shown {latency:.2f} s later")
        assert latency < 5.0
        (tmp_path / "END").touch()
        assert job.runner is not None and job.runner.wait(30) == 0
        ended = time.monotonic()
        assert p.wait(15) == 0, p.stderr.read() if p.stderr else ""
        print(f"follow: ended {time.monotonic() - ended:.2f} s after the job")
        out.t.join(5)
        text = out.text
        assert SECRET not in text and "token is ***" in text, text
        assert "== stage one: passed" in text and "== stage two: running" in text
        assert "last-of-one" in text and "two-done" in text
        assert out.got[-1][1] == "== job demo: passed (exit 0)", text
        assert (
            text.index("appended-line")
            < text.index("last-of-one")
            < text.index("== stage one: passed")
        )
        assert "Traceback" not in (p.stderr.read() if p.stderr else "")
    finally:
        job.close()


def test_follow_of_a_job_that_already_ended_prints_it_once_and_exits_with_its_code(
    tmp_path, sshd, gateway
):
    job = Job(
        tmp_path,
        sshd,
        gateway,
        [{"name": "bad", "kind": "command", "command": "echo boom; exit 4"}],
    )
    assert job.run().wait(60) == 1
    t0 = time.monotonic()
    r = nev(["job", "status", "demo", "--follow"], job.dev, timeout=30)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert time.monotonic() - t0 < 15
    assert r.stdout.splitlines()[0] == "demo on lane 0: failed, attempt 1"
    assert "  bad                  failed" in r.stdout
    assert r.stdout.splitlines()[-1] == "== job demo: failed (exit 1)"


def test_ctrl_c_ends_follow_with_130_and_leaves_the_job_and_the_record_alone(
    tmp_path, sshd, gateway
):
    job = Job(tmp_path, sshd, gateway, waiting_stage(tmp_path))
    record = records.path(job.dev).read_bytes()
    try:
        job.run()
        wait_for(lambda: job.log_has("one", "first"), 30, "stage one to start")
        p, out = follow(job)
        out.when(lambda x: x == "first", 20)
        assert len(readers_on_the_lane()) == 1  # one reader, on the one session kept open
        p.send_signal(signal.SIGINT)
        assert p.wait(10) == 130
        assert job.runner is not None and job.runner.poll() is None  # the job runs on
        assert records.path(job.dev).read_bytes() == record
        wait_for(lambda: not readers_on_the_lane(), 10, "the lane's reader to end with its session")
        (tmp_path / "GO").touch()
        (tmp_path / "END").touch()
        assert job.runner.wait(30) == 0
    finally:
        job.close()


def test_status_shows_the_lanes_view_of_a_running_job_or_says_the_lane_is_unreachable(
    tmp_path, sshd, gateway
):
    job = Job(tmp_path, sshd, gateway, waiting_stage(tmp_path))
    try:
        job.run()
        wait_for(lambda: job.log_has("one", "first"), 30, "stage one to start")
        r = nev(["job", "status", "demo"], job.dev)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("demo: submitted")
        assert lines[1].startswith(
            "  demo on lane 0: running, attempt 1; stage one running for "
        ), r.stdout
        assert (
            "    one                  running" in lines
            and "    two                  pending" in lines
        )
        js = json.loads(nev(["job", "status", "demo", "--json"], job.dev).stdout)
        assert js[0]["lane"]["stage"] == "one" and js[0]["lane"]["stage_age_s"] >= 0
        # the jump host in front of the lane answers nobody
        job.lanes.write_text(json.dumps(sshd.lanes(jump_port=local_sshd.free_port())))
        r = nev(["job", "status", "demo"], job.dev)
        assert r.returncode == 0
        assert r.stdout.splitlines()[0].startswith("demo: submitted")
        said = [x for x in r.stdout.splitlines() if "lane unreachable: " in x]
        assert said == r.stdout.splitlines()[1:2] and "jump host" in said[0], r.stdout
        r = nev(["job", "status", "demo", "--follow"], job.dev)
        assert r.returncode == 3 and "lane unreachable: " in r.stdout, (r.stdout, r.stderr)
        (tmp_path / "GO").touch()
        (tmp_path / "END").touch()
        assert job.runner is not None and job.runner.wait(30) == 0
    finally:
        job.close()


def test_the_dashboard_shows_the_running_stage_and_its_age_from_the_lane(
    tmp_path, sshd, gateway, monkeypatch
):
    from rig.dashboard import collect, page

    job = Job(tmp_path, sshd, gateway, waiting_stage(tmp_path))
    try:
        job.run()
        wait_for(lambda: job.log_has("one", "first"), 30, "stage one to start")
        for k in ("NEV_LANES_FILE", "NEV_KNOWN_HOSTS", "NEV_SSH_KEY", "NEV_STATE_DIR"):
            monkeypatch.setenv(k, job.dev[k])
        monkeypatch.delenv("NEV_LANE_SSH", raising=False)
        monkeypatch.delenv("NEV_DAGU_LANE", raising=False)
        got = collect.gather({"lane_jobs": collect.lane_jobs}, timeout=20).lane_jobs
        assert isinstance(got, list)
        rows = [r.to_json() for r in got]
        assert [(r["job"], r["stage"], r["status"]) for r in rows] == [("demo", "one", "running")], (
            rows
        )
        assert rows[0]["stage_age_s"] >= 0
        html = page.jobs_html([], got)
        assert 'data-lane-job="demo" data-stage="one"' in html
        # a lane that does not answer is shown as such, and the page renders
        job.lanes.write_text(json.dumps(sshd.lanes(jump_port=local_sshd.free_port())))
        got = collect.gather({"lane_jobs": collect.lane_jobs}, timeout=20).lane_jobs
        assert isinstance(got, list)
        assert got[0].job == "demo" and got[0].unavailable, got
        html = page.jobs_html([], got)
        assert "unavailable: " in html and 'data-lane-job="demo"' in html
        (tmp_path / "GO").touch()
        (tmp_path / "END").touch()
        assert job.runner is not None and job.runner.wait(30) == 0
    finally:
        job.close()


def reads(f: jfollow.Follower) -> tuple[list[str], int | None, bool, int]:
    """One read of the follower's, the lane's reader run here: (lines, exit, again, bytes read)."""
    reqs = f.requests()
    head, chunks = laneread.read_files([list(r) for r in reqs], time.time())
    raw = json.dumps(head).encode() + b"\n" + b"".join(chunks)
    return (*f.take(laneread.parse_reply(raw, len(reqs), "test")), sum(len(c) for c in chunks[1:]))


def running(tmp_path: Path) -> tuple[JobState, Path, jfollow.Follower]:
    """A job's state as the runner writes it (`JobState.record`): its stage gen running, its log."""
    state = tmp_path / "state"
    js = JobState.open(state)
    log = state / "logs" / "gen.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"".join(b"old line %d\n" % i for i in range(40)))
    js.record(Event.RUN_STARTED, job="demo", run_id=RUN_ID, stages=["gen"], inputs={})
    js.record(Event.STAGE_STARTED, stage="gen", log=str(log), inputs={})
    return (
        js,
        log,
        jfollow.Follower(lanestate.Where("demo", Lane(0, "lane@h"), str(state), RUN_ID)),
    )


def test_each_read_asks_only_for_the_bytes_after_those_seen(tmp_path):
    """The follower's reads, with the lane's reader run here on the runner's own files: a log is
    read from the offset already seen, never again from its start."""
    js, log, f = running(tmp_path)
    read_bytes = 0

    def step() -> tuple[list[str], int | None, bool]:
        nonlocal read_bytes
        lines, code, again, n = reads(f)
        read_bytes += n
        return lines, code, again

    lines, code, again = step()
    assert lines[0] == "demo on lane 0: running, attempt 1; stage gen running for 0 s" and again
    lines, code, again = step()
    assert lines[1:] == [f"old line {i}" for i in range(30, 40)] and code is None  # its last lines
    assert f.requests()[2] == (str(log), log.stat().st_size, jfollow.CAP)
    with log.open("ab") as fh:
        fh.write(b"new line\npart")
    lines, code, _ = step()
    assert lines == ["new line"]
    with log.open("ab") as fh:
        fh.write(b"ial\n")
    js.record(Event.STAGE_PASSED, stage="gen", commit="c" * 40, outputs=[])
    js.record(Event.JOB_ENDED, outcome="passed", exit=0)
    lines, code, _ = step()
    assert (
        lines == ["partial", "== stage gen: passed", "== job demo: passed (exit 0)"] and code == 0
    )
    assert (
        read_bytes == log.stat().st_size
    )  # each byte of the log read once (it is shorter than a tail)
    js.close()


def test_a_running_job_whose_state_stopped_changing_ends_follow_with_3(tmp_path):
    """The lane restarted under the runner: the job still says running, but neither its events nor
    its heartbeat (clock.json, every 5 s while a stage runs) changed for STALE_S."""
    js, log, f = running(tmp_path)
    js.heartbeat()
    assert reads(f)[1] is None and reads(f)[1] is None  # alive: followed
    old = time.time() - jfollow.STALE_S - 5
    for p in (js.folder / "events.jsonl", js.folder / "clock.json"):
        os.utime(p, (old, old))
    lines, code, again, _ = reads(f)
    assert (
        code == 3 and not again and lines[-1].startswith("== no sign of the runner on lane 0 for ")
    )
    js.close()


def test_a_folder_cleaned_up_between_two_reads_is_followed_to_its_end_from_the_archive(tmp_path):
    """The job passed, was archived and its folder removed between two reads (a busy lane, a
    fast end): the rest of the running log and the job's end come from the archived copy, each
    line once, and the last line is the job's end as for any other job (CI saw this race)."""
    js, log, _ = running(tmp_path)
    share = tmp_path / "share"
    f = jfollow.Follower(
        lanestate.Where("demo", Lane(0, "lane@h"), str(js.folder), RUN_ID, str(share))
    )
    assert reads(f)[1] is None and reads(f)[0][1:] == [f"old line {i}" for i in range(30, 40)]
    with log.open("ab") as fh:
        fh.write(b"seen line\n")
    assert reads(f)[0] == ["seen line"]
    with log.open("ab") as fh:
        fh.write(b"late line 1\nlate line 2 from 10.1.2.3\n")
    js.record(Event.STAGE_PASSED, stage="gen", commit="c" * 40, outputs=[])
    js.record(Event.JOB_ENDED, outcome="passed", exit=0)
    js.close()
    archive.archive("demo", RUN_ID, js.folder.parent, share, None, [])
    shutil.rmtree(js.folder)
    out: list[str] = []
    for _ in range(5):
        lines, code, again, _n = reads(f)
        out += lines
        if code is not None:
            break
    assert code == 0, out
    assert out[0].startswith("== job demo: its folder on lane 0 is cleaned up"), out
    assert out[1:] == [
        "late line 1",
        "late line 2 from <address>",  # the archive's copy is scrubbed
        "== stage gen: passed",
        "== job demo: passed (exit 0)",
    ], out


def test_follow_begun_after_the_folder_was_cleaned_up_ends_with_the_jobs_end(tmp_path):
    js, log, _ = running(tmp_path)
    js.record(Event.STAGE_PASSED, stage="gen", commit="c" * 40, outputs=[])
    js.record(Event.JOB_ENDED, outcome="failed", exit=4)
    js.close()
    share = tmp_path / "share"
    archive.archive("demo", RUN_ID, js.folder.parent, share, None, [])
    shutil.rmtree(js.folder)
    f = jfollow.Follower(
        lanestate.Where("demo", Lane(0, "lane@h"), str(js.folder), RUN_ID, str(share))
    )
    out: list[str] = []
    code = None
    for _ in range(5):
        lines, code, _a, _n = reads(f)
        out += lines
        if code is not None:
            break
    assert code == 4 and out[-1] == "== job demo: failed (exit 4)", out
