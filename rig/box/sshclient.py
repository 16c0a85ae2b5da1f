"""The box's OpenSSH client config (`nev box env` points ssh at it): what a user of the real rig
has in ~/.ssh/config."""

from __future__ import annotations

from rig.box import plan
from rig.box.lanes_netns import USER
from rig.box.state import BoxInfo


def ssh_client_config(box_name: str, info: BoxInfo) -> str:
    """An OpenSSH client config as a user of the real rig has one: every rig host through
    the jump host (ProxyJump), every host key pinned."""
    common = f"""    IdentityFile {info.ssh_key}
    IdentitiesOnly yes
    UserKnownHostsFile {info.known_hosts}
    StrictHostKeyChecking yes
    BatchMode yes
    KexAlgorithms curve25519-sha256
"""
    jump_alias = f"{box_name}-jump"
    out = [f"""Host {jump_alias} {info.jump_addr}
    HostName {info.jump_addr}
    User {plan.JUMP_USER}
{common}"""]
    hosts = [(ln.name, ln.addr, USER) for ln in info.lanes]
    hosts += [(h, info.hosts[h]["addr"], "root") for h in plan.SERVICE_SSH_HOSTS]
    for name, addr, user in hosts:
        out.append(f"""Host {box_name}-{name} {addr}
    HostName {addr}
    User {user}
    ProxyJump {jump_alias}
{common}""")
    return "".join(out)
