"""`nev lane writer start` end to end on a local lane (the real agent, sent and run by `sh -c`
instead of SSH, as in tests/test_lane_messages.py): a writer that ends at once fails the start
with its log's last lines; the harness checkout (PI_TRACKS_HOME, real git: a bare upstream and a
clone) is updated fast-forward only first, and a start is refused over its local changes."""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import pytest

from lanes import gate, lanesfile
from lanes.agent import layout
from lanes.agent import writer as aw
from lanes.base.openssh import OpenSsh
from lanes.base.ssh import Target
from lanes.lanesfile import Lane, LanesFile
from rig import commands
from tests.helpers import lane_helpers as h


class LocalShell(OpenSsh):
    """The lane is this machine: `sh -c COMMAND` instead of `ssh ... COMMAND`."""

    def argv(self, command: str) -> list[str]:
        return ["sh", "-c", command]


# The harness's writer command, as a checkout of its own holds it: says its version, then runs
# until `go` appears in the copy (so a start sees it running).
WRITER_EXEC = """#!/bin/sh
echo "writer-exec {version} $*"
while [ ! -e go ]; do sleep 0.05; done
"""


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        forge, _ = h.make_forge(tmp / "f")
        self.wt = h.clone_worktree(str(forge), tmp / "wt")
        (tmp / "share").mkdir()
        self.lane = Lane(0, "lane@local", root=str(tmp / "root"), shared=str(tmp / "share"))
        self.brief = tmp / "brief.md"
        self.brief.write_text("do it\n")
        self.pi_home = self.home / aw.PI_TRACKS_HOME

    def tracks(self, launch: str) -> None:
        """The worktree's declared harness (untracked files travel with the start)."""
        (self.wt / "tracks.json").write_text(json.dumps(
            {"verify": "true", "specWatch": {"lanes": {"tool": "stand-in", "launch": launch}}}))

    def start(self, capsys) -> tuple[int, str, str]:
        code = commands.main(["lane", "writer", "start", str(self.wt), "--lane", "0", "--model", "m1",
                              "--brief", str(self.brief)])
        out = capsys.readouterr()
        return code, out.out, out.err

    def copy(self) -> Path:
        return Path(layout.Root(self.lane.root).copy(h.copy_name(self.wt)))

    def release(self) -> None:
        """Let a running stand-in end, and wait until its wrapper recorded it."""
        (self.copy() / "go").write_text("")
        name = h.copy_name(self.wt)
        deadline = time.monotonic() + 30
        while aw.exit_status(layout.Root(self.lane.root), name) is None:
            assert time.monotonic() < deadline, "the writer did not end"
            time.sleep(0.05)

    def harness_repo(self) -> tuple[Path, Path, str]:
        """A bare upstream of the harness and its clone at PI_TRACKS_HOME; the first commit."""
        seed = self.tmp / "harness-seed"
        seed.mkdir()
        h.git(seed, "init", "-q", "-b", "main")
        self._commit(seed, "v1")
        upstream = self.tmp / "harness.git"
        h.git(self.tmp, "clone", "-q", "--bare", str(seed), str(upstream))
        self.pi_home.parent.mkdir(parents=True, exist_ok=True)
        h.git(self.tmp, "clone", "-q", str(upstream), str(self.pi_home))
        return seed, upstream, h.git(self.pi_home, "rev-parse", "HEAD")

    @staticmethod
    def _commit(repo: Path, version: str) -> str:
        (repo / "bin").mkdir(exist_ok=True)
        (repo / "bin" / "writer-exec.sh").write_text(WRITER_EXEC.format(version=version))
        os.chmod(repo / "bin" / "writer-exec.sh", 0o755)
        h.git(repo, "add", "-A")
        h.git(repo, "-c", "user.name=h", "-c", "user.email=h@h", "commit", "-qm", version)
        return h.git(repo, "rev-parse", "HEAD")


