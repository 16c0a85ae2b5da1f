"""Writers on a lane, without SSH: the fetch decision, and the lane agent's writer operations on a
real lane root (a bare mirror and a copy that is its worktree) with a stand-in harness that commits.

The whole path through SSH is in tests/test_lane_writer_box.py.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from lanes import gate
from lanes.agent import layout
from lanes.agent import messages as m
from lanes.agent import writer as aw
from lanes.agent.errors import Refused
from lanes.agent.wire import Kind
from lanes.base.gitrun import Repo
from lanes.writer import Fetch, decide_fetch
from tests.helpers import lane_helpers as h

# The stand-in harness: waits for `go` in the copy (so a test sees it running), then makes two
# commits and prints what it was given; the harness itself is the user's, never named in code.
STANDIN = """#!/bin/sh
while [ ! -e go ]; do sleep 0.05; done
rm -f go
echo "args: $*"
echo "env: ${NEV_ON_LANE:-} $NEV_WRITER_TOOL $NEV_WRITER_MODEL"
[ -f .env ] && echo "env file present"
echo "one in $(basename "$PWD")" > w1.txt; git add w1.txt; git commit -qm "writer: first"
echo two > w2.txt; git add w2.txt; git commit -qm "writer: second"
"""
IDENT = {"GIT_AUTHOR_NAME": "w", "GIT_AUTHOR_EMAIL": "w@w", "GIT_COMMITTER_NAME": "w", "GIT_COMMITTER_EMAIL": "w@w"}


@pytest.mark.parametrize("head_in_tip,tip_in_head,same,want", [
    (True, False, False, Fetch.FAST_FORWARD),
    (False, True, False, Fetch.UP_TO_DATE),
    (True, True, True, Fetch.UP_TO_DATE),
    (False, False, False, Fetch.DIVERGED),
])
def test_fetch_moves_only_fast_forward(head_in_tip, tip_in_head, same, want):
    head, tip = "a" * 40, ("a" if same else "b") * 40
    assert decide_fetch(head, tip, head_in_tip, tip_in_head) is want


class _Lane:
    """A lane root on this machine: a bare mirror of a dev repo, and copy `wt` checked out as the gate does."""

    def __init__(self, tmp: Path) -> None:
        _, self.dev = h.make_forge(tmp / "dev")
        (self.dev / "standin.sh").write_text(STANDIN)
        os.chmod(self.dev / "standin.sh", 0o755)
        h.git(self.dev, "add", "standin.sh")
        h.git(self.dev, "commit", "-qm", "stand-in harness")
        self.base = h.git(self.dev, "rev-parse", "HEAD")
        self.root = layout.Root(str(tmp / "lane"))
        os.makedirs(self.root.path)
        h.git(tmp, "clone", "-q", "--bare", str(self.dev), self.root.mirror)
        h.git(Path(self.root.mirror), "worktree", "add", "-q", "--detach", self.root.copy("wt"), self.base)
        self.copy = Path(self.root.copy("wt"))
        (self.copy / ".env").write_text("NEV_MODEL_KEY=sk-x\n")

    def launch(self, name: str = "wt") -> m.WriterState:
        spec = m.WriterSpec(branch="main", tool="stand-in", model="m1", launch="./standin.sh", brief="do it\n")
        env = dict(os.environ, NEV_ON_LANE="1", **IDENT)
        return aw.launch(self.root, name, spec, self.base, env, jail=self.jail(name, env))

    def jail(self, name: str, env: dict[str, str], shared: str | None = None) -> list[str]:
        """The writer's jail as the development box makes it (`lanes.gate.writer_jail`) from the
        lane's hello."""
        home = os.path.realpath(os.path.expanduser("~"))
        hello = m.HelloAnswer(pid=1, mirror=True, tips=[], fetch_age=None, free_gb=1.0, guest="g",
                              python="3", root=os.path.realpath(self.root.path), home=home,
                              shared=os.path.realpath(shared) if shared else None,
                              harness=os.path.realpath(aw.harness_home(env)))
        return gate.writer_jail(hello, name, env)

    def add_copy(self, name: str) -> Path:
        """Another copy of the same repository under the root (another clone's worktree)."""
        h.git(Path(self.root.mirror), "worktree", "add", "-q", "--detach", self.root.copy(name), self.base)
        return Path(self.root.copy(name))

    def finish(self, state: m.WriterState, name: str = "wt") -> None:
        """Let the stand-in go on, and wait for its wrapper (our child here) to end."""
        (Path(self.root.copy(name)) / "go").write_text("")
        os.waitpid(state.pid, 0)


