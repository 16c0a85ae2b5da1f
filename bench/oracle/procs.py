"""Browser processes: each in its own session, always stopped, even when this process dies.

Every engine process is started with `start_new_session=True` (its own process group)
and stopped with `lanes.base.procgroup.stop`. A small reaper sidecar holds the list of live groups and
kills them all when its stdin reaches EOF, which happens when this process exits for
any reason, SIGKILL included; so no browser, driver or Xvfb outlives a build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from lanes.base import procgroup

# The reaper: reads "+PGID" / "-PGID" / "dPATH" / "uPATH" lines; on EOF kills every group
# still listed, then removes every scratch folder still listed.
_REAPER = r"""
import os, shutil, signal, sys, time
live, dirs = set(), set()
for line in sys.stdin:
    line = line.rstrip("\n")
    op, arg = line[:1], line[1:]
    if op == "+": live.add(int(arg))
    elif op == "-": live.discard(int(arg))
    elif op == "d": dirs.add(arg)
    elif op == "u": dirs.discard(arg)
for g in live:
    try: os.killpg(g, signal.SIGKILL)
    except OSError: pass
time.sleep(0.5 if live else 0)
for d in dirs:
    shutil.rmtree(d, ignore_errors=True)
"""

_lock = threading.Lock()
_reaper: subprocess.Popen[str] | None = None


def _tell_reaper(line: str) -> None:
    global _reaper
    with _lock:
        if _reaper is None or _reaper.poll() is not None:
            _reaper = subprocess.Popen([sys.executable, "-c", _REAPER], stdin=subprocess.PIPE,
                                       text=True, start_new_session=True)
        assert _reaper.stdin is not None
        _reaper.stdin.write(line + "\n")
        _reaper.stdin.flush()


class Scratch:
    """A private scratch folder with its own XDG homes; removed on `remove()`."""

    def __init__(self, prefix: str = "nev-oracle-") -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self.env: dict[str, str] = {"HOME": str(self.path / "home")}
        for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache"),
                         ("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state"),
                         ("XDG_RUNTIME_DIR", "runtime")):
            d = self.path / sub
            d.mkdir(mode=0o700)
            self.env[var] = str(d)
        (self.path / "home").mkdir()
        _tell_reaper(f"d{self.path}")

    def sub(self, name: str) -> Path:
        d = self.path / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        _tell_reaper(f"u{self.path}")


def base_env(scratch: Scratch, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A minimal environment: PATH, locale, the scratch homes; no proxy or session variables."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "NO_AT_BRIDGE": "1", "GTK_A11Y": "none"}
    env.update(scratch.env)
    if extra:
        env.update(extra)
    return env


class Proc:
    """One engine process (and its group)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *,
                 stdout: int | None = subprocess.DEVNULL, stderr: int | None = subprocess.PIPE) -> None:
        self.argv = list(argv)
        self.popen = subprocess.Popen(self.argv, env=dict(env), stdin=subprocess.DEVNULL,
                                      stdout=stdout, stderr=stderr, start_new_session=True)
        self.pgid = self.popen.pid
        _tell_reaper(f"+{self.pgid}")

    @property
    def pid(self) -> int:
        return self.popen.pid

    def drain(self) -> None:
        """Keep reading the process's stderr in the background so it never blocks on a full pipe."""
        stream = self.popen.stderr
        if stream is None:
            return

        def run() -> None:
            try:
                while stream.read(65536):
                    pass
            except (OSError, ValueError):
                pass

        threading.Thread(target=run, daemon=True, name=f"drain-{self.pid}").start()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM the whole group, SIGKILL what is left after `grace` seconds."""
        procgroup.stop(self.pgid, grace=grace, leader=self.popen)
        try:
            self.popen.wait(2)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()
        _tell_reaper(f"-{self.pgid}")


def read_line_matching(stream: object, marker: str, timeout: float, what: str) -> str:
    """Read lines from a process's pipe until one contains `marker`; raise after `timeout`."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)  # type: ignore[arg-type]
    buf = b""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    fd = stream.fileno()  # type: ignore[attr-defined]
    while time.monotonic() < deadline:
        if not sel.select(max(0.0, deadline - time.monotonic())):
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            raw, buf = buf.split(b"\n", 1)
            line = raw.decode(errors="replace")
            if marker in line:
                sel.close()
                return line
            seen.append(line)
    sel.close()
    tail = " | ".join(seen[-3:])
    raise TimeoutError(f"{what} did not print {marker!r} within {timeout:.0f} s (last output: {tail or 'none'})")
