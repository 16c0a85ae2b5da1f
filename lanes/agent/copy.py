"""The lane copy of a worktree: checkout at the exact commit, the diff, the untracked files, the links, the run's `.env`.

A directory at the copy's place that is no worktree of the mirror is moved aside (never
deleted); ignored files such as `target/` survive the checkout. Every path of the diff and the
untracked files is checked first (`lanes.agent.guard`).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

from lanes import dotenv
from lanes.agent import layout, links
from lanes.agent.errors import Refused
from lanes.agent.git import git, worktree_entry
from lanes.agent.guard import check_diff, check_tar, inside
from lanes.agent.mirror import Mirror, MirrorLock
from lanes.agent.wire import CHUNK


def swap_model_url(text: bytes, model_url: str | None) -> bytes:
    """The .env with its NEV_MODEL_URL (or GENERA_MODEL_URL) line pointing at the lane's gateway."""
    if not model_url:
        return text
    lines = text.split(b"\n")
    for i, line in enumerate(lines):
        s = line.lstrip()
        if s.startswith(b"export "):
            s = s[7:].lstrip()
        if s.startswith(b"NEV_MODEL_URL=") or s.startswith(b"GENERA_MODEL_URL="):
            lines[i] = line[: len(line) - len(s)] + s.split(b"=", 1)[0] + b"=" + model_url.encode()
    return b"\n".join(lines)


def lane_model_url() -> str | None:
    """The gateway as this lane reaches it, for the run's `.env`: NEV_LANE_MODEL_URL in the agent's
    environment (the lane's own sshd session), else `~/.lane-model-env`."""
    url = os.environ.get("NEV_LANE_MODEL_URL") or os.environ.get("GENERA_LANE_MODEL_URL")
    if url:
        return url
    path = layout.home_file(os.path.expanduser("~"), layout.MODEL_ENV)
    return dotenv.first(dotenv.read(path), "NEV_LANE_MODEL_URL", "GENERA_LANE_MODEL_URL")


