"""The lane's shared mirror under two gates at once (`lanes/agent/mirror.py`, `copy.py`): the
agent's own mirror update and copy preparation, run by two gates of two worktrees at the same
moment against a real bare forge repository, both succeed (the seed's "cannot lock ref
'refs/heads/main'", and a new lane's mirror made by both gates at once)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from lanes.agent import layout
from lanes.agent.copy import Copy
from lanes.agent.mirror import Mirror
from lanes.agent.procs import Child
from tests.helpers.landkit import git

BRANCHES = 40    # many refs for each fetch to lock, so two fetches at once would meet on them


def _forge(tmp_path: Path) -> tuple[Path, Path]:
    forge = tmp_path / "forge.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(forge))
    src = tmp_path / "src"
    git(tmp_path, "clone", "-q", str(forge), str(src))
    return forge, src


def _advance(src: Path, n: int) -> str:
    """One more commit on the forge's main, and every other branch moved to it."""
    (src / "f.txt").write_text(f"{n}\n")
    git(src, "add", "f.txt")
    git(src, "commit", "-qm", f"commit {n}")
    for b in range(BRANCHES):
        git(src, "branch", "-f", f"b{b}")
    git(src, "push", "-q", "-f", "origin", "HEAD:main", *(f"b{b}" for b in range(BRANCHES)))
    return git(src, "rev-parse", "HEAD")


def _two_gates_at_once(root: layout.Root, forge: Path, commit: str,
                       names: list[str]) -> dict[str, str]:
    """What each gate's mirror step does on the lane (`lanes.agent.gate`): supply the commit (a
    forge fetch first, the mirror's last fetch being old or absent), then prepare its copy;
    started together. Each gate's outcome: "ok" or its error."""
    go = threading.Barrier(len(names))
    out: dict[str, str] = {}

    def gate(name: str) -> None:
        try:
            m = Mirror(root, str(forge), None, 600.0, lambda _m: None, Child(name))
            go.wait()
            bundle = root.member(name, layout.BUNDLE)
            m.supply(commit, f"refs/nev/{name}", bundle, False, lambda _tips: 0)
            Copy(root, name, lambda _m: None).prepare(m, commit)
            out[name] = "ok"
        except Exception as e:    # the outcome is the assertion's
            out[name] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=gate, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def _assert_both_landed(root: layout.Root, commit: str, names: list[str],
                        out: dict[str, str]) -> None:
    assert out == {n: "ok" for n in names}
    mirror = Path(root.mirror)
    assert git(mirror, "rev-parse", "refs/heads/main") == commit
    assert git(mirror, "rev-parse", f"refs/heads/b{BRANCHES - 1}") == commit
    for n in names:
        assert git(Path(root.copy(n)), "rev-parse", "HEAD") == commit


def test_two_gates_making_a_new_lanes_mirror_at_once_both_succeed(tmp_path: Path) -> None:
    forge, src = _forge(tmp_path)
    for i in range(8):      # a fresh lane each round: both gates find no mirror
        commit = _advance(src, i)
        root = layout.Root(str(tmp_path / f"lane-{i}"))
        os.makedirs(root.path)
        names = [f"wt-a-{i}", f"wt-b-{i}"]
        _assert_both_landed(root, commit, names, _two_gates_at_once(root, forge, commit, names))
        assert not os.path.exists(root.mirror_init)


def test_two_gates_fetching_into_one_mirror_at_once_both_succeed(tmp_path: Path) -> None:
    forge, src = _forge(tmp_path)
    root = layout.Root(str(tmp_path / "lane"))
    os.makedirs(root.path)
    for i in range(8):      # the forge moved every branch, and the mirror's last fetch is old
        commit = _advance(src, i)
        if os.path.exists(root.last_fetch):
            os.utime(root.last_fetch, (0, 0))
        names = [f"wt-a-{i}", f"wt-b-{i}"]
        _assert_both_landed(root, commit, names, _two_gates_at_once(root, forge, commit, names))


def test_a_mirror_half_made_by_a_killed_gate_is_made_again(tmp_path: Path) -> None:
    forge, src = _forge(tmp_path)
    commit = _advance(src, 0)
    root = layout.Root(str(tmp_path / "lane"))
    os.makedirs(root.mirror_init)
    Path(root.mirror_init, "HEAD").write_text("half made\n")
    m = Mirror(root, str(forge), None, 600.0, lambda _m: None, Child("x"))
    m.supply(commit, "refs/nev/x", root.member("x", layout.BUNDLE), False, lambda _tips: 0)
    assert git(Path(root.mirror), "rev-parse", "refs/heads/main") == commit
    assert git(Path(root.mirror), "config", "gc.auto") == "0"
    assert not os.path.exists(root.mirror_init)
