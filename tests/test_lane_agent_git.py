"""The lane agent never runs a copy's or the mirror's code (`lanes/agent/git.py`): what a gate's
command could plant in its copy, the shared mirror or the lane home, played against the agent's
own mirror update and copy preparation with real git. Each planted program, had it run, leaves a
file named after it; none may appear, and the copy still gates."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lanes.agent import layout
from lanes.agent.copy import Copy
from lanes.agent.errors import Refused
from lanes.agent.git import git as agent_git
from lanes.agent.git import worktree_entry
from lanes.agent.mirror import MIRROR_CONFIG, Mirror
from lanes.agent.procs import Child
from tests.helpers.landkit import git


def _program(tmp: Path, name: str) -> str:
    """A shell program that, when run, leaves `tmp/ran-<name>` (and exits 0)."""
    p = tmp / f"evil-{name}"
    p.write_text(f"#!/bin/sh\ntouch {tmp}/ran-{name}\ncat\n")
    p.chmod(0o755)
    return str(p)


def _ran(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob("ran-*"))


class Lane:
    """A lane root with its mirror fed from a local forge, and a gate's agent steps."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.forge = tmp / "forge.git"
        git(tmp, "init", "-q", "--bare", "-b", "main", str(self.forge))
        self.src = tmp / "src"
        git(tmp, "clone", "-q", str(self.forge), str(self.src))
        self.root = layout.Root(str(tmp / "lane"))
        os.makedirs(self.root.path)
        self.said: list[str] = []

    def commit(self, files: dict[str, str]) -> str:
        for k, v in files.items():
            (self.src / k).write_text(v)
            git(self.src, "add", k)
        git(self.src, "commit", "-qm", "c")
        git(self.src, "push", "-q", "origin", "HEAD:main")
        return git(self.src, "rev-parse", "HEAD")

    def gate(self, name: str, commit: str) -> Path:
        """What a gate's agent does before the command: supply the commit, prepare the copy."""
        m = Mirror(self.root, str(self.forge), None, 0.0, self.said.append, Child(name))
        bundle = self.root.member(name, layout.BUNDLE)
        m.supply(commit, f"refs/nev/{name}", bundle, False, lambda _t: 0)
        Copy(self.root, name, self.said.append).prepare(m, commit)
        return Path(self.root.copy(name))


@pytest.fixture
def lane(tmp_path, monkeypatch) -> Lane:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return Lane(tmp_path)


