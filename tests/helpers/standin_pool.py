"""A stand-in model pool (rig/box/pool.py) on 127.0.0.1 for tests that need no whole box."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def control(url: str, **settings: object) -> dict:
    req = urllib.request.Request(url + "/control", data=json.dumps(settings).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with OPENER.open(req, timeout=10) as r:
        return json.loads(r.read())


def counters(url: str) -> dict:
    with OPENER.open(url + "/control", timeout=10) as r:
        return json.loads(r.read())


@contextmanager
def standin_pool(max_inflight: int = 8, alias: str = "stand-alias") -> Iterator[str]:
    """Start the stand-in pool process; yields its base URL; stops it (by its PID) at the end."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rig.box.pool", "--addr", "127.0.0.1", "--port", str(port), "--name", "gpu9",
         "--bank", str(ROOT / "rig/box/bank.json"), "--model", f"{alias}=sampling",
         "--max-inflight", str(max_inflight)],
        cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                counters(url)
                break
            except OSError as e:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read() if proc.stderr else ""
                    raise RuntimeError(f"stand-in pool did not start: {err!r}") from e
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
