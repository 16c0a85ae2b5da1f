"""Helpers for the job tests: a job checkout, a lane-like environment, the CLI as a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import yaml

ROOT = Path(__file__).resolve().parents[2]

TOOLS = ["git", "python3", "node", "kill", "bash", "sleep", "cat", "touch", "echo", "printf", "test", "env",
         "cargo", "chromium", "firefox-esr", "WebKitWebDriver", "make", "sh", "mkdir", "cp", "rm", "ls", "wc"]


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def make_checkout(path: Path, tracks_tool: str | None = "stand-in-writer", launch: str | None = None) -> str:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    lanes: dict[str, str] = {}
    if tracks_tool:
        lanes["tool"] = tracks_tool
    if launch:
        lanes["launch"] = launch
    tracks = {"verify": "test -e README.md", "specWatch": {"lanes": lanes}}
    (path / "tracks.json").write_text(json.dumps(tracks) + "\n")
    (path / "README.md").write_text("job tree\n")
    (path / "bench").mkdir()
    shutil.copy(ROOT / "bench" / "folknet.json", path / "bench" / "folknet.json")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return git(path, "rev-parse", "HEAD")


def write_manifest(path: Path, base: str, stages: list[dict], **top: object) -> Path:
    data = {"name": top.pop("name", "demo"), "base": base, "spec": "specs/demo.md", **top, "stages": stages}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def tool_dir(path: Path, leave_out: str | None = None) -> Path:
    """A PATH folder with links to the real tools, one of them left out."""
    path.mkdir(parents=True, exist_ok=True)
    for t in TOOLS:
        if t == leave_out:
            continue
        real = shutil.which(t)
        assert real, f"{t} must be installed for the job tests"
        (path / t).symlink_to(real)
    return path


class Listener:
    """A real TCP listener standing for 'something answers at the gateway's address'."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._t = threading.Thread(target=self._accept, daemon=True)
        self._t.start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
                c.close()
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def lane_env(tmp: Path, gateway_port: int, bindir: Path | None = None, **extra: str) -> dict[str, str]:
    shared = tmp / "share"
    (shared / "archive").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "TRACKS_"))}
    env.update({
        "PATH": str(bindir) if bindir else env.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp / "home"),
        "NEV_LANE_SHARED": str(shared),
        "NEV_JOB_MIN_FREE_GB": "0",
        "NEV_ON_LANE": "1",
        "NEV_LANE_MODEL_URL": f"http://127.0.0.1:{gateway_port}",
        "NEV_STATE_DIR": str(tmp / "state-root"),
        "NEV_INVENTORY": str(tmp / "inventory.json"),
    })
    env.update(extra)
    return env


def nev(args: list[str], env: dict[str, str], cwd: Path | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def nev_popen(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rig.cli", *args], cwd=cwd or ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def events(state: Path) -> list[dict]:
    return [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]


LANE_PROBE_OUT = "HOME=/home/lane\nPATH=/usr/bin:/bin\nRUSTUP_HOME=\nCARGO_HOME=\n"


class FakeConn:
    """The lane's side of an SSH connection, as `nev job submit` uses it."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes, int]] = {}
        self.commands: list[str] = []

    def run(self, command: str, stdin: bytes | None = None, check: bool = False, timeout: float | None = None):
        self.commands.append(command)
        return SimpleNamespace(exit_status=0, out=LANE_PROBE_OUT if "RUSTUP_HOME" in command else "")

    def write_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        self.files[path] = (data, mode)


def fake_lane_dagu(monkeypatch) -> tuple[FakeConn, list[dict[str, str]]]:
    """`nev job submit`'s lane and its Dagu, faked at the edge (in this process): the SSH
    connection, and the run parameters Dagu was given."""
    from dagu import runs, service
    from dagu.layout import Layout

    conn = FakeConn()
    ld = SimpleNamespace(conn=conn, layout=Layout(root="/home/lane/dagu"),
                         lane=SimpleNamespace(label="lane 0", shared_dir="/srv/lane-shared"),
                         write_if_changed=lambda path, text: None, api=contextlib.nullcontext,
                         answering=lambda api, timeout, say: None)  # the faked Dagu answers
    sent: list[dict[str, str]] = []
    monkeypatch.setattr(service, "opened", lambda flag: contextlib.nullcontext(ld))
    monkeypatch.setattr(runs, "submit", lambda api, wf, p: (sent.append(p), ("run-1", False))[1])
    return conn, sent
