"""The one way to a rig host that is not a lane: a role's host (the gateway, a pool host, the
NAS), the host of the gateway's keys file, an LXC or Proxmox node. Lanes have theirs
(`Lane.connect`, the lanes file's user and jump).

A host is `[user@]host[:port]`, its user root unless named; its key is pinned (known_hosts);
it is reached through the jump host in front of the rig when there is one: either a jump host
this connection opens and closes itself (`jump`), or one already open and shared by several
(`via`, `rig.snapshot.hosts.Hosts`). Known hosts and key default to NEV_KNOWN_HOSTS and
NEV_SSH_KEY (`lanes.base.ssh`); `from_settings` also takes the jump host from NEV_LANE_JUMP.
The connection is returned unopened: `with connection(...) as c:` or `.connect()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lanes.base import settings
from lanes.base.ssh import CONNECT_TIMEOUT, Connection, Target

USER = "root"   # the user on a rig host when its spec names none


def target(spec: str | Target) -> Target:
    """`[user@]host[:port]` as a target, root by default (SshError when it is not one)."""
    return spec if isinstance(spec, Target) else Target.parse(spec, default_user=USER)


def connection(spec: str | Target, *, known_hosts: Path | None = None, key_file: Path | None = None,
               jump: str | Target | None = None, via: Connection | None = None,
               timeout: float = CONNECT_TIMEOUT) -> Connection:
    """A connection to the rig host `spec` (not yet open): through `via` (an open jump host's
    connection) or `jump` (a jump host it opens itself), or straight."""
    if via is not None and jump is not None:
        raise ValueError("a connection goes through an open jump host or opens one, not both")
    return Connection(target(spec), known_hosts, key_file, timeout=timeout, via=via,
                      jump=target(jump) if jump is not None else None)


def from_settings(spec: str | Target, environ: Mapping[str, str] | None = None) -> Connection:
    """A connection to `spec` with the settings' known hosts, key and jump host (NEV_KNOWN_HOSTS,
    NEV_SSH_KEY, NEV_LANE_JUMP), for a host named by a setting (NEV_GATEWAY_KEYS_FILE's)."""
    return connection(spec, known_hosts=settings.get_path(settings.KNOWN_HOSTS, environ),
                      key_file=settings.get_path(settings.SSH_KEY, environ),
                      jump=settings.get(settings.LANE_JUMP, environ) or None)
