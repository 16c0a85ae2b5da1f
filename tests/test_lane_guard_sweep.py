"""The disk guard's sweep (issue 31, item 5) sweeps by the repository being gated (its own primary
checkout and worktrees), never by the current folder's: gating `…/engine` from another
repository's folder with the guard tripped removed the other project's lane copies. Through the
real gate to a lane on this machine (`tests/helpers/local_lane.py`); the sweep's survey and
removal on the lane (paramiko) are replaced by a recorder of what it was asked to keep."""

from __future__ import annotations

import contextlib
import os

import pytest

from lanes import gate, payload
from lanes import sweep as sw
from lanes.base.errors import DiskShortError
from lanes.lanesfile import Lane
from tests.helpers.local_lane import LocalLane, git, make_repo


@pytest.fixture
def guarded(tmp_path, monkeypatch):
    """A local lane whose disk is always short, and what the guard's sweep was asked to keep."""
    lane = LocalLane(tmp_path)
    for k in [k for k in os.environ if k.startswith(("NEV_", "GENERA_"))]:
        monkeypatch.delenv(k)
    for k, v in lane.env(NEV_LANE_MIN_FREE_GB="1000000").items():
        monkeypatch.setenv(k, v)
    asked: list[tuple[set[str], str | None]] = []

    def sweep_lane(conn, ln, tracks, primary, track, dry_run, nas, key):
        asked.append((set(tracks), primary))
        return sw.LaneSweep(ln)

    monkeypatch.setattr(sw, "sweep_lane", sweep_lane)
    monkeypatch.setattr(Lane, "connect", lambda self, timeout=5: contextlib.nullcontext(None))
    return lane, asked


def _engine(tmp_path):
    engine = make_repo(tmp_path / "engine")
    git(engine, "worktree", "add", "-q", str(tmp_path / "engine-fix"))
    return engine


def _names(tmp_path):
    """The copy names of engine's primary checkout and worktree (keyed by engine's repository)."""
    eng, fix = (payload.Worktree.open(tmp_path / n).name for n in ("engine", "engine-fix"))
    return {eng, fix}, eng


def test_the_guard_sweeps_by_the_gated_repository_not_the_current_folders(guarded, tmp_path, monkeypatch):
    _lane, asked = guarded
    _engine(tmp_path)
    other = make_repo(tmp_path / "other")
    git(other, "worktree", "add", "-q", str(tmp_path / "other-wt"))
    monkeypatch.chdir(other)
    with pytest.raises(DiskShortError):
        gate.run(tmp_path / "engine-fix", ["true"])
    assert asked == [_names(tmp_path)]


def test_the_guard_sweeps_from_a_folder_that_is_no_repository(guarded, tmp_path, monkeypatch, capsys):
    _lane, asked = guarded
    _engine(tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    with pytest.raises(DiskShortError):
        gate.run(tmp_path / "engine", ["true"])
    assert asked == [_names(tmp_path)]
    assert "not a git repository" not in capsys.readouterr().err


def test_lane_sweep_from_a_folder_that_is_no_repository_says_so_in_one_line(tmp_path):
    lane = LocalLane(tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    r = lane.nev(["lane", "sweep", "--dry-run"], cwd=plain)
    assert r.returncode == 1 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "is no git checkout" in r.stderr and "--repo" in r.stderr
