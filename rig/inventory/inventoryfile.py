"""The inventory snapshot (`NEV_INVENTORY`): one JSON file written by collect and probe.

Both writers read, change and write it under an exclusive lock (a `.lock` file
beside it) and write atomically, so a reader (the job's inventory check, `nev rig
status`) never sees a half-written file and one writer never drops the other's
section. Format (docs/inventory.md):

    {"schema": 1, "written_at": ISO, "collected_at": ISO|null, "probed_at": ISO|null,
     "declared_file": PATH,
     "hosts": {NAME: {url, addresses, role, sources, status: up|down, error, inventory, ...}},
     "aliases": {ALIAS: {pool, provider, max_inflight, tier, retired, keys, health,
                         status: unknown|ready|failing|retired, since, last_answer,
                         latency_s, last_error, last_probe, fails, oks}}}
"""

from __future__ import annotations

import datetime as dt
import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.folknet import Folknet
from lanes.base import jsonfile, settings
from lanes.base.errors import ConfigError
from lanes.base.ui import info

SCHEMA = 1

DECLARED_FIELDS = ("pool", "provider", "max_inflight", "tier", "retired", "keys", "health")


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def default_path() -> Path:
    return settings.path(settings.INVENTORY)


def empty() -> dict[str, Any]:
    return {"schema": SCHEMA, "written_at": None, "collected_at": None, "probed_at": None,
            "declared_file": None, "hosts": {}, "aliases": {}}


def read(path: Path) -> dict[str, Any]:
    """The snapshot, or an empty one when there is none yet. A corrupt one is started over."""
    try:
        data = jsonfile.load(path, "inventory snapshot", missing=None)
    except ConfigError as e:
        info(f"inventory snapshot {path} is unreadable ({e.message}); starting a new one")
        return empty()
    if data is None:
        return empty()
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        info(f"inventory snapshot {path} has another format; starting a new one")
        return empty()
    base = empty()
    base.update(data)
    for section in ("hosts", "aliases"):
        if not isinstance(base.get(section), dict):
            base[section] = {}
    return base


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def update(path: Path, change: Callable[[dict[str, Any]], None], now: dt.datetime | None = None) -> dict[str, Any]:
    """Read, change in place, stamp and write the snapshot atomically, under the lock."""
    with _locked(path):
        snap = read(path)
        change(snap)
        snap["written_at"] = iso(now or now_utc())
        jsonfile.write_atomic(path, snap)
        return snap


def merge_declared(snap: dict[str, Any], declared: Folknet, today: dt.date) -> None:
    """Make the aliases section follow the declared file: declared fields refreshed, probe
    fields kept, aliases no longer declared dropped, retired ones marked retired."""
    old = snap.get("aliases") or {}
    new: dict[str, Any] = {}
    for name, a in declared.aliases.items():
        entry = dict(old.get(name) or {})
        entry.update({"pool": a.pool, "provider": a.provider, "max_inflight": a.max_inflight,
                      "tier": a.tier, "retired": a.retired, "keys": list(a.keys), "health": a.health})
        if a.is_retired(today):
            entry["status"] = "retired"
        elif entry.get("status") in (None, "retired"):
            entry.update(status="unknown", since=None, fails=0, oks=0)
        new[name] = entry
    snap["aliases"] = new
    snap["declared_file"] = str(declared.path)
