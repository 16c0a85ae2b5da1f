"""`rig/rig.local.json` (gitignored): roles, their hosts, files and commands, the jump host."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lanes import jsonfile, settings


@dataclass(frozen=True)
class Role:
    name: str
    hosts: list[str]
    files: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    validate: str | None = None
    reload: str | None = None
    health: str | None = None
    masks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RigFile:
    path: Path
    roles: dict[str, Role]
    jump: str | None = None
    seeds: list[str] = field(default_factory=list)


def load(path: Path) -> RigFile:
    data = jsonfile.load(path, "rig file")
    f = jsonfile.Fields(path)
    top = f.obj(data, "(top level)")
    roles: dict[str, Role] = {}
    for name, obj in f.get(top, "roles", dict, "").items():
        where = f"roles.{name}"
        f.obj(obj, where)
        hosts = f.str_list(obj, "hosts", where, required=True)
        if not hosts:
            raise f.fail(f"{where}.hosts", "is empty; name at least one host")
        roles[name] = Role(name=name, hosts=hosts, files=f.str_list(obj, "files", where),
                           commands=f.str_list(obj, "commands", where),
                           validate=f.get(obj, "validate", str, where, required=False),
                           reload=f.get(obj, "reload", str, where, required=False),
                           health=f.get(obj, "health", str, where, required=False),
                           masks=f.str_list(obj, "masks", where))
    return RigFile(path=path, roles=roles, jump=f.get(top, "jump", str, "", required=False),
                   seeds=f.str_list(top, "seeds", ""))


def default_path() -> Path:
    p = settings.get_path(settings.RIG_FILE)
    assert p is not None
    return p
