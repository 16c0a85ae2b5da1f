"""Dagu as a service on one lane: up, start, stop, status, autostart, all over SSH as the lane user.

Dagu is started from `~/dagu/bin/start.sh` (also the `@reboot` crontab line) with a
clean environment, so nothing from the lane user's shell files reaches steps. The
password is generated on the lane, lives only in `~/dagu/home/config.yaml` (mode
600) and is read over SSH, into memory, when the API is needed. The API is reached
through an SSH port forward to the lane's loopback.
"""

from __future__ import annotations

import hashlib
import logging
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from dagu import daguconfig, install
from dagu.api import DaguApi, DaguApiError
from dagu.layout import USERNAME, Layout, resolve_root
from lanes import lanesfile
from lanes.base import crontab, settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.exitcodes import Exit
from lanes.base.mask import register_secret
from lanes.base.ssh import Connection
from lanes.lanesfile import Lane

CRON_TAG = "# nev-dagu"
HEALTH_WAIT = 20.0
LOG_CAP_BYTES = 10 * 1024 * 1024
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"


class DaguServiceError(NevError):
    pass


def pick_lane(flag: int | None) -> Lane:
    """The lane that runs Dagu: --lane, else NEV_DAGU_LANE, else NEV_LANE_SSH's lane, else lane 0."""
    return lanesfile.chosen(flag, settings.DAGU_LANE)


# -- scripts written to the lane (pure) ------------------------------------

def if_running(pidfile: str, program: str) -> str:
    """sh: `$pid` read from `pidfile`, then an `if` (the caller writes its body and `fi`) that holds
    while that process is alive and is `program` (its command line names it: a pid the system has
    given to another process since is not ours)."""
    q = shlex.quote
    return (f'pid=$(cat {q(pidfile)} 2>/dev/null || true)\n'
            f'if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q {program} "/proc/$pid/cmdline" 2>/dev/null; then\n')


def clean_env(layout: Layout) -> str:
    """The start of a Dagu process's command line, continued on the next line: nothing of the SSH
    session's environment, only who runs it and where."""
    q = shlex.quote
    return (f'env -i HOME="$HOME" USER="$(id -un)" LOGNAME="$(id -un)" PATH={CLEAN_PATH} LANG=C.UTF-8 \\\n'
            f'  DAGU_HOME={q(layout.home)} TMPDIR={q(layout.tmp)} \\\n')


def render_start_script(layout: Layout) -> str:
    q = shlex.quote
    # Single mode: none of our Dagu runs, so a scheduler lock left behind is stale. In distributed
    # mode the lock is on the NAS and only the coordinator's own stop removes it.
    lock = "" if layout.shared else f"rm -rf {q(layout.lock_dir)}\n"
    return f"""#!/bin/sh
# Written by `nev dagu up`: starts Dagu in the background; also the @reboot crontab line.
set -e
umask 077
mkdir -p {q(layout.run_dir)} {q(layout.tmp)}
{if_running(layout.server_pid, "dagu")}  exit 0
fi
if [ -f {q(layout.server_log)} ] && [ "$(stat -c %s {q(layout.server_log)})" -gt {LOG_CAP_BYTES} ]; then
  mv -f {q(layout.server_log)} {q(layout.server_log)}.1
fi
{lock}cd {q(layout.root)}
{clean_env(layout)}  setsid nohup {q(layout.binary)} start-all -c {q(layout.config)} >> {q(layout.server_log)} 2>&1 < /dev/null &
echo $! > {q(layout.server_pid)}
"""


def render_stop_script(layout: Layout, pidfile: str) -> str:
    """Stop our Dagu; its scheduler lock is removed only after our own process is gone."""
    q = shlex.quote
    return f"""#!/bin/sh
# Written by `nev dagu up`: stops one Dagu process of this lane user (TERM, then KILL after 10 s).
{if_running(pidfile, "dagu")}  kill -TERM "$pid" 2>/dev/null || true
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -rf {q(layout.lock_dir)}
fi
rm -f {q(pidfile)}
"""


def cron_lines(existing: str, start_script: str, on: bool) -> str:
    """The lane user's crontab with our @reboot line added or removed (other lines kept)."""
    line = f"@reboot /bin/sh {shlex.quote(start_script)} {CRON_TAG}"
    return crontab.table(existing, CRON_TAG, line if on else None)


# -- the lane ----------------------------------------------------------------

