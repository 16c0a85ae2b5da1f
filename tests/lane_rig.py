"""The lane set-up the gate tests run against: a real sshd, a real git smart-HTTP forge with
basic auth and an access log, a NAS folder, and a lanes file.

`local()` builds it on loopback (sshd from tests/local_sshd.py, `git http-backend` behind a small
HTTP server); the box variant uses the rig-in-a-box's lane namespaces and nginx forge.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests import lane_helpers as h
from tests import local_sshd


@dataclass
class LaneRig:
    tmp: Path
    lane_root: Path            # the lane root as seen from here (the dev box)
    nas: Path                  # the NAS share as seen from here
    env: dict[str, str]        # NEV_* settings pointing nev at the lane
    clone_url: str             # forge URL a dev worktree clones from (credential inside)
    push_env: dict[str, str]
    fetch_count: Callable[[], int]
    lane_cmdlines: Callable[[], list[tuple[int, str]]]
    cut_connections: Callable[[], None]
    shared_worktree: Path = field(init=False)
    stop: Callable[[], None] = lambda: None


class GitForge:
    """`git http-backend` over HTTP on loopback, basic auth, one access-log line per request."""

    def __init__(self, root: Path, user: str, token: str) -> None:
        self.root = root
        self.log: list[str] = []
        expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
        forge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _serve(self) -> None:
                if self.headers.get("Authorization") != expected:
                    forge.log.append(f"{self.command} {self.path} 401")
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="forge"')
                    self.end_headers()
                    return
                forge.log.append(f"{self.command} {self.path} 200")
                path, _, query = self.path.partition("?")
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                env = {"GIT_PROJECT_ROOT": str(forge.root), "GIT_HTTP_EXPORT_ALL": "1",
                       "PATH_INFO": path.removeprefix("/git"), "QUERY_STRING": query,
                       "REQUEST_METHOD": self.command, "REMOTE_USER": user, "REMOTE_ADDR": "127.0.0.1",
                       "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                       "CONTENT_LENGTH": str(len(body)), "PATH": os.environ["PATH"],
                       "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
                if self.headers.get("Content-Encoding"):
                    env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
                cp = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
                head, _, rest = cp.stdout.partition(b"\r\n\r\n")
                status = 200
                headers = []
                for line in head.decode(errors="replace").split("\r\n"):
                    k, _, v = line.partition(":")
                    if k.lower() == "status":
                        status = int(v.strip().split()[0])
                    elif k:
                        headers.append((k, v.strip()))
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(rest)))
                self.end_headers()
                self.wfile.write(rest)

            do_GET = _serve
            do_POST = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fetches(self) -> int:
        """Fetch negotiations (one `git-upload-pack` advertisement per fetch or clone)."""
        return sum(1 for line in self.log if "service=git-upload-pack" in line and line.endswith(" 200"))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _sshd_sessions(listener: int) -> list[int]:
    out = []
    for pid, cmd in h.cmdlines():
        if cmd.startswith("sshd:") and _ancestor(pid, listener):
            out.append(pid)
    return out


def _ancestor(pid: int, anc: int) -> bool:
    for _ in range(50):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid == anc:
            return True
        if pid <= 1:
            return False
    return False


def local(tmp: Path, user: str = "nev", token: str = "forgetok-4f1d9c2b7ea8815d3c") -> LaneRig:
    sshd = local_sshd.start(tmp / "sshd")
    forge_root = tmp / "forge"
    forge_root.mkdir()
    _, seed = h.make_forge(tmp / "seed")
    h.git(forge_root, "clone", "-q", "--bare", str(seed), str(forge_root / "engine.git"))
    h.git(forge_root / "engine.git", "config", "http.receivepack", "true")
    forge = GitForge(forge_root, user, token)
    lane_root = tmp / "lane"
    nas = tmp / "nas"
    lane_root.mkdir()
    nas.mkdir()
    url = f"http://127.0.0.1:{forge.port}/git/engine.git"
    lanes = tmp / "lanes.json"
    lanes.write_text(json.dumps({"lanes": [{"ssh": f"{sshd.user}@127.0.0.1:{sshd.port}", "root": str(lane_root),
                                            "shared": str(nas), "name": "loopback lane"}], "git_url": url}))
    token_file = tmp / "forge-token"
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o600)
    env = {"NEV_LANES_FILE": str(lanes), "NEV_KNOWN_HOSTS": str(sshd.known_hosts),
           "NEV_SSH_KEY": str(sshd.client_key), "NEV_FORGE_USER": user,
           "NEV_FORGE_TOKEN_FILE": str(token_file)}

    def cut() -> None:
        for pid in _sshd_sessions(sshd.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    rig = LaneRig(tmp=tmp, lane_root=lane_root, nas=nas, env=env,
                  clone_url=f"http://{user}:{token}@127.0.0.1:{forge.port}/git/engine.git",
                  push_env={}, fetch_count=forge.fetches, lane_cmdlines=h.cmdlines, cut_connections=cut)

    def stop() -> None:
        sshd.stop()
        forge.close()

    rig.stop = stop
    return rig
