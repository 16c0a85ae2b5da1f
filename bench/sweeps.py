"""Which throughput sweeps may size a batch: a sweep measured before the last change to the
serving configuration is stale and is not used (pure; the change log is read at the edge).

A change log entry (`lanes.base.changelog`) is a change to the serving configuration when:

| entry heading | a serving change? |
|---|---|
| `restore LABEL [...]` | yes: the roles' files were put back |
| `drift --fix ...` | yes: the gateway's aliases were rewritten |
| `drain`, `stop`, `start`, `restart ROLE` | yes: the replicas serving changed, or reloaded |
| `snapshot LABEL`, `changed since PREV: FILES` | yes, no later than the snapshot |
| `log worked` or `log failed` naming a `role:` | yes: a person changed that role by hand |
| anything else (`land`, a snapshot that changed nothing, a `log` with no role) | no |

A sweep is stale when its `measured_at` is at or before the last serving change (the change log
keeps seconds: the same second is not after), or when it has no `measured_at` and there is a
serving change at all. With no serving change on record every sweep is fresh.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lanes.base.changelog import Entry
from lanes.base.isotime import age as _age
from lanes.base.isotime import parse as parse_time

SERVING_VERBS = frozenset({"restore", "drift", "drain", "stop", "start", "restart"})
#: the option that accepts a stale sweep (`nev batch plan`, `nev batch run`)
ACCEPT_OPTION = "--accept-stale-sweeps"


@dataclass(frozen=True)
class Change:
    """One change to the serving configuration: when, and what the change log says of it."""

    at: dt.datetime
    what: str

    def to_json(self) -> dict[str, str]:
        return {"at": iso(self.at), "what": self.what}


@dataclass(frozen=True)
class Stale:
    """A sweep not used: its alias, when it was measured (None: unknown), the change after it."""

    alias: str
    measured_at: dt.datetime | None
    change: Change

    def age_s(self, now: dt.datetime) -> float | None:
        return None if self.measured_at is None else (now - self.measured_at).total_seconds()

    def line(self, now: dt.datetime, accepted: bool = False) -> str:
        age = self.age_s(now)
        when = (
            "with no measured_at"
            if self.measured_at is None
            else f"measured {iso(self.measured_at)} ({_age(age)} old)"
        )
        head = (
            f"the sweep of {self.alias} {when} is older than the serving change of "
            f"{iso(self.change.at)} ({self.change.what})"
        )
        if accepted:
            return f"{head}: used anyway ({ACCEPT_OPTION})"
        return (
            f"{head}: not used to size the batch; refresh it with `nev rig throughput "
            f"{self.alias}`, or pass {ACCEPT_OPTION} to use it"
        )

    def to_json(self, now: dt.datetime, accepted: bool = False) -> dict[str, object]:
        age = self.age_s(now)
        return {
            "alias": self.alias,
            "measured_at": None if self.measured_at is None else iso(self.measured_at),
            "age_s": None if age is None else round(age),
            "changed": self.change.to_json(),
            "used": accepted,
            "refresh": f"nev rig throughput {self.alias}",
        }


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def serving_change(e: Entry) -> Change | None:
    """The entry as a serving change (see the module's table), or None."""
    at = parse_time(e.time)
    verb = e.heading.split(" ", 1)[0]
    if at is None:
        return None
    if verb in SERVING_VERBS:
        return Change(at, e.heading)
    if verb == "snapshot":
        changed = next((ln for ln in e.lines if ln.startswith("changed since ")), None)
        if changed and not changed.endswith(": owners/outputs only"):
            return Change(at, f"{e.heading}: {changed}")
    if verb == "log":
        role = next((ln for ln in e.lines if ln.startswith("role: ")), None)
        if role:
            what = next((ln[len("what: ") :] for ln in e.lines if ln.startswith("what: ")), "")
            return Change(at, f"{e.heading} by {e.who} ({role}): {what}")
    return None


def last_change(entries: Iterable[Entry]) -> Change | None:
    """The latest serving change of the change log (None: none on record)."""
    changes = [c for c in map(serving_change, entries) if c is not None]
    return max(changes, key=lambda c: c.at) if changes else None


def stale(sweeps: Mapping[str, Mapping[str, object]], change: Change | None) -> dict[str, Stale]:
    """The sweeps (by alias) measured at or before `change`, or with no time when there is one."""
    if change is None:
        return {}
    out = {}
    for alias, sw in sweeps.items():
        at = parse_time(sw.get("measured_at"))
        if at is None or at <= change.at:
            out[alias] = Stale(alias, at, change)
    return out
