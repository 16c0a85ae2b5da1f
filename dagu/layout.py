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


class _Under:
    """A path under the Dagu root, named once in `Layout` (`binary = _Under("bin", "dagu")`)."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, layout: Layout, owner: type | None = None) -> str:
        return posixpath.join(layout.root, *self.parts)


@dataclass(frozen=True)
class Layout:
    """Paths of one lane's Dagu. `root` is absolute (resolved on the lane)."""

    root: str
    shared: str | None = None  # the NAS folder on the lane, set in distributed mode

    bin_dir = _Under("bin")
    binary = _Under("bin", "dagu")
    supervisor = _Under("bin", "supervise.py")
    home = _Under("home")
    config = _Under("home", "config.yaml")
    worker_config = _Under("home", "worker.yaml")
    dags = _Under("home", "dags")
    model_key = _Under("home", "model-key")
    # pid files and the server's and workers' own logs (always lane-local)
    run_dir = _Under("run")
    server_pid = _Under("run", "server.pid")
    server_log = _Under("run", "server.log")
    worker_pid = _Under("run", "worker.pid")
    worker_log = _Under("run", "worker.log")
    # TMPDIR of Dagu and its steps: /tmp may be shared with other users (workers write DAG files there)
    tmp = _Under("tmp")
    tls_dir = _Under("tls")
    tls_cert = _Under("tls", "lane.crt")
    tls_key = _Under("tls", "lane.key")
    tls_ca = _Under("tls", "ca.crt")
    jobs_work = _Under("jobs-work")
    job_mirror = _Under("job-mirror.git")  # the job workflow's prepare fetches job/<name> into it

    @property
    def data(self) -> str:
        if self.shared:
            return posixpath.join(self.shared, "dagu", "data")
        return posixpath.join(self.root, "home", "data")

    @property
    def logs(self) -> str:
        if self.shared:
            return posixpath.join(self.shared, "dagu", "logs")
        return posixpath.join(self.root, "home", "logs")

    @property
    def lock_dir(self) -> str:
        return posixpath.join(self.data, "scheduler", "locks", ".dagu_lock")


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
