"""Where snapshots live: the local rig notes and a root-only folder on each host.

Both are content-addressed (`objects/<sha256>`, written once, so identical content is
stored once) with one manifest per label (`labels/<label>.json`: label, time, who, roles,
per-file sha256, owner and mode). Every file is mode 600, every folder 700. A snapshot
holds the gateway's master key, so a store inside a git worktree or on the NAS is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base import jsonfile
from lanes.base.errors import ConfigError, NevError, UsageError
from lanes.base.jsonfile import write_bytes_atomic
from lanes.base.mask import mask
from lanes.base.ssh import Connection
from lanes.base.ui import info
from rig.snapshot.capture import HostState, sha256

FORMAT = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
NETWORK_FS = {"nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "sshfs", "fuse.sshfs", "9p",
              "glusterfs", "fuse.glusterfs", "ceph", "fuse.ceph", "afs", "davfs", "fuse.davfs2"}


class StoreError(NevError):
    pass


def check_label(label: str) -> str:
    if label == "live" or not LABEL_RE.match(label):
        raise UsageError(f"snapshot label {label!r} is not usable; use letters, digits, '.', '_' and '-' "
                         "(up to 100, not 'live'), e.g. known-good-2026-09-24")
    return label


# -- where a store may live (pure decisions) ----------------------------------------------

def refusal(path: str, git_top: str | None, fstype: str | None, nas_roots: Iterable[str]) -> str | None:
    """Why a store at `path` is refused, or None. Inputs are facts gathered locally or on a host."""
    if git_top is not None:
        return (f"{path} is inside the git worktree {git_top}; snapshots hold the gateway's master key "
                "and never go into git: choose a folder outside any repository")
    p = os.path.normpath(path)
    for root in nas_roots:
        r = os.path.normpath(root)
        if r != "/" and (p == r or p.startswith(r.rstrip("/") + "/")):
            return (f"{path} is on the NAS ({root}); snapshots hold the gateway's master key and never go "
                    "onto the NAS: choose a local folder")
    if fstype is not None and fstype.lower() in NETWORK_FS:
        return (f"{path} is on a network filesystem ({fstype}); snapshots hold the gateway's master key "
                "and stay on local disk: choose a local folder")
    return None


def nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def git_top_of(path: Path) -> str | None:
    """The worktree holding `path` (a `.git` file or folder in it or a parent), without running git."""
    p = nearest_existing(path.absolute()).resolve()
    for q in (p, *p.parents):
        if (q / ".git").exists():
            return str(q)
    return None


def fstype_of(path: Path) -> str | None:
    try:
        mounts_text = Path("/proc/self/mounts").read_text()
    except OSError:
        return None
    return fstype_in(str(nearest_existing(path.absolute()).resolve()), mounts_text)


def fstype_in(p: str, mounts_text: str) -> str | None:
    """The filesystem type of the longest mount point holding `p` (a /proc/mounts text)."""
    best, kind = "", None
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mp = parts[1].replace("\\040", " ")
        if (p == mp or p.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best):
            best, kind = mp, parts[2]
    return kind


# -- manifests ---------------------------------------------------------------------------

@dataclass
class Manifest:
    label: str
    time: str
    who: str
    roles: dict[str, dict[str, HostState]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"format": FORMAT, "label": self.label, "time": self.time, "who": self.who,
                "roles": {r: {h: s.to_json() for h, s in hosts.items()} for r, hosts in self.roles.items()}}

    @classmethod
    def from_json(cls, value: object, label: Path | str = "snapshot label") -> Manifest:
        """A decoded label file (ConfigError naming `label` and the field otherwise)."""
        f = jsonfile.Fields(label)
        d = f.obj(value, "(top level)")
        roles: dict[str, dict[str, HostState]] = {}
        for r, hosts in f.get(d, "roles", dict, "").items():
            hosts = f.obj(hosts, f"roles.{r}")
            roles[str(r)] = {str(h): HostState.from_json(str(h), s, f, f"roles.{r}.{h}")
                             for h, s in hosts.items()}
        return cls(
            label=f.get(d, "label", str, ""),
            time=f.get(d, "time", str, ""),
            who=f.get(d, "who", str, ""),
            roles=roles,
        )

    def problem(self, label: str) -> str | None:
        """What makes a read manifest unusable although it parsed (pure): a label other than its
        file's, text fields that are not text, an object id that is not a sha256 (it names a file
        in the store)."""
        if self.label != label:
            return f"its label is {self.label!r}, not {label!r} as its file name says"
        if not isinstance(self.time, str) or not isinstance(self.who, str):
            return "time and who must be text"
        for hosts in self.roles.values():
            for s in hosts.values():
                for sha in [f.sha256 for f in s.files if not f.missing] + [c.sha256 for c in s.commands]:
                    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
                        return f"object id {str(sha)[:70]!r} is not a sha256"
        return None

    def content_key(self) -> str:
        """Equal for two snapshots holding the same files, owners, modes and outputs."""
        d = self.to_json()["roles"]
        return sha256(json.dumps(d, sort_keys=True).encode())

    def file_count(self) -> int:
        return sum(len(s.files) for hosts in self.roles.values() for s in hosts.values())


def _write_private(path: Path, data: bytes) -> None:
    write_bytes_atomic(path, data, 0o600)


class LocalStore:
    """The snapshots in the local rig notes (`<notes>/snapshots`)."""

    def __init__(self, notes: Path) -> None:
        self.notes = notes
        self.root = notes / "snapshots"
        self.objects = self.root / "objects"
        self.labels = self.root / "labels"

    @classmethod
    def open(cls, notes: Path, nas_roots: Iterable[str], create: bool = True) -> LocalStore:
        notes = notes.expanduser()
        why = refusal(str(notes), git_top_of(notes), fstype_of(notes), nas_roots)
        if why:
            raise StoreError(f"refusing to keep rig notes at {why} (NEV_RIG_NOTES names the folder)")
        st = cls(notes)
        if create:
            # never the process's umask: it is every thread's (a box coming up beside a snapshot
            # made its lanes' folders 700, which an LXC guest's root cannot enter)
            for d in (notes, st.root, st.objects, st.labels):
                d.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.chmod(d, 0o700)
        return st

    def has_blob(self, sha: str) -> bool:
        return (self.objects / sha).exists()

    def put_blob(self, data: bytes) -> str:
        sha = sha256(data)
        if not self.has_blob(sha):
            _write_private(self.objects / sha, data)
        return sha

    def get_blob(self, sha: str) -> bytes:
        try:
            return (self.objects / sha).read_bytes()
        except FileNotFoundError:
            raise StoreError(f"object {sha[:12]} is missing from {self.objects}") from None

    def has_label(self, label: str) -> bool:
        return os.path.lexists(self.labels / f"{label}.json")

    @contextmanager
    def taking(self) -> Iterator[None]:
        """Held while a snapshot is taken: two `nev rig snapshot` of one store run one after the
        other, so the second sees the first's label (labels are never overwritten)."""
        fd = os.open(self.root / "take.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                info(f"waiting for another `nev rig snapshot` of {self.root}")
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def write_manifest(self, m: Manifest, new: bool = False) -> None:
        """Write `m`'s label; with `new`, only when no label of that name exists (created by a hard
        link of the written file: one of two writers wins, the other gets StoreError)."""
        path = self.labels / f"{m.label}.json"
        data = (json.dumps(m.to_json(), indent=2) + "\n").encode()
        if not new:
            _write_private(path, data)
            return
        tmp = self.labels / f".{m.label}.json.{os.getpid()}.new"
        _write_private(tmp, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise StoreError(f"a snapshot labelled {m.label} was just written by another `nev rig snapshot`; "
                             "labels are never overwritten: choose a new one") from None
        finally:
            tmp.unlink(missing_ok=True)

    def _load(self, p: Path) -> Manifest:
        """The label file `p`, checked: StoreError naming it when it cannot be used."""
        d = jsonfile.load(p, "snapshot label")
        try:
            m = Manifest.from_json(d, p)
        except ConfigError as e:
            why = e.message.removeprefix(f"{p}: ").removesuffix("; fix the file")
            raise StoreError(f"{p}: the snapshot label is damaged ({why}); "
                             "it cannot be used") from None
        problem = m.problem(p.name[:-len(".json")])
        if problem:
            raise StoreError(f"{p}: the snapshot label is damaged ({problem}); it cannot be used")
        return m

    def read_manifest(self, label: str) -> Manifest:
        check_label(label)
        p = self.labels / f"{label}.json"
        if not os.path.lexists(p):
            known = ", ".join(m.label for m in self.manifests()[-5:]) or "none yet"
            raise StoreError(f"no snapshot labelled {label} in {self.labels} (latest: {known}); "
                             "`nev rig snapshots` lists them")
        return self._load(p)

    def scan(self) -> tuple[list[Manifest], list[str]]:
        """Every label's manifest in time order, and a one-line problem for each that cannot be read."""
        out, damaged = [], []
        for p in sorted(self.labels.glob("*.json")):
            try:
                out.append(self._load(p))
            except NevError as e:
                damaged.append(e.message)
        return sorted(out, key=lambda m: (m.time, m.label)), damaged

    def manifests(self) -> list[Manifest]:
        """The labels that can be read (a damaged one is left out: `scan` names it)."""
        return self.scan()[0]

    def verify(self, m: Manifest) -> list[str]:
        """Every problem with the stored content of `m` (missing object or hash mismatch)."""
        problems = []
        for role, hosts in m.roles.items():
            for host, s in hosts.items():
                items: list[tuple[str, str, int | None]] = [(f.path, f.sha256, f.size) for f in s.files if not f.missing]
                items += [(f"output of {c.cmd!r}", c.sha256, None) for c in s.commands]
                for what, sha, size in items:
                    p = self.objects / sha
                    if not p.exists():
                        problems.append(f"{role}/{host}: {what} is missing from the store")
                        continue
                    data = p.read_bytes()
                    if sha256(data) != sha or (size is not None and len(data) != size):
                        problems.append(f"{role}/{host}: {what} does not match its manifest hash")
        return problems

    def load_blobs(self, m: Manifest) -> None:
        for hosts in m.roles.values():
            for s in hosts.values():
                for sha in {f.sha256 for f in s.files if not f.missing} | {c.sha256 for c in s.commands}:
                    s.blobs[sha] = self.get_blob(sha)


# -- the copy kept on each host ----------------------------------------------------------

_FACTS = r"""
d=$1; p=$d
while [ ! -e "$p" ]; do p=$(dirname -- "$p"); done
printf 'fstype %s\n' "$(stat -f -c %T -- "$p")"
q=$(readlink -f -- "$p")
while :; do
  if [ -e "$q/.git" ]; then printf 'git %s\n' "$q"; break; fi
  [ "$q" = / ] && break
  q=$(dirname -- "$q")
done
"""


def host_facts(text: str) -> tuple[str | None, str | None]:
    """(git worktree, filesystem type) from the facts script's output."""
    git_top = fstype = None
    for line in text.splitlines():
        if line.startswith("git "):
            git_top = line[4:]
        elif line.startswith("fstype "):
            fstype = line[7:]
    return git_top, fstype


class HostStore:
    """The same layout under a root-only folder on a role's host (rig file `host_store`)."""

    def __init__(self, conn: Connection, root: str) -> None:
        self.conn = conn
        self.root = root.rstrip("/")

    def check(self, nas_roots: Iterable[str]) -> None:
        res = self.conn.run(shlex.join(["sh", "-c", _FACTS, "nev-facts", self.root]), timeout=30)
        git_top, fstype = host_facts(res.out)
        why = refusal(self.root, git_top, fstype, nas_roots)
        if why:
            raise StoreError(f"refusing to keep snapshots on {self.conn.target} at {why} "
                             "(the rig file's host_store names the folder)")

    def save(self, label: str, states: dict[str, HostState], meta: dict[str, str]) -> None:
        q = shlex.quote
        r = self.root
        self.conn.run(f"umask 077 && mkdir -p {q(r + '/objects')} {q(r + '/labels')} && "
                      f"chmod 700 {q(r)} {q(r + '/objects')} {q(r + '/labels')}", check=True, timeout=30)
        blobs: dict[str, bytes] = {}
        for s in states.values():
            blobs.update(s.blobs)
        if blobs:
            have = self.conn.run(f"cd {q(r + '/objects')} && ls -1", timeout=30).out.split()
            for sha, data in blobs.items():
                if sha not in have:
                    self.conn.write_file(f"{r}/objects/{sha}", data, 0o600)
        doc = {"format": FORMAT, "label": label, **meta,
               "roles": {role: s.to_json() for role, s in states.items()}}
        self.conn.write_file(f"{r}/labels/{label}.json", (json.dumps(doc, indent=2) + "\n").encode(), 0o600)

    def get_blob(self, sha: str) -> bytes:
        data = self.conn.read_file(f"{self.root}/objects/{sha}")
        if sha256(data) != sha:
            raise StoreError(f"object {sha[:12]} on {self.conn.target} does not match its hash")
        return data


def describe_problems(label: str, problems: list[str]) -> str:
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return mask(f"snapshot {label} is damaged: {problems[0]}{more}; refusing to use it")
