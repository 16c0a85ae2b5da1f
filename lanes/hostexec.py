"""Running a shell script on a node (an LXC host, a Proxmox node, a lane guest as root).

A script is always sent the same way: `sh -s` with the script on stdin, so nothing it carries
(keys, URLs) is ever in a process's argv. On a remote node that is one SSH command
(`lanes.base.ssh`, host key pinned); on the local machine ("local") the very same command line runs
here, so what the tests exercise is byte for byte what would go over SSH.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from lanes.base.errors import NevError
from lanes.base.mask import mask
from lanes.base.ssh import Connection, Target

COMMAND = "sh -s"
LOCAL = "local"


@dataclass(frozen=True)
class Ran:
    status: int
    out: str
    err: str

    def last_err(self) -> str:
        lines = [ln for ln in self.err.splitlines() if ln.strip()]
        return mask(lines[-1]) if lines else f"exit {self.status}"


class Node:
    """Where scripts run: `local` or `[user@]host[:port]` (user defaults to root)."""

    def __init__(self, spec: str, known_hosts: Path | None = None, key_file: Path | None = None,
                 timeout: float = 900, jump: Target | None = None) -> None:
        self.spec = spec
        self.timeout = timeout
        self.target = None if spec == LOCAL else Target.parse(spec, default_user="root")
        self._conn: Connection | None = None
        self._known_hosts = known_hosts
        self._key_file = key_file
        self._jump = jump    # the jump host in front of the node (both host keys pinned)

    @property
    def is_local(self) -> bool:
        return self.target is None

    def __str__(self) -> str:
        return self.spec

    def run(self, script: str, check: bool = True, what: str = "script") -> Ran:
        if self.target is None:
            cp = subprocess.run(COMMAND.split(), input=script, capture_output=True, text=True,
                                timeout=self.timeout)
            ran = Ran(cp.returncode, cp.stdout, cp.stderr)
        else:
            if self._conn is None:
                self._conn = Connection(self.target, self._known_hosts, self._key_file, jump=self._jump).connect()
            res = self._conn.run(COMMAND, stdin=script.encode(), timeout=self.timeout)
            ran = Ran(res.exit_status, res.out, res.err)
        if check and ran.status != 0:
            raise NevError(f"{what} on {self} failed (exit {ran.status}): {ran.last_err()}")
        return ran

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
