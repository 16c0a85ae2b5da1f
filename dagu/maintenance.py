"""Cleaning up after jobs on the lane: one job's folder, and deleted job refs in the lane mirror.

The lane mirror (`<lane root>/.git-mirror`, fetched by gates from the forge URL with no
remote) and the job mirror (`~/dagu/job-mirror.git`, fetched by the job workflow's prepare)
keep every `job/*` and `result/*` branch after the forge deletes it. `prune_mirror` asks the
forge from the lane (`lanes.sweep.prune_refs`, the lane agent) and removes, in both, the
branches of those two namespaces it no longer has; every other ref stays as it is.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from dagu.service import LaneDagu
from lanes import sweep
from lanes.agent import layout
from lanes.base.errors import UsageError
from lanes.base.gitrun import Repo
from lanes.base.ui import info

_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_job_name(name: str) -> str:
    if not _JOB_NAME.match(name) or ".." in name:
        raise UsageError(f"job name {name!r}: use letters, digits, '_', '-' or '.' (no '/' or '..'); nothing removed")
    return name


def clean_job(ld: LaneDagu, name: str) -> bool:
    path = posixpath.join(ld.layout.jobs_work, check_job_name(name))
    q = shlex.quote(path)
    r = ld.conn.run(f"if [ -e {q} ]; then rm -rf -- {q} && echo removed; fi", check=True)
    return "removed" in r.out


def mirrors(ld: LaneDagu) -> list[str]:
    """The lane's two mirrors: the gate's (`<lane root>/.git-mirror`) and the job workflow's."""
    return [layout.Root(ld.lane.root).mirror, ld.layout.job_mirror]


def prune_mirror(ld: LaneDagu, repo: Repo | None = None) -> list[str]:
    """Remove the job/* and result/* branches the forge no longer has from both mirrors; the refs
    removed, each as `<mirror>: <ref>`. A mirror not made yet is said on one line."""
    pruned = []
    for mirror, got in sweep.prune_refs(ld.conn, ld.lane, mirrors(ld), repo).items():
        if got.missing:
            info(f"prune-mirror: {ld.lane.label} has no mirror at {mirror} yet; nothing to prune there")
            continue
        pruned += [f"{mirror}: {ref}" for ref in got.pruned]
        for ref, why in got.kept.items():
            info(f"prune-mirror: kept {mirror}: {ref}: {why}")
    return pruned