class Copy:
    def __init__(self, root: layout.Root, name: str, say: Callable[[str], None]) -> None:
        self.root = root
        self.name = name
        self.path = root.copy(name)
        self.say = say

    def prepare(self, mirror: Mirror, commit: str) -> None:
        """The copy checked out at `commit`, detached, with untracked files cleaned (not ignored
        ones). A copy the mirror has no worktree entry for, whose `.git` is no file, or whose
        checkout fails is moved aside (one line) and made anew: never refused for good. A `.git`
        file naming anything but its entry is rewritten (one line); git never follows it anyway
        (`lanes.agent.git.repo_env`)."""
        with MirrorLock(self.root):
            if not os.path.isdir(self.path):
                git(["worktree", "prune"], cwd=mirror.path)
            entry = worktree_entry(mirror.path, self.path) if os.path.isdir(self.path) else None
            dot = os.path.join(self.path, ".git")
            if entry is not None and (os.path.islink(dot) or not os.path.isfile(dot)):
                entry = None
                why = "its .git is not the file git made"
            else:
                why = "was not a worktree of the lane's mirror"
            if os.path.lexists(self.path) and entry is None:
                self.set_aside(why)
            if entry is None:
                self.add(mirror, commit)
                return
            self.fix_gitfile(entry)
        try:
            git(["checkout", "-q", "--detach", "--force", commit], cwd=self.path)
            git(["clean", "-q", "-fd"], cwd=self.path)
        except Refused as e:
            with MirrorLock(self.root):
                self.set_aside(f"could not be checked out ({e})")
                self.add(mirror, commit)

    def set_aside(self, why: str) -> None:
        """The copy moved aside to a stray (nothing deleted), one line saying why."""
        aside = base = self.root.stray(self.name, time.strftime("%Y%m%dT%H%M%S"), os.getpid())
        n = 1
        while os.path.lexists(aside):
            n += 1
            aside = f"{base}.{n}"
        os.rename(self.path, aside)
        self.say(f"{self.path} {why}; moved it aside to {aside} (nothing deleted) and made it anew")

    def add(self, mirror: Mirror, commit: str) -> None:
        git(["worktree", "prune"], cwd=mirror.path)
        git(["worktree", "add", "-q", "--detach", "--force", self.path, commit], cwd=mirror.path)

    def fix_gitfile(self, entry: str) -> None:
        """The copy's `.git` file names its worktree entry, as git wrote it; rewritten (one line)
        when a gate pointed it elsewhere."""
        dot = os.path.join(self.path, ".git")
        entry = os.path.realpath(entry)
        with open(dot, "rb") as f:
            text = f.read(4097).decode(errors="surrogateescape")
        if text.startswith("gitdir: ") and text.endswith("\n") and text.count("\n") == 1 and \
                os.path.realpath(text[8:-1]) == entry:
            return
        want = f"gitdir: {entry}\n".encode(errors="surrogateescape")
        tmp = dot + ".nev-rewrite"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(want)
        os.replace(tmp, dot)
        self.say(f"{dot} named another git folder; rewritten to name its worktree entry {entry}")

    def apply_diff(self, path: str) -> None:
        if os.path.getsize(path) == 0:
            return
        with open(path, "rb") as f:
            check_diff(self.path, f.read())
        git(["apply", "--binary", "--whitespace=nowarn", path], cwd=self.path)

    def extract(self, tar_path: str) -> int:
        """The untracked files' tar into the copy, every member checked first; how many."""
        copy = self.path
        import tarfile  # only with untracked files: a call starts without it

        with tarfile.open(tar_path, "r:*") as tf:
            members = check_tar(copy, tf)
            for m in members:
                dest = os.path.join(copy, m.name)
                if os.path.islink(dest) or (os.path.exists(dest) and not os.path.isdir(dest)):
                    os.unlink(dest)
                if m.isdir():
                    os.makedirs(dest, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                if not inside(copy, os.path.dirname(dest)):  # re-check after earlier members
                    raise Refused(f"untracked files: {m.name!r} goes through a symlink out of the worktree")
                if m.issym():
                    os.symlink(m.linkname, dest)
                    continue
                src = tf.extractfile(m)
                assert src is not None
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as f:
                    shutil.copyfileobj(src, f, CHUNK)
                os.chmod(dest, m.mode & 0o7777)
            return len(members)

    def make_links(self, shared: str) -> None:
        """The links into the NAS share (`lanes.agent.links`), when the share is there."""
        if not os.path.isdir(shared):
            return
        copy = self.path
        texts: list[str] = []
        cp = git(["grep", "-h", "-o", "-I", "-E", r"corpus/[A-Za-z0-9_.-]*ground-truth"], cwd=copy, check=False)
        if cp.returncode == 0:
            texts.append(cp.stdout.decode(errors="replace"))
        for line in links.retired(copy, shared, links.ground_truth_names(texts)):
            self.say(line)
        plan = links.plan(self.name, links.read_pins(copy), os.path.isdir(os.path.join(copy, "oracle")),
                          os.path.isdir(os.path.join(copy, "webgpu-cts")))
        for line in links.apply_links(copy, shared, plan):
            self.say("linked " + line)

    def install_env(self, model_url: str | None) -> None:
        """The payload's `.env`, its model URL swapped, as the copy's `.env` for this run."""
        src = self.root.member(self.name, layout.ENV)
        if not os.path.exists(src):
            return
        with open(src, "rb") as f:
            text = swap_model_url(f.read(), model_url)
        tmp = os.path.join(self.path, layout.ENV_REWRITE)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.path, layout.ENV))


def remove_env(root: layout.Root, name: str, keep_copy_env: bool = False) -> list[str]:
    """The run's three `.env` files removed (all but the copy's own with `keep_copy_env`: a
    writer's, removed when it ends); those that were there."""
    removed = []
    for p in root.env_files(name)[1 if keep_copy_env else 0:]:
        try:
            os.unlink(p)
            removed.append(p)
        except FileNotFoundError:
            pass
    return removed
