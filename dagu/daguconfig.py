"""Dagu 1.30.2 config files (`config.yaml`, `worker.yaml`, `base.yaml`), rendered from plain values.

Keys are camelCase (1.30.2 refuses snake_case). Rendering is deterministic so a
second `up` can compare the file on the lane with what it would write and leave
an unchanged lane alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from dagu.layout import USERNAME, Layout
from lanes.base.errors import ConfigError

QUEUE_NAME = "global"
DEFAULT_QUEUE_MAX = 2
HIST_RETENTION_DAYS = 7
# A stopped Dagu leaves data/scheduler/locks/.dagu_lock behind; the default 30 s
# threshold makes the next start wait ~25 s before the scheduler takes queued runs.
LOCK_STALE = "3s"
LOCK_RETRY = "1s"


@dataclass(frozen=True)
class Tls:
    """Paths on the lane of the lane's certificate, key and the CA (mTLS, distributed mode)."""

    cert: str
    key: str
    ca: str


@dataclass(frozen=True)
class ServerConfig:
    layout: Layout
    port: int
    password: str
    coord_port: int
    host: str = "127.0.0.1"
    queue_max: int = DEFAULT_QUEUE_MAX
    coord_host: str = "127.0.0.1"  # the lane's rig address in distributed mode
    coord_advertise: str | None = None
    tls: Tls | None = None


@dataclass(frozen=True)
class WorkerConfig:
    layout: Layout
    worker_id: str
    labels: dict[str, str] = field(default_factory=dict)
    max_active_runs: int = 1
    tls: Tls | None = None


def _paths(layout: Layout) -> dict[str, str]:
    return {
        "dagsDir": layout.dags,
        "dataDir": layout.data,
        "logDir": layout.logs,
        "adminLogsDir": layout.run_dir + "/admin",
        "suspendFlagsDir": layout.home + "/suspend",
        "baseConfig": layout.home + "/base.yaml",
    }


def _peer(tls: Tls | None) -> dict[str, object]:
    if tls is None:
        return {"insecure": True}
    return {"insecure": False, "certFile": tls.cert, "keyFile": tls.key, "clientCaFile": tls.ca}


HEADER = "# Written by `nev dagu up`; edits are replaced on the next up.\n"


def render_server(c: ServerConfig) -> str:
    if c.queue_max < 1:
        raise ConfigError(f"queue max {c.queue_max} is below 1; give at least 1")
    doc: dict[str, object] = {     # Dagu's config.yaml, built to be dumped
        "host": c.host,
        "port": c.port,
        "auth": {"basic": {"username": USERNAME, "password": c.password}},
        "paths": _paths(c.layout),
        "scheduler": {"lockStaleThreshold": LOCK_STALE, "lockRetryInterval": LOCK_RETRY},
        "queues": {"enabled": True, "config": [{"name": QUEUE_NAME, "maxConcurrency": c.queue_max}]},
        "coordinator": {"host": c.coord_host, "port": c.coord_port,
                        "advertise": c.coord_advertise or c.coord_host},
        "peer": _peer(c.tls),
    }
    return HEADER + yaml.safe_dump(doc, sort_keys=False)


def is_distributed(text: str) -> bool:
    """A config.yaml written by `up --distributed` (its peers use TLS)."""
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return False
    return isinstance(doc, dict) and (doc.get("peer") or {}).get("insecure") is False


def with_queue_max(text: str, n: int) -> str:
    """The same config with the global queue's size set to n (other keys kept, in order)."""
    if n < 1:
        raise ConfigError(f"queue max {n} is below 1; give at least 1")
    doc = yaml.safe_load(text)
    doc["queues"] = {"enabled": True, "config": [{"name": QUEUE_NAME, "maxConcurrency": n}]}
    return HEADER + yaml.safe_dump(doc, sort_keys=False)


def render_worker(c: WorkerConfig) -> str:
    doc: dict[str, object] = {     # a worker's config.yaml, built to be dumped
        "paths": _paths(c.layout),
        "worker": {"id": c.worker_id, "maxActiveRuns": c.max_active_runs,
                   "labels": ",".join(f"{k}={v}" for k, v in c.labels.items())},
        "peer": _peer(c.tls),
    }
    return "# Written by `nev dagu up --distributed`.\n" + yaml.safe_dump(doc, sort_keys=False)


def render_base() -> str:
    return yaml.safe_dump({"histRetentionDays": HIST_RETENTION_DAYS}, sort_keys=False)


@dataclass(frozen=True)
class Existing:
    """What an existing config.yaml on the lane carries over into the next one."""

    password: str | None
    queue_max: int


def parse_existing(text: str | None) -> Existing:
    if not text:
        return Existing(None, DEFAULT_QUEUE_MAX)
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return Existing(None, DEFAULT_QUEUE_MAX)
    if not isinstance(doc, dict):
        return Existing(None, DEFAULT_QUEUE_MAX)
    password = None
    auth = doc.get("auth")
    if isinstance(auth, dict) and isinstance(auth.get("basic"), dict):
        pw = auth["basic"].get("password")
        password = str(pw) if pw else None
    qmax = DEFAULT_QUEUE_MAX
    queues = doc.get("queues")
    if isinstance(queues, dict):
        for q in queues.get("config") or []:
            if isinstance(q, dict) and q.get("name") == QUEUE_NAME and isinstance(q.get("maxConcurrency"), int):
                qmax = q["maxConcurrency"]
    return Existing(password, qmax)
