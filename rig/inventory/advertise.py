"""`nev rig advertise`: this host's mDNS service and its read-only HTTP inventory.

The service `_nevinv._tcp.local.` (TXT: schema version, role, inventory URL) is
registered on the one address given, never on every interface (a real host has
an uplink the rig must not talk to). The HTTP inventory answers GET /inventory
and GET /health on that address only. Nothing secret is ever served: fields
with a secret-shaped name are dropped and every string is masked. A clean exit
(SIGTERM, SIGINT) unregisters the service, so browsers see the goodbye at once.
"""

from __future__ import annotations

import ipaddress
import json
import os
import platform
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from lanes.base import jsonfile
from lanes.base.errors import ConfigError, UsageError
from lanes.base.mask import is_secret_name, mask, register_secret
from lanes.base.ui import info
from rig.inventory import inventoryfile

if TYPE_CHECKING:
    from zeroconf import ServiceInfo, Zeroconf

SERVICE_TYPE = "_nevinv._tcp.local."
SCHEMA = 1
DECLARED_KEYS = ("name", "role", "roles", "hardware_class", "gpus", "serving", "models", "pools",
                 "ssh", "software", "notes")


def check_interface(addr: str | None, what: str = "--interface") -> str:
    if not addr:
        raise UsageError(f"give {what} ADDR (the one address to use for mDNS; never all interfaces), "
                         "or set NEV_MDNS_INTERFACE")
    try:
        ip = ipaddress.IPv4Address(addr)
    except ValueError:
        raise UsageError(f"{what} {addr!r} is not an IPv4 address; give this host's address on the rig network") from None
    if ip.is_unspecified:
        raise UsageError(f"{what} {addr} would mean every interface; give one address")
    return addr


