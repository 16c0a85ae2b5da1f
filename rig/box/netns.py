"""The box's network, as the real rig's: two networks and one way in.

The rig network is a bridge inside a namespace of its own (`<name>-rig`), with one network
namespace per host joined to it by a veth; the root namespace (the development box) has no
interface, address or route on it (the rig's /24 is an `unreachable` route there). The jump
host's namespace has a second interface, the outside link, a /30 shared with the root
namespace only. Only what is missing is created (so `up` repairs a half-alive box), and `down`
removes exactly the objects named after this box.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lanes.base import procs
from lanes.base.errors import NevError
from rig.box import guests, plan, state
from rig.box.state import BoxInfo


def _run(argv: list[str], input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cp = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=60)
    if check and cp.returncode != 0:
        msg = " ".join((cp.stderr or cp.stdout).split())
        raise NevError(f"{' '.join(argv[:4])} failed: {msg or 'exit ' + str(cp.returncode)}"
                       + (f" (input: {input.strip().splitlines()})" if input else ""))
    return cp


def ip_batch(cmds: list[str], ns: str | None = None) -> None:
    if cmds:
        _run(["ip", *(["-n", ns] if ns else []), "-batch", "-"], input="\n".join(cmds) + "\n")


def netns_list() -> set[str]:
    d = Path("/run/netns")
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def link_exists(dev: str, ns: str | None = None) -> bool:
    """Whether interface `dev` exists in namespace `ns` (the root namespace for None)."""
    if ns is None:
        return Path("/sys/class/net", dev).exists()
    if ns not in netns_list():
        return False
    return _run(["ip", "-n", ns, "link", "show", "dev", dev], check=False).returncode == 0


def ns_has_addr(ns: str, dev: str = "eth0") -> bool:
    cp = _run(["ip", "-n", ns, "-o", "-4", "addr", "show", "dev", dev], check=False)
    return cp.returncode == 0 and " inet " in cp.stdout


def ns_has_eth0(ns: str) -> bool:
    return ns_has_addr(ns, "eth0")


def ensure(layout: plan.Layout, skip_roles: frozenset[str] = frozenset()) -> list[str]:
    """Create the rig namespace and bridge, the host namespaces and veths, and the jump host's
    outside link that are missing; return what was made. Hosts of a role in `skip_roles` get
    no namespace or veth (LXC lanes bring their own)."""
    made: list[str] = []
    rig = layout.rig_netns
    if rig not in netns_list():
        _run(["ip", "netns", "add", rig])
        made.append(f"made netns {rig}")
    cmds: list[str] = []
    if not link_exists(layout.bridge, rig):
        cmds += plan.bridge_cmds(layout)
        made.append(f"made bridge {layout.bridge} (in {rig})")
    hosts = [h for h in [*layout.hosts(), layout.jump()] if h.role not in skip_roles]
    remade = _ensure_hosts(layout, hosts, cmds, made)
    ip_batch(cmds, rig)
    for h, ns_side in remade:
        ip_batch(ns_side, h.netns)
    if remade:
        _forget_macs(layout, [h.addr for h, _ in remade])
    return made + _ensure_outside_link(layout)


def _ensure_hosts(layout: plan.Layout, hosts: list[plan.Host], cmds: list[str],
                  made: list[str]) -> list[tuple[plan.Host, list[str]]]:
    """Each host's namespace, made where missing; the rig side of each missing veth added to
    `cmds`. The hosts whose veth is (re)made, with the commands to run inside them."""
    have = netns_list()
    remade = []
    for h in hosts:
        if h.netns not in have:
            _run(["ip", "netns", "add", h.netns])
            made.append(f"made netns {h.netns}")
        if not link_exists(h.veth, layout.rig_netns) or not ns_has_eth0(h.netns):
            if link_exists(h.veth, layout.rig_netns):
                cmds.append(f"link del {h.veth}")
            rig_side, ns_side = plan.host_cmds(layout, h)
            cmds += rig_side
            remade.append((h, ns_side))
            made.append(f"made veth {h.veth}")
    return remade


def _forget_macs(layout: plan.Layout, addrs: list[str]) -> None:
    """A recreated host has a new MAC: every host that talked to it (the jump host first) must
    forget the old one, or connections stall until the entry times out."""
    _run(["ip", "-n", layout.rig_netns, "neigh", "flush", "dev", layout.bridge], check=False)
    have = netns_list()
    for h in [*layout.hosts(), layout.jump()]:
        if h.netns in have:
            for addr in addrs:
                _run(["ip", "-n", h.netns, "neigh", "flush", "to", addr], check=False)


def _ensure_outside_link(layout: plan.Layout) -> list[str]:
    jump_ns = layout.jump().netns
    if link_exists(layout.outside_veth) and ns_has_addr(jump_ns, "eth1"):
        # The unreachable route may have been removed by hand: put it back (idempotent).
        _run(["ip", "route", "replace", "unreachable", f"{layout.net}.0/24"], check=False)
        return []
    if link_exists(layout.outside_veth):
        _run(["ip", "link", "del", layout.outside_veth], check=False)
    root_side, jump_side = plan.outside_cmds(layout)
    ip_batch(root_side)
    ip_batch(jump_side, jump_ns)
    return [f"made outside link {layout.outside_veth} ({layout.addr(plan.DEV_OCTET)} <-> "
            f"{layout.addr(plan.JUMP_OUT_OCTET)})"]


def box_netns(name: str) -> list[str]:
    pre = plan.netns_prefix(name)
    return sorted(n for n in netns_list() if n.startswith(pre))


def box_links(name: str) -> list[str]:
    """The box's interfaces in the root namespace (the outside link; LXC lanes' veths)."""
    pre = plan.netns_prefix(name)
    return sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(pre))


def root_routes_to(net: str) -> list[str]:
    """The root namespace's routes inside the box's /24 (pure read; for checks and `down`)."""
    cp = _run(["ip", "-o", "-4", "route", "show", "table", "all"], check=False)
    return [ln for ln in cp.stdout.splitlines() if f" {net}." in f" {ln}" or ln.startswith(f"{net}.")
            or f"unreachable {net}." in ln]


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


@contextmanager
def inside(ns: str) -> Iterator[None]:
    """Run the block's new sockets in namespace `ns` (this thread only; restored after).

    The box uses it for its own health checks and its stand-in pools' control route: the
    development box itself has no way onto the rig network but through the jump host.
    """
    target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise NevError(f"cannot enter network namespace {ns}: {os.strerror(ctypes.get_errno())}; "
                           "run `nev box up` to repair the box")
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:
                raise NevError(f"cannot return from network namespace {ns}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(target)
        os.close(own)


def ns_pids(ns: str) -> list[int]:
    cp = _run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in cp.stdout.split() if x.isdigit()]


def remove(name: str, extra_netns: list[str] | None = None, net: str | None = None) -> list[str]:
    """Delete every namespace (the rig's with its bridge and veths), the outside link, a bridge
    left in the root namespace by an older box, and the unreachable route of box `name`."""
    gone: list[str] = []
    cmds = [f"link del {dev}" for dev in box_links(name)]
    gone += [f"link {dev}" for dev in box_links(name)]
    for ns in sorted(set(box_netns(name)) | set(extra_netns or [])):
        if ns in netns_list():
            cmds.append(f"netns del {ns}")
            gone.append(ns)
    br = f"{name}br"
    if link_exists(br):
        cmds.append(f"link del {br}")
        gone.append(br)
    if net:
        cp = _run(["ip", "route", "show", "type", "unreachable", f"{net}.0/24"], check=False)
        if cp.stdout.strip():
            cmds.append(f"route del unreachable {net}.0/24")
            gone.append(f"route unreachable {net}.0/24")
    if cmds:
        _run(["ip", "-force", "-batch", "-"], input="\n".join(cmds) + "\n", check=False)
    return gone


def default_routes(ns: str) -> list[str]:
    cp = _run(["ip", "-n", ns, "route", "show", "default"], check=False)
    return [ln for ln in cp.stdout.splitlines() if ln.strip()]


def lane_pid(info: BoxInfo, host: str) -> int | None:
    """A process inside the lane to enter: an LXC guest's current init (it changes when the
    guest reboots itself), a netns lane's recorded sshd; None when the lane is down."""
    st = state.read_state(info.dir)
    if st is None:
        return None
    if st.lanes_kind != "netns":
        return guests.init_pid(info.dir, host)
    rec = st.procs.get(f"{host}.sshd")
    return rec.pid if rec is not None and procs.alive(rec) else None


