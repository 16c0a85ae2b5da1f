"""Every path under a lane root, and the lane home's files nev reads or writes, named once.

| path | what |
|---|---|
| `<root>/.git-mirror` | the bare mirror; every copy is one of its worktrees |
| `<root>/.git-mirror.lock` | flock that serialises ref updates in the mirror across gates |
| `<root>/.git-mirror.init` | the mirror being made, under that flock; renamed into place |
| `<root>/.git-mirror/nev-last-fetch` | its mtime is the last fetch from the forge |
| `<root>/<name>` | a worktree's copy (a worktree of the mirror), `<folder>-<key>` (`copy_name`) |
| `<root>/<name>/.env`, `<root>/<name>/.env.nev-rewrite` | the run's `.env`, and its rewrite on the way in |
| `<root>/.lock-<name>` | flock held while a gate of `name` runs; holds `pid P since T` |
| `<root>/.payload-<name>/` | a gate's payload (mode 700): `bundle`, `diff`, `untracked`, `.env` |
| `<root>/.stray-<name>-<time>-<pid>` | a directory found at a copy's place that was no worktree, moved aside |
| `<root>/.writer-<name>/` | the writer started in copy `name` (`nev lane writer`): `state.json`, `exit`, `log`, `fetched` |
| `~/.cache/lane-writer-briefs/` | a writer's brief, outside every copy (so the writer never commits it) |
| `~/.lane-model-env` | NEV_LANE_MODEL_URL: the gateway as the lane reaches it (`nev lane provision`) |
| `~/.lane-env`, `~/.lane-shared-env` | the NAS folder, npm cache and PATH for lane shells (`nev lane provision`) |
| `~/.local/bin` | the lane's own nev (`nev lane install`), put on a gate command's PATH |
| `~/.local/bin/nev` | a link to `~/.local/share/nev/current/bin/nev`: the install chosen now |
| `~/.local/share/nev/current` | a link to `installs/<key>`, replaced by one atomic rename |
| `~/.local/share/nev/installs/<key>/` | one install of nev (a venv), never changed once there |
| `…/installs/<key>/.in-use` | flock: shared by each nev run from it, exclusive to remove it |
| `…/installs/<key>/entry/nev` | the install's own `nev` alone: a run's children find it on PATH |
| `…/installs/.tmp-*`, `.gone-*` | an install being built, an install being removed |
| `~/.local/share/nev/install.lock` | flock: one install at a time on the lane |
| `~/.local/share/nev/sweep.lock` | flock: one sweep at a time removes installs |
| `~/.local/state/nev/agent/<hash>` | the lane agent as last sent (its modules as JSON), named by the sha256 of that content: the bootstrap runs it only when the hash matches and touches it; the sweep removes the others not used within NEV_AGENT_KEEP_HOURS |
| `/srv/toolchain/{rustup,cargo-bin}` | the node's Rust toolchain, bound read-only (`TOOLCHAIN_ENV` for sessions) |

Stdlib only and pure: the agent uses it on the lane, the development box (the sweep, provisioning,
Dagu's maintenance) to name the same paths. Lane paths are POSIX paths on either side.
"""

from __future__ import annotations

import fcntl
import os
import posixpath
from typing import NamedTuple

MIRROR = ".git-mirror"
LOCK = ".lock-"
PAYLOAD = ".payload-"
STRAY = ".stray-"
WRITER = ".writer-"
# A writer's record, in `<root>/.writer-<name>/`: what was started, its exit status (written by
# the wrapper when the harness ends), its output, and the tip last fetched to the development box.
WRITER_STATE, WRITER_EXIT, WRITER_LOG, WRITER_FETCHED = "state.json", "exit", "log", "fetched"
WRITER_BRIEFS = ".cache/lane-writer-briefs"
LAST_FETCH = "nev-last-fetch"
ENV = ".env"
ENV_REWRITE = ".env.nev-rewrite"
# A payload's members, in the order they follow the payload request on the wire.
BUNDLE, DIFF, UNTRACKED = "bundle", "diff", "untracked"
PAYLOAD_MEMBERS = (BUNDLE, DIFF, UNTRACKED, ENV)
# In a payload: the folder of nev's store builder serving the gate (`lanes.agent.storeserve`),
# and its socket there
STORE_SERVICE, STORE_SOCKET = "store", "store.sock"

