"""Where a landing keeps its state, all under the repository's git directory (never in the
tree, so no track can write it): approvals, land-pending markers, the lock, the running
gate's process group, and the temporary worktree a landing rebases and gates in.

    <common-git-dir>/nev/land.lock
    <common-git-dir>/nev/approvals/<name>.json     what a person approved: spec sha, branch tip
    <common-git-dir>/nev/land-pending/<name>.json  written before main moves; a rerun finishes after it
    <common-git-dir>/nev/land-gate/<name>.json     the running gate's process group (killed by a rerun)
    <common-git-dir>/nev/land-wt/<name>/           the rebased worktree the gate runs in
"""

from __future__ import annotations

import getpass
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lanes import jsonfile
from lanes.errors import NevError


@dataclass(frozen=True)
class LandPaths:
    common: Path

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


@dataclass(frozen=True)
class Approval:
    name: str
    spec_sha: str
    tip: str
    approved_at: float
    by: str


def _read(path: Path, what: str) -> dict[str, Any]:
    data = jsonfile.load(path, what)
    if not isinstance(data, dict):
        raise NevError(f"{path}: {what} is not a JSON object; remove it and approve again")
    return data


def save_approval(paths: LandPaths, name: str, spec_sha: str, tip: str) -> Approval:
    try:
        by = getpass.getuser()
    except (KeyError, OSError):
        by = str(os.getuid())
    a = Approval(name=name, spec_sha=spec_sha, tip=tip, approved_at=time.time(), by=by)
    jsonfile.write_atomic(paths.approval(name), a.__dict__)
    return a


def load_approval(paths: LandPaths, name: str) -> Approval | None:
    p = paths.approval(name)
    if not p.exists():
        return None
    d = _read(p, "approval")
    try:
        return Approval(name=str(d["name"]), spec_sha=str(d["spec_sha"]), tip=str(d["tip"]),
                        approved_at=float(d.get("approved_at", 0)), by=str(d.get("by", "")))
    except (KeyError, TypeError, ValueError):
        raise NevError(f"{p}: approval is missing name, spec_sha or tip; approve the track again") from None


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


def write_pending(paths: LandPaths, name: str, data: dict[str, Any]) -> None:
    jsonfile.write_atomic(paths.pending(name), data)
    fd = os.open(paths.pending(name).parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_pending(paths: LandPaths, name: str) -> dict[str, Any] | None:
    p = paths.pending(name)
    return _read(p, "land-pending marker") if p.exists() else None


def pending_names(paths: LandPaths) -> list[str]:
    d = paths.base / "land-pending"
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def drop_pending(paths: LandPaths, name: str) -> None:
    paths.pending(name).unlink(missing_ok=True)