@dataclass
class LaneDagu:
    """One lane's Dagu, reached over one SSH connection."""

    lane: Lane
    conn: Connection
    layout: Layout
    port: int
    coord_port: int
    _password: str | None = field(default=None, repr=False)

    @property
    def start_script(self) -> str:
        return self.layout.bin_dir + "/start.sh"

    @property
    def stop_script(self) -> str:
        return self.layout.bin_dir + "/stop.sh"

    def sh(self, script: str, check: bool = True, timeout: float | None = 60) -> str:
        return self.conn.run(script, check=check, timeout=timeout).out

    def read_opt(self, path: str) -> bytes | None:
        r = self.conn.run(f"cat -- {shlex.quote(path)} 2>/dev/null")
        return r.stdout if r.exit_status == 0 else None

    def write_if_changed(self, path: str, text: str, mode: int = 0o600) -> bool:
        data = text.encode()
        if self.read_opt(path) == data:
            return False
        self.conn.write_file(path, data, mode)
        return True

    # -- state -------------------------------------------------------------
    def pid(self, pidfile: str | None = None) -> int | None:
        out = self.sh(if_running(pidfile or self.layout.server_pid, "dagu") + 'echo "$pid"\nfi', check=False).strip()
        return int(out) if out.isdigit() else None

    def password(self) -> str:
        if self._password is None:
            raw = self.read_opt(self.layout.config)
            pw = daguconfig.parse_existing(raw.decode() if raw else None).password
            if not pw:
                raise DaguServiceError(f"Dagu is not set up on {self.lane.label} ({self.layout.config} has no "
                                       "password); run `nev dagu up` first")
            register_secret(pw)
            self._password = pw
        return self._password

    @contextmanager
    def api(self) -> Iterator[DaguApi]:
        """The API through a port forward to the lane's loopback, with the lane's password."""
        with self.conn.forward("127.0.0.1", self.port) as fwd:
            client = DaguApi(fwd.url, USERNAME, self.password())
            try:
                yield client
            finally:
                client.close()

    def healthy(self, api: DaguApi) -> bool:
        try:
            return api.health().get("status") == "healthy"
        except DaguApiError:
            return False

    def wait_healthy(self, timeout: float = HEALTH_WAIT) -> None:
        deadline = time.monotonic() + timeout
        with _forward_refusals_quiet():
            self._wait_healthy(deadline, timeout)

    def answering(self, api: DaguApi, timeout: float, say: Callable[[str], None]) -> None:
        """Dagu healthy on `api`, waited for up to `timeout` s (a lane rebooting, its Dagu being
        started by its @reboot line or `nev dagu start`); else NevError, exit 3 (nothing sent)."""
        if self.healthy(api):
            return
        say(f"Dagu on {self.lane.label} does not answer; waiting up to {timeout:.0f} s "
            "(a restart under way?)")
        deadline = time.monotonic() + timeout
        with _forward_refusals_quiet():
            while time.monotonic() < deadline:
                time.sleep(1.0)
                if self.healthy(api):
                    say(f"Dagu on {self.lane.label} answers")
                    return
        raise NevError(f"Dagu on {self.lane.label} did not answer for {timeout:.0f} s; nothing was "
                       f"submitted: `nev dagu status --lane {self.lane.index}`, then submit again",
                       Exit.UNAVAILABLE)

    def _wait_healthy(self, deadline: float, timeout: float) -> None:
        with self.api() as api:
            while time.monotonic() < deadline:
                if self.healthy(api):
                    return
                if self.pid() is None:
                    tail = self.sh(f"tail -n 5 {shlex.quote(self.layout.server_log)} 2>/dev/null", check=False)
                    raise DaguServiceError(f"Dagu on {self.lane.label} exited at start; last log lines: "
                                           f"{' | '.join(tail.strip().splitlines()) or '(none)'}")
                time.sleep(0.2)
        raise DaguServiceError(f"Dagu on {self.lane.label} is not healthy after {timeout:.0f} s; "
                               f"see {self.layout.server_log} on the lane")

    # -- actions -----------------------------------------------------------
    def start(self) -> bool:
        """Start Dagu unless it runs; True when it was started."""
        if self.pid() is not None:
            return False
        r = self.conn.run(f"/bin/sh {shlex.quote(self.start_script)}", timeout=30)
        if r.exit_status != 0:
            raise DaguServiceError(f"cannot start Dagu on {self.lane.label}: {r.err.strip() or 'start.sh failed'}; "
                                   "run `nev dagu up` to (re)install it")
        self.wait_healthy()
        return True

    def stop(self) -> bool:
        """Stop Dagu; True when one was running."""
        was = self.pid() is not None
        self.sh(f"/bin/sh {shlex.quote(self.stop_script)} 2>/dev/null || true", check=False, timeout=60)
        return was

    def restart(self) -> None:
        self.stop()
        self.start()

    def status(self) -> dict[str, object]:
        pid = self.pid()
        st: dict[str, object] = {"lane": self.lane.index, "pid": pid, "port": self.port, "healthy": False}
        if pid is not None:
            with self.api() as api:
                try:
                    h = api.health()
                    st["healthy"] = h.get("status") == "healthy"
                    st["version"] = h.get("version")
                except DaguApiError as e:
                    st["error"] = e.message
        return st

    def autostart(self, on: bool) -> bool:
        r = self.conn.run("command -v crontab >/dev/null 2>&1")
        if r.exit_status != 0:
            raise DaguServiceError(f"{self.lane.label} has no crontab command; install cron there "
                                   "(Debian package `cron`) to use autostart")
        existing = self.conn.run("crontab -l 2>/dev/null").out
        new = cron_lines(existing, self.start_script, on)
        if new == existing:
            return False
        self.conn.run("crontab -", stdin=new.encode(), check=True)
        return True

    # -- up ----------------------------------------------------------------
    def generate_password(self) -> str:
        pw = self.sh("head -c 24 /dev/urandom | base64 | tr -d '/+=\\n'").strip()
        if len(pw) < 20:
            raise DaguServiceError(f"could not generate a password on {self.lane.label}")
        register_secret(pw)
        return pw

    def server_config(self, password: str, queue_max: int) -> daguconfig.ServerConfig:
        return daguconfig.ServerConfig(layout=self.layout, port=self.port, password=password,
                                    coord_port=self.coord_port, queue_max=queue_max)

    def write_config(self, queue_max: int | None = None,
                     server: daguconfig.ServerConfig | None = None) -> bool:
        """Write config.yaml (keeping the password and queue size); True when it changed."""
        raw = self.read_opt(self.layout.config)
        if server is None and raw is not None and queue_max is not None and daguconfig.is_distributed(raw.decode()):
            text = daguconfig.with_queue_max(raw.decode(), queue_max)
        else:
            if server is None:
                existing = daguconfig.parse_existing(raw.decode() if raw else None)
                pw = existing.password or self.generate_password()
                server = self.server_config(pw, queue_max if queue_max is not None else existing.queue_max)
            register_secret(server.password)
            self._password = server.password
            text = daguconfig.render_server(server)
        if raw is not None and raw.decode() == text:
            return False
        self.conn.write_file(self.layout.config, text.encode(), 0o600)
        return True