def sanitize(value: object, dropped: list[str], where: str = "") -> object:
    """Drop secret-named fields and mask every string, recursively (a JSON value)."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for k, v in value.items():
            path = f"{where}.{k}" if where else str(k)
            if is_secret_name(str(k)):
                dropped.append(path)
                continue
            out[str(k)] = sanitize(v, dropped, path)
        return out
    if isinstance(value, list):
        return [sanitize(v, dropped, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        return mask(value)
    return value


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def build(declared: dict[str, object], addr: str, port: int, name: str,
          started_at: str) -> tuple[dict[str, object], list[str]]:
    """The inventory document this host serves (pure but for the facts read from this host).
    `declared` is the host inventory file as `read_declared` checked it; the document is JSON
    built to be served, its declared fields passed through."""
    doc: dict[str, object] = {k: declared[k] for k in DECLARED_KEYS if k in declared}
    given = declared.get("roles")
    declared_roles = [str(r) for r in given] if isinstance(given, list) else []
    given_role = declared.get("role")
    role = (given_role if isinstance(given_role, str) and given_role
            else (declared_roles or ["host"])[0])
    roles = declared_roles or [role]
    software: dict[str, object] = {"nev": _version("nev"), "python": platform.python_version(),
                                   "kernel": platform.release(), "zeroconf": _version("zeroconf")}
    extra_sw = declared.get("software")
    if isinstance(extra_sw, dict):
        software.update(extra_sw)
    doc.update({"schema": SCHEMA, "name": name, "role": role, "roles": roles,
                "address": addr, "url": f"http://{addr}:{port}/inventory",
                "cpus": os.cpu_count(), "memory_gb": _memory_gb(), "software": software,
                "started_at": started_at})
    for k in ("gpus", "serving", "models", "pools"):
        doc.setdefault(k, [])
    dropped: list[str] = []
    clean = sanitize(doc, dropped)
    assert isinstance(clean, dict)
    notes = [f"field {d} dropped (secret-named fields are never served)" for d in dropped]
    notes += [f"field {k} ignored (not an inventory field: {', '.join(DECLARED_KEYS)})"
              for k in declared if k not in DECLARED_KEYS]
    return clean, notes


def read_declared(path: Path | None) -> dict[str, object]:
    """The host inventory file (its known fields checked; the rest passed through as declared)."""
    if path is None:
        return {}
    data = jsonfile.load(path, "host inventory file")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: host inventory file must be a JSON object; fix the file")
    f = jsonfile.Fields(path)
    for k in ("name", "role", "hardware_class"):
        f.get(data, k, str, "", required=False)
    for k in ("roles", "models", "pools"):
        f.str_list(data, k, "")
    for k in ("gpus", "serving"):
        f.get(data, k, list, "", required=False)
    ssh = f.get(data, "ssh", dict, "", required=False)
    if ssh is not None:   # how this host is reached over SSH: {"user": ..., "port": ...}
        f.get(ssh, "user", str, "ssh", required=False)
        f.get(ssh, "port", int, "ssh", required=False)
    return data


def default_name(addr: str) -> str:
    # Several network namespaces share one hostname: the address keeps names apart.
    return f"{socket.gethostname().split('.')[0]}-{addr.replace('.', '-')}"


class _Handler(BaseHTTPRequestHandler):
    body: bytes = b"{}"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if path in ("/inventory", "/inventory.json", "/"):
            self._send(200, self.body)
        elif path == "/health":
            self._send(200, b'{"ok": true}\n')
        else:
            self._send(404, b'{"error": "not found: try /inventory"}\n')

    do_HEAD = do_GET  # noqa: N815

    def do_POST(self) -> None:  # noqa: N802
        self._send(405, b'{"error": "read-only"}\n')

    do_PUT = do_DELETE = do_PATCH = do_POST  # noqa: N815

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Advertiser:
    """The HTTP inventory plus the mDNS registration; `start()` then `stop()`."""

    addr: str
    port: int
    name: str
    doc: dict[str, object]      # the served document (`build`)

    def __post_init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None
        self._zc: Zeroconf | None = None
        self._info: ServiceInfo | None = None

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self._bound_port}/inventory"

    @property
    def _bound_port(self) -> int:
        return self._server.server_address[1] if self._server else self.port

    def start(self) -> None:
        from zeroconf import (
            BadTypeInNameException,
            IPVersion,
            NamePartTooLongException,
            NonUniqueNameException,
            ServiceInfo,
            Zeroconf,
        )

        handler = type("Handler", (_Handler,), {"body": (json.dumps(self.doc, indent=2) + "\n").encode()})
        try:
            self._server = ThreadingHTTPServer((self.addr, self.port), handler)
        except OSError as e:
            raise ConfigError(f"cannot serve the inventory on {self.addr}:{self.port}: {e.strerror}; "
                              "is another advertiser running, or is the address not on this host?") from None
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True, name="inventory-http").start()
        # The served document names its own URL: patch the port when 0 picked one.
        if self.port == 0:
            self.doc["url"] = self.url
            self._server.RequestHandlerClass.body = (json.dumps(self.doc, indent=2) + "\n").encode()  # type: ignore[attr-defined]
        try:
            self._zc = Zeroconf(interfaces=[self.addr], ip_version=IPVersion.V4Only)
        except OSError as e:
            raise ConfigError(f"cannot use {self.addr} for mDNS: {e.strerror or e}; "
                              "give this host's own address with --interface") from None
        try:
            info = ServiceInfo(
                SERVICE_TYPE, f"{self.name}.{SERVICE_TYPE}", addresses=[socket.inet_aton(self.addr)],
                port=self._bound_port, server=f"{self.name}.local.",
                properties={"v": str(SCHEMA), "role": str(self.doc.get("role", "")), "url": self.url})
        except (BadTypeInNameException, NamePartTooLongException) as e:
            raise UsageError(f"--name {self.name!r} is not a usable mDNS name ({type(e).__name__}); "
                             "use letters, digits and dashes, at most 63") from None
        try:
            self._zc.register_service(info)
        except NonUniqueNameException:
            raise ConfigError(f"another host already advertises {self.name!r} on this network; "
                              "give this one its own --name") from None
        self._info = info

    def stop(self) -> None:
        if self._zc is not None:
            try:
                if self._info is not None:
                    self._zc.unregister_service(self._info)  # the goodbye
            finally:
                self._zc.close()
                self._zc = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def run(interface: str | None, inventory: Path | None, port: int, name: str | None) -> int:
    addr = check_interface(interface)
    for k, v in os.environ.items():
        if is_secret_name(k):
            register_secret(v)
    declared = read_declared(inventory)
    given = declared.get("name")
    host_name = name or (given if isinstance(given, str) else None) or default_name(addr)
    doc, dropped = build(declared, addr, port, host_name, inventoryfile.iso(inventoryfile.now_utc()))
    for note in dropped:
        info(f"inventory: {note}")
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    adv = Advertiser(addr, port, host_name, doc)
    try:
        adv.start()
        info(f"advertising {host_name} ({SERVICE_TYPE}) with its inventory at {adv.url}")
        sys.stderr.flush()
        while not stop.wait(3600):
            pass
    finally:
        adv.stop()
        for s, h in old.items():
            signal.signal(s, h)
    info(f"stopped advertising {host_name}")
    return 0
