"""The lane end of the shared store written only by nev: a gate's command sees the share's store
(`corpora/`, `ground-truth/`, `suites/`) read-only, and what it asks to be built or fetched there
nev's own store builder does outside its jail (docs/sandbox.md, "A gate's jail").

For each jailed gate on a lane with a share, the agent binds a Unix socket in a folder of the
gate's payload (`<payload>/store/store.sock`, read-only in the jail, which names it in
`NEV_STORE_SOCKET`) and watches it. Nothing more runs unless the gate asks: on the first
connection, the lane's own nev (`~/.local/bin/nev`, the install the gate's own `nev` is; a gate
cannot write it) starts outside the jail as `nev oracle serve-store --fd N` with the listening
socket, and serves the gate until it ends (`bench.oracle.store_service`). So a gate that builds
nothing pays one socket, and no gate's command is ever the process that writes the store.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import threading

from lanes.agent import layout
from lanes.agent.layout import STORE_SOCKET


class StoreService:
    """One gate's store builder: `open` before the command, `close` after it."""

    def __init__(self, folder: str, home: str, env: dict[str, str]) -> None:
        self.folder = folder
        self.nev = os.path.join(layout.home_file(home, layout.LOCAL_BIN), "nev")
        self.env = env
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the builder starts, or the gate ends: one of the two

    def open(self) -> bool:
        """The socket bound and watched; False (nothing made) where there is no nev to serve it."""
        if not os.access(self.nev, os.X_OK):
            return False
        shutil.rmtree(self.folder, ignore_errors=True)
        os.makedirs(self.folder, mode=0o700)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # through the folder's descriptor: a socket's path may hold only 107 bytes
        dfd = os.open(self.folder, os.O_PATH | os.O_DIRECTORY)
        try:
            sock.bind(f"/proc/self/fd/{dfd}/{STORE_SOCKET}")
        except OSError:
            sock.close()
            raise
        finally:
            os.close(dfd)
        sock.listen(8)
        self.sock = sock
        threading.Thread(target=self._watch, args=(sock.fileno(),), daemon=True).start()
        return True

    def _watch(self, fd: int) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([fd], [], [], 0.2)
            except (OSError, ValueError):  # closed: the gate ended
                return
            with self._lock:
                if not ready or self._stop.is_set():
                    continue
                self.proc = subprocess.Popen(
                    [self.nev, "oracle", "serve-store", "--fd", str(fd)],
                    pass_fds=(fd,),
                    cwd=self.folder,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
                return

    def close(self) -> None:
        """The builder stopped (with whatever it started), the socket and its folder gone; the
        watcher is not waited for (it ends at its next look, or finds the socket closed)."""
        with self._lock:
            self._stop.set()
        p = self.proc
        if p is not None and p.poll() is None:
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(p.pid, sig)
                except OSError:
                    break
                try:
                    p.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.sock is not None:
            self.sock.close()
        shutil.rmtree(self.folder, ignore_errors=True)