def connect(lane: Lane, distributed_shared: str | None = None) -> LaneDagu:
    conn = lane.connect()
    home = conn.run('printf %s "$HOME"', check=True).out.strip()
    root = resolve_root(settings.value(settings.DAGU_DIR), home)
    layout = Layout(root=root, shared=distributed_shared)
    return LaneDagu(lane=lane, conn=conn, layout=layout, port=settings.get_int(settings.DAGU_PORT),
                    coord_port=settings.get_int(settings.DAGU_COORD_PORT))


@contextmanager
def _forward_refusals_quiet() -> Iterator[None]:
    """Until Dagu listens, each forwarded connection is refused and paramiko logs it as an error:
    not said while nev waits for Dagu on purpose."""
    quiet = logging.getLogger("paramiko.transport")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        quiet.setLevel(level)


@contextmanager
def opened(lane_flag: int | None) -> Iterator[LaneDagu]:
    lane = pick_lane(lane_flag)
    ld = connect(lane)
    ld.layout = _detect_layout(ld)
    try:
        yield ld
    finally:
        ld.conn.close()


def _detect_layout(ld: LaneDagu) -> Layout:
    """A lane set up with --distributed keeps data and logs on the NAS (recorded in config.yaml)."""
    raw = ld.read_opt(ld.layout.config) or ld.read_opt(ld.layout.worker_config)
    if raw and ld.layout.shared is None:
        import yaml
        try:
            doc = yaml.safe_load(raw.decode()) or {}
        except yaml.YAMLError:
            return ld.layout
        data_dir = ((doc.get("paths") or {}).get("dataDir") or "") if isinstance(doc, dict) else ""
        if data_dir and not data_dir.startswith(ld.layout.root + "/"):
            shared = data_dir.rsplit("/dagu/data", 1)[0]
            return Layout(root=ld.layout.root, shared=shared)
    return ld.layout


# -- the model key --------------------------------------------------------

def model_key_bytes() -> bytes | None:
    """The gateway key from NEV_MODEL_KEY_FILE (a file here) or NEV_MODEL_API_KEY; never logged."""
    path = settings.get_path(settings.MODEL_KEY_FILE)
    if path is not None:
        try:
            value = path.read_text().strip()
        except OSError as e:
            raise ConfigError(f"NEV_MODEL_KEY_FILE={path}: cannot read it ({e.strerror}); fix the path") from None
    else:
        value = (settings.get(settings.MODEL_API_KEY) or "").strip()
    if not value:
        return None
    register_secret(value)
    return value.encode()


