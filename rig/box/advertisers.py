"""Extra `nev rig advertise` processes on hosts of the rig-in-a-box, for tests and benchmarks.

Each runs the real command in its host's own namespace, with its own port and instance name
(`<host>-<tag>`), so it never collides with anything the box itself runs; `close()` ends every
one still running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rig.box.state import BoxInfo

ROOT = Path(__file__).resolve().parents[2]
PORT = 8790


class Advertisers:
    def __init__(self, box: BoxInfo, tmp: Path, port: int = PORT) -> None:
        self.hosts: dict[str, dict[str, str]] = dict(box.hosts)
        self.bridge_addr: str = box.bridge_addr
        self.rig_netns: str = box.rig_netns     # "no host": the rig network's own namespace
        self.tmp = tmp
        self.port = port
        self.procs: list[subprocess.Popen] = []

    def addr(self, host: str) -> str:
        return self.hosts[host]["addr"]

    def popen(self, host: str | None, argv: list[str], log: Path,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start argv in a host's network namespace (the rig network's own for None), output to `log`."""
        full = ["ip", "netns", "exec", self.hosts[host]["netns"] if host else self.rig_netns, *argv]
        e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        p = subprocess.Popen(full, cwd=ROOT, env=e, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def log(self, host: str, tag: str) -> Path:
        return self.tmp / f"{host}-{tag}.advertise.log"

    def start(self, host: str, tag: str, inventory: dict[str, object] | None = None,
              port: int | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        argv = [sys.executable, "-m", "rig.cli", "rig", "advertise", "--interface", self.addr(host),
                "--port", str(port or self.port), "--name", f"{host}-{tag}"]
        if inventory is not None:
            f = self.tmp / f"{host}-{tag}.inventory.json"
            f.write_text(json.dumps(inventory))
            argv += ["--inventory", str(f)]
        return self.popen(host, argv, self.log(host, tag), env)

    def start_all(self, tag: str, inventory_of: Callable[[str], dict[str, object]] | None = None,
                  ) -> dict[str, subprocess.Popen]:
        procs = {h: self.start(h, tag, inventory_of(h) if inventory_of else None) for h in self.hosts}
        for h in self.hosts:
            self.wait_for_line(self.log(h, tag), "advertising")
        return procs

    @staticmethod
    def wait_for_line(log: Path, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.exists() and text in log.read_text(errors="replace"):
                return
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in {log} after {timeout} s: {log.read_text(errors='replace')[-1500:]}")

    @staticmethod
    def stop(p: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if p.poll() is None:
            os.killpg(p.pid, sig)
        return p.wait(timeout)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
