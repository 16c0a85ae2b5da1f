"""Connections to the roles' hosts: as root, host keys pinned, through the jump host when declared,
each with the key the rig file gives that host (`RigFile.key_for`); each one is
`lanes.base.righost`'s, the one way to a rig host that is not a lane."""

from __future__ import annotations

from lanes.base import righost, ssh
from lanes.base.ssh import Connection
from rig.rigfile import RigFile


class Hosts:
    """One open connection per host for the duration of a command; closed together."""

    def __init__(self, rig: RigFile) -> None:
        self.rig = rig
        self._jump: Connection | None = None
        self._conns: dict[str, Connection] = {}

    def _kw(self, spec: str) -> dict:
        key = self.rig.key_for(spec)
        return {"known_hosts": self.rig.known_hosts or ssh.default_known_hosts(),
                "key_file": key if key is not None else ssh.default_key_file()}

    def get(self, spec: str) -> Connection:
        if spec not in self._conns:
            via = None
            if self.rig.jump:
                if self._jump is None:
                    jump = self.rig.jump
                    self._jump = righost.connection(jump, **self._kw(jump)).connect()
                via = self._jump
            self._conns[spec] = righost.connection(spec, via=via, **self._kw(spec)).connect()
        return self._conns[spec]

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        if self._jump is not None:
            self._jump.close()
            self._jump = None

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
