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

from bench.folknet import Folknet
from lanes.base import jsonfile, settings
from lanes.base.errors import ConfigError
from lanes.base.inventory_record import RETIRED, SCHEMA, UNKNOWN, AliasState, Snapshot
from lanes.base.ui import info

DECLARED_FIELDS = ("pool", "provider", "max_inflight", "tier", "retired", "keys", "health")


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def default_path() -> Path:
    return settings.path(settings.INVENTORY)


def empty() -> Snapshot:
    return Snapshot()


def read(path: Path) -> Snapshot:
    """The snapshot, or an empty one when there is none yet. A corrupt one (not JSON, or a field
    of the wrong type) is started over."""
    try:
        data = jsonfile.load(path, "inventory snapshot", missing=None)
        if data is None:
            return empty()
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            info(f"inventory snapshot {path} has another format; starting a new one")
            return empty()
        return Snapshot.from_json(data, str(path))
    except ConfigError as e:
        info(f"inventory snapshot {path} is unreadable ({e.message}); starting a new one")
        return empty()


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


def update(path: Path, change: Callable[[Snapshot], None],
           now: dt.datetime | None = None) -> Snapshot:
    """Read, change in place, stamp and write the snapshot atomically, under the lock."""
    with _locked(path):
        snap = read(path)
        change(snap)
        snap.written_at = iso(now or now_utc())
        jsonfile.write_atomic(path, snap.to_json())
        return snap


def merge_declared(snap: Snapshot, declared: Folknet, today: dt.date) -> None:
    """Make the aliases section follow the declared file: declared fields refreshed, probe
    fields kept, aliases no longer declared dropped, retired ones marked retired."""
    new: dict[str, AliasState] = {}
    for name, a in declared.aliases.items():
        entry = snap.aliases.get(name) or AliasState(status="")
        entry.pool, entry.provider, entry.max_inflight = a.pool, a.provider, a.max_inflight
        entry.tier, entry.retired, entry.health = a.tier, a.retired, a.health
        entry.keys = list(a.keys)
        if a.is_retired(today):
            entry.status = RETIRED
        elif entry.status in ("", RETIRED):
            entry.status, entry.since, entry.fails, entry.oks = UNKNOWN, None, 0, 0
        new[name] = entry
    snap.aliases = new
    snap.declared_file = str(declared.path)
