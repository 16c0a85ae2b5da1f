"""Cleaning up after jobs on the lane: one job's folder, and deleted job refs in the lane mirror.

The lane mirror (`<lane root>/.git-mirror`) fetches `+refs/*:refs/*` without
pruning, so it keeps every `job/*` and `result/*` branch after the forge deletes
it. `prune_mirror` fetches and prunes those two namespaces only; every other ref
stays as it is. Git's messages can carry the forge URL (with its credential) and
are masked before they are shown.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from dagu.service import LaneDagu
from lanes.agent import layout
from lanes.base.errors import NevError, UsageError
from lanes.base.mask import mask

_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
NAMESPACES = ("job", "result")


def check_job_name(name: str) -> str:
    if not _JOB_NAME.match(name) or ".." in name:
        raise UsageError(f"job name {name!r}: use letters, digits, '_', '-' or '.' (no '/' or '..'); nothing removed")
    return name


def clean_job(ld: LaneDagu, name: str) -> bool:
    path = posixpath.join(ld.layout.jobs_work, check_job_name(name))
    q = shlex.quote(path)
    r = ld.conn.run(f"if [ -e {q} ]; then rm -rf -- {q} && echo removed; fi", check=True)
    return "removed" in r.out


def mirror_path(ld: LaneDagu) -> str:
    return layout.Root(ld.lane.root).mirror


def refspecs() -> list[str]:
    return [f"+refs/heads/{ns}/*:refs/heads/{ns}/*" for ns in NAMESPACES]


def _refs(ld: LaneDagu, mirror: str) -> set[str]:
    pats = " ".join(shlex.quote(f"refs/heads/{ns}/") for ns in NAMESPACES)
    r = ld.conn.run(f"git -C {shlex.quote(mirror)} for-each-ref --format='%(refname)' {pats}", check=True)
    return {ln.strip() for ln in r.out.splitlines() if ln.strip()}


def prune_mirror(ld: LaneDagu) -> list[str]:
    """Fetch and prune job/* and result/*; the refs removed."""
    mirror = mirror_path(ld)
    q = shlex.quote(mirror)
    if ld.conn.run(f"test -d {q}/objects").exit_status != 0:
        raise NevError(f"{ld.lane.label} has no lane mirror at {mirror}; run a lane command first to create it")
    before = _refs(ld, mirror)
    specs = " ".join(shlex.quote(s) for s in refspecs())
    r = ld.conn.run(f"git -C {q} fetch --prune --no-tags origin {specs}", timeout=600)
    if r.exit_status != 0:
        last = (r.err.strip().splitlines() or ["fetch failed"])[-1]
        raise NevError(f"prune-mirror on {ld.lane.label}: git fetch failed: {mask(last)}")
    after = _refs(ld, mirror)
    return sorted(before - after)