def test_a_copys_git_file_pointed_at_a_planted_git_folder_runs_nothing_and_is_rewritten(lane):
    c1 = lane.commit({"a.txt": "one\n"})
    copy = lane.gate("a", c1)
    entry = worktree_entry(lane.root.mirror, str(copy))
    assert entry is not None
    # The sandboxed command's trick: its own git folder, borrowing the mirror's objects, with an
    # fsmonitor and a post-checkout hook, and the copy's `.git` pointed at it.
    evil = copy / "evilgit"
    git(copy, "init", "-q", "--bare", str(evil))
    objects = Path(lane.root.mirror) / "objects"
    (evil / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    git(evil, "config", "core.fsmonitor", _program(lane.tmp, "fsmonitor"))
    (evil / "hooks" / "post-checkout").write_text(f"#!/bin/sh\ntouch {lane.tmp}/ran-hook\n")
    (evil / "hooks" / "post-checkout").chmod(0o755)
    git(evil, "update-ref", "HEAD", c1)
    (copy / ".git").write_text(f"gitdir: {evil}\n")
    c2 = lane.commit({"a.txt": "two\n"})
    assert lane.gate("a", c2) == copy
    assert _ran(lane.tmp) == []
    assert (copy / "a.txt").read_text() == "two\n"
    assert (copy / ".git").read_text() == f"gitdir: {os.path.realpath(entry)}\n"
    assert any("rewritten to name its worktree entry" in s for s in lane.said)


def test_a_hook_a_filter_an_fsmonitor_or_a_url_rewrite_in_the_shared_mirror_never_runs(lane):
    c1 = lane.commit({".gitattributes": "*.txt filter=evil\n", "a.txt": "one\n"})
    lane.gate("a", c1)
    mirror = Path(lane.root.mirror)
    for hook in ("reference-transaction", "post-checkout", "post-merge"):
        (mirror / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {lane.tmp}/ran-{hook}\n")
        (mirror / "hooks" / hook).chmod(0o755)
    with open(mirror / "config", "a") as f:
        f.write(f"[filter \"evil\"]\n\tsmudge = {_program(lane.tmp, 'smudge')}\n"
                f"\tclean = {_program(lane.tmp, 'clean')}\n"
                f"[core]\n\tfsmonitor = {_program(lane.tmp, 'fsmonitor')}\n"
                f"\thooksPath = {mirror / 'hooks'}\n"
                f"[url \"{lane.tmp}/nowhere\"]\n\tinsteadOf = {lane.forge}\n")
    c2 = lane.commit({"a.txt": "two\n", "b.txt": "new\n"})
    # the same planted in the lane user's global config (after this test's own commits): ignored
    Path(os.environ["HOME"], ".gitconfig").write_text(
        f"[core]\n\tfsmonitor = {_program(lane.tmp, 'global-fsmonitor')}\n")
    copy = lane.gate("b", c2)              # another worktree's gate: a forge fetch, a new copy
    assert lane.gate("a", c2)              # and the planting copy's next gate
    assert _ran(lane.tmp) == []
    assert (copy / "b.txt").read_text() == "new\n"
    assert (mirror / "config").read_bytes() == MIRROR_CONFIG
    assert any("config" in s and "rewritten" in s for s in lane.said)


def test_a_git_file_planted_in_the_mirror_or_a_redirected_common_dir_is_not_followed(lane):
    c1 = lane.commit({"a.txt": "one\n"})
    copy = lane.gate("a", c1)
    evil = lane.tmp / "evilgit"
    git(lane.tmp, "init", "-q", "--bare", str(evil))
    git(evil, "config", "core.fsmonitor", _program(lane.tmp, "fsmonitor"))
    (Path(lane.root.mirror) / ".git").write_text(f"gitdir: {evil}\n")
    entry = worktree_entry(lane.root.mirror, str(copy))
    assert entry is not None
    Path(entry, "commondir").write_text(f"{evil}\n")
    c2 = lane.commit({"a.txt": "two\n"})
    lane.gate("a", c2)
    assert _ran(lane.tmp) == []
    assert (copy / "a.txt").read_text() == "two\n"
    assert agent_git(["rev-parse", "HEAD"], cwd=str(copy)).stdout.decode().strip() == c2


def test_a_copy_whose_git_metadata_is_broken_is_set_aside_with_one_line_and_made_anew(lane):
    c1 = lane.commit({"a.txt": "one\n"})
    copy = lane.gate("a", c1)
    entry = worktree_entry(lane.root.mirror, str(copy))
    assert entry is not None
    Path(entry, "index").write_bytes(b"not an index")      # a checkout there fails
    c2 = lane.commit({"a.txt": "two\n"})
    assert lane.gate("a", c2) == copy
    assert (copy / "a.txt").read_text() == "two\n"
    assert len([s for s in lane.said if "moved it aside" in s and "made it anew" in s]) == 1
    # `.git` made a folder (a repository of the gate's own): set aside too, never followed
    os.unlink(copy / ".git")
    git(lane.tmp, "init", "-q", str(copy))
    git(copy, "config", "core.fsmonitor", _program(lane.tmp, "fsmonitor"))
    lane.gate("a", c2)
    assert _ran(lane.tmp) == []
    assert stat.S_ISREG(os.lstat(copy / ".git").st_mode)
    assert len([s for s in lane.said if "moved it aside" in s]) == 2


def test_git_in_a_folder_beside_the_mirror_that_is_no_copy_is_refused_not_discovered(lane):
    c1 = lane.commit({"a.txt": "one\n"})
    lane.gate("a", c1)
    stray = Path(lane.root.path) / "b"
    git(lane.tmp, "init", "-q", str(stray))
    git(stray, "config", "core.fsmonitor", _program(lane.tmp, "fsmonitor"))
    with pytest.raises(Refused, match="no worktree of the lane's mirror"):
        agent_git(["status"], cwd=str(stray))
    cp = agent_git(["ls-files"], cwd=str(stray), check=False)     # a caller that tolerates failure
    assert cp.returncode != 0 and b"no worktree of the lane's mirror" in cp.stderr
    assert _ran(lane.tmp) == []


def test_building_a_payload_runs_no_fsmonitor_filter_or_hook_of_the_worktree(lane):
    """The development box's side: `nev lane run` reads a person's worktree with git, and
    neither their `core.fsmonitor` nor a `filter.*.clean` runs (nor a hook of theirs)."""
    from lanes import payload
    from lanes.base.gitrun import Repo

    c1 = lane.commit({".gitattributes": "*.txt filter=lfsish\n", "a.txt": "one\n"})
    wt = lane.src
    git(wt, "config", "filter.lfsish.clean", _program(lane.tmp, "clean"))
    git(wt, "config", "filter.lfsish.process", _program(lane.tmp, "process"))
    git(wt, "config", "core.fsmonitor", _program(lane.tmp, "fsmonitor"))
    for hook in ("post-checkout", "reference-transaction", "pre-auto-gc"):
        (wt / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {lane.tmp}/ran-{hook}\n")
        (wt / ".git" / "hooks" / hook).chmod(0o755)
    (wt / "a.txt").write_text("two\n")
    (wt / "new.txt").write_text("untracked\n")
    w = payload.Worktree(wt, "src", c1, Repo(wt))
    loc = payload.local_members(w, forge_reachable=True)
    p = payload.build(w, [], True, local=loc)
    assert _ran(lane.tmp) == []
    assert b"+two" in loc.diff and loc.untracked_count == 1
    assert p.commit == c1


def test_the_agent_makes_no_link_through_a_committed_symlink_nor_reads_pins_through_one(
        tmp_path):
    """`lanes.agent.links`: a copy whose `oracle` is a committed link out of it gets no
    `oracle/suites/results` link made through it (nothing created outside the copy), and a
    `tracks.json` that is a link is not read."""
    import json as _json

    from lanes.agent import links

    copy, outside, share = tmp_path / "copy", tmp_path / "outside", tmp_path / "share"
    for d in (copy, outside, share):
        d.mkdir()
    (copy / "oracle").symlink_to(outside)
    (outside / "pins.json").write_text(_json.dumps({"suites": {"wpt": {"commit": "abc"}}}))
    (copy / "tracks.json").symlink_to(outside / "pins.json")
    assert links.read_pins(str(copy)) == {}
    plan = links.plan("copy", {}, True, False)
    made = links.apply_links(str(copy), str(share), plan)
    assert list(outside.iterdir()) == [outside / "pins.json"], "something was made outside the copy"
    assert any("not linked" in m for m in made), made


def test_a_worktree_entry_a_gate_points_at_another_copy_makes_both_copies_anew_not_shared(lane):
    """A gate's jail writes its own copy's worktree entry: one whose `gitdir` it points at another
    copy's `.git` leaves that copy with two entries naming it; the agent trusts neither, sets the
    copy aside (one line) and makes it anew, with an entry of its own."""
    c1 = lane.commit({"a.txt": "one\n"})
    copy_a, copy_b = lane.gate("a", c1), lane.gate("b", c1)
    entry_a = worktree_entry(lane.root.mirror, str(copy_a))
    entry_b = worktree_entry(lane.root.mirror, str(copy_b))
    assert entry_a and entry_b and entry_a != entry_b
    Path(entry_a, "gitdir").write_text(f"{copy_b}/.git\n")
    assert worktree_entry(lane.root.mirror, str(copy_b)) is None
    c2 = lane.commit({"a.txt": "two\n"})
    lane.gate("b", c2)
    new_b = worktree_entry(lane.root.mirror, str(copy_b))
    assert new_b is not None and (copy_b / "a.txt").read_text() == "two\n"
    assert any(str(copy_b) in s and "moved it aside" in s for s in lane.said)
    lane.gate("a", c2)
    assert (copy_a / "a.txt").read_text() == "two\n"
