"""The inventory snapshot as typed records: one family shared by its writers (`nev rig collect`,
`nev rig probe`) and its readers (`nev rig status`, the dashboard, the metrics, `nev rig
capacity`, the Ansible export, and the job's inventory check, `bench/readiness.py`: it lives in
the foundation so that `bench`, which may not import `rig`, reads the same record).

Parsed once at the edge: the snapshot file (`Snapshot.from_json`, from `inventoryfile.read` for
the writers and `status.load` for the readers) and a host's served inventory on the wire
(`HostDoc.from_json`, from `collect.fetch`). A field of the wrong type is refused in one line
naming the file (or URL) and the dotted field (`lanes.base.jsonfile.Fields`); past the edge,
code sees attributes. The JSON stays the one docs/inventory.md describes: `to_json` writes the
keys every version wrote, and keys this version does not know are kept as read (`extra`), so a
newer writer's fields survive an older one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from lanes.base.jsonfile import Fields

SCHEMA = 1

# `object` below is a JSON value passed through as read (a host's `gpus`, `serving`, `software`; a
# key this version does not know): never read here, written back unchanged.


def _opt_str(f: Fields, obj: dict, key: str, where: str) -> str | None:
    v: str | None = f.get(obj, key, str, where, required=False)
    return v


def _opt_num(f: Fields, obj: dict, key: str, where: str) -> float | None:
    v: float | None = f.get(obj, key, (int, float), where, required=False)
    return v


def _opt_int(f: Fields, obj: dict, key: str, where: str) -> int | None:
    v: int | None = f.get(obj, key, int, where, required=False)
    return v


def _rest(obj: dict, known: tuple[str, ...]) -> dict[str, object]:
    return {str(k): v for k, v in obj.items() if k not in known}


# -- a host's served inventory (the wire) ------------------------------------------------------

@dataclass(frozen=True)
class HostDoc:
    """What a host's `nev rig advertise` serves at /inventory (already masked, secret-named fields
    dropped), as stored under the snapshot's `hosts.NAME.inventory`. The fields nev reads are
    attributes; `doc` is the document as served, written back unchanged (the Ansible export
    passes its `gpus`, `serving`, `models`, `software` through)."""

    doc: dict[str, object]
    name: str | None = None
    role: str | None = None
    roles: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    address: str | None = None
    hardware_class: str | None = None
    ssh_user: str | None = None
    ssh_port: int | None = None

    @classmethod
    def from_json(cls, value: object, f: Fields, where: str) -> HostDoc:
        obj = f.obj(value, where or "(top level)")
        ssh = f.get(obj, "ssh", dict, where, required=False)
        sw = f"{where}.ssh" if where else "ssh"
        return cls(
            doc=obj,
            name=_opt_str(f, obj, "name", where),
            role=_opt_str(f, obj, "role", where) or None,
            roles=tuple(f.str_list(obj, "roles", where)),
            pools=tuple(f.str_list(obj, "pools", where)),
            address=_opt_str(f, obj, "address", where) or None,
            hardware_class=_opt_str(f, obj, "hardware_class", where) or None,
            ssh_user=_opt_str(f, ssh, "user", sw) if ssh is not None else None,
            ssh_port=_opt_int(f, ssh, "port", sw) if ssh is not None else None,
        )

    def to_json(self) -> dict[str, object]:
        return self.doc


# -- hosts -------------------------------------------------------------------------------------

HOST_KEYS = ("name", "url", "addresses", "role", "sources", "status", "error", "seen_after_s",
             "checked_at", "inventory")


@dataclass
class Host:
    """One host the collector found (mDNS or a seed): up only if its inventory answered now."""

    name: str
    url: str | None = None
    addresses: list[str] = field(default_factory=list)
    role: str | None = None
    sources: list[str] = field(default_factory=list)
    status: str = "down"                # up | down
    error: str | None = None            # why down, as the collector said it
    seen_after_s: float | None = None
    checked_at: str | None = None
    inventory: HostDoc | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return self.status == "up"

    @classmethod
    def from_json(cls, value: object, f: Fields, name: str) -> Host:
        where = f"hosts.{name}"
        obj = f.obj(value, where)
        inv = obj.get("inventory")
        return cls(
            name=_opt_str(f, obj, "name", where) or name,
            url=_opt_str(f, obj, "url", where),
            addresses=f.str_list(obj, "addresses", where),
            role=_opt_str(f, obj, "role", where),
            sources=f.str_list(obj, "sources", where),
            status=_opt_str(f, obj, "status", where) or "down",
            error=_opt_str(f, obj, "error", where),
            seen_after_s=_opt_num(f, obj, "seen_after_s", where),
            checked_at=_opt_str(f, obj, "checked_at", where),
            inventory=None if inv is None else HostDoc.from_json(inv, f, f"{where}.inventory"),
            extra=_rest(obj, HOST_KEYS),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "url": self.url,
            "addresses": list(self.addresses),
            "role": self.role,
            "sources": list(self.sources),
            "status": self.status,
            "error": self.error,
            "seen_after_s": self.seen_after_s,
            "checked_at": self.checked_at,
            "inventory": None if self.inventory is None else self.inventory.to_json(),
            **self.extra,
        }


# -- aliases -----------------------------------------------------------------------------------

UNKNOWN = "unknown"
RETIRED = "retired"
ALIAS_KEYS = ("pool", "provider", "max_inflight", "tier", "retired", "keys", "health", "status",
              "since", "fails", "oks", "pool_hosts", "last_probe", "latency_s", "last_answer",
              "last_answer_latency_s", "last_error")


@dataclass
class AliasState:
    """One declared alias: its declared fields (refreshed from bench/folknet.json by every writer)
    and what the probe found (status with hysteresis, since when, the last answer and error)."""

    pool: str | None = None
    provider: str | None = None
    max_inflight: int | None = None
    tier: str | None = None
    retired: str | None = None
    keys: list[str] = field(default_factory=list)
    health: str | None = None
    status: str = UNKNOWN               # unknown | ready | failing | retired
    since: str | None = None
    fails: int = 0
    oks: int = 0
    pool_hosts: list[str] | None = None     # the collector's hosts of the pool (None: none yet)
    last_probe: str | None = None
    latency_s: float | None = None
    last_answer: str | None = None
    last_answer_latency_s: float | None = None
    last_error: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @classmethod
    def from_json(cls, value: object, f: Fields, name: str) -> AliasState:
        where = f"aliases.{name}"
        obj = f.obj(value, where)
        given = obj.get("pool_hosts") is not None
        pool_hosts = f.str_list(obj, "pool_hosts", where) if given else None
        return cls(
            pool=_opt_str(f, obj, "pool", where),
            provider=_opt_str(f, obj, "provider", where),
            max_inflight=_opt_int(f, obj, "max_inflight", where),
            tier=_opt_str(f, obj, "tier", where),
            retired=_opt_str(f, obj, "retired", where),
            keys=f.str_list(obj, "keys", where),
            health=_opt_str(f, obj, "health", where),
            status=_opt_str(f, obj, "status", where) or UNKNOWN,
            since=_opt_str(f, obj, "since", where),
            fails=_opt_int(f, obj, "fails", where) or 0,
            oks=_opt_int(f, obj, "oks", where) or 0,
            pool_hosts=pool_hosts,
            last_probe=_opt_str(f, obj, "last_probe", where),
            latency_s=_opt_num(f, obj, "latency_s", where),
            last_answer=_opt_str(f, obj, "last_answer", where),
            last_answer_latency_s=_opt_num(f, obj, "last_answer_latency_s", where),
            last_error=_opt_str(f, obj, "last_error", where),
            extra=_rest(obj, ALIAS_KEYS),
        )

    def to_json(self) -> dict[str, object]:
        """The declared fields, status, since and the counts always; what a probe or the collector
        adds only once it did (a never-probed alias has no `last_probe`, as before)."""
        out: dict[str, object] = {
            "pool": self.pool,
            "provider": self.provider,
            "max_inflight": self.max_inflight,
            "tier": self.tier,
            "retired": self.retired,
            "keys": list(self.keys),
            "health": self.health,
            "status": self.status,
            "since": self.since,
            "fails": self.fails,
            "oks": self.oks,
        }
        if self.pool_hosts is not None:
            out["pool_hosts"] = list(self.pool_hosts)
        if self.last_probe is not None:
            out.update(last_probe=self.last_probe, latency_s=self.latency_s)
        if self.last_answer is not None:
            out.update(last_answer=self.last_answer,
                       last_answer_latency_s=self.last_answer_latency_s)
        if self.last_error is not None:
            out["last_error"] = self.last_error
        out.update(self.extra)
        return out


# -- the snapshot ------------------------------------------------------------------------------

SNAPSHOT_KEYS = ("schema", "written_at", "collected_at", "probed_at", "declared_file", "hosts",
                 "aliases")


@dataclass
class Snapshot:
    """The whole snapshot file (NEV_INVENTORY)."""

    schema: int | None = SCHEMA
    written_at: str | None = None
    collected_at: str | None = None
    probed_at: str | None = None
    declared_file: str | None = None
    hosts: dict[str, Host] = field(default_factory=dict)
    aliases: dict[str, AliasState] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)

    @classmethod
    def from_json(cls, value: object, label: str) -> Snapshot:
        """A decoded snapshot (ConfigError naming `label` and the field otherwise). A section that
        is not an object reads as empty, as every reader did."""
        f = Fields(label)
        obj = f.obj(value, "(top level)")
        hosts, aliases = (v if isinstance(v := obj.get(k), dict) else {} for k in ("hosts", "aliases"))
        return cls(
            schema=_opt_int(f, obj, "schema", ""),
            written_at=_opt_str(f, obj, "written_at", ""),
            collected_at=_opt_str(f, obj, "collected_at", ""),
            probed_at=_opt_str(f, obj, "probed_at", ""),
            declared_file=_opt_str(f, obj, "declared_file", ""),
            hosts={str(n): Host.from_json(h, f, str(n)) for n, h in hosts.items()},
            aliases={str(n): AliasState.from_json(a, f, str(n)) for n, a in aliases.items()},
            extra=_rest(obj, SNAPSHOT_KEYS),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "schema": self.schema,
            "written_at": self.written_at,
            "collected_at": self.collected_at,
            "probed_at": self.probed_at,
            "declared_file": self.declared_file,
            "hosts": {n: h.to_json() for n, h in self.hosts.items()},
            "aliases": {n: a.to_json() for n, a in self.aliases.items()},
            **self.extra,
        }


# -- `nev rig status --json` (rig/inventory/status.py builds it) ---------------------------------

class RowJson(TypedDict):
    """One alias's row of `nev rig status --json` (`status.rows`)."""

    alias: str
    status: str
    held_for_s: float | None
    since: str | None
    last_answer: str | None
    last_answer_ago_s: float | None
    latency_s: float | None
    last_error: str | None
    retired: str | None
    pool: str | None
    max_inflight: NotRequired[int | None]      # the dashboard's, from the snapshot's alias


class HostRowJson(TypedDict):
    name: str
    status: str
    role: str | None
    url: str | None
    error: str | None


class Summary(TypedDict):
    """`nev rig status --json`: the snapshot as people read it (built by `status.summary`,
    printed, and read by `status.render`, the metrics, the dashboard and `nev doctor`)."""

    snapshot: str
    written_at: str | None
    probed_at: str | None
    snapshot_age_s: float | None
    collected_at: str | None
    collected_age_s: float | None
    aliases: list[RowJson]
    hosts: list[HostRowJson]
    # the serving replicas (`rig.serving.state.ReplicaState.to_json`), or why HAProxy was not read
    replicas: NotRequired[list[dict[str, object]] | str]
