"""`nev rig collect`: browse mDNS for a bounded time, fetch every HTTP inventory, merge
with the declared file and the static seeds, write the snapshot.

Presence in mDNS is not liveness: a host killed with SIGKILL sends no goodbye and
stays in browsers' caches for the PTR TTL (python-zeroconf: at least 1125 s), so
a host counts as up only when its HTTP inventory answers now. A host that exits
cleanly sends a goodbye and drops out of the listing. Hosts mDNS cannot reach
(other subnets) come from `seeds` in rig/rig.local.json (inventory URLs).

`--every S` keeps one browser running across rounds, as a collector service
would: its cache then holds a SIGKILLed host until the TTL runs out, and every
round reports that host down.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import requests

from bench.folknet import Folknet
from lanes.base.errors import ConfigError
from lanes.base.inventory_record import Host, HostDoc, Snapshot
from lanes.base.jsonfile import Fields
from lanes.base.mask import mask
from lanes.base.ui import info
from rig.inventory import inventoryfile
from rig.inventory.advertise import SERVICE_TYPE, check_interface, sanitize
from rig.inventory.reach import Reach, host_vars

FETCH_TIMEOUT = 3.0


@dataclass
class Found:
    """One host as listed by mDNS (or named by a seed)."""

    name: str
    url: str | None
    addresses: list[str] = field(default_factory=list)
    role: str | None = None
    sources: list[str] = field(default_factory=list)
    seen_after_s: float | None = None


def _name_of(service_name: str) -> str:
    return service_name[: -len("." + SERVICE_TYPE)] if service_name.endswith("." + SERVICE_TYPE) else service_name


class Browser:
    """A long-lived mDNS browser on one address; `listing()` is what its cache holds now."""

    def __init__(self, interface: str) -> None:
        from zeroconf import IPVersion, ServiceBrowser, ServiceStateChange, Zeroconf

        self._state_added = ServiceStateChange.Added
        self._state_removed = ServiceStateChange.Removed
        self.interface = interface
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._names: dict[str, float] = {}
        self._resolved: dict[str, Found] = {}
        self._changed = threading.Event()
        self.zc = Zeroconf(interfaces=[interface], ip_version=IPVersion.V4Only)
        self.browser = ServiceBrowser(self.zc, SERVICE_TYPE, handlers=[self._on_change])

    def _on_change(self, zeroconf: object, service_type: str, name: str,
                   state_change: object) -> None:
        with self._lock:
            if state_change == self._state_removed:
                self._names.pop(name, None)
                self._resolved.pop(name, None)
            elif state_change == self._state_added:
                self._names.setdefault(name, time.monotonic() - self.t0)
            else:  # updated: a restarted host may serve elsewhere now; resolve it again
                self._resolved.pop(name, None)
        self._changed.set()

    def _resolve(self, name: str, seen: float, timeout_ms: int) -> Found | None:
        from zeroconf import ServiceInfo

        si = ServiceInfo(SERVICE_TYPE, name)
        if not si.request(self.zc, timeout_ms):
            return None
        props = {(k.decode() if isinstance(k, bytes) else str(k)):
                 (v.decode() if isinstance(v, bytes) else v) for k, v in (si.properties or {}).items()}
        addrs = si.parsed_addresses()
        url = props.get("url") or (f"http://{addrs[0]}:{si.port}/inventory" if addrs else None)
        return Found(name=_name_of(name), url=url, addresses=addrs, role=props.get("role") or None,
                     sources=["mdns"], seen_after_s=round(seen, 3))

    def listing(self, duration: float, expect: int | None = None,
                names: set[str] | None = None) -> list[Found]:
        """Browse for `duration` seconds (less once `expect` hosts, or all of `names`, are resolved)."""
        end = time.monotonic() + duration
        while True:
            with self._lock:
                pending = [(n, s) for n, s in self._names.items() if n not in self._resolved]
            for name, seen in pending:
                left = max(0.2, end - time.monotonic())
                found = self._resolve(name, seen, int(min(left, 3.0) * 1000))
                if found is not None:
                    with self._lock:
                        if name in self._names:
                            self._resolved[name] = found
            with self._lock:
                n = len(self._resolved)
                have = {f.name for f in self._resolved.values()}
            if expect is not None and n >= expect:
                break
            if names is not None and names <= have:
                break
            now = time.monotonic()
            if now >= end:
                break
            self._changed.wait(min(0.1, end - now))
            self._changed.clear()
        with self._lock:
            return [self._resolved[n] for n in sorted(self._resolved) if n in self._names]

    def close(self) -> None:
        self.browser.cancel()
        self.zc.close()


def _session() -> requests.Session:
    """Rig traffic never goes through a proxy named in the environment."""
    sess = requests.Session()
    sess.trust_env = False
    return sess


Fetched = tuple[HostDoc | None, str | None]     # a host's inventory, or why it is down


def fetch(url: str, timeout: float = FETCH_TIMEOUT) -> Fetched:
    """A host's inventory, or why it is down (a field of the wrong type too: the line names it)."""
    try:
        r = _session().get(url, timeout=(timeout, timeout))
    except requests.Timeout:
        return None, f"inventory {url} did not answer within {timeout:g} s"
    except requests.RequestException as e:
        return None, mask(f"inventory {url} unreachable: {type(e).__name__}")
    if r.status_code != 200:
        return None, f"inventory {url}: HTTP {r.status_code}"
    try:
        doc = r.json()
    except ValueError:
        return None, f"inventory {url}: not JSON"
    if not isinstance(doc, dict):
        return None, f"inventory {url}: not a JSON object"
    # Another host's software may be careless: nothing secret-shaped is ever stored either.
    try:
        return HostDoc.from_json(sanitize(doc, []), Fields(f"inventory {url}"), ""), None
    except ConfigError as e:
        return None, e.message.removesuffix("; fix the file")


