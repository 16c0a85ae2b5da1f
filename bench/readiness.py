"""The inventory check a job makes before its first stage: are its models ready right now?

Pure: given what the manifest needs, the inventory snapshot (as read) and the
declared file, it returns every reason the job cannot start. A reason is either
transient (exit 3: the model is not ready yet, the snapshot is stale or missing;
resend later) or permanent (exit 10: the model is retired or undeclared, its
provider is not declared, or the job's key may not use it; it never clears by
itself). All reasons are collected, never only the first.

The snapshot fields read here (`probed_at`, `aliases.<name>.status|since|
last_error`) are written by `rig/inventory/inventoryfile.py` and read as the typed record every
reader shares (`lanes.base.inventory_record.Snapshot`); docs/inventory.md describes the format.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from bench.folknet import Folknet
from lanes.base import jsonfile
from lanes.base.errors import ConfigError
from lanes.base.exitcodes import Exit
from lanes.base.inventory_record import Snapshot as Inventory

READY = "ready"


@dataclass(frozen=True)
class Need:
    """One model a stage needs, with the provider the stage names (if any)."""

    alias: str
    provider: str | None = None
    stage: str | None = None


class ReasonKind(StrEnum):
    """Why a job may not start now. Transient kinds clear by themselves (exit 3: resend later);
    permanent ones never do (exit 10)."""

    SNAPSHOT_MISSING = "snapshot-missing"
    SNAPSHOT_UNPROBED = "snapshot-unprobed"
    SNAPSHOT_STALE = "snapshot-stale"
    NOT_PROBED = "not-probed"
    NOT_READY = "not-ready"
    PROVIDER_UNDECLARED = "provider-undeclared"
    ALIAS_UNDECLARED = "alias-undeclared"
    ALIAS_RETIRED = "alias-retired"
    PROVIDER_NOT_ALLOWED = "provider-not-allowed"
    KEY_NOT_ALLOWED = "key-not-allowed"

    @property
    def permanent(self) -> bool:
        return self in PERMANENT


PERMANENT = frozenset({ReasonKind.PROVIDER_UNDECLARED, ReasonKind.ALIAS_UNDECLARED, ReasonKind.ALIAS_RETIRED,
                       ReasonKind.PROVIDER_NOT_ALLOWED, ReasonKind.KEY_NOT_ALLOWED})


@dataclass(frozen=True)
class Reason:
    kind: ReasonKind
    message: str
    need: Need | None = None   # the model (or provider) it is about; None: the snapshot's as a whole

    @property
    def permanent(self) -> bool:
        return self.kind.permanent

    @property
    def alias(self) -> str | None:
        return (self.need.alias or None) if self.need else None

    @property
    def stage(self) -> str | None:
        return self.need.stage if self.need else None

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind.value, "permanent": self.permanent, "message": self.message,
                "alias": self.alias, "stage": self.stage}


@dataclass(frozen=True)
class Needs:
    models: list[Need]
    key: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """What the check reads: None when the file is missing or unreadable (with why)."""

    path: str
    data: Inventory | None
    problem: str | None = None


def parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def needs_from_manifest(data: object, where: Path | str) -> Needs:
    """The models (and providers) a manifest's stages need, and the gateway key it uses.

    Accepted: top-level `key` (the key name, e.g. "batch"), top-level `models`,
    and per stage `models` (alias names or `{alias, provider}`) and `providers`.
    """
    f = jsonfile.Fields(where)
    top = f.obj(data, "(top level)")
    key = f.get(top, "key", str, "", required=False)
    out: list[Need] = []

    def models_of(obj: dict, field: str, stage: str | None) -> None:
        providers = f.str_list(obj, "providers", field)
        raw = f.get(obj, "models", list, field, required=False, default=[])
        for i, item in enumerate(raw):
            here = f"{field}.models[{i}]" if field else f"models[{i}]"
            if isinstance(item, str):
                out.append(Need(item, None, stage))
            elif isinstance(item, dict):
                alias = f.get(item, "alias", str, here)
                out.append(Need(alias, f.get(item, "provider", str, here, required=False), stage))
            else:
                raise f.fail(here, "must be an alias name or {alias, provider}")
        for p in providers:
            out.append(Need("", p, stage))

    models_of(top, "", None)
    stages = f.get(top, "stages", list, "", required=False, default=[])
    for i, st in enumerate(stages):
        where_i = f"stages[{i}]"
        st = f.obj(st, where_i)
        name = st.get("name") if isinstance(st.get("name"), str) else where_i
        models_of(st, where_i, name)
    return Needs(models=out, key=key)


def read_snapshot(path: Path) -> Snapshot:
    """Read the snapshot; a missing or unreadable file is a transient reason, not an error."""
    if not os.path.lexists(path):
        return Snapshot(str(path), None, "missing")
    try:
        data = jsonfile.load(path, "inventory snapshot")
    except ConfigError as e:
        return Snapshot(str(path), None, f"unreadable ({e.message.removeprefix(str(path) + ': ')})")
    if not isinstance(data, dict):
        return Snapshot(str(path), None, "not a JSON object")
    try:
        return Snapshot(str(path), Inventory.from_json(data, str(path)))
    except ConfigError as e:
        return Snapshot(str(path), None, f"unreadable ({e.message.removeprefix(str(path) + ': ')})")


def _fmt_age(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def check(needs: Needs, snap: Snapshot, declared: Folknet, now: dt.datetime,
          max_age_s: float = 900.0) -> list[Reason]:
    """Every reason the job may not start now; empty when every model it needs is ready."""
    reasons: list[Reason] = []
    today = now.date()

    if snap.data is None:
        reasons.append(Reason(ReasonKind.SNAPSHOT_MISSING,
                              f"inventory snapshot {snap.path} is {snap.problem}: run `nev rig probe` on the lane"))
    else:
        probed = parse_time(snap.data.probed_at)
        if probed is None:
            reasons.append(Reason(ReasonKind.SNAPSHOT_UNPROBED,
                                  f"inventory snapshot {snap.path} has no probe round yet: run `nev rig probe`"))
        else:
            age = (now - probed).total_seconds()
            if age > max_age_s:
                reasons.append(Reason(ReasonKind.SNAPSHOT_STALE,
                                      f"inventory snapshot {snap.path} is {_fmt_age(age)} old "
                                      f"(limit {_fmt_age(max_age_s)}): is `nev rig probe --every` running?"))

    seen: set[Need] = set()
    for need in needs.models:
        if need in seen:
            continue
        seen.add(need)
        where = f" (stage {need.stage})" if need.stage else ""
        if need.provider is not None and need.provider not in declared.providers:
            reasons.append(Reason(ReasonKind.PROVIDER_UNDECLARED,
                                  f"provider {need.provider}{where} is not declared in {declared.path}", need))
        if not need.alias:
            continue
        alias = declared.aliases.get(need.alias)
        if alias is None:
            reasons.append(Reason(ReasonKind.ALIAS_UNDECLARED,
                                  f"model {need.alias}{where} is not declared in {declared.path}",
                                  need))
            continue
        if alias.is_retired(today):
            reasons.append(Reason(ReasonKind.ALIAS_RETIRED,
                                  f"model {need.alias}{where} was retired on {alias.retired}",
                                  need))
            continue
        if alias.provider not in declared.providers:
            reasons.append(Reason(ReasonKind.PROVIDER_UNDECLARED,
                                  f"model {need.alias}{where}: its provider {alias.provider} is not declared "
                                  f"in {declared.path}", need))
        if need.provider is not None and need.provider != alias.provider:
            reasons.append(Reason(ReasonKind.PROVIDER_NOT_ALLOWED,
                                  f"model {need.alias}{where} is served by {alias.provider}, "
                                  f"not by the provider {need.provider} the stage allows",
                                  need))
        if needs.key is not None and needs.key not in alias.keys:
            reasons.append(Reason(ReasonKind.KEY_NOT_ALLOWED,
                                  f"model {need.alias}{where} is not allowed for key {needs.key} "
                                  f"(allowed: {', '.join(alias.keys) or 'none'})", need))
        if snap.data is None:
            continue
        st = snap.data.aliases.get(need.alias)
        status = st.status if st is not None else None
        if status == READY:
            continue
        if st is None or status in (None, "unknown"):
            reasons.append(Reason(ReasonKind.NOT_PROBED,
                                  f"model {need.alias}{where} has not been probed yet", need))
            continue
        since = parse_time(st.since)
        held = f" for {_fmt_age((now - since).total_seconds())}" if since else ""
        err = st.last_error
        reasons.append(Reason(ReasonKind.NOT_READY,
                              f"model {need.alias}{where} is {status}{held}"
                              + (f": {err}" if err else ""), need))
    return reasons


def exit_code(reasons: list[Reason]) -> Exit:
    if not reasons:
        return Exit.OK
    return Exit.REFUSED if any(r.permanent for r in reasons) else Exit.UNAVAILABLE


def report(reasons: list[Reason]) -> dict[str, object]:
    """The JSON form kept in the job's state (`state.json` -> `inventory`)."""
    code = exit_code(reasons)
    outcome = {Exit.OK: "ready", Exit.UNAVAILABLE: "not-ready", Exit.REFUSED: "refused"}[code]
    return {"outcome": outcome, "exit": code, "reasons": [r.to_json() for r in reasons]}