@pytest.fixture
def lane(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return _Lane(tmp_path)


def test_writer_runs_detached_on_its_branch_and_its_env_lives_as_long_as_it(lane, tmp_path):
    state = lane.launch()
    assert aw.running(state)
    with pytest.raises(Refused, match="a writer is running in the lane copy of wt"):
        aw.refuse_if_running(lane.root, "wt")
    assert (lane.copy / ".env").exists()
    brief = Path(state.brief)
    assert brief.parent == tmp_path / "home" / layout.WRITER_BRIEFS / "wt"
    assert brief.read_text() == "do it\n"
    assert not str(brief).startswith(str(lane.copy))
    assert h.git(lane.copy, "symbolic-ref", "HEAD") == aw.writer_ref("wt", "main") == state.ref
    assert state.ref.startswith("refs/heads/nev-writer/main@")
    lane.finish(state)
    assert not aw.running(state)
    assert aw.exit_status(lane.root, "wt") == 0
    assert not (lane.copy / ".env").exists()
    log = Path(state.log).read_text()
    assert f"args: --tool stand-in --model m1 --brief-file {brief}" in log
    assert "env: 1 stand-in m1" in log and "env file present" in log
    aw.refuse_if_running(lane.root, "wt")          # ended: no longer in a gate's way


def test_status_names_the_unfetched_commits_until_fetched(lane):
    state = lane.launch()
    lane.finish(state)
    (w,) = aw.status(m.WriterStatusRequest(root=lane.root.path)).writers
    assert (w.name, w.running, w.exit, w.branch) == ("wt", False, 0, "main")
    assert [c.split(" ", 1)[1] for c in w.unfetched] == ["writer: second", "writer: first"]
    tip = h.git(Path(lane.root.mirror), "rev-parse", state.ref)
    assert aw.fetched(m.WriterFetchedRequest(root=lane.root.path, name="wt", tip=tip)) == m.WriterFetchedResult(tip)
    assert aw.status(m.WriterStatusRequest(root=lane.root.path)).writers[0].unfetched == []


def test_two_copies_on_one_branch_name_write_on_branches_of_their_own(lane):
    """Two clones both on `main`, their writers started at once on one lane: neither moves the
    other's branch, and each copy's commits are its own to fetch."""
    lane.add_copy("other clone")                    # a copy name no ref could hold as it is
    first, second = lane.launch(), lane.launch("other clone")
    assert first.ref != second.ref and first.branch == second.branch == "main"
    lane.finish(first)
    lane.finish(second, "other clone")
    mirror = Path(lane.root.mirror)
    tips = {h.git(mirror, "rev-parse", s.ref) for s in (first, second)}
    assert len(tips) == 2
    for s in (first, second):
        assert [c.split(" ", 1)[1] for c in aw.commits(lane.root.mirror, lane.base, s.ref)] == \
            ["writer: second", "writer: first"]


def test_start_over_a_dead_writers_unfetched_commits_is_refused_naming_them(lane):
    state = lane.launch()
    lane.finish(state)
    with pytest.raises(Refused) as e:
        aw.refuse_unfetched(lane.root, "wt", lane.base)
    assert "2 commit(s) never fetched" in str(e.value)
    assert "writer: first" in str(e.value) and "writer: second" in str(e.value)
    tip = h.git(Path(lane.root.mirror), "rev-parse", state.ref)
    aw.refuse_unfetched(lane.root, "wt", tip)      # a start from a commit that holds them goes on


class _Wire:
    def __init__(self) -> None:
        self.frames: list[tuple[Kind, bytes]] = []

    def send(self, kind: Kind, data: bytes = b"") -> None:
        self.frames.append((kind, data))

    def send_json(self, kind: Kind, obj: object) -> None:
        self.send(kind, json.dumps(obj).encode())


def test_fetch_sends_a_bundle_of_only_the_writers_commits_that_applies_fast_forward(lane):
    state = lane.launch()
    lane.finish(state)
    wire = _Wire()
    req = m.WriterFetchRequest(root=lane.root.path, name="wt", have=[lane.base, "f" * 40])
    assert aw.fetch(wire, req) == 0  # type: ignore[arg-type]
    bundle = b"".join(d for k, d in wire.frames if k is Kind.WRITER_BUNDLE)
    res = m.WriterFetchResult.decode(wire.frames[-1][1])
    assert wire.frames[-1][0] is Kind.RESULT and res.bundle == len(bundle) > 0
    path = lane.dev.parent / "w.bundle"
    path.write_bytes(bundle)
    repo = Repo(lane.dev)
    tip = repo.fetch_bundle(path, res.ref, "refs/nev/writer/wt")
    assert tip == res.tip and len(repo.oneline(tip, lane.base)) == 2
    assert decide_fetch(lane.base, tip, repo.is_ancestor(lane.base, tip), repo.is_ancestor(tip, lane.base)) \
        is Fetch.FAST_FORWARD
    repo.fast_forward(tip)
    assert repo.rev("HEAD") == tip and (lane.dev / "w2.txt").read_text() == "two\n"


def test_fetch_of_a_copy_without_writer_says_none(lane):
    wire = _Wire()
    aw.fetch(wire, m.WriterFetchRequest(root=lane.root.path, name="wt", have=[]))  # type: ignore[arg-type]
    assert json.loads(wire.frames[-1][1]) == {"none": True}


def test_a_writer_command_not_on_the_lane_is_refused_and_nothing_starts(lane):
    spec = m.WriterSpec(branch="main", tool="stand-in", model="m1", launch="./no-such-harness", brief="x")
    with pytest.raises(Refused, match="not found on the lane"):
        aw.launch(lane.root, "wt", spec, lane.base, dict(os.environ),
                  jail=lane.jail("wt", dict(os.environ)))
    assert aw.read_state(lane.root, "wt") is None


def test_start_without_a_declared_harness_is_refused_before_any_lane(tmp_path):
    _, wt = h.make_forge(tmp_path / "f")
    brief = tmp_path / "brief.md"
    brief.write_text("x")
    r = h.nev(["lane", "writer", "start", str(wt), "--lane", "0", "--model", "m", "--brief", str(brief)],
              {"TRACKS_TOOL": "", "NEV_LANE_SSH": "lane@127.0.0.1:1"})
    assert r.returncode == 1
    assert "no writer harness is declared" in r.stderr and "specWatch.lanes.tool" in r.stderr


def test_the_second_call_after_a_dropped_start_keeps_a_running_writers_env(lane):
    from lanes.agent import root as agent_root

    Path(lane.root.lock("wt")).write_text("")
    os.makedirs(lane.root.payload("wt"))
    Path(lane.root.member("wt", layout.ENV)).write_text("NEV_MODEL_KEY=sk-x\n")
    state = lane.launch()
    ans = agent_root.cleanup(m.CleanupRequest(root=lane.root.path, name="wt", wait=0))
    assert (lane.copy / ".env").exists() and lane.root.member("wt", layout.ENV) in ans.removed
    lane.finish(state)
    (lane.copy / ".env").write_text("NEV_MODEL_KEY=sk-x\n")     # a gate's, once the writer ended
    ans = agent_root.cleanup(m.CleanupRequest(root=lane.root.path, name="wt", wait=0))
    assert not (lane.copy / ".env").exists() and str(lane.copy / ".env") in ans.removed


def test_writer_records_are_named_apart_from_copies():
    root = layout.Root("/srv/lane")
    assert root.writer("wt", layout.WRITER_EXIT) == "/srv/lane/.writer-wt/exit"
    assert root.writer_names([".writer-a", "a", ".writer-.hidden", ".payload-b", ".writer-b"]) == ["a", "b"]
    assert layout.copy_names([".writer-a"]) == set()     # never a copy for the sweep


# A stand-in that prints a secret of the copy's `.env`, a credential URL, commits once, then
# holds until it is stopped (or `go` appears).
LEAKY = """#!/bin/sh
. ./.env
echo "the key is $NEV_MODEL_KEY and the forge https://nev:$NEV_MODEL_KEY@forge.example/x.git"
echo "token only: $NEV_FORGE_TOKEN"
echo "one in $(basename "$PWD")" > w1.txt; git add w1.txt; git commit -qm "writer: first"
while [ ! -e go ]; do sleep 0.05; done
"""
KEY, TOKEN = "writer-secret-0a1b2c", "plain"   # a token too short to be masked by its shape


def _leaky(lane) -> m.WriterState:
    (lane.copy / "leaky.sh").write_text(LEAKY)
    os.chmod(lane.copy / "leaky.sh", 0o755)
    (lane.copy / ".env").write_text(f"NEV_MODEL_KEY={KEY}\nNEV_FORGE_TOKEN=pl41n-t0ken\n")
    spec = m.WriterSpec(branch="main", tool="stand-in", model="m1", launch="./leaky.sh", brief="leak\n")
    env = dict(os.environ, **IDENT)
    return aw.launch(lane.root, "wt", spec, lane.base, env, jail=lane.jail("wt", env))


def _wait_for(pred, what: str, timeout: float = 30) -> None:
    import time

    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, what
        time.sleep(0.05)


def test_the_writer_log_masks_the_env_secrets_and_credential_urls(lane):
    state = _leaky(lane)
    log = Path(state.log)
    _wait_for(lambda: "writer: first" in h.git(Path(lane.root.mirror), "log", "--format=%s", state.ref),
              "the stand-in did not commit")
    (lane.copy / "go").write_text("")
    os.waitpid(state.pid, 0)
    text = log.read_text()
    assert "the key is ***" in text and "https://***@forge.example" in text
    assert KEY not in text and "pl41n-t0ken" not in text
    assert aw.exit_status(lane.root, "wt") == 0 and not (lane.copy / ".env").exists()


def test_stop_ends_the_writer_removes_its_env_and_keeps_its_commits(lane):
    state = _leaky(lane)
    _wait_for(lambda: "writer: first" in h.git(Path(lane.root.mirror), "log", "--format=%s", state.ref),
              "the stand-in did not commit")
    assert aw.running(state) and (lane.copy / ".env").exists()
    ans = aw.stop(m.WriterStopRequest(root=lane.root.path, name="wt"))
    assert isinstance(ans, m.WriterStopResult)
    try:
        os.waitpid(state.pid, 0)                   # our child here (subprocess may have reaped it)
    except ChildProcessError:
        pass
    assert ans.was_running and not ans.running
    assert not (lane.copy / ".env").exists() and str(lane.copy / ".env") in ans.env_removed
    assert ans.exit == 143 and ans.stopped       # the harness ended by SIGTERM (128 + 15)
    assert [c.split(" ", 1)[1] for c in ans.unfetched] == ["writer: first"]   # kept for fetch
    assert "the key is ***" in ans.log_tail and KEY not in ans.log_tail
    from lanes.agent.procs import descendants
    assert not [p for p in descendants(os.getpid()) if "leaky" in Path(f"/proc/{p}/cmdline").read_text()]
    # stopping again: nothing runs, the commits are still there
    again = aw.stop(m.WriterStopRequest(root=lane.root.path, name="wt"))
    assert isinstance(again, m.WriterStopResult) and not again.was_running and len(again.unfetched) == 1
    assert aw.stop(m.WriterStopRequest(root=lane.root.path, name="nosuch")) == m.NoWriter()


def test_a_writer_record_is_removed_only_once_its_commits_were_fetched(lane):
    state = _leaky(lane)
    (lane.copy / "go").write_text("")
    os.waitpid(state.pid, 0)
    facts = aw.sweep_facts(lane.root, "wt")
    assert facts.record and not facts.running and len(facts.unfetched) == 1
    with pytest.raises(Refused, match="1 commit\\(s\\) never fetched; kept"):
        aw.remove_record(lane.root, "wt")
    assert os.path.isdir(lane.root.writer("wt"))
    tip = h.git(Path(lane.root.mirror), "rev-parse", state.ref)
    aw.fetched(m.WriterFetchedRequest(root=lane.root.path, name="wt", tip=tip))
    aw.remove_record(lane.root, "wt")
    assert not os.path.exists(lane.root.writer("wt"))
    assert h.git(Path(lane.root.mirror), "rev-parse", state.ref) == tip    # the branch stays


def test_a_writer_sees_no_lane_home_no_share_and_no_other_copy(lane, tmp_path):
    """The harness runs in bubblewrap (docs/sandbox.md): the lane's Dagu credentials, the share's
    corpus store and another copy are not there; its own copy and commits work as before."""
    home = tmp_path / "home"
    (home / "dagu").mkdir(parents=True, exist_ok=True)
    (home / "dagu" / "password").write_text("hunter2-dagu\n")
    share = tmp_path / "share"
    (share / "corpora").mkdir(parents=True)
    (share / "corpora" / "entry").write_text("ground truth\n")
    other = lane.add_copy("other")
    (other / "theirs.txt").write_text("another copy's file\n")
    script = (f"cat {home}/dagu/password; ls {share}/corpora; cat {other}/theirs.txt; "
              f"echo mine > {share}/corpora/evil; echo own > own.txt && echo own-copy-ok; echo done")
    spec = m.WriterSpec(branch="main", tool="stand-in", model="m1", launch=f"sh -c {shlex.quote(script)}",
                        brief="look around\n")
    env = dict(os.environ, NEV_ON_LANE="1", **IDENT)
    state = aw.launch(lane.root, "wt", spec, lane.base, env,
                      jail=lane.jail("wt", env, shared=str(share)))
    os.waitpid(state.pid, 0)
    log = Path(state.log).read_text()
    assert "done" in log and "own-copy-ok" in log, log
    assert "hunter2" not in log and "another copy's file" not in log and "entry" not in log, log
    assert (share / "corpora" / "entry").read_text() == "ground truth\n"
    assert not (share / "corpora" / "evil").exists()
    assert (lane.copy / "own.txt").read_text() == "own\n"
