"""How the development box reaches a rig host over SSH, for the Ansible export: jump, pinned keys, user.

On the real rig (and the box) the development box has no route to the rig network: every SSH
connection goes through the jump host. `load` reads what the local files and settings say;
`host_vars` and `common_args` are pure.

Why a ProxyCommand and not `-o ProxyJump=...`: ssh runs the jump's connection as a second ssh
that gets none of the command line's `-o` options (only `-F`), so with ProxyJump the jump host's
key would be checked against ~/.ssh/known_hosts instead of the pinned file (measured: "Host key
verification failed"). The ProxyCommand carries the same pinning options to the jump.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lanes import lanesfile
from lanes.base import jsonfile, settings
from lanes.base import ssh as lanes_ssh
from lanes.base.inventory_record import HostDoc
from lanes.base.ssh import Target
from rig import rigfile


@dataclass(frozen=True)
class Reach:
    """What Ansible needs besides each host's address: the jump host, pinned keys, the key file,
    and the SSH user and port the local lanes and rig files give per address."""

    jump: Target | None = None
    known_hosts: Path | None = None
    key_file: Path | None = None      # every host's the rig file gives no other key
    by_addr: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    key_by_addr: Mapping[str, Path] = field(default_factory=dict)   # a role host's own key
    jump_key_file: Path | None = None   # the jump host's own key (None: key_file)


def _setting(environ: Mapping[str, str]) -> str | None:
    return settings.get(settings.LANE_JUMP, environ)


def jump_spec(environ: Mapping[str, str] | None = None) -> str | None:
    """The jump host as [user@]host[:port]: the rig file's `jump`, else NEV_LANE_JUMP, else the
    lanes file's top-level `jump`; None when none is declared. The one place that says so."""
    env = os.environ if environ is None else environ
    rig_path = settings.get_path(settings.RIG_FILE, env)
    if rig_path is not None and rig_path.exists():
        jump = rigfile.load(rig_path).jump
        if jump:
            return jump
    spec = _setting(env)
    if spec:
        return spec
    lanes_path = settings.get_path(settings.LANES_FILE, env)
    if lanes_path is not None and lanes_path.exists():
        data = jsonfile.load(lanes_path, "lanes file")
        jump = data.get("jump") if isinstance(data, dict) else None
        if isinstance(jump, str) and jump:
            return jump
    return None


def load() -> Reach:
    """The local view: jump, known_hosts and keys (rig file: each role host's and the jump's own
    key, else its `ssh_key`; else NEV_KNOWN_HOSTS / NEV_SSH_KEY), and user@addr:port of every lane
    (lanes file, NEV_LANE_SSH) and role host (rig file, root by default)."""
    by_addr: dict[str, tuple[str, int]] = {}
    keys: dict[str, Path | None] = {}
    rig = None
    rig_path = rigfile.default_path()
    if rig_path.exists():
        rig = rigfile.load(rig_path)
    key = (rig.ssh_key if rig else None) or lanes_ssh.default_key_file()
    if rig is not None:
        for role in rig.roles.values():
            for spec in role.hosts:
                t = Target.parse(spec, default_user="root")
                by_addr[t.host] = (t.user, t.port)
                keys[t.host] = rig.key_for(spec) or key
    for lane in lanesfile.configured(require=False).lanes:
        t = lane.target
        by_addr[t.host] = (t.user, t.port)
        keys.pop(t.host, None)
    jump = jump_spec()
    known = (rig.known_hosts if rig and rig.known_hosts else None) or settings.get_path(settings.KNOWN_HOSTS)
    jump_key = (rig.key_for(jump) if rig and jump else None) or key
    return Reach(jump=Target.parse(jump, default_user="root") if jump else None,
                 known_hosts=known, key_file=key, by_addr=by_addr,
                 key_by_addr={a: k for a, k in keys.items() if k is not None and k != key},
                 jump_key_file=jump_key if jump_key != key else None)


def _pinning(reach: Reach) -> list[str]:
    out = []
    if reach.known_hosts is not None:
        out += ["-o", f"UserKnownHostsFile={reach.known_hosts}"]
    return out + ["-o", "StrictHostKeyChecking=yes"]


def common_args(reach: Reach) -> str:
    """`ansible_ssh_common_args`: host keys pinned (never turned off), through the jump when one
    is declared. Ansible splits it with shlex; ssh runs the ProxyCommand with /bin/sh."""
    args = _pinning(reach)
    if reach.jump is None:
        return shlex.join(args)
    j = reach.jump
    inner = ["ssh", *_pinning(reach), "-o", "BatchMode=yes"]
    jump_key = reach.jump_key_file or reach.key_file
    if jump_key is not None:
        inner += ["-o", f"IdentityFile={jump_key}", "-o", "IdentitiesOnly=yes"]
    inner += ["-p", str(j.port), "-W", "%h:%p", f"{j.user}@{j.host}"]
    return shlex.join(["-o", "ProxyCommand=" + shlex.join(inner), *args])


def host_vars(addr: str | None, inventory: HostDoc | None, reach: Reach) -> dict[str, object]:
    """ansible_host, ansible_user, ansible_port, the key file and the common args for one host.
    The user and port come from the local lanes/rig files when they name the address, else from
    the host's own inventory (`ssh: {user, port}`); a host with neither gets no user or port.
    Ansible's host vars: a JSON document only built to be printed."""
    out: dict[str, object] = {}
    if not addr:
        return out
    out["ansible_host"] = addr
    user, port = reach.by_addr.get(addr) or ((inventory.ssh_user, inventory.ssh_port) if inventory
                                             else (None, None))
    if user:
        out["ansible_user"] = user
    if port:
        out["ansible_port"] = int(port)
    key = reach.key_by_addr.get(addr, reach.key_file)
    if key is not None:
        out["ansible_ssh_private_key_file"] = str(key)
    out["ansible_ssh_common_args"] = common_args(reach)
    return out