MODEL_ENV = ".lane-model-env"
LANE_ENV = ".lane-env"
SHARED_ENV = ".lane-shared-env"
LOCAL_BIN = ".local/bin"
AGENT_CACHE = ".local/state/nev/agent"
# nev's versioned installs (`lanes/selfinstall.py` makes them, `lanes/agent/installs.py` reports and
# removes them, `rig/cli.py` holds IN_USE for each run): see the table above.
NEV_SHARE = ".local/share/nev"
NEV_INSTALLS = NEV_SHARE + "/installs"
NEV_CURRENT = NEV_SHARE + "/current"
NEV_LEGACY_VENV = NEV_SHARE + "/venv"          # the one in-place venv before versioned installs
INSTALL_LOCK = NEV_SHARE + "/install.lock"
SWEEP_LOCK = NEV_SHARE + "/sweep.lock"
IN_USE = ".in-use"
CHOSEN = ".chosen"          # touched each time it is made current: the sweep keeps the newest
INSTALL_ENTRY = "entry"
INSTALL_TMP, INSTALL_GONE = ".tmp-", ".gone-"

TOOLCHAIN = "/srv/toolchain"
TOOLCHAIN_PATH = f"{TOOLCHAIN}/cargo-bin:/usr/local/bin:/usr/bin:/bin"
TOOLCHAIN_ENV = {"PATH": TOOLCHAIN_PATH, "RUSTUP_HOME": f"{TOOLCHAIN}/rustup"}


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")
_HEX = frozenset("0123456789abcdef")


def plain_name(folder: str) -> str:
    """A worktree folder's name made plain: the name itself when it is plain (letters, digits,
    `._+-`, not hidden, at most 100 characters), else a plain form of it and 8 hex digits of its
    sha256 (`a:b;c$(id)` -> `a_b_c__id_-1f2e3d4c`), so no copy, lock or payload on a lane is named
    with a newline, a shell character or a colon, and two odd names never meet. Alone, it was a
    copy's whole name before copies were keyed (a legacy copy); now `copy_name` adds the key."""
    if folder and len(folder) <= 100 and not folder.startswith(".") and set(folder) <= _SAFE:
        return folder
    import hashlib

    plain = "".join(c if c in _SAFE else "_" for c in folder).lstrip(".")[:64] or "wt"
    return f"{plain}-{hashlib.sha256(folder.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def repo_key(host: str, common_dir: str) -> str:
    """The 8 hex digits that key a repository's lane copies: of the sha256 of the development
    box's host name and the absolute, resolved path of the repository's git common dir (the
    primary checkout's `.git`, which all its worktrees share).

    Why these: every worktree of one repository has the same common dir, so its key is the same
    for all of them and across runs; two repositories on one box have two common dirs, and two
    boxes two host names, so they never share a key, even when both are clones of one forge
    repository in folders of one name. A key of the forge URL and the first commit would give two
    users' clones of one repository one key, and one user's sweep would then remove the other's
    copies (whose worktrees it cannot see); a key read from the forge would need the network.
    The price: moving or cloning the primary checkout anew changes the key, and the old copies
    are then another repository's to the sweep (kept; `nev lane sweep --track NAME` removes one).

    | host | common dir | key |
    |---|---|---|
    | `devbox` | `/home/me/engine/.git` | the same for every worktree of `engine` |
    | `devbox` | `/home/me/other/.git` | another |
    | `laptop` | `/home/me/engine/.git` | another (a second user's clone) |
    """
    import hashlib

    ident = f"{host}\0{common_dir}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(ident).hexdigest()[:8]


def copy_name(folder: str, key: str) -> str:
    """The lane copy's name for a worktree folder named `folder` of the repository keyed `key`
    (`repo_key`): `<plain_name(folder)>-<key>` (`engine` -> `engine-1a2b3c4d`). Two repositories'
    worktrees of one folder name get two copies; two worktrees of one repository differ by their
    folder names, and a worktree's copy is the same on every run. The development box computes it
    in one place, `lanes.payload.copy_name_of` (every caller, the box tests included)."""
    return f"{plain_name(folder)}-{key}"


def copy_key(name: str) -> str | None:
    """The repository key a copy name ends with (`-` and 8 lower-case hex digits), else None: an
    unkeyed copy from before copies were keyed. A legacy odd name (`plain_name`'s hash) looks
    keyed too; it is then another repository's to the sweep, which keeps it (the safe side)."""
    head, sep, tail = name.rpartition("-")
    if sep and head and len(tail) == 8 and set(tail) <= _HEX:
        return tail
    return None


