"""What a gate ships from a worktree: bundle, diff, untracked files and `.env`.

- The bundle holds only the commits the lane cannot already have: its basis is the lane mirror's
  tips (that exist here) plus, when the lane can reach the forge, this repository's
  remote-tracking tips (the forge supplies those faster than a slow uplink; if it cannot, the
  lane asks again and gets a bundle over its own tips only).
- The diff is `git diff --binary -M HEAD`: staged and unstaged, binary-safe, with modes,
  symlinks, deletions and renames.
- The untracked files git does not ignore go as one gzip'd tar (odd names, modes, symlinks).
- One rule for what leaves the worktree (`read_in_tree`, `untracked_tar`, `env_bytes`): regular
  files only, read through a descriptor opened without following a link and checked to be the
  file that was looked at, never more than its size when opened (`.env`: at most ENV_MAX_BYTES);
  never through a symlink that leaves the worktree (a symlink travels as a link, and only one
  whose target stays inside); a FIFO, a device or a socket is refused with one line. So the gate
  ships no byte from outside the worktree, whatever links the tree holds.

The lane agent that carries them is packed in `lanes/agentpack.py`.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from lanes.agent import layout
from lanes.agent.guard import link_target_ok
from lanes.base.errors import NevError
from lanes.base.gitrun import GitError, Repo

if TYPE_CHECKING:
    import tarfile

def copy_name_of(repo: Repo, folder: str | None = None, common_dir: str | None = None) -> str:
    """The lane copy's name of the worktree `folder` (default: `repo`'s own folder) of `repo`'s
    repository: `lanes.agent.layout.copy_name` keyed by `layout.repo_key` of this host and the
    repository's git common dir (why those: its docstring). The one place the development box
    names a copy: the gate, the writer, the sweep, `nev ledger` and the box tests call it."""
    import socket

    common = os.path.realpath(common_dir if common_dir is not None else repo.common_dir())
    name = folder if folder is not None else repo.path.name
    return layout.copy_name(name, layout.repo_key(socket.gethostname(), common))


@dataclass
class Worktree:
    path: Path
    name: str
    commit: str
    repo: Repo

    @classmethod
    def open(cls, path: Path) -> Worktree:
        if not path.is_dir():
            raise NevError(f"worktree {path} does not exist; give the folder of a git worktree")
        try:
            top = Repo(path).toplevel()
        except GitError:
            raise NevError(f"{path} is not inside a git worktree; give the folder of one") from None
        repo = Repo(top)
        commit = repo.try_rev("HEAD")
        if commit is None:
            raise NevError(f"worktree {top} has no commit yet; commit something first")
        return cls(top, copy_name_of(repo), commit, repo)


@dataclass
class Payload:
    commit: str
    bundle: bytes
    diff: bytes
    untracked: Member
    env: bytes
    untracked_count: int = 0
    basis: list[str] = field(default_factory=list)

    def sizes(self) -> dict[str, int]:
        return {"bundle": len(self.bundle), "diff": len(self.diff),
                "untracked": member_size(self.untracked), ".env": len(self.env)}

    def members(self) -> list[Member]:
        """In the order they follow the request; a file member is sent a chunk at a time
        (`member_chunks`)."""
        return [self.bundle, self.diff, self.untracked, self.env]


def known_commits(repo: Repo, shas: list[str]) -> list[str]:
    """Those of `shas` that are commits in this repository."""
    if not shas:
        return []
    cp = repo.git("cat-file", "--batch-check=%(objectname) %(objecttype)", input="\n".join(shas) + "\n")
    out = []
    for line in cp.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == "commit":
            out.append(parts[0])
    return out


def remote_tips(repo: Repo) -> list[str]:
    out = repo.out("for-each-ref", "--format=%(objectname)", "refs/remotes")
    return sorted(set(out.split()))


@dataclass(frozen=True)
class Known:
    """What was looked up here before the lane's hello came (`known_ahead`): the remote-tracking
    tips (when the forge is reachable), every sha asked about, and those that are commits."""

    remote: tuple[str, ...]
    looked: frozenset[str]
    commits: frozenset[str]


def known_ahead(wt: Worktree, forge_reachable: bool) -> Known:
    """The remote-tracking tips and HEAD looked up ahead: a lane whose mirror holds only those (the
    common case: the forge's branches and this copy's last commit) costs no git after its hello."""
    remote = remote_tips(wt.repo) if forge_reachable else []
    looked = sorted({*remote, wt.commit})
    return Known(tuple(remote), frozenset(looked), frozenset(known_commits(wt.repo, looked)))


def basis_for(repo: Repo, lane_tips: list[str], forge_reachable: bool, known: Known | None = None) -> list[str]:
    """The commits both sides hold: the lane's tips, and the remote-tracking tips when the forge is
    reachable, that are commits here. `known` (`known_ahead`, same `forge_reachable`) saves
    looking up again what it looked up."""
    if known is None:
        basis = set(lane_tips)
        if forge_reachable:
            basis.update(remote_tips(repo))
        return known_commits(repo, sorted(basis))
    commits = known.commits | set(known_commits(repo, sorted(set(lane_tips) - known.looked)))
    return sorted(c for c in {*lane_tips, *known.remote} if c in commits)


def bundle(repo: Repo, commit: str, basis: list[str]) -> bytes:
    """A bundle of `commit` without what `basis` already holds; empty when nothing is missing."""
    if commit in basis:
        return b""
    revs = "HEAD\n" + "".join(f"^{b}\n" for b in basis)
    cp = repo.git("bundle", "create", "-q", "-", "--stdin", input=revs.encode(), text=False, check=False)
    if cp.returncode != 0:
        err = cp.stderr.decode(errors="replace")
        if "empty bundle" in err:
            return b""
        raise GitError(f"git bundle create failed in {repo.path}: {err.strip().splitlines()[-1] if err.strip() else cp.returncode}")
    return cp.stdout


def diff(repo: Repo) -> bytes:
    cp = repo.git(*repo.filters_off(), "diff", "--binary", "--full-index", "--no-color",
                  "--no-ext-diff", "--no-textconv", "-M", "HEAD", "--", text=False)
    return cp.stdout


def untracked_names(repo: Repo) -> list[str]:
    """Untracked files git does not ignore; `.env` travels on its own (installed for the run only)."""
    cp = repo.git(*repo.filters_off(), "ls-files", "--others", "--exclude-standard", "-z",
                  text=False)
    names = (n.decode("utf-8", "surrogateescape") for n in cp.stdout.split(b"\0") if n)
    return [n for n in names if n != ".env"]


ENV_MAX_BYTES = 1 << 20     # the worktree's `.env` (NAME=value lines) travels only up to this size


class Refusal(NevError):
    """A file of the worktree that may not leave it (one line: which, why, what to do)."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _inside(top: str, path: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def read_in_tree(root: Path, rel: str, what: str, limit: int | None = None) -> tuple[os.stat_result, bytes]:
    """(its status, its bytes) of the regular file `rel` under `root`, by the one rule for what
    leaves the worktree (`open_in_tree`), read whole: for small files (`.env`)."""
    fst, fd = open_in_tree(root, rel, what, limit)
    try:
        chunks, left = [], fst.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return fst, b"".join(chunks)


