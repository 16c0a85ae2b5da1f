"""A few network namespaces on one bridge (198.18.200.0/24) for the mDNS tests.

Made and removed by the test itself (root needed), named `ninv*` so they never
collide with the box or another helper's objects; `close()` removes everything,
and `__init__` first removes leftovers of an earlier run that was cut short.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

NET = "198.18.200"
BRIDGE = "ninvbr0"
ROOT = Path(__file__).resolve().parent.parent


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class Hosts:
    def __init__(self, count: int) -> None:
        self.names = [f"ninv{i}" for i in range(count)]
        self.addrs = {n: f"{NET}.{11 + i}" for i, n in enumerate(self.names)}
        self.bridge_addr = f"{NET}.1"
        self.procs: list[subprocess.Popen] = []
        self._cleanup_leftovers()
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{self.bridge_addr}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for n in self.names:
            _ip("netns", "add", n)
            _ip("link", "add", f"{n}v", "type", "veth", "peer", "name", "eth0", "netns", n)
            _ip("link", "set", f"{n}v", "master", BRIDGE)
            _ip("link", "set", f"{n}v", "up")
            _ip("-n", n, "addr", "add", f"{self.addrs[n]}/24", "dev", "eth0")
            _ip("-n", n, "link", "set", "eth0", "up")
            _ip("-n", n, "link", "set", "lo", "up")

    @staticmethod
    def _cleanup_leftovers() -> None:
        out = _ip("netns", "list", check=False).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith("ninv"):
                _ip("netns", "del", name, check=False)
        _ip("link", "del", BRIDGE, check=False)

    def popen(self, host: str | None, argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start argv in a host's namespace (or the root one for None), output to `log`."""
        full = (["ip", "netns", "exec", host] if host else []) + argv
        e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        p = subprocess.Popen(full, cwd=ROOT, env=e, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def advertise(self, host: str, tmp: Path, inventory: dict | None = None, port: int = 8787,
                  env: dict[str, str] | None = None, name: str | None = None) -> subprocess.Popen:
        import json

        argv = [sys.executable, "-m", "rig.cli", "rig", "advertise", "--interface", self.addrs[host],
                "--port", str(port), "--name", name or host]
        if inventory is not None:
            f = tmp / f"{host}.inventory.json"
            f.write_text(json.dumps(inventory))
            argv += ["--inventory", str(f)]
        return self.popen(host, argv, tmp / f"{host}.advertise.log", env)

    @staticmethod
    def wait_for_line(log: Path, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.exists() and text in log.read_text(errors="replace"):
                return
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in {log} after {timeout} s: {log.read_text(errors='replace')[-1500:]}")

    @staticmethod
    def stop(p: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
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
        for n in self.names:
            _ip("netns", "del", n, check=False)
        _ip("link", "del", BRIDGE, check=False)
