"""Folders pulled back from a gate (`--pull DIR`): each one's compressed stream kept in a temporary
file up to a bound (NEV_PULL_MAX_MB), then checked before a byte is written into the worktree: no
write through a local or pulled link, no `.git`, nothing but files, folders and links inside the
folder (`pull_problem`, `pulled_problem`)."""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lanes.agent.errors import Refused
from lanes.agent.guard import link_target_ok, pull_path
from lanes.base import settings
from lanes.base.errors import NevError, UsageError


class Pull:
    """A pulled folder on its way in: PULL_START, PULL_DATA..., PULL_END; only a folder asked for."""

    def __init__(self, d: str, asked: Sequence[str], max_bytes: int | None = None) -> None:
        import tempfile  # only a gate with --pull: the others start without it

        if d not in asked:
            raise NevError(f"the lane sent back folder {d!r}, which was not asked for (--pull {', '.join(asked)})")
        self.dir = d
        self.tmp = tempfile.TemporaryFile()
        self.max_bytes = max_bytes if max_bytes is not None else pull_max_bytes()
        self.got = 0

    def write(self, data: bytes) -> None:
        """One PULL_DATA frame: kept in the temporary file until the folder's compressed stream
        alone passes the bound (then nothing more is kept and the folder is refused)."""
        self.got += len(data)
        if self.got <= self.max_bytes:
            self.tmp.write(data)

    def finish(self, root: Path) -> str | None:
        """The folder written into WORKTREE/DIR; the one line why when it is refused (`pull_problem`,
        `pulled_problem`: then nothing of it is written)."""
        import tarfile
        import zlib

        dest = root / self.dir
        limit = f"{self.max_bytes / (1 << 20):g} MiB ({settings.PULL_MAX_MB.name})"
        try:
            if self.got > self.max_bytes:
                return (f"--pull {self.dir} refused: it holds more than {limit}; nothing of it "
                        "was written")
            self.tmp.seek(0)
            with tarfile.open(fileobj=self.tmp, mode="r:gz") as tf:
                members = tf.getmembers()
                total = sum(m.size for m in members if m.isfile())
                why = pull_problem(root, self.dir) or pulled_problem(dest, members)
                if why is None and total > self.max_bytes:
                    why = f"its files hold {total} bytes, more than {limit}"
                if why:
                    return f"--pull {self.dir} refused: {why}; nothing of it was written"
                dest.mkdir(parents=True, exist_ok=True)
                if not hasattr(tarfile, "data_filter"):
                    # Python before 3.11.4 (Debian 12's python3 is 3.11.2, a client install's):
                    # no extraction filters; the data filter's owner and mode rules by hand
                    for m in members:
                        m.mode &= 0o755
                        m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""
                    tf.extractall(dest, members=members)
                else:
                    tf.extractall(dest, members=members, filter="data")
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            return f"--pull {self.dir} failed: {e}; what was written before stays"
        finally:
            self.tmp.close()
        return None


def pull_max_bytes() -> int:
    """NEV_PULL_MAX_MB in bytes (UsageError for one that is not a positive whole number)."""
    mb = settings.get_int(settings.PULL_MAX_MB)
    if mb <= 0:
        raise UsageError(f"{settings.PULL_MAX_MB.name}={mb}: give a positive whole number of MiB "
                         f"(default {settings.PULL_MAX_MB.default})")
    return mb << 20


def pull_dirs(pull: Sequence[str]) -> list[str]:
    """The `--pull` folders, normalised (`lanes.agent.guard.pull_path`); UsageError (2) for one
    that is not a folder inside the worktree (the worktree itself, `.git`, `..`, absolute, empty)."""
    out = []
    for d in pull:
        try:
            out.append(pull_path(d))
        except Refused as e:
            raise UsageError(f"{e}; nothing ran") from None
    return out


def pull_problem(root: Path, rel: str) -> str | None:
    """Why WORKTREE/`rel` may not receive a pulled folder here, else None: a pull never writes
    through a local symlink (any folder on the way included), never into a file, never into a
    folder holding `.git` (a repository of its own)."""
    p = root
    for part in rel.split("/"):
        p = p / part
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return None
        here = p.relative_to(root)
        if stat.S_ISLNK(st.st_mode):
            return f"{here} is a symlink here (-> {os.readlink(p)}); a pull never writes through a link"
        if not stat.S_ISDIR(st.st_mode):
            return f"{here} is a file here, not a folder"
        if os.path.lexists(p / ".git"):
            return f"{here} holds a .git (a repository of its own); a pull never writes into one"
    return None


def pulled_problem(dest: Path, members: list[Any]) -> str | None:
    """Why a pulled folder's tar members (tarfile.TarInfo) may not be written into `dest`, else
    None: a name out of the folder or holding `.git`, what is neither file, folder nor link, a
    symlink whose target leaves the folder (links inside it only), a hard link to anything but a
    file before it, a member that lies through a link (the tar's or a local one)."""
    links: set[str] = set()
    files: set[str] = set()
    for m in members:
        name = posixpath.normpath(m.name)
        parts = [] if name == "." else name.split("/")
        if name.startswith("/") or ".." in parts:
            return f"{m.name!r} lies outside the pulled folder"
        if ".git" in parts:
            return f"{m.name!r} is a .git; it is never pulled"
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            return f"{name!r} is a FIFO or a device; only files, folders and links inside the folder are pulled"
        if not parts:
            if not m.isdir():
                return "it is no folder on the lane"
            continue
        for i in range(1, len(parts) + (0 if m.issym() else 1)):
            pre = "/".join(parts[:i])
            if pre in links and i < len(parts):
                return f"{name!r} lies through the pulled link {pre!r}"
            if os.path.islink(dest / pre):
                return f"{dest.name}/{pre} is a symlink here (-> {os.readlink(dest / pre)}); a pull never writes through a link"
        if m.issym():
            if not link_target_ok(name, m.linkname):
                return f"symlink {name!r} points out of the pulled folder ({m.linkname!r}); only links inside it are pulled"
            links.add(name)
        elif m.islnk():
            if posixpath.normpath(m.linkname) not in files:
                return f"hard link {name!r} to {m.linkname!r}, not a file of the pulled folder"
        elif m.isfile():
            files.add(name)
    return None
