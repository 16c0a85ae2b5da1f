"""What each serving replica is doing, for `nev rig status` and the dashboard: HAProxy's server
state (runtime API) with the last change-log action that put it there.

    HAProxy server              shown      alias whose probe fails, every replica drained or stopped
    UP / no check               ready      -
    DRAIN                       drained    `stopped` (an operator's action, not a failure)
    MAINT, last action drain    drained    `stopped`
    MAINT                       stopped    `stopped`
    DOWN                        down       stays `failing`

`replicas`, `last_actions` and `alias_status` are pure; `gather` reads HAProxy over SSH.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from lanes.base.inventory_record import Summary
from rig.rigfile import RigFile
from rig.serving.declared import ServingRole
from rig.serving.haproxy import Admin, Server

_HEAD = re.compile(r"^## (\S+) (drain|stop|start|restart) (\S+)$")


@dataclass(frozen=True)
class Action:
    time: str
    verb: str
    who: str
    result: str


@dataclass(frozen=True)
class ReplicaState:
    replica: str          # ROLE/REPLICA
    server: str           # BACKEND/SERVER
    aliases: list[str]
    state: str            # ready | drained | stopped | down | unknown (no server line)
    by: str = ""          # the last action on it: `drain by root@vm at 2026-12-01T17:30:20Z`

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def last_actions(changelog: str) -> dict[str, Action]:
    """ROLE/REPLICA -> the last serving action the change log records for it."""
    out: dict[str, Action] = {}
    blocks: list[list[str]] = []
    for ln in changelog.splitlines():
        if ln.startswith("## "):
            blocks.append([ln])
        elif blocks:
            blocks[-1].append(ln)
    for head, *rest in blocks:
        m = _HEAD.match(head)
        if not m:
            continue
        fields = dict(ln[2:].split(": ", 1) for ln in rest if ln.startswith("- ") and ": " in ln)
        act = Action(time=m.group(1), verb=m.group(2), who=fields.get("who", "?"), result=fields.get("result", "?"))
        for ref in fields.get("replicas", "").split(" (")[0].split(", "):
            if ref:
                out[ref] = act
    return out


def replicas(serving: dict[str, ServingRole], servers: list[Server], actions: dict[str, Action]) -> list[ReplicaState]:
    state = {(s.backend, s.name): s for s in servers}
    out = []
    for ro in serving.values():
        for r in ro.replicas.values():
            s = state.get((ro.backend, r.server))
            a = actions.get(r.ref)
            st = s.state if s else "unknown"
            if st == "stopped" and a and a.verb == "drain":
                st = "drained"      # a drain ends in maintenance: drained first, then stopped
            by = f"{a.verb} by {a.who} at {a.time}" if a and st in ("drained", "stopped") else ""
            out.append(ReplicaState(r.ref, f"{ro.backend}/{r.server}", list(ro.aliases), st, by))
    return out


def alias_status(alias: str, probed: str, reps: list[ReplicaState]) -> str:
    """A failing alias whose replicas an operator all drained or stopped is `stopped`."""
    mine = [r for r in reps if alias in r.aliases]
    if probed != "ready" and mine and all(r.state in ("drained", "stopped") for r in mine):
        return "stopped"
    return probed


def overlay(summary: Summary, reps: list[ReplicaState]) -> Summary:
    """`nev rig status`'s summary with the replicas and each alias's status read with them."""
    for row in summary["aliases"]:
        row["status"] = alias_status(row["alias"], row["status"], reps)
    summary["replicas"] = [r.to_json() for r in reps]
    return summary


def gather(rig: RigFile, notes: Path) -> list[ReplicaState]:
    """HAProxy's server lines of every serving role's proxy, with the rig notes' change log."""
    from rig.snapshot.hosts import Hosts

    servers: list[Server] = []
    with Hosts(rig) as hosts:
        for name in sorted({ro.proxy for ro in rig.serving.values()}):
            role = rig.roles[name]
            if role.admin:
                servers += Admin(hosts.get(role.hosts[0]), role.admin, role.hosts[0]).servers()
    log = notes / "changelog.md"
    return replicas(rig.serving, servers, last_actions(log.read_text() if log.exists() else ""))