class _FdReader(io.RawIOBase):
    """At most `size` bytes of an open descriptor, read as a file (then closed): a file goes into
    the untracked files' tar a chunk at a time, never whole in memory."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.left = fd, size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        if self.left <= 0:
            return 0
        data = os.read(self.fd, min(len(b), self.left, 1 << 20))
        b[:len(data)] = data
        self.left -= len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def open_in_tree(root: Path, rel: str, what: str,
                 limit: int | None = None) -> tuple[os.stat_result, int]:
    """(its status, an open descriptor) of the regular file `rel` under `root`, by the one rule for
    what leaves the worktree: the path may not lead out of it through a symlink (a link inside it
    is followed), only a regular file is read (a FIFO would block the gate, a device never end),
    and through a descriptor opened without following a link and checked to be the file looked
    at; no more than its size then (the caller reads at most `st_size`), and no more than
    `limit`. Refusal (one line) otherwise."""
    top = os.path.realpath(root)
    path = os.path.join(top, rel)
    real = os.path.realpath(path)
    subject = f"{what} {rel!r} in {top}".lstrip()
    if not _inside(top, real):
        via = f" (-> {os.readlink(path)})" if os.path.islink(path) else ""
        raise Refusal(f"{subject} leads out of the worktree through a symlink{via}; only files inside the "
                      "worktree are sent (copy the file in place); nothing ran")
    st = os.lstat(real)
    if not stat.S_ISREG(st.st_mode):
        raise Refusal(f"{subject} is {_kind(st.st_mode)}; only regular files are sent; nothing ran")
    too_big = Refusal(f"{subject} is larger than {limit} bytes; nothing ran")
    if limit is not None and st.st_size > limit:
        raise too_big
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise Refusal(f"{subject} cannot be read ({e.strerror}); nothing ran") from None
    try:
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(fst.st_mode):
            raise Refusal(f"{subject} changed while it was read; nothing ran")
        if limit is not None and fst.st_size > limit:
            raise too_big
    except BaseException:
        os.close(fd)
        raise
    return fst, fd


def env_bytes(root: Path) -> bytes:
    """The worktree's `.env` as it travels: empty when there is none (or it is a folder, such as a
    virtualenv named `.env`, or a link inside the worktree to none); Refusal when it leads out of
    the worktree, is no regular file or is larger than ENV_MAX_BYTES."""
    path = root / layout.ENV
    top = os.path.realpath(root)
    real = os.path.realpath(path)
    if _inside(top, real):
        try:
            st = os.lstat(real)
        except OSError:
            return b""                    # none, or a link inside the worktree to nothing
        if stat.S_ISDIR(st.st_mode):
            return b""
    return read_in_tree(root, layout.ENV, "", ENV_MAX_BYTES)[1]


SPOOL_BYTES = 8 << 20   # untracked files' tar kept in memory up to this, in a temporary file beyond


def untracked_tar(root: Path, names: list[str], extra: Mapping[str, bytes] | None = None) -> Member:
    """The untracked files, and `extra` (lane-copy path -> content: files of this machine that
    travel with the run, e.g. a batch's declared aliases), as one gzipped tar. Each by the one rule
    (`open_in_tree`), streamed a chunk at a time; a symlink travels as a link, refused here when
    its target leaves the worktree. Bytes up to SPOOL_BYTES, else an unnamed temporary file
    (sent a chunk at a time: `send_member`), so a large untracked file is never whole in memory."""
    if not names and not extra:
        return b""
    import gzip  # most warm gates have no untracked files: a gate starts without these
    import tarfile
    import tempfile

    raw = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tf:
            for n in names:
                _add_untracked(tf, root, n)
            for n, data in (extra or {}).items():
                info = tarfile.TarInfo(n)
                info.size, info.mode = len(data), 0o600
                tf.addfile(info, io.BytesIO(data))
    raw.seek(0)
    if raw.seek(0, os.SEEK_END) <= SPOOL_BYTES:      # still in memory: the bytes themselves
        raw.seek(0)
        data = raw.read()
        raw.close()
        return data
    raw.seek(0)
    return raw  # type: ignore[return-value]


Member = bytes | IO[bytes]


def member_size(m: Member) -> int:
    if isinstance(m, bytes):
        return len(m)
    pos = m.tell()
    end = m.seek(0, os.SEEK_END)
    m.seek(pos)
    return end


def member_chunks(m: Member, chunk: int = 1 << 20) -> Iterator[bytes]:
    """A member's bytes, a chunk at a time (a file member from its start, then closed)."""
    if isinstance(m, bytes):
        yield m
        return
    m.seek(0)
    try:
        while True:
            data = m.read(chunk)
            if not data:
                return
            yield data
    finally:
        m.close()


def _add_untracked(tf: tarfile.TarFile, root: Path, n: str) -> None:
    import tarfile

    p = os.path.join(root, n)
    try:
        st = os.lstat(p)
    except OSError:
        return                             # gone since git listed it
    top = os.path.realpath(root)
    if not _inside(top, os.path.realpath(os.path.dirname(p))):
        raise Refusal(f"untracked file {n!r} in {top} lies through a symlink out of the worktree; nothing ran")
    info = tarfile.TarInfo(n)
    info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(p)
        if not link_target_ok(n, target):
            raise Refusal(f"untracked symlink {n!r} in {top} points out of the worktree ({target!r}); "
                          "nothing ran")
        info.type, info.linkname = tarfile.SYMTYPE, target
        tf.addfile(info)
    elif stat.S_ISDIR(st.st_mode):       # an untracked repository inside the worktree, listed as `dir/`
        info.type = tarfile.DIRTYPE
        tf.addfile(info)
    else:
        fst, fd = open_in_tree(root, n, "untracked file")
        info.mode, info.size = stat.S_IMODE(fst.st_mode), fst.st_size
        with _FdReader(fd, fst.st_size) as src:
            try:
                tf.addfile(info, io.BufferedReader(src, 1 << 20))
            except OSError:             # shorter than when it was looked at
                raise Refusal(f"untracked file {n!r} in {root} changed while it was read; "
                              "nothing ran") from None


@dataclass(frozen=True)
class Local:
    """The members that do not depend on the lane (diff, untracked files, `.env`): a gate makes
    them while the lane's hello is on its way."""

    diff: bytes
    untracked: Member
    env: bytes
    untracked_count: int
    known: Known | None = None      # the bundle's basis as far as it could be looked up ahead


def local_members(wt: Worktree, extra: Mapping[str, bytes] | None = None,
                  forge_reachable: bool | None = None) -> Local:
    """The members that do not depend on the lane; with `forge_reachable` given, the commits the
    bundle's basis will be drawn from looked up too (`known_ahead`)."""
    names = untracked_names(wt.repo)
    env = env_bytes(wt.path)
    return Local(diff=diff(wt.repo), untracked=untracked_tar(wt.path, names, extra), env=env,
                 untracked_count=len(names) + len(extra or {}),
                 known=None if forge_reachable is None else known_ahead(wt, forge_reachable))


def build(wt: Worktree, lane_tips: list[str], forge_reachable: bool,
          extra: Mapping[str, bytes] | None = None, local: Local | None = None) -> Payload:
    """The payload for a lane whose mirror holds `lane_tips`; `local` (`local_members`, made
    earlier with the same `extra`) saves making those members now."""
    loc = local if local is not None else local_members(wt, extra)
    basis = basis_for(wt.repo, lane_tips, forge_reachable, loc.known)
    return Payload(commit=wt.commit, bundle=bundle(wt.repo, wt.commit, basis), diff=loc.diff,
                   untracked=loc.untracked, env=loc.env, untracked_count=loc.untracked_count, basis=basis)

