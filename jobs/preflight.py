"""The requirements check a job makes before its first stage that is not passed (exit 0 or 9).

It only asks what the lane can answer right now (a binary, a socket, a folder, a
variable, the clock); whether a model is available on the rig is the inventory
check that follows it. `gather` reads the facts, `evaluate` (pure) turns them into
every unmet reason, never only the first.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.gateway import url_from_settings
from jobs.manifest import Manifest
from lanes.base import settings
from lanes.base.errors import ConfigError

BASE_TOOLS = ("git", "python3", "node", "kill")


@dataclass(frozen=True)
class Unmet:
    kind: str
    message: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Facts:
    """What the lane answers right now."""

    tools: dict[str, str | None]                 # tool -> resolved path (None: not found)
    browsers: dict[str, str | None]              # "a|b" alternatives -> resolved path
    # when a stage calls a model: (url, why it does not answer) or (None, why no URL); None: not asked
    gateway: tuple[str | None, str | None] | None
    workdir: str
    free_bytes: int | None
    min_free_bytes: int
    archive: str
    archive_problem: str | None
    on_lane: bool
    limit_s: float
    used_s: float
    min_left_s: float
    writer: bool = False
    gate: bool = False
    # keys of the requirements this version does not know: kept as the user wrote them
    extra: dict[str, Any] = field(default_factory=dict)


def evaluate(f: Facts) -> list[Unmet]:
    """Every requirement the lane does not meet (pure)."""
    out: list[Unmet] = []
    for tool, path in f.tools.items():
        if path is None:
            why = " (a writer stage is listed)" if tool == "cargo" else ""
            out.append(Unmet("tool-missing", f"{tool} is not on PATH{why}; install it on the lane"))
    for names, path in f.browsers.items():
        if path is None:
            out.append(Unmet("browser-missing", f"browser {names.replace('|', ' or ')} is not on PATH "
                             "(the oracle's browsers are needed by a writer stage); install it on the lane"))
    if f.gateway is not None:
        url, err = f.gateway
        if url is None:
            out.append(Unmet("gateway-unset", f"a stage calls a model but {err or 'no gateway URL is set'}"))
        elif err is not None:
            out.append(Unmet("gateway-unreachable", f"the model gateway {url} does not answer: {err}"))
    gib = 1 << 30
    if f.free_bytes is None:
        out.append(Unmet("workdir-missing", f"workdir {f.workdir} does not exist"))
    elif f.free_bytes < f.min_free_bytes:
        out.append(Unmet("disk-short", f"{f.free_bytes / gib:.1f} GiB free on the filesystem of {f.workdir}, "
                         f"{f.min_free_bytes / gib:.0f} GiB needed; free space on the lane (nev lane sweep)"))
    if f.archive_problem is not None:
        out.append(Unmet("archive-missing", f"the shared archive folder {f.archive} {f.archive_problem}; "
                         "mount the share (NEV_LANE_SHARED)"))
    if f.gate and not f.on_lane:
        out.append(Unmet("not-on-lane", "a stage calls the lane gate or the verify but NEV_ON_LANE is not set; "
                         "run the job on a lane (inside its Dagu workflow)"))
    left = f.limit_s - f.used_s
    if left < f.min_left_s:
        out.append(Unmet("time-short", f"{max(left, 0):.0f} s of the job's {f.limit_s:.0f} s wall-clock limit left "
                         f"({f.used_s:.0f} s used across resumes), {f.min_left_s:.0f} s needed; "
                         "raise limit in the manifest and resubmit"))
    return out


def gateway_url(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(the gateway URL this process reaches, None), or (None, why there is none):
    `bench.gateway.url_from_settings` decides (on a lane, the lane's ~/.lane-model-env)."""
    try:
        return url_from_settings(environ), None
    except ConfigError as e:
        return None, str(e)


def probe_gateway(url: str, timeout: float = 3.0) -> str | None:
    """None when something accepts a connection at the gateway's address, else why not."""
    parts = urlsplit(url)
    if not parts.hostname:
        return f"{url!r} is not a URL"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError as e:
        return e.strerror or str(e)


def archive_folder(environ: Mapping[str, str] | None = None) -> Path:
    return settings.path(settings.LANE_SHARED, environ) / "archive"


def _archive_problem(path: Path) -> str | None:
    if not path.is_dir():
        return "does not exist"
    if not os.access(path, os.W_OK | os.X_OK):
        return "is not writable"
    return None


def gather(m: Manifest, workdir: Path, used_s: float, environ: Mapping[str, str] | None = None) -> Facts:
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    tools = {t: shutil.which(t, path=path) for t in BASE_TOOLS}
    browsers: dict[str, str | None] = {}
    if m.has_writer():
        tools["cargo"] = shutil.which("cargo", path=path)
        spec = settings.value(settings.JOB_BROWSERS, env)
        for alt in (a.strip() for a in spec.split(",") if a.strip()):
            found = None
            for name in alt.split("|"):
                found = shutil.which(name.strip(), path=path)
                if found:
                    break
            browsers[alt] = found
    gateway: tuple[str | None, str | None] | None = None
    if m.calls_model():
        url, why = gateway_url(env)
        gateway = (url, probe_gateway(url) if url else why)
    try:
        free: int | None = shutil.disk_usage(workdir).free
    except OSError:
        free = None
    archive = archive_folder(env)
    return Facts(tools=tools, browsers=browsers, gateway=gateway, workdir=str(workdir), free_bytes=free,
                 min_free_bytes=int(settings.get_float(settings.JOB_MIN_FREE_GB, env) * (1 << 30)),
                 archive=str(archive), archive_problem=_archive_problem(archive),
                 on_lane=bool(settings.get(settings.ON_LANE, env)), limit_s=m.limit_s, used_s=used_s,
                 min_left_s=settings.get_float(settings.JOB_MIN_LEFT, env),
                 writer=m.has_writer(), gate=m.calls_gate())


def check(m: Manifest, workdir: Path, used_s: float = 0.0, environ: Mapping[str, str] | None = None) -> list[Unmet]:
    return evaluate(gather(m, workdir, used_s, environ))
