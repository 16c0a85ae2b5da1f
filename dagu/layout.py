"""Every on-lane location of the Dagu install, in one place (absolute paths on the lane).

Single mode keeps everything under `~/dagu` (NEV_DAGU_DIR). Distributed mode moves
Dagu's data and log folders to the NAS share, at the same absolute path on every
lane, because 1.30.2 workers read and write run status and logs there directly.
TLS material always stays in the lane user's own folder (never on the NAS).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

# The pinned release. The hash is the npm package @dagu-org/dagu-linux-x64@1.30.2's binary.
DAGU_VERSION = "1.30.2"
DAGU_SHA256 = "3eb94cd06c8dfdf5591f209834ded1f3549a3d764e89baceb2b34b1f62f03018"

USERNAME = "nev"  # basic-auth user; the password is generated on the lane


@dataclass(frozen=True)
class Layout:
    """Paths of one lane's Dagu. `root` is absolute (resolved on the lane)."""

    root: str
    shared: str | None = None  # the NAS folder on the lane, set in distributed mode

    def _p(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    @property
    def bin_dir(self) -> str:
        return self._p("bin")

    @property
    def binary(self) -> str:
        return self._p("bin", "dagu")

    @property
    def home(self) -> str:
        return self._p("home")

    @property
    def config(self) -> str:
        return self._p("home", "config.yaml")

    @property
    def worker_config(self) -> str:
        return self._p("home", "worker.yaml")

    @property
    def dags(self) -> str:
        return self._p("home", "dags")

    @property
    def model_key(self) -> str:
        return self._p("home", "model-key")

    @property
    def data(self) -> str:
        if self.shared:
            return posixpath.join(self.shared, "dagu", "data")
        return self._p("home", "data")

    @property
    def logs(self) -> str:
        if self.shared:
            return posixpath.join(self.shared, "dagu", "logs")
        return self._p("home", "logs")

    @property
    def lock_dir(self) -> str:
        return posixpath.join(self.data, "scheduler", "locks", ".dagu_lock")

    @property
    def run_dir(self) -> str:
        """Pid files and the server's and workers' own logs (always lane-local)."""
        return self._p("run")

    @property
    def tmp(self) -> str:
        """TMPDIR of Dagu and its steps: /tmp may be shared with other users (workers write DAG files there)."""
        return self._p("tmp")

    @property
    def server_pid(self) -> str:
        return self._p("run", "server.pid")

    @property
    def server_log(self) -> str:
        return self._p("run", "server.log")

    @property
    def worker_pid(self) -> str:
        return self._p("run", "worker.pid")

    @property
    def worker_log(self) -> str:
        return self._p("run", "worker.log")

    @property
    def supervisor(self) -> str:
        return self._p("bin", "supervise.py")

    @property
    def tls_dir(self) -> str:
        return self._p("tls")

    @property
    def tls_cert(self) -> str:
        return self._p("tls", "lane.crt")

    @property
    def tls_key(self) -> str:
        return self._p("tls", "lane.key")

    @property
    def tls_ca(self) -> str:
        return self._p("tls", "ca.crt")

    @property
    def jobs_work(self) -> str:
        return self._p("jobs-work")


def resolve_root(setting_value: str, remote_home: str) -> str:
    """NEV_DAGU_DIR with a leading `~` taken as the lane user's home."""
    v = setting_value.strip()
    if v == "~":
        return remote_home
    if v.startswith("~/"):
        return posixpath.join(remote_home, v[2:])
    if not v.startswith("/"):
        return posixpath.join(remote_home, v)
    return v.rstrip("/") or "/"
