"""Where a landing keeps its state, all under the repository's git directory (never in the
tree, so no track can write it): approvals, land-pending markers, the lock, the running
gate's process group, and the temporary worktree a landing rebases and gates in.

    <common-git-dir>/nev/land.lock
    <common-git-dir>/nev/approvals/<name>.json     what a person approved: spec sha, branch tip
    <common-git-dir>/nev/land-pending/<name>.json  written before main moves; a rerun finishes after it
    <common-git-dir>/nev/land-gate/<name>.json     the running gate's process group (killed by a rerun)
    <common-git-dir>/nev/land-wt/<name>/           the rebased worktree the gate runs in

Approvals and markers are read into dataclasses through `lanes.base.jsonfile.Fields`: a file that
is not what nev wrote is refused naming the file and the field, and left as it is.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import spec
from lanes.base import jsonfile
from lanes.base.errors import NevError
from lanes.base.gitrun import Repo
from lanes.base.jsonfile import Fields

MAIN = "refs/heads/main"
_FULL_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class LandPaths:
    common: Path

    @classmethod
    def of(cls, repo: Repo) -> LandPaths:
        return cls(repo.common_dir())

    @property
    def base(self) -> Path:
        return self.common / "nev"

    @property
    def lock(self) -> Path:
        return self.base / "land.lock"

    def approval(self, name: str) -> Path:
        return self.base / "approvals" / f"{name}.json"

    def pending(self, name: str) -> Path:
        return self.base / "land-pending" / f"{name}.json"

    def gate(self, name: str) -> Path:
        return self.base / "land-gate" / f"{name}.json"

    def worktree(self, name: str) -> Path:
        return self.base / "land-wt" / name


def sha_arg(what: str, value: str) -> str:
    """A sha given on the command line: 7 to 40 hex digits, lower-cased."""
    v = value.strip().lower()
    if not (7 <= len(v) <= 40 and all(c in "0123456789abcdef" for c in v)):
        raise NevError(f"{what} {value!r} is not a commit sha (7 to 40 hex digits); nothing was done")
    return v


REVIEWER_MAX = 100


def _is_person(v: str) -> bool:
    return bool(v) and v == v.strip() and len(v) <= REVIEWER_MAX and v.isprintable()


def reviewer_arg(value: str) -> str:
    """The person named by `nev land --reviewed-by`: one printable line, up to 100 characters."""
    v = value.strip()
    if not _is_person(v):
        raise NevError(f"--reviewed-by {value[:REVIEWER_MAX]!r} is not a person's name (one "
                       f"printable line, 1 to {REVIEWER_MAX} characters); nothing was done")
    return v


def _full_sha(f: Fields, top: dict, key: str) -> str:
    v = f.get(top, key, str, "")
    if not _FULL_SHA.fullmatch(v):
        raise f.fail(key, f"must be a full object id (40 hex digits), not {v[:50]!r}")
    return str(v)


def _name(f: Fields, top: dict, expected: str) -> str:
    name = f.get(top, "name", str, "")
    if name != expected:
        raise f.fail("name", f"is {name[:50]!r}, but the file is for {expected!r}")
    return str(name)


@dataclass(frozen=True)
class Pins:
    """What an approval and a land-pending marker both hold: the track, its spec's blob on main
    and the approved branch tip."""

    name: str
    spec_sha: str
    tip: str

    @staticmethod
    def read(data: Any, path: Path) -> tuple[Fields, dict[str, Any], tuple[str, str, str]]:
        """A file of either kind, read as far as the pins: its fields, its top-level object, and the
        pins checked (the name is the file's, the shas are full object ids)."""
        f = Fields(path)
        top = f.obj(data, "(top level)")
        return f, top, (_name(f, top, path.stem), _full_sha(f, top, "spec_sha"), _full_sha(f, top, "tip"))


# ---------------------------------------------------------------- approvals


@dataclass(frozen=True)
class Approval(Pins):
    approved_at: float
    by: str

    @classmethod
    def from_json(cls, data: Any, path: Path) -> Approval:
        f, top, pins = cls.read(data, path)
        return cls(*pins, approved_at=float(f.get(top, "approved_at", (int, float), "", required=False, default=0)),
                   by=str(f.get(top, "by", str, "", required=False, default="")))


def save_approval(paths: LandPaths, name: str, spec_sha: str, tip: str) -> Approval:
    try:
        by = getpass.getuser()
    except (KeyError, OSError):
        by = str(os.getuid())
    a = Approval(name=name, spec_sha=spec_sha, tip=tip, approved_at=time.time(), by=by)
    jsonfile.write_atomic(paths.approval(name), dataclasses.asdict(a))
    return a


def load_approval(paths: LandPaths, name: str) -> Approval | None:
    p = paths.approval(name)
    return Approval.from_json(jsonfile.load(p, "approval"), p) if p.exists() else None


def list_approvals(paths: LandPaths) -> list[Approval]:
    d = paths.base / "approvals"
    out = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        a = load_approval(paths, p.stem)
        if a is not None:
            out.append(a)
    return sorted(out, key=lambda a: (a.approved_at, a.name))


def drop_approval(paths: LandPaths, name: str) -> None:
    paths.approval(name).unlink(missing_ok=True)


def approve(repo_path: Path, name: str, spec_sha: str | None = None, tip: str | None = None) -> int:
    """`nev land approve NAME`: pin the reviewed spec sha and branch tip (default: what they are now)."""
    spec.check_name(name)
    repo = Repo(repo_path)
    paths = LandPaths.of(repo)
    now_tip = repo.try_rev(f"refs/heads/{name}")
    if now_tip is None:
        raise NevError(f"branch {name} does not exist; nothing approved")
    blob = repo.blob(repo.rev(MAIN), spec.spec_path(name))
    if blob is None:
        raise NevError(f"{spec.spec_path(name)} is not on main; nothing approved")
    if tip is not None and not now_tip.startswith(sha_arg("branch tip", tip)):
        raise NevError(f"branch {name} is at {now_tip[:12]}, not the reviewed {tip}; review again; nothing approved")
    if spec_sha is not None and not blob.startswith(sha_arg("spec sha", spec_sha)):
        raise NevError(f"{spec.spec_path(name)} on main is {blob[:12]}, not the reviewed {spec_sha}; nothing approved")
    a = save_approval(paths, name, blob, now_tip)
    print(f"approved {name}: spec {a.spec_sha[:12]}, tip {a.tip[:12]} (stored in {paths.approval(name)})")
    return 0


# ---------------------------------------------------------------- the land-pending marker


@dataclass(frozen=True)
class Pending(Pins):
    """Written (and synced) just before main moves from `old` to `new`; removed when every
    after-step has run. A rerun that finds it finishes what the landing owed."""

    old: str   # main before
    new: str   # the gated tip main moves to
    time: float
    pid: int
    reviewed_by: str | None = None   # a person's landing (`--reviewed-by`): the tag names them
    #: the ledgers whose batches are behind it (its announcement reads them; default: the track's)
    ledgers: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Any, path: Path) -> Pending:
        f, top, pins = cls.read(data, path)
        by = f.get(top, "reviewed_by", str, "", required=False, default=None)
        if by is not None and not _is_person(by):
            raise f.fail("reviewed_by", f"must be a person's name (one printable line), "
                                        f"not {by[:50]!r}")
        ledgers = f.get(top, "ledgers", list, "", required=False, default=[]) or []
        if not all(isinstance(x, str) and x and "/" not in x for x in ledgers):
            raise f.fail("ledgers", "must be a list of ledger names (plain file names)")
        return cls(*pins, old=_full_sha(f, top, "old"), new=_full_sha(f, top, "new"),
                   time=float(f.get(top, "time", (int, float), "")),
                   pid=int(f.get(top, "pid", int, "")), reviewed_by=by, ledgers=tuple(ledgers))


def write_pending(paths: LandPaths, marker: Pending) -> None:
    p = paths.pending(marker.name)
    jsonfile.write_atomic(p, dataclasses.asdict(marker))
    fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_pending(paths: LandPaths, name: str) -> Pending | None:
    p = paths.pending(name)
    return Pending.from_json(jsonfile.load(p, "land-pending marker"), p) if p.exists() else None


def pending_names(paths: LandPaths) -> list[str]:
    d = paths.base / "land-pending"
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def drop_pending(paths: LandPaths, name: str) -> None:
    paths.pending(name).unlink(missing_ok=True)
