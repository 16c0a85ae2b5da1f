"""What `--pull` brings back (issue 31, item 2): never the worktree root or anything holding
`.git`, never through a local symlink, links inside the pulled folder only; every refusal one
line with its documented exit code (2: a path that is no folder inside the worktree; 1: refused
here before anything ran; 5: the command ran, the pulled folder was refused and nothing of it
written). End to end through `nev lane run` to a lane on this machine (`tests/helpers/local_lane.py`)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from lanes import gate, pulled
from lanes.base.exitcodes import Exit
from tests.helpers.local_lane import LocalLane, git, make_repo

MAKE_OUT = "mkdir -p out/d && echo stamp > out/d/f && ln -s d out/rel"


@pytest.fixture
def lane(tmp_path) -> LocalLane:
    return LocalLane(tmp_path)


def _one_line(r) -> None:
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("kind", ["linked", "clone"])
@pytest.mark.parametrize("bad", [".", "./", "", "../x", "/etc", ".git", "out/../..", "out/..", "a/.git/hooks"])
def test_a_pull_path_that_is_no_folder_inside_the_worktree_is_a_usage_error_and_nothing_changes(
        lane, tmp_path, kind, bad):
    main = make_repo(tmp_path / "main")
    if kind == "linked":
        git(main, "worktree", "add", "-q", str(tmp_path / "wt"))
        wt = tmp_path / "wt"
    else:
        wt = main
    dot_git = (wt / ".git").read_bytes() if (wt / ".git").is_file() else None
    r = lane.nev(["lane", "run", "--pull", bad, str(wt), "sh", "-c", "echo lane > README.md; echo ran"])
    assert r.returncode == Exit.USAGE, (r.stdout, r.stderr)
    _one_line(r)
    assert "ran" not in r.stdout and "nothing ran" in r.stderr
    assert (wt / "README.md").read_text() == "hello\n"
    if dot_git is not None:
        assert (wt / ".git").read_bytes() == dot_git
    assert git(wt, "status", "--short") == ""


def test_a_pull_into_a_local_symlink_is_refused_before_anything_runs(lane, tmp_path):
    wt = make_repo(tmp_path / "wt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, wt / "out")
    r = lane.nev(["lane", "run", "--pull", "out", str(wt), "sh", "-c", MAKE_OUT + "; echo ran"])
    assert r.returncode == Exit.FAILED and "out is a symlink here" in r.stderr and "nothing ran" in r.stderr
    _one_line(r)
    assert "ran" not in r.stdout and list(elsewhere.iterdir()) == []


def test_a_pull_into_a_folder_holding_git_is_refused(lane, tmp_path):
    wt = make_repo(tmp_path / "wt")
    make_repo(wt / "vendor" / "lib")               # a repository of its own inside the worktree
    r = lane.nev(["lane", "run", "--pull", "vendor/lib", str(wt), "sh", "-c", "mkdir -p vendor/lib; echo ran"])
    assert r.returncode == Exit.FAILED and "holds a .git" in r.stderr
    _one_line(r)


@pytest.mark.parametrize("made,why", [
    ("ln -s /etc out/abs", "symlink 'abs' points out of the pulled folder"),
    ("ln -s ../../.. out/up", "symlink 'up' points out of the pulled folder"),
    ("mkfifo out/pipe", "'pipe' is a FIFO or a device"),
])
def test_a_pulled_folder_with_a_link_out_or_a_fifo_is_refused_whole_and_the_commands_status_is_kept(
        lane, tmp_path, made, why):
    wt = make_repo(tmp_path / "wt")
    r = lane.nev(["lane", "run", "--pull", "out", str(wt), "sh", "-c", f"{MAKE_OUT} && {made}; exit 3"])
    assert r.returncode == Exit.PULL_REFUSED, (r.stdout, r.stderr)
    _one_line(r)
    assert why in r.stderr and "nothing of it was written" in r.stderr and "the command exited 3" in r.stderr
    assert not (wt / "out").exists()


def test_a_pulled_folder_with_links_inside_it_arrives_and_the_status_is_the_commands(lane, tmp_path):
    wt = make_repo(tmp_path / "wt")
    r = lane.nev(["lane", "run", "--pull", "out/", str(wt), "sh", "-c", MAKE_OUT + "; exit 7"])
    assert r.returncode == 7, r.stderr
    assert "Traceback" not in r.stderr and "pulled out" in r.stderr
    assert (wt / "out" / "d" / "f").read_text() == "stamp\n" and os.readlink(wt / "out" / "rel") == "d"


# -- the checks on their own, with members a lane could craft ----------------------------------


def _members(*spec: tuple[str, bytes, str]) -> list[tarfile.TarInfo]:
    out = []
    for name, kind, link in spec:
        m = tarfile.TarInfo(name)
        m.type, m.linkname = kind, link
        out.append(m)
    return out


@pytest.mark.parametrize("spec,why", [
    ([("./l", tarfile.SYMTYPE, "sub"), ("./l/x", tarfile.REGTYPE, "")], "lies through the pulled link"),
    ([("./h", tarfile.LNKTYPE, "/etc/passwd")], "hard link"),
    ([("./a/.git/config", tarfile.REGTYPE, "")], "is a .git"),
    ([("/abs", tarfile.REGTYPE, "")], "lies outside"),
    ([("./../x", tarfile.REGTYPE, "")], "lies outside"),
    ([("./dev", tarfile.CHRTYPE, "")], "FIFO or a device"),
    ([(".", tarfile.SYMTYPE, "/")], "no folder on the lane"),
])
def test_members_a_lane_could_craft_are_refused(tmp_path, spec, why):
    assert why in (pulled.pulled_problem(tmp_path / "out", _members(*spec)) or "")


def test_a_member_through_a_local_symlink_inside_the_pulled_folder_is_refused(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", dest / "sub")
    why = pulled.pulled_problem(dest, _members(("./sub/x", tarfile.REGTYPE, "")))
    assert why and "out/sub is a symlink here" in why
    assert pulled.pulled_problem(dest, _members(("./sub", tarfile.SYMTYPE, "other"))) is None   # replaced, not followed


def test_a_refused_pull_writes_nothing(tmp_path):
    wt = tmp_path / "wt"
    wt.mkdir()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tf:
        for name, data in (("./good", b"x"),):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        bad = tarfile.TarInfo("./bad")
        bad.type, bad.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tf.addfile(bad)
    p = pulled.Pull("out", ["out"])
    p.tmp.write(raw.getvalue())
    why = p.finish(wt)
    assert why and "nothing of it was written" in why and not (wt / "out").exists()


def test_a_folder_the_lane_sends_unasked_is_refused(tmp_path):
    with pytest.raises(gate.NevError, match="not asked for"):
        pulled.Pull("other", ["out"])


def test_pull_paths_are_normalised():
    assert pulled.pull_dirs(["out/", "./a//b", "x"]) == ["out", "a/b", "x"]


def test_the_lane_never_sends_the_copy_itself(tmp_path):
    """The lane agent applies the same rule to what it is asked to send."""
    from lanes.agent.errors import Refused
    from lanes.agent.guard import pull_path

    for bad in (".", "", "/", "..", ".git", "a/../.."):
        with pytest.raises(Refused):
            pull_path(bad)
    assert pull_path("out") == "out" and Path("x").name == "x"


def test_a_pulled_folder_over_the_bound_is_refused_whole_and_a_sparse_file_is_never_made_whole(
        lane, tmp_path):
    """`--pull` holds at most NEV_PULL_MAX_MB (default 2048): a folder whose files hold more is
    refused whole (exit 5, one line), however well it compresses; a folder holding a sparse file
    (a 4 GiB hole would become 4 GiB of real disk here) is not pulled, said in one line."""
    wt = make_repo(tmp_path / "wt")
    big = "mkdir -p out && head -c 3145728 /dev/zero > out/zeros"           # 3 MiB, ~3 KB gzip'd
    r = lane.nev(["lane", "run", "--pull", "out", str(wt), "sh", "-c", big], NEV_PULL_MAX_MB="2")
    assert r.returncode == Exit.PULL_REFUSED, (r.stdout, r.stderr)
    assert "more than 2 MiB (NEV_PULL_MAX_MB)" in r.stderr
    assert "nothing of it was written" in r.stderr
    assert not (wt / "out").exists()
    sparse = "mkdir -p out && echo kept > out/small && truncate -s 4G out/hole"
    r = lane.nev(["lane", "run", "--pull", "out", str(wt), "sh", "-c", sparse])
    assert "out: hole is a sparse file" in r.stderr, r.stderr
    assert "nothing pulled for it" in r.stderr
    assert not (wt / "out").exists()
    r = lane.nev(["lane", "run", "--pull", "out", str(wt), "sh", "-c", big], NEV_PULL_MAX_MB="4")
    assert r.returncode == 0 and (wt / "out" / "zeros").stat().st_size == 3 << 20, r.stderr