def run_in(info: BoxInfo, host: str, argv: list[str], **kw: Any) -> subprocess.CompletedProcess:
    """Run `argv` in a host's network namespace; for a lane also inside its mount namespace
    (entered through its sshd), so /srv/lane is the lane's own. `kw`: subprocess.run's keyword
    arguments, passed on as given (typeshed types them by overload, so no narrower type fits)."""
    h = info.hosts.get(host)
    if h is None:
        raise NevError(f"no host {host!r} in box {info.name}; hosts: {', '.join(info.hosts)}")
    if h["role"] == "lane":
        st = state.read_state(info.dir)
        pid = lane_pid(info, host)
        if pid is None:
            raise NevError(f"{host} is not running; run `nev box up` to repair the box")
        # An LXC guest has its own user namespace: enter it too, so `runuser -u lane` is the
        # guest's lane (uid 1000 inside, 101000 outside) and root is the guest's root.
        userns = ["-U"] if st and st.lanes_kind != "netns" else []
        full = ["nsenter", "-t", str(pid), *userns, "-n", "-m", "--", *argv]
    else:
        full = ["ip", "netns", "exec", h["netns"], *argv]
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run(full, **kw)


def remove_some(namespaces: list[str]) -> None:
    """Delete some of the box's hosts (veth of the same name first, then the namespace)."""
    cmds = []
    for ns in namespaces:
        if link_exists(ns):
            cmds.append(f"link del {ns}")
        procs_left = ns_pids(ns)
        if procs_left:
            procs.kill_pids(procs_left)
        cmds.append(f"netns del {ns}")
    if cmds:
        _run(["ip", "-force", "-batch", "-"], input="\n".join(cmds) + "\n", check=False)
