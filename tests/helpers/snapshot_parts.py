"""Real parts for the snapshot tests: sshd on loopback, Debian's HAProxy in front of a small
HTTP backend, a LiteLLM-style gateway config with a keys file, and a rig file naming them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.helpers import local_sshd
from tests.helpers.local_sshd import free_port

ROOT = Path(__file__).resolve().parents[2]
MASTER_KEY = "sk-master-7f3a9c1e55d2b8406e1f"
BATCH_KEY = "sk-batch-0a1b2c3d4e5f60718293"

HAPROXY_CFG = """global
    log stdout format raw local0 emerg

defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s

frontend pools
    bind 127.0.0.1:{fe}
    default_backend pool_a

backend pool_a
    option httpchk GET /health
    server a1 127.0.0.1:{be} check inter 300ms fall 1 rise 1 maxconn 8

listen stats
    bind 127.0.0.1:{st}
    stats enable
    stats uri /stats
"""

# Healthy = every server UP after a real check (not just the start-up state) and a request
# through the frontend answered by the pool.
HEALTH_PY = """import csv, io, sys, urllib.request
st, fe = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(io.StringIO(urllib.request.urlopen(f"http://127.0.0.1:{st}/stats;csv", timeout=2).read().decode().lstrip("# "))))
servers = [r for r in rows if r["svname"] not in ("FRONTEND", "BACKEND") and r["pxname"] != "stats"]
bad = [f"{r['pxname']}/{r['svname']} {r['status']} {r['check_status']}" for r in servers if r["status"] != "UP" or r["check_status"] != "L7OK"]
if not servers or bad:
    sys.exit("not healthy: " + (", ".join(bad) or "no servers"))
body = urllib.request.urlopen(f"http://127.0.0.1:{fe}/v1/models", timeout=2).read().decode()
if "pool-a" not in body:
    sys.exit("frontend answered without the pool: " + body[:80])
print("healthy")
"""

GATEWAY_YAML = """model_list:
  - model_name: qwen-fast
    litellm_params:
      model: openai/qwen-fast
      api_base: http://127.0.0.1:{fe}/v1
      api_key: sk-none
general_settings:
  master_key: {master}
  custom_auth: custom_auth.user_api_key_auth
  custom_auth_settings:
    keys_file: {keys}
litellm_settings:
  num_retries: 0
"""


class _Pool(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"pool": "pool-a", "ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # HAProxy's checks hang up without reading the body


@dataclass
class Parts:
    dir: Path
    sshd: local_sshd.LocalSshd
    backend: ThreadingHTTPServer
    fe: int
    be: int
    st: int
    haproxy_cfg: Path
    pidfile: Path
    gateway_cfg: Path
    keys_file: Path
    rig_file: Path
    notes: Path
    host_store: Path
    env: dict[str, str]

    @property
    def host(self) -> str:
        return f"root@127.0.0.1:{self.sshd.port}"

    def haproxy_text(self, be: int | None = None, extra: str = "") -> str:
        return HAPROXY_CFG.format(fe=self.fe, be=self.be if be is None else be, st=self.st) + extra

    def healthy(self) -> bool:
        r = subprocess.run([sys.executable, str(self.dir / "health.py"), str(self.st), str(self.fe)],
                           capture_output=True, text=True)
        return r.returncode == 0

    def wait_healthy(self, timeout: float = 10) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return True
            time.sleep(0.2)
        return False

    def through_proxy(self) -> str:
        return urllib.request.urlopen(f"http://127.0.0.1:{self.fe}/v1/models", timeout=3).read().decode()

    def haproxy_pid(self) -> int:
        return int(self.pidfile.read_text().split()[0])

    def nev(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        e = {**os.environ, **self.env, **(env or {}), "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=e,
                              capture_output=True, text=True, timeout=180)

    def stop(self) -> None:
        try:
            os.kill(self.haproxy_pid(), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        self.backend.shutdown()
        self.sshd.stop()


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)


def start(tmp: Path) -> Parts:
    sshd = local_sshd.start(tmp / "sshd")
    be, fe, st = free_port(), free_port(), free_port()
    backend = _Server(("127.0.0.1", be), _Pool)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    etc = tmp / "etc"
    cfg = etc / "haproxy" / "haproxy.cfg"
    pidfile = tmp / "run" / "haproxy.pid"
    pidfile.parent.mkdir(parents=True)
    write(cfg, HAPROXY_CFG.format(fe=fe, be=be, st=st))
    write(tmp / "health.py", HEALTH_PY)
    subprocess.run(["/usr/sbin/haproxy", "-f", str(cfg), "-p", str(pidfile), "-D"], check=True)
    keys = etc / "litellm" / "keys.json"
    write(keys, json.dumps({"keys": {BATCH_KEY: {"models": ["qwen-fast"]}}}, indent=2) + "\n", 0o600)
    gw = etc / "litellm" / "config.yaml"
    write(gw, GATEWAY_YAML.format(fe=fe, master=MASTER_KEY, keys=keys), 0o640)
    notes, store = tmp / "notes", tmp / "hoststore"
    host = f"root@127.0.0.1:{sshd.port}"
    rig = {
        "known_hosts": str(sshd.known_hosts),
        "ssh_key": str(sshd.client_key),
        "host_store": str(store),
        "roles": {
            "proxy": {
                "hosts": [host],
                "files": [str(cfg)],
                "commands": ["/usr/sbin/haproxy -v | head -1"],
                "volatile": [r"\d{4}/\d{2}/\d{2}"],
                "validate": "/usr/sbin/haproxy -c -f {path}",
                "reload": f"/usr/sbin/haproxy -f {cfg} -p {pidfile} -D -sf $(cat {pidfile})",
                "health": f"python3 {tmp / 'health.py'} {st} {fe}",
                "health_timeout": 4,
            },
            "gateway": {
                "hosts": [host],
                "files": [str(gw), {"path": str(keys), "validate": "python3 -m json.tool {path} >/dev/null"}],
                "masks": ["master_key"],
                "validate": "python3 -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' {path}",
                "reload": f"touch {tmp / 'gateway.reloaded'}",
                "health": f"python3 -c 'import yaml; yaml.safe_load(open(\"{gw}\"))'",
            },
        },
    }
    rig_file = tmp / "rig.local.json"
    rig_file.write_text(json.dumps(rig, indent=2))
    env = {"NEV_RIG_FILE": str(rig_file), "NEV_RIG_NOTES": str(notes),
           "NEV_LANES_FILE": str(tmp / "no-lanes.json"), "NEV_LANE_SHARED": str(tmp / "nas")}
    parts = Parts(tmp, sshd, backend, fe, be, st, cfg, pidfile, gw, keys, rig_file, notes, store, env)
    if not parts.wait_healthy():
        parts.stop()
        raise RuntimeError("HAProxy in front of the test pool did not become healthy")
    return parts