def copy_name_ok(name: str) -> bool:
    """A worktree name that can be a copy under the root: one path part, not hidden (so it can
    never be the mirror, a lock, a payload or a stray)."""
    return bool(name) and "/" not in name and "\0" not in name and not name.startswith(".")


def lock_owner(entry: str) -> str | None:
    """The copy name a root entry is the lock of (`.lock-<name>`), else None."""
    return entry[len(LOCK):] if entry.startswith(LOCK) else None


def copy_names(entries: list[str]) -> set[str]:
    """The copy names a listing of the root speaks of: copies, and payloads left without one
    (the mirror, locks, strays and other hidden entries are no copy)."""
    names = set()
    for e in entries:
        if e.startswith(PAYLOAD):
            names.add(e[len(PAYLOAD):])
        elif copy_name_ok(e):
            names.add(e)
    return names


class Root(NamedTuple):
    """A lane root: `path` as given (the lane resolves it where it must). A NamedTuple rather than
    a dataclass: `dataclasses` is the costliest import of the agent's start on a lane."""

    path: str

    @property
    def mirror(self) -> str:
        return posixpath.join(self.path, MIRROR)

    @property
    def mirror_lock(self) -> str:
        return self.mirror + ".lock"

    @property
    def mirror_init(self) -> str:
        return self.mirror + ".init"

    @property
    def last_fetch(self) -> str:
        return posixpath.join(self.mirror, LAST_FETCH)

    def copy(self, name: str) -> str:
        return posixpath.join(self.path, name)

    def lock(self, name: str) -> str:
        return posixpath.join(self.path, LOCK + name)

    def payload(self, name: str) -> str:
        return posixpath.join(self.path, PAYLOAD + name)

    def store_service(self, name: str) -> str:
        """The folder of nev's store builder for a gate of `name` (its socket, the corpora it
        leaves for the gate; `lanes.agent.storeserve`), in the payload."""
        return posixpath.join(self.payload(name), STORE_SERVICE)

    def member(self, name: str, member: str) -> str:
        """One of PAYLOAD_MEMBERS in the payload of `name`."""
        return posixpath.join(self.payload(name), member)

    def env_files(self, name: str) -> list[str]:
        """The three `.env` files of a run, removed on every exit."""
        return [posixpath.join(self.copy(name), ENV), posixpath.join(self.copy(name), ENV_REWRITE),
                self.member(name, ENV)]

    def writer(self, name: str, member: str | None = None) -> str:
        """The writer record of copy `name`, or one of its files (WRITER_STATE, ...)."""
        folder = posixpath.join(self.path, WRITER + name)
        return posixpath.join(folder, member) if member else folder

    def writer_names(self, entries: list[str]) -> list[str]:
        """The copy names with a writer record among a listing of the root."""
        return sorted(e[len(WRITER):] for e in entries if e.startswith(WRITER) and copy_name_ok(e[len(WRITER):]))

    def stray(self, name: str, stamp: str, pid: int) -> str:
        return posixpath.join(self.path, f"{STRAY}{name}-{stamp}-{pid}")


def home_file(home: str, name: str) -> str:
    """One of the lane home's files above (MODEL_ENV, LANE_ENV, SHARED_ENV, LOCAL_BIN, AGENT_CACHE, WRITER_BRIEFS)
    under `home`."""
    return posixpath.join(home, name)


def install_name_ok(name: str) -> bool:
    """A name an install's folder can have (`lanes.selfinstall.source_key`: 16 hex digits)."""
    return len(name) == 16 and all(c in _HEX for c in name)


def agent_entry_ok(name: str) -> bool:
    """A name an entry of AGENT_CACHE can have, so one the sweep may remove: a cached agent
    (its content's sha256, hex), its compiled modules (`<hash>.code`), or one of them being
    written (`<hash>.tmp<pid>`, `<hash>.code.tmp<pid>`); always one path part."""
    digest, dot, rest = name.partition(".")
    if rest.startswith("code"):
        rest = rest[4:].removeprefix(".") if rest == "code" or rest.startswith("code.tmp") else "x"
    return (len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
            and (not dot or not rest or (rest.startswith("tmp") and rest[3:].isdigit())))


def lock_held(path: str | os.PathLike[str]) -> bool:
    """True while another process holds `path`'s flock, shared or exclusive (an install in use or
    being built, a supervisor running); False when nobody does or there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