@pytest.fixture
def rig(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NEV_LANE_MIN_FREE_GB", "0")
    for k in ("NEV_LANE_KEEP_ENV", "PI_TRACKS_HOME", "TRACKS_TOOL", "NEV_WRITER_SETTLE_S"):
        monkeypatch.delenv(k, raising=False)
    r = Rig(tmp_path)
    monkeypatch.setattr(lanesfile, "configured", lambda: LanesFile(None, [r.lane]))
    monkeypatch.setattr(gate, "pick_lane", lambda lf, i: (r.lane, LocalShell(Target.parse("lane@local"))))
    return r


def test_a_writer_that_exits_at_once_fails_the_start_with_its_last_lines(rig, capsys):
    rig.tracks("sh -c " + shlex.quote("echo getting ready; echo boom >&2; exit 3"))
    t0 = time.monotonic()
    code, out, err = rig.start(capsys)
    took = time.monotonic() - t0
    assert code == 1, (out, err)
    (first,) = [ln for ln in err.splitlines() if ln.startswith("nev: ")]     # one error line
    assert first.startswith(f"nev: lane 0: the writer of {h.copy_name(rig.wt)} exited 3 within 2 s")
    assert "log is " in first and layout.WRITER_LOG in first
    assert "boom" in err and "getting ready" in err and "writer started" not in out
    assert took < 30                                # the wait ended when the writer did
    # status says the same: an ended writer, not a running one
    name = h.copy_name(rig.wt)
    assert aw.exit_status(layout.Root(rig.lane.root), name) == 3
    assert not (rig.copy() / ".env").exists()


def test_the_failed_start_masks_a_secret_the_writer_printed(rig, capsys):
    (rig.wt / ".env").write_text("NEV_MODEL_KEY=sk-writer-0123456789\n")
    rig.tracks("sh -c " + shlex.quote(". ./.env; echo \"key $NEV_MODEL_KEY\" >&2; exit 2"))
    code, _, err = rig.start(capsys)
    assert code == 1 and "exited 2" in err
    assert "key ***" in err and "sk-writer-0123456789" not in err


def test_a_long_running_writer_still_starts(rig, capsys, monkeypatch):
    monkeypatch.setenv("NEV_WRITER_SETTLE_S", "0.5")
    (rig.wt / "hold.sh").write_text("#!/bin/sh\necho holding\nwhile [ ! -e go ]; do sleep 0.05; done\n")
    os.chmod(rig.wt / "hold.sh", 0o755)
    rig.tracks("./hold.sh")
    code, out, err = rig.start(capsys)
    assert code == 0, err
    assert "writer started in" in out
    assert f"harness: no checkout at {rig.pi_home}, nothing updated" in out
    rig.release()
    assert aw.exit_status(layout.Root(rig.lane.root), h.copy_name(rig.wt)) == 0


def test_a_bad_settle_time_is_refused_before_any_lane(rig, capsys, monkeypatch):
    monkeypatch.setenv("NEV_WRITER_SETTLE_S", "-1")
    rig.tracks("./x")
    code, _, err = rig.start(capsys)
    assert code == 1 and "NEV_WRITER_SETTLE_S=-1 is out of range" in err
    assert not os.path.exists(rig.lane.root)


def test_start_updates_the_harness_checkout_fast_forward_first(rig, capsys):
    seed, upstream, v1 = rig.harness_repo()
    rig.tracks("$PI_TRACKS_HOME/bin/writer-exec.sh")
    code, out, err = rig.start(capsys)
    assert code == 0, err
    assert f"lane 0: harness at {v1[:12]} (unchanged)" in out
    rig.release()
    log = Path(layout.Root(rig.lane.root).writer(h.copy_name(rig.wt), layout.WRITER_LOG)).read_text()
    assert "writer-exec v1 --tool stand-in --model m1" in log
    v2 = rig._commit(seed, "v2")
    h.git(seed, "push", "-q", str(upstream), "main")
    code, out, err = rig.start(capsys)
    assert code == 0, err
    assert f"lane 0: harness at {v2[:12]} (updated from {v1[:12]})" in out
    assert h.git(rig.pi_home, "rev-parse", "HEAD") == v2
    rig.release()
    log = Path(layout.Root(rig.lane.root).writer(h.copy_name(rig.wt), layout.WRITER_LOG)).read_text()
    assert "writer-exec v2" in log


def test_start_is_refused_over_local_changes_in_the_harness_checkout(rig, capsys):
    seed, upstream, v1 = rig.harness_repo()
    rig.tracks("$PI_TRACKS_HOME/bin/writer-exec.sh")
    (rig.pi_home / "bin" / "writer-exec.sh").write_text("#!/bin/sh\necho edited by hand\n")
    rig._commit(seed, "v2")
    h.git(seed, "push", "-q", str(upstream), "main")
    code, out, err = rig.start(capsys)
    assert code == 1
    assert len([ln for ln in err.splitlines() if ln.startswith("nev: ")]) == 1
    assert "refused the writer's start: the harness checkout" in err and "has local changes" in err
    assert "bin/writer-exec.sh" in err and "nothing started" in err
    assert aw.read_state(layout.Root(rig.lane.root), h.copy_name(rig.wt)) is None
    assert h.git(rig.pi_home, "rev-parse", "HEAD") == v1            # not moved
    assert "edited by hand" in (rig.pi_home / "bin" / "writer-exec.sh").read_text()


def test_start_is_refused_when_the_harness_checkout_cannot_fast_forward(rig, capsys):
    seed, upstream, v1 = rig.harness_repo()
    rig.tracks("$PI_TRACKS_HOME/bin/writer-exec.sh")
    rig._commit(rig.pi_home, "local")                            # a commit only the checkout has
    rig._commit(seed, "v2")
    h.git(seed, "push", "-q", str(upstream), "main")
    code, _, err = rig.start(capsys)
    assert code == 1 and len([ln for ln in err.splitlines() if ln.startswith("nev: ")]) == 1
    assert "cannot fast-forward to origin/main" in err and "1 commit(s) its upstream lacks" in err
    assert aw.read_state(layout.Root(rig.lane.root), h.copy_name(rig.wt)) is None


def test_start_is_refused_when_the_harness_upstream_cannot_be_fetched(rig, capsys):
    seed, upstream, v1 = rig.harness_repo()
    rig.tracks("$PI_TRACKS_HOME/bin/writer-exec.sh")
    upstream.rename(upstream.with_name("moved.git"))
    code, _, err = rig.start(capsys)
    assert code == 1 and "git fetch failed" in err and "nothing started" in err
    assert aw.read_state(layout.Root(rig.lane.root), h.copy_name(rig.wt)) is None
    assert h.git(rig.pi_home, "rev-parse", "HEAD") == v1
