"""The Proxmox backend of `nev lane create`: the same guest made from a Debian template by
`pct create` on a Proxmox node (`lanes/create.py` has the overview and what both backends
share). Never run against a real Proxmox node (there is none here); see docs/lane-create.md."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from lanes.base.errors import ConfigError
from lanes.base.ui import info
from lanes.create import Bind, check_name, heredoc
from lanes.hostexec import Node


@dataclass(frozen=True)
class PctLane:
    vmid: int
    name: str
    addr: str
    gateway: str | None = None
    bridge: str = "vmbr0"
    cpus: int = 96
    memory_gb: int = 96
    disk_gb: int = 200
    storage: str = "local-lvm"
    template: str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
    binds: tuple[Bind, ...] = ()
    authorized_keys_file: str = "/root/.ssh/nev-lane.pub"   # on the node, written by the script

    def __post_init__(self) -> None:
        check_name(self.name)
        if not 100 <= self.vmid <= 999999999:
            raise ConfigError(f"--vmid {self.vmid}: Proxmox guest ids are 100 or more")


def pct_create_commands(lane: PctLane) -> list[str]:
    q = shlex.quote
    net = f"name=eth0,bridge={lane.bridge},ip={lane.addr}/24" + (f",gw={lane.gateway}" if lane.gateway else "")
    cmd = ["pct", "create", str(lane.vmid), lane.template,
           "--hostname", lane.name, "--unprivileged", "1", "--onboot", "1",
           "--cores", str(lane.cpus), "--memory", str(lane.memory_gb * 1024), "--swap", "0",
           "--rootfs", f"{lane.storage}:{lane.disk_gb}", "--net0", net,
           "--features", "nesting=1", "--ssh-public-keys", lane.authorized_keys_file]
    for i, b in enumerate(lane.binds):
        cmd += [f"--mp{i}", f"{b.source},mp={b.target}" + (",ro=1" if b.readonly else "")]
    # The lane user and everything else come from `nev lane provision` over SSH as root.
    return [" ".join(q(c) for c in cmd), f"pct start {lane.vmid}"]


def pct_destroy_commands(vmid: int) -> list[str]:
    return [f"pct stop {vmid}", f"pct destroy {vmid} --purge 1"]


def pct_create_script(lane: PctLane, authorized_keys: str) -> str:
    out = "set -eu\n" + heredoc(lane.authorized_keys_file, authorized_keys, "600")
    out += "".join(c + "\n" for c in pct_create_commands(lane))
    out += f"rm -f {shlex.quote(lane.authorized_keys_file)}\n"
    return out


def run_create_pct(node: Node | None, lane: PctLane, authorized_keys: str) -> int:
    """With no node, print the command lines only (there is no Proxmox node here)."""
    if node is None:
        for c in pct_create_commands(lane):
            print(c)
        return 0
    node.run(pct_create_script(lane, authorized_keys), what=f"pct create {lane.vmid}")
    info(f"lane {lane.name} created as guest {lane.vmid} on {node}")
    return 0