def fetch_all(found: list[Found], timeout: float = FETCH_TIMEOUT) -> dict[str, Fetched]:
    """Fetch every inventory at once (one thread each), keyed by URL."""
    urls = sorted({f.url for f in found if f.url})
    out: dict[str, Fetched] = {}
    lock = threading.Lock()

    def one(u: str) -> None:
        res = fetch(u, timeout)
        with lock:
            out[u] = res

    threads = [threading.Thread(target=one, args=(u,), daemon=True) for u in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 1.0)
    with lock:
        return {u: out.get(u, (None, f"inventory {u} did not answer within {timeout:g} s")) for u in urls}


def merge(found: list[Found], seeds: list[str], fetched: dict[str, Fetched],
          at: dt.datetime) -> dict[str, Host]:
    """The hosts section (pure): one entry per host, up only if its inventory answered."""
    hosts: dict[str, Host] = {}
    by_url: dict[str, str] = {}
    for f in found:
        doc, err = fetched.get(f.url or "", (None, "no inventory URL in its mDNS record"))
        hosts[f.name] = Host(
            name=f.name,
            url=f.url,
            addresses=f.addresses,
            role=(doc.role if doc else None) or f.role,
            sources=list(f.sources),
            status="up" if doc is not None else "down",
            error=err,
            seen_after_s=f.seen_after_s,
            checked_at=inventoryfile.iso(at),
            inventory=doc,
        )
        if f.url:
            by_url[f.url] = f.name
    for url in seeds:
        if url in by_url:
            hosts[by_url[url]].sources.append("seed")
            continue
        doc, err = fetched.get(url, (None, "not fetched"))
        netloc = urlsplit(url).netloc or url
        name = (doc.name if doc else None) or netloc
        if name in hosts:
            name = netloc
        hosts[name] = Host(name=name, url=url, addresses=[], role=doc.role if doc else None,
                           sources=["seed"], status="up" if doc is not None else "down", error=err,
                           seen_after_s=None, checked_at=inventoryfile.iso(at), inventory=doc)
    return hosts


