"""`nev lane writer start|fetch|status` on the rig-in-a-box: a real lane over SSH through the jump
host, a real forge, and a stand-in harness that makes two commits (the harness is the user's)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lanes.agent import layout
from tests.helpers import lane_helpers as h
from tests.helpers import lane_rig as rigs

# Waits for `go` in the lane copy (so the test sees it running), then commits twice.
STANDIN = """#!/bin/sh
while [ ! -e go ]; do sleep 0.05; done
rm -f go
echo "brief: $(cat "$6")"
[ -f .env ] && echo "env file present"
c() { git -c user.name=w -c user.email=w@w commit -qm "$1"; }
echo one > w1.txt; git add w1.txt; c "writer: first"
echo two > w2.txt; git add w2.txt; c "writer: second"
"""
TRACKS = {"verify": "true", "specWatch": {"lanes": {"tool": "stand-in", "launch": "./standin.sh"}}}


@pytest.fixture(scope="module")
def lane_rig(box, tmp_path_factory):
    rig = rigs.on_box(box, tmp_path_factory.mktemp("writerrig"))
    yield rig
    rig.stop()


def writer_worktree(rig, name: str) -> Path:
    """A clone of the forge's repository on branch `work`, with the stand-in declared in its tracks.json."""
    wt = h.clone_worktree(rig.clone_url, rig.tmp / (name + rig.tag), rig.push_env)
    h.git(wt, "checkout", "-q", "-b", "work")
    (wt / "standin.sh").write_text(STANDIN)
    (wt / "standin.sh").chmod(0o755)
    (wt / "tracks.json").write_text(json.dumps(TRACKS))
    h.git(wt, "add", "standin.sh", "tracks.json")
    h.git(wt, "commit", "-qm", "declare the stand-in harness")
    (wt / ".env").write_text("NEV_MODEL_KEY=sk-writer-box-1234\n")
    return wt


def start(rig, wt: Path, brief_text: str = "write two commits\n"):
    brief = rig.tmp / f"brief-{wt.name}.md"
    brief.write_text(brief_text)
    return h.nev(["lane", "writer", "start", str(wt), "--lane", "0", "--model", "m1", "--brief", str(brief)],
                 rig.env)


def writers(rig) -> dict[str, dict]:
    r = h.nev(["lane", "writer", "status", "--json"], rig.env)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    return {w["name"]: w for w in row["writers"]}


def let_it_finish(rig, wt: Path) -> dict:
    """Let the stand-in go on and wait until the lane says it ended; its status row."""
    (rig.lane_root / h.copy_name(wt) / "go").write_text("")
    exit_file = rig.lane_root / (layout.WRITER + h.copy_name(wt)) / layout.WRITER_EXIT
    deadline = time.monotonic() + 60
    while not exit_file.exists():
        assert time.monotonic() < deadline, "the stand-in writer did not end"
        time.sleep(0.1)
    return writers(rig)[h.copy_name(wt)]


def test_writer_makes_two_commits_and_fetch_brings_them_back_fast_forward(lane_rig):
    wt = writer_worktree(lane_rig, "wfetch")
    base = h.git(wt, "rev-parse", "HEAD")
    r = start(lane_rig, wt)
    assert r.returncode == 0, r.stderr
    assert "writer started in" in r.stdout and "nev-writer/work" in r.stdout
    running = writers(lane_rig)[h.copy_name(wt)]
    assert running["running"] and running["branch"] == "work" and running["model"] == "m1"
    copy = lane_rig.lane_root / h.copy_name(wt)
    assert (copy / ".env").exists()                        # kept while the writer lives
    gate = h.nev(["lane", "run", str(wt), "true"], lane_rig.env)
    assert gate.returncode == 1 and "a writer is running in the lane copy" in gate.stderr
    done = let_it_finish(lane_rig, wt)
    assert (done["running"], done["exit"]) == (False, 0)
    assert [c.split(" ", 1)[1] for c in done["unfetched"]] == ["writer: second", "writer: first"]
    assert not (copy / ".env").exists()                    # gone with the writer
    log = (lane_rig.lane_root / (layout.WRITER + h.copy_name(wt)) / layout.WRITER_LOG).read_text()
    assert "brief: write two commits" in log and "env file present" in log
    assert not list(copy.rglob("*brief*"))                 # the brief stayed outside the copy

    r = h.nev(["lane", "writer", "fetch", str(wt)], lane_rig.env)
    assert r.returncode == 0, r.stderr
    assert "fast-forwarded" in r.stdout and "2 commit(s)" in r.stdout
    assert h.git(wt, "log", "--format=%s", f"{base}..HEAD").splitlines() == ["writer: second", "writer: first"]
    assert h.git(wt, "rev-parse", "--abbrev-ref", "HEAD") == "work"
    assert (wt / "w2.txt").read_text() == "two\n"
    assert writers(lane_rig)[h.copy_name(wt)]["unfetched"] == []
    again = h.nev(["lane", "writer", "fetch", str(wt)], lane_rig.env)
    assert again.returncode == 0 and "nothing to fetch" in again.stdout


