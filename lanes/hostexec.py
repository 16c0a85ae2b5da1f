"""Running a shell script on a node (an LXC host, a Proxmox node, a lane guest as root).

A script is always sent the same way: `sh -s` with the script on stdin, so nothing it carries
(keys, URLs) is ever in a process's argv. On a remote node that is one SSH command
(`lanes.base.righost`, host key pinned); on the local machine ("local") the very same command line runs
here, so what the tests exercise is byte for byte what would go over SSH.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from lanes.base import righost
from lanes.base.errors import NevError
from lanes.base.ssh import Connection, Result, Target

COMMAND = "sh -s"
LOCAL = "local"


class Node:
    """Where scripts run: `local` or `[user@]host[:port]` (user defaults to root)."""

    def __init__(self, spec: str, known_hosts: Path | None = None, key_file: Path | None = None,
                 timeout: float = 900, jump: Target | None = None) -> None:
        self.spec = spec
        self.timeout = timeout
        self.target = None if spec == LOCAL else righost.target(spec)
        self._conn: Connection | None = None
        self._known_hosts = known_hosts
        self._key_file = key_file
        self._jump = jump    # the jump host in front of the node (both host keys pinned)

    @property
    def is_local(self) -> bool:
        return self.target is None

    def __str__(self) -> str:
        return self.spec

    def run(self, script: str, check: bool = True, what: str = "script") -> Result:
        if self.target is None:
            cp = subprocess.run(COMMAND.split(), input=script.encode(), capture_output=True, timeout=self.timeout)
            ran = Result(cp.returncode, cp.stdout, cp.stderr)
        else:
            if self._conn is None:
                self._conn = righost.connection(self.target, known_hosts=self._known_hosts,
                                                key_file=self._key_file, jump=self._jump).connect()
            ran = self._conn.run(COMMAND, stdin=script.encode(), timeout=self.timeout)
        if check and ran.exit_status != 0:
            raise NevError(f"{what} on {self} failed (exit {ran.exit_status}): {ran.last_err()}")
        return ran

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