def pool_hosts(hosts: dict[str, Host], pool: str) -> list[str]:
    return sorted(n for n, h in hosts.items()
                  if h.inventory is not None and pool in h.inventory.pools)


def apply(snap: Snapshot, hosts: dict[str, Host], declared: Folknet | None,
          at: dt.datetime) -> None:
    if declared is not None:
        inventoryfile.merge_declared(snap, declared, at.date())
    snap.hosts = hosts
    for a in snap.aliases.values():
        a.pool_hosts = pool_hosts(hosts, a.pool or "")
    snap.collected_at = inventoryfile.iso(at)


def collect_round(browser: Browser | None, seeds: list[str], path: Path, declared: Folknet | None,
                  duration: float, expect: int | None) -> Snapshot:
    found = browser.listing(duration, expect) if browser is not None else []
    extra = [Found(name=u, url=u, sources=["seed"]) for u in seeds]
    fetched = fetch_all(found + extra)
    at = inventoryfile.now_utc()
    hosts = merge(found, seeds, fetched, at)

    def change(snap: Snapshot) -> None:
        apply(snap, hosts, declared, at)

    return inventoryfile.update(path, change, at)


def ansible(snap: Snapshot, reach: Reach | None = None) -> dict[str, object]:
    """Ansible's dynamic-inventory `--list` form: a group per role, `down`, `_meta.hostvars`.
    With `reach`, every host also gets what Ansible needs to reach it from the development box
    (user, port, key file, pinned host keys, the jump host: `reach.host_vars`). A JSON document
    only built to be printed: each host's vars hold the served fields as they were served."""
    groups: dict[str, list[str]] = {}
    hostvars: dict[str, dict[str, object]] = {}
    for name, h in sorted(snap.hosts.items()):
        inv = h.inventory
        addrs = h.addresses or ([inv.address] if inv and inv.address else [])
        url_host = urlsplit(h.url).hostname if h.url else None
        if not addrs and url_host:
            addrs = [url_host]
        hv: dict[str, object] = {k: v for k, v in (("nev_status", h.status), ("nev_url", h.url),
                                                    ("nev_role", h.role)) if v is not None}
        if addrs:
            hv["ansible_host"] = addrs[0]
        if reach is not None:
            hv.update(host_vars(addrs[0] if addrs else None, inv, reach))
        for k in ("hardware_class", "gpus", "serving", "models", "pools", "software"):
            if inv is not None and k in inv.doc:
                hv[f"nev_{k}"] = inv.doc[k]
        hostvars[name] = hv
        for role in (inv.roles if inv else ()) or ([h.role] if h.role else []):
            groups.setdefault(str(role), []).append(name)
        if h.status != "up":
            groups.setdefault("down", []).append(name)
    out: dict[str, object] = {g: {"hosts": hs} for g, hs in sorted(groups.items())}
    out["all"] = {"hosts": sorted(hostvars), "children": sorted(groups)}
    out["_meta"] = {"hostvars": hostvars}
    return out


def run(interface: str | None, seeds: list[str], path: Path, declared: Folknet | None, timeout: float,
        expect: int | None, every: float | None, rounds: int | None) -> Snapshot:
    browser = None
    if interface is not None:
        browser = Browser(check_interface(interface))
    elif not seeds:
        check_interface(None)
    else:
        info("mDNS browse skipped (no --interface or NEV_MDNS_INTERFACE): seeds only")
    try:
        n = 0
        while True:
            t0 = time.monotonic()
            snap = collect_round(browser, seeds, path, declared, timeout, expect)
            n += 1
            up = sorted(k for k, h in snap.hosts.items() if h.up)
            down = sorted(k for k, h in snap.hosts.items() if not h.up)
            info(f"collect round {n} ({time.monotonic() - t0:.1f} s): {len(up)} up"
                 + (f", down: {', '.join(down)}" if down else "") + f" -> {path}")
            if every is None or (rounds is not None and n >= rounds):
                return snap
            time.sleep(max(0.0, every - (time.monotonic() - t0)))
    finally:
        if browser is not None:
            browser.close()