def test_fetch_of_a_diverged_branch_is_refused_naming_the_commits(lane_rig):
    wt = writer_worktree(lane_rig, "wdiverge")
    assert start(lane_rig, wt).returncode == 0
    let_it_finish(lane_rig, wt)
    (wt / "local.txt").write_text("mine\n")
    h.git(wt, "add", "local.txt")
    h.git(wt, "commit", "-qm", "local: meanwhile")
    head = h.git(wt, "rev-parse", "HEAD")
    r = h.nev(["lane", "writer", "fetch", str(wt)], lane_rig.env)
    assert r.returncode == 1
    assert "diverged" in r.stderr and "nothing fetched" in r.stderr
    for subject in ("writer: first", "writer: second", "local: meanwhile"):
        assert subject in r.stderr
    assert h.git(wt, "rev-parse", "HEAD") == head and not (wt / "w1.txt").exists()
    assert len(writers(lane_rig)[h.copy_name(wt)]["unfetched"]) == 2


def test_start_over_a_dead_writers_unfetched_commits_is_refused(lane_rig):
    wt = writer_worktree(lane_rig, "wdead")
    assert start(lane_rig, wt).returncode == 0
    let_it_finish(lane_rig, wt)
    r = start(lane_rig, wt, "another brief\n")
    assert r.returncode == 1
    assert "never fetched" in r.stderr and "writer: first" in r.stderr and "writer: second" in r.stderr
    w = writers(lane_rig)[h.copy_name(wt)]
    assert (w["running"], w["exit"], len(w["unfetched"])) == (False, 0, 2)   # the old record stands
    assert h.nev(["lane", "writer", "fetch", str(wt)], lane_rig.env).returncode == 0
    r = start(lane_rig, wt, "go on\n")                     # fetched: a new writer may start
    assert r.returncode == 0, r.stderr
    let_it_finish(lane_rig, wt)


# Prints the `.env`'s secret (not token-shaped: only the `.env` says it is one), commits once, then
# holds until `go` appears or it is stopped.
LEAKY = """#!/bin/sh
. ./.env
echo "the key is $NEV_MODEL_KEY"
c() { git -c user.name=w -c user.email=w@w commit -qm "$1"; }
echo one > w1.txt; git add w1.txt; c "writer: first"
while [ ! -e go ]; do sleep 0.05; done
"""
SECRET = "writer-box-secret-77"


def leaky_worktree(rig, name: str) -> Path:
    wt = writer_worktree(rig, name)
    (wt / "standin.sh").write_text(LEAKY)
    h.git(wt, "commit", "-qam", "a stand-in that prints its key")
    (wt / ".env").write_text(f"NEV_MODEL_KEY={SECRET}\n")
    return wt


