"""A TCP relay from an address on the rig network to a port on this machine, for tests.

The rig's apt cache is a host of the rig network that also has an uplink. The box's rig network
has none, so a test that provisions a guest runs apt-cacher-ng here (where the package mirror
is reachable) and relays one port of the rig network to it: the listening socket is made inside
the rig network's namespace, the upstream connections in this one.
"""

from __future__ import annotations

import select
import socket
import threading

from lanes.base.ssh import pipe
from rig.box.netns import inside


class Relay:
    def __init__(self, netns: str, listen: tuple[str, int], target: tuple[str, int]) -> None:
        with inside(netns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(listen)
            self.sock.listen(32)
        self.target = target
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)   # started here: this namespace
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            r, _, _ = select.select([self.sock], [], [], 0.2)
            if not r:
                continue
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(2)
