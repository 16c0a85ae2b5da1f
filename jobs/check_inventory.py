"""`nev job check inventory`: the shell around bench.readiness (read, check, print).

The job runner calls `run_check` and keeps `bench.readiness.report(reasons)` in
its state (`state.json` -> `inventory`); exit 3 is resent later, exit 10 never is.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench import folknet, readiness
from bench.readiness import Reason
from jobs import manifest as manifest_file
from lanes.base import settings
from lanes.base.ui import emit_json, info


def run_check(manifest: Path, snapshot: Path, declared: Path | None = None) -> list[Reason]:
    """Every reason the job may not start now (empty: every model it needs is ready)."""
    needs = readiness.needs_from_manifest(manifest_file.read(manifest), manifest)
    decl = folknet.load(declared or folknet.default_path())
    snap = readiness.read_snapshot(snapshot)
    return readiness.check(needs, snap, decl, dt.datetime.now(dt.UTC),
                                 float(settings.get_int(settings.INVENTORY_MAX_AGE)))


def run(manifest: Path, snapshot: Path, declared: Path | None, as_json: bool) -> int:
    reasons = run_check(manifest, snapshot, declared)
    for r in reasons:
        info(f"inventory: {'refused' if r.permanent else 'not ready'}: {r.message}")
    code = readiness.exit_code(reasons)
    if as_json:
        emit_json(readiness.report(reasons))
    elif code == 0:
        info(f"inventory: every model of {manifest} is ready")
    return code
