"""Paths a payload may touch: nothing that escapes the copy (`..`, absolute, `.git/`, symlinks out).

Every check raises `Refused` with one line before anything is written, so a refused payload
changes nothing.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from lanes.agent.errors import Refused

if TYPE_CHECKING:
    import tarfile


def inside(root: str, path: str) -> bool:
    root = os.path.realpath(root)
    p = os.path.realpath(path)
    return p == root or p.startswith(root + os.sep)


def check_rel(rel: str, what: str) -> None:
    """A relative path inside the copy: no absolute path, no `..`, no `.git`, no NUL."""
    if not rel or "\0" in rel or rel.startswith("/") or rel.startswith("\\"):
        raise Refused(f"{what}: path {rel!r} escapes the worktree; nothing was applied")
    parts = rel.split("/")
    if any(p == ".." for p in parts) or parts[0] == ".git" or ".git" in parts:
        raise Refused(f"{what}: path {rel!r} escapes the worktree; nothing was applied")


def pull_path(d: str) -> str:
    """A `--pull` folder as a relative path inside the worktree, normalised (`out/`, `./out` ->
    `out`). Refused: empty, absolute, any `..`, any `.git`, and the worktree itself (`.`): a pull
    replaces what it brings back, and the worktree's root holds its `.git`."""
    if not d or "\0" in d or d.startswith("/") or d.startswith("\\"):
        raise Refused(f"--pull {d!r}: give a folder inside the worktree (relative, not empty)")
    parts = [p for p in d.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused(f"--pull {d!r}: a path with `..` may leave the worktree; give a folder inside it")
    if not parts:
        raise Refused(f"--pull {d!r}: the worktree itself is never pulled (it holds its .git); give a folder inside it")
    if ".git" in parts:
        raise Refused(f"--pull {d!r}: .git is never pulled; give a folder of the worktree's files")
    return "/".join(parts)


def check_under(copy: str, rel: str, what: str) -> None:
    """Writing `rel` must not go through a symlink that leaves the copy."""
    check_rel(rel, what)
    parent = os.path.dirname(os.path.join(copy, rel))
    if not inside(copy, parent):
        raise Refused(f"{what}: path {rel!r} goes through a symlink out of the worktree; nothing was applied")


def link_target_ok(rel: str, target: str) -> bool:
    """Whether a symlink at `rel` pointing at `target` stays inside the copy."""
    if target.startswith("/"):
        return False
    depth = len(rel.split("/")) - 1
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


_DIFF_PATH = re.compile(r"^(?:rename from|rename to|copy from|copy to) (.*)$")


def _unquote(p: str) -> str:
    if p.startswith('"') and p.endswith('"'):
        raw = p[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        return raw.encode("latin-1").decode("utf-8", "surrogateescape")
    return p


def diff_paths(diff: bytes) -> tuple[list[str], list[tuple[str, str]]]:
    """Every path a git diff touches, and (path, target) of each symlink it creates."""
    paths: list[str] = []
    symlinks: list[tuple[str, str]] = []
    cur_b: str | None = None
    new_link = False
    in_link_hunk = False
    for raw in diff.split(b"\n"):
        line = raw.decode("utf-8", "surrogateescape")
        if line.startswith("diff --git "):
            cur_b, new_link, in_link_hunk = None, False, False
            continue
        if line.startswith("--- ") or line.startswith("+++ "):
            p = _unquote(line[4:].rstrip("\t"))
            if p != "/dev/null":
                if not (p.startswith("a/") or p.startswith("b/")):
                    raise Refused(f"diff: path {p!r} escapes the worktree; nothing was applied")
                paths.append(p[2:])
                if line.startswith("+++ "):
                    cur_b = p[2:]
            continue
        m = _DIFF_PATH.match(line)
        if m:
            paths.append(_unquote(m.group(1)))
            continue
        if line.startswith("new file mode 120000") or line.startswith("new mode 120000") or (
                line.startswith("index ") and line.endswith(" 120000")):
            new_link = True
            continue
        if new_link and line.startswith("@@"):
            in_link_hunk = True
            continue
        if in_link_hunk and line.startswith("+") and cur_b is not None:
            symlinks.append((cur_b, line[1:]))
            in_link_hunk = False
    return paths, symlinks


def check_diff(copy: str, diff: bytes) -> None:
    paths, symlinks = diff_paths(diff)
    for p in paths:
        check_under(copy, p, "diff")
    for p, target in symlinks:
        if not link_target_ok(p, target):
            raise Refused(f"diff: symlink {p!r} points out of the worktree ({target!r}); nothing was applied")


def check_tar(copy: str, tf: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The members of the untracked files' tar, every one checked."""
    members = tf.getmembers()
    for m in members:
        check_under(copy, m.name, "untracked files")
        if m.issym() and not link_target_ok(m.name, m.linkname):
            raise Refused(f"untracked files: symlink {m.name!r} points out of the worktree "
                          f"({m.linkname!r}); nothing was applied")
        if not (m.isfile() or m.issym() or m.isdir()):
            raise Refused(f"untracked files: {m.name!r} is not a file, directory or symlink; nothing was applied")
    return members
