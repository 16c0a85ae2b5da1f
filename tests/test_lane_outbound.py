"""What leaves the worktree (issue 31, item 1): regular files only, never through a symlink that
leaves the tree (`.env` included), bounded, FIFOs and devices refused with one line. Against the
real payload builder, and end to end through `nev lane run` to a lane on this machine
(`tests/helpers/local_lane.py`: the real agent behind a stand-in `ssh`)."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest

from lanes import dotenv, payload
from tests.helpers.local_lane import LocalLane, make_repo

MARK = b"zz-outside-the-worktree-zz"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside every worktree: a secret file, a folder holding one, a FIFO."""
    out = tmp_path / "outside"
    (out / "folder").mkdir(parents=True)
    (out / "secret").write_bytes(b"TOKEN=" + MARK + b"\n")
    (out / "folder" / "inner").write_bytes(MARK)
    os.mkfifo(out / "fifo")
    return out


def _untracked_bytes(local: payload.Local) -> bytes:
    """Every member's bytes and link name of the untracked files' tar."""
    if not local.untracked:
        return b""
    out = b""
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(local.untracked)), mode="r:") as tf:
        for m in tf.getmembers():
            out += m.name.encode() + m.linkname.encode()
            f = tf.extractfile(m) if m.isfile() else None
            if f is not None:
                out += f.read()
    return out


@pytest.mark.parametrize("target", ["secret", "folder", "/dev/zero", "fifo"])
def test_env_through_a_link_out_of_the_worktree_is_refused_in_one_line(tmp_path, outside, target):
    wt = make_repo(tmp_path / "wt")
    os.symlink(target if target.startswith("/") else outside / target, wt / ".env")
    with pytest.raises(payload.Refusal, match=r"'\.env' in .* leads out of the worktree through a symlink"):
        payload.env_bytes(wt)


def test_env_as_a_fifo_or_too_large_is_refused_and_a_folder_or_an_inside_link_is_fine(tmp_path):
    wt = make_repo(tmp_path / "wt")
    os.mkfifo(wt / ".env")
    with pytest.raises(payload.Refusal, match="is a FIFO"):
        payload.env_bytes(wt)
    os.unlink(wt / ".env")
    (wt / ".env").write_bytes(b"A=1\n" * (payload.ENV_MAX_BYTES // 4 + 1))
    with pytest.raises(payload.Refusal, match="larger than"):
        payload.env_bytes(wt)
    os.unlink(wt / ".env")
    (wt / ".env").mkdir()                              # a virtualenv named .env: nothing travels
    assert payload.env_bytes(wt) == b""
    os.rmdir(wt / ".env")
    (wt / "conf").mkdir()
    (wt / "conf" / "dev.env").write_text("A=1\n")
    os.symlink("conf/dev.env", wt / ".env")           # a link that stays inside is followed
    assert payload.env_bytes(wt) == b"A=1\n"


@pytest.mark.parametrize("target", ["secret", "folder", "/dev/zero", "fifo"])
def test_an_untracked_link_out_of_the_worktree_is_refused_and_no_byte_of_its_target_is_read(
        tmp_path, outside, target):
    wt = make_repo(tmp_path / "wt")
    os.symlink(target if target.startswith("/") else outside / target, wt / "link")
    with pytest.raises(payload.Refusal, match="untracked symlink 'link' .* points out of the worktree"):
        payload.local_members(payload.Worktree.open(wt))


def test_links_inside_the_worktree_travel_as_links(tmp_path, outside):
    wt = make_repo(tmp_path / "wt")
    (wt / "data").mkdir()
    (wt / "data" / "f").write_text("inside\n")
    os.symlink("data/f", wt / "to-file")
    os.symlink("data", wt / "to-folder")
    local = payload.local_members(payload.Worktree.open(wt))
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(local.untracked)), mode="r:") as tf:
        kinds = {m.name: (m.type, m.linkname) for m in tf.getmembers()}
    assert kinds["to-file"] == (tarfile.SYMTYPE, "data/f") and kinds["to-folder"] == (tarfile.SYMTYPE, "data")
    assert kinds["data/f"][0] == tarfile.REGTYPE
    assert MARK not in _untracked_bytes(local)


def test_a_file_git_lists_that_became_a_fifo_is_refused_not_waited_on(tmp_path, monkeypatch):
    wt = make_repo(tmp_path / "wt")
    os.mkfifo(wt / "pipe")
    monkeypatch.setattr(payload, "untracked_names", lambda repo: ["pipe"])   # git itself skips FIFOs
    with pytest.raises(payload.Refusal, match="'pipe' .* is a FIFO"):
        payload.local_members(payload.Worktree.open(wt))


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_the_env_reader_never_blocks_or_grows_on_a_fifo_or_a_device(tmp_path, kind):
    """The forge credential's lookup reads the worktree's `.env` before the payload is built."""
    env = tmp_path / ".env"
    if kind == "fifo":
        os.mkfifo(env)
    else:
        os.symlink(kind, env)
    assert dotenv.read(env) == {}


# -- end to end: nev lane run to a lane on this machine ------------------------------------------


def _all_lane_bytes(lane: LocalLane) -> bytes:
    out = b""
    for base in (lane.root, lane.home):
        for dirpath, _dirs, files in os.walk(base):
            for f in files:
                p = os.path.join(dirpath, f)
                if not os.path.islink(p) and os.path.isfile(p):
                    out += Path(p).read_bytes()
    return out


@pytest.mark.parametrize("how", ["env-secret", "env-folder", "env-zero", "env-fifo", "env-is-fifo",
                                 "link-secret", "link-folder", "link-zero", "link-fifo"])
def test_the_gate_ships_no_byte_from_outside_the_worktree(tmp_path, outside, how):
    lane = LocalLane(tmp_path)
    wt = make_repo(tmp_path / "wt")
    where, _, what = how.partition("-")
    if what == "is-fifo":
        os.mkfifo(wt / ".env")
    else:
        target = {"secret": outside / "secret", "folder": outside / "folder", "zero": Path("/dev/zero"),
                  "fifo": outside / "fifo"}[what]
        os.symlink(target, wt / (".env" if where == "env" else "link"))
    r = lane.nev(["lane", "run", str(wt), "sh", "-c", "cat .env link link/inner 2>/dev/null; echo ran"], timeout=60)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "nothing ran" in r.stderr and "ran" not in r.stdout
    assert MARK not in _all_lane_bytes(lane)


def test_a_gate_with_inside_links_and_a_regular_env_runs(tmp_path):
    lane = LocalLane(tmp_path)
    wt = make_repo(tmp_path / "wt")
    (wt / "conf.env").write_text("A=from-the-worktree\n")
    os.symlink("conf.env", wt / ".env")
    os.symlink("README.md", wt / "conf-link")
    r = lane.nev(["lane", "run", str(wt), "sh", "-c", "cat .env; test -L conf-link && echo linked"], timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "A=from-the-worktree\nlinked\n"
