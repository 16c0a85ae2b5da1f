"""The rig file's `serving` section: per serving role, its HAProxy backend, aliases and replicas.

    "serving": {"flashnext": {"proxy": "proxy", "backend": "be_flashnext", "aliases": ["qwen3.8-flash-next"],
                              "start_timeout": 600,
                              "replicas": {"r0": {"host": "admin@arm-node-1", "server": "node1", "sudo": true,
                                                  "start": "/usr/bin/systemctl start folknet-flashnext",
                                                  "stop": "/usr/bin/systemctl stop folknet-flashnext",
                                                  "status": "/usr/bin/systemctl is-active --quiet folknet-flashnext"}}}}

A replica is what starts and stops as one: one unit on one host. A tensor-parallel pair is one
replica whose `halves` name its nodes (one oneshot unit starts both); a half is never started or
stopped alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lanes.base import jsonfile
from lanes.base.errors import UsageError
from lanes.base.ssh import SshError, Target

DEFAULT_START_TIMEOUT = 120.0
REPLICA_FIELDS = {"host", "server", "start", "stop", "status", "halves", "sudo"}


@dataclass(frozen=True)
class Replica:
    role: str
    name: str
    host: str                 # [user@]host[:port], reached through the jump host
    server: str               # its server line in the role's backend
    start: str
    stop: str
    status: str               # exits 0 while the unit is active and healthy
    halves: tuple[str, ...] = ()
    sudo: bool = False        # the host's admin account runs the unit commands with `sudo -n`

    @property
    def ref(self) -> str:
        return f"{self.role}/{self.name}"

    def command(self, which: str) -> str:
        cmd = {"start": self.start, "stop": self.stop, "status": self.status}[which]
        return f"sudo -n {cmd}" if self.sudo else cmd


@dataclass(frozen=True)
class ServingRole:
    name: str
    proxy: str                # the rig file role whose host runs HAProxy (its `admin` command)
    backend: str
    aliases: list[str]
    replicas: dict[str, Replica] = field(default_factory=dict)
    start_timeout: float = DEFAULT_START_TIMEOUT
    ssh_key: str | None = None    # its replicas' accounts' key as written (rig.rigfile resolves it)


def _replica(f: jsonfile.Fields, role: str, name: str, obj: object) -> Replica:
    where = f"serving.{role}.replicas.{name}"
    o = f.obj(obj, where)
    unknown = sorted(set(o) - REPLICA_FIELDS)
    if unknown:
        raise f.fail(f"{where}.{unknown[0]}", f"is not a replica field ({', '.join(sorted(REPLICA_FIELDS))})")
    host = f.get(o, "host", str, where)
    try:
        Target.parse(host, default_user="root")
    except SshError as e:
        raise f.fail(f"{where}.host", f"is not an SSH address ({e})") from None
    cmds = {k: f.get(o, k, str, where) for k in ("start", "stop", "status")}
    return Replica(role=role, name=name, host=host, server=f.get(o, "server", str, where, required=False, default=name),
                   halves=tuple(f.str_list(o, "halves", where)),
                   sudo=f.get(o, "sudo", bool, where, required=False, default=False), **cmds)


def _role(f: jsonfile.Fields, name: str, obj: object, roles: set[str]) -> ServingRole:
    where = f"serving.{name}"
    o = f.obj(obj, where)
    proxy = f.get(o, "proxy", str, where)
    if proxy not in roles:
        raise f.fail(f"{where}.proxy", f"names no role of this file ({proxy!r}); name the role whose host runs HAProxy")
    reps = f.get(o, "replicas", dict, where)
    if not reps:
        raise f.fail(f"{where}.replicas", "is empty; declare at least one replica")
    timeout = f.get(o, "start_timeout", (int, float), where, required=False, default=DEFAULT_START_TIMEOUT)
    if timeout <= 0:
        raise f.fail(f"{where}.start_timeout", "must be a positive number of seconds")
    return ServingRole(name=name, proxy=proxy, backend=f.get(o, "backend", str, where),
                       aliases=f.str_list(o, "aliases", where, required=True),
                       replicas={r: _replica(f, name, r, ro) for r, ro in reps.items()},
                       start_timeout=float(timeout),
                       ssh_key=f.get(o, "ssh_key", str, where, required=False))


def load(f: jsonfile.Fields, top: dict, roles: set[str]) -> dict[str, ServingRole]:
    raw = f.get(top, "serving", dict, "", required=False, default={})
    return {name: _role(f, name, obj, roles) for name, obj in raw.items()}


def resolve(serving: dict[str, ServingRole], spec: str, verb: str) -> tuple[ServingRole, list[Replica]]:
    """`ROLE` (every replica) or `ROLE/REPLICA`; a pair's half is refused: a pair starts and stops
    only as one."""
    role_name, _, rep = spec.partition("/")
    role = serving.get(role_name)
    if role is None:
        raise UsageError(f"no serving role {role_name!r} in the rig file (serving roles: "
                         f"{', '.join(serving) or 'none'})")
    if not rep:
        return role, list(role.replicas.values())
    if rep in role.replicas:
        return role, [role.replicas[rep]]
    pair = next((r for r in role.replicas.values() if rep in r.halves), None)
    if pair is not None:
        raise UsageError(f"{spec} is one half of the pair {pair.ref} ({' + '.join(pair.halves)}), which starts and "
                         f"stops only as one: nev rig {verb} {pair.ref}")
    raise UsageError(f"no replica {rep!r} in serving role {role_name} (replicas: {', '.join(role.replicas)})")