def test_stop_ends_the_writer_keeps_its_commits_and_its_log_masks_the_env_secret(lane_rig):
    wt = leaky_worktree(lane_rig, "wstop")
    base = h.git(wt, "rev-parse", "HEAD")
    assert start(lane_rig, wt).returncode == 0
    deadline = time.monotonic() + 60
    while not writers(lane_rig)[h.copy_name(wt)]["unfetched"]:
        assert time.monotonic() < deadline, "the stand-in did not commit"
        time.sleep(0.3)
    copy = lane_rig.lane_root / h.copy_name(wt)
    assert writers(lane_rig)[h.copy_name(wt)]["running"] and (copy / ".env").exists()
    r = h.nev(["lane", "writer", "stop", str(wt)], lane_rig.env)
    assert r.returncode == 0, r.stderr
    assert f"the writer of {h.copy_name(wt)} stopped (it was running as pid" in r.stdout
    assert "1 commit(s) kept for `nev lane writer fetch`" in r.stdout and "writer: first" in r.stdout
    assert "the key is ***" in r.stdout                       # the log's last lines, masked
    assert SECRET not in r.stdout + r.stderr
    log = (lane_rig.lane_root / (layout.WRITER + h.copy_name(wt)) / layout.WRITER_LOG).read_text()
    assert "the key is ***" in log and SECRET not in log       # masked as it was written, on the lane
    assert not (copy / ".env").exists()
    w = writers(lane_rig)[h.copy_name(wt)]
    assert not w["running"] and w["stopped"] and w["exit"] is not None and len(w["unfetched"]) == 1
    assert not [c for _, c in lane_rig.lane_cmdlines() if "standin.sh" in c]   # nothing of it runs
    st = h.nev(["lane", "writer", "status"], lane_rig.env)
    assert f"{h.copy_name(wt)}  stopped at" in st.stdout
    r = h.nev(["lane", "writer", "fetch", str(wt)], lane_rig.env)   # its commit came back
    assert r.returncode == 0 and "1 commit(s)" in r.stdout, r.stderr
    assert h.git(wt, "log", "--format=%s", f"{base}..HEAD").splitlines() == ["writer: first"]
    r = h.nev(["lane", "writer", "stop", str(wt.parent / "nosuch")], lane_rig.env)
    assert r.returncode == 2 or "does not exist" in r.stderr


def test_sweep_removes_an_orphan_writer_record_once_fetched_and_never_one_with_unfetched_commits(lane_rig):
    primary = lane_rig.tmp / "primary-without-these"
    h.git(lane_rig.tmp, "init", "-q", str(primary))
    done, pending = writer_worktree(lane_rig, "wswept"), writer_worktree(lane_rig, "wpending")
    for wt in (done, pending):
        h.git(wt, "branch", "-q", "-m", f"work-{wt.name}")   # two writers at once: a branch each
        assert start(lane_rig, wt).returncode == 0
        let_it_finish(lane_rig, wt)
    assert h.nev(["lane", "writer", "fetch", str(done)], lane_rig.env).returncode == 0
    root = lane_rig.lane_root
    out = {}
    for wt in (done, pending):
        copy = h.copy_name(wt)        # named as it is: the copy is not `primary`'s repository's
        r = h.nev(["lane", "sweep", "--track", copy, "--repo", str(primary)], lane_rig.env)
        assert r.returncode == 0, r.stdout + r.stderr
        out[wt] = r.stdout
        assert f"removed {copy}" in r.stdout            # the copy: its track has no worktree there
        assert not (root / copy).exists()
    assert f"removed writer record {layout.WRITER}{h.copy_name(done)}: an orphan" in out[done]
    assert not (root / (layout.WRITER + h.copy_name(done))).exists()
    assert f"kept writer record {layout.WRITER}{h.copy_name(pending)}: 2 commit(s) of its writer " \
        "never fetched" \
        in out[pending]
    assert (root / (layout.WRITER + h.copy_name(pending)) / layout.WRITER_STATE).exists()
    # its commits are still on the lane: fetch brings them back, after which the next sweep takes it
    r = h.nev(["lane", "writer", "fetch", str(pending)], lane_rig.env)
    assert r.returncode == 0 and "2 commit(s)" in r.stdout, r.stderr
    track = h.copy_name(pending)
    r = h.nev(["lane", "sweep", "--track", track, "--repo", str(primary)], lane_rig.env)
    assert f"removed writer record {layout.WRITER}{h.copy_name(pending)}" in r.stdout, r.stdout
    assert not (root / (layout.WRITER + h.copy_name(pending))).exists()