def push_model_key(ld: LaneDagu, key: bytes) -> bool:
    """Send the key over SSH stdin into model-key (mode 600); False when the lane has it already."""
    have = install.remote_sha256(ld.conn, ld.layout.model_key)
    if have == hashlib.sha256(key).hexdigest():
        return False
    ld.conn.write_file(ld.layout.model_key, key, 0o600)
    return True


# -- up -----------------------------------------------------------------------

@dataclass
class UpReport:
    changes: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def note(self, what: str, changed: bool) -> None:
        (self.changes if changed else self.unchanged).append(what)


def prepare(ld: LaneDagu, report: UpReport) -> None:
    """Folders, the pinned binary, base.yaml, start/stop scripts and the model key (no start)."""
    q = shlex.quote
    L = ld.layout
    ld.sh(f"umask 077 && mkdir -p {q(L.bin_dir)} {q(L.home)} {q(L.dags)} {q(L.run_dir)} {q(L.data)} {q(L.logs)}")
    src = install.source_from_settings(ld.lane.shared_dir)
    at = ld.lane.label
    report.note(f"{at}: Dagu {install.DAGU_VERSION} binary (sha256 checked)", install.install(ld.conn, L, src))
    report.note(f"{at}: base.yaml", ld.write_if_changed(L.home + "/base.yaml", daguconfig.render_base()))
    report.note(f"{at}: start.sh", ld.write_if_changed(ld.start_script, render_start_script(L), 0o700))
    report.note(f"{at}: stop.sh", ld.write_if_changed(ld.stop_script, render_stop_script(L, L.server_pid), 0o700))
    key = model_key_bytes()
    if key is not None:
        report.note(f"{at}: model key (over SSH stdin, mode 600)", push_model_key(ld, key))


def up_plan(lane_flag: int | None, distributed: bool) -> list[str]:
    """What `nev dagu up` would do, from the lanes file alone (`--dry-run`: no connection)."""
    lane = pick_lane(lane_flag)
    at = f"{lane.label} ({lane.ssh})"
    steps = [f"Dagu {install.DAGU_VERSION} binary (sha256 checked against the pin)",
             "~/dagu/home/base.yaml, start.sh, stop.sh",
             "the gateway key (NEV_MODEL_KEY_FILE) over SSH stdin, mode 600",
             "config.yaml", "start Dagu, or restart it when config.yaml changed",
             "wait until healthy; the API refuses a request without the password"]
    if not distributed:
        return [f"would set up Dagu on {at} (single mode), each step only if not so:",
                *(f"  {s}" for s in steps)]
    lines = [f"would set up Dagu distributed: coordinator on {at}, a worker on every "
             "lane, mTLS, data on the NAS; on the coordinator, each step only if not so:",
             *(f"  {s}" for s in steps)]
    lines += [f"  worker on {ln.label} ({ln.ssh})" for ln in lanesfile.configured().lanes]
    return lines


def up(ld: LaneDagu) -> UpReport:
    """Single mode: Dagu's data and logs under ~/dagu, no coordinator peers, no worker."""
    report = UpReport()
    if ld.layout.shared is not None:
        # this lane ran in distributed mode: its worker goes, its data stays on the NAS
        ld.layout = Layout(root=ld.layout.root)
        q = shlex.quote
        ld.sh(f"/bin/sh {q(ld.layout.bin_dir + '/worker-stop.sh')} 2>/dev/null; rm -f {q(ld.layout.worker_config)}",
              check=False)
        report.note(f"{ld.lane.label}: distributed mode left (worker stopped)", True)
    prepare(ld, report)
    changed = ld.write_config()
    report.note(f"{ld.lane.label}: config.yaml", changed)
    running = ld.pid() is not None
    if running and changed:
        ld.restart()
        report.note("Dagu restarted (config changed)", True)
    elif not running:
        ld.start()
        report.note("Dagu started", True)
    else:
        report.note("Dagu running", False)
    ld.wait_healthy()
    check_auth(ld)
    return report


def check_auth(ld: LaneDagu) -> None:
    """The API refuses a request without the password (401) and accepts it with."""
    import requests

    with ld.conn.forward("127.0.0.1", ld.port) as fwd:
        r = requests.get(fwd.url + "/api/v2/dag-runs", timeout=10)
        if r.status_code != 401:
            raise DaguServiceError(f"Dagu on {ld.lane.label} answered {r.status_code} without a password "
                                   "(expected 401); check ~/dagu/home/config.yaml")
    with ld.api() as api:
        api.list_runs()
