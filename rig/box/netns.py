"""The box's network: a bridge in the root namespace, one network namespace per host, veths.

Only what is missing is created (so `up` repairs a half-alive box), and `down` removes exactly
the objects named after this box.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lanes.errors import NevError
from rig.box import plan

if TYPE_CHECKING:
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


def link_exists(dev: str) -> bool:
    return Path("/sys/class/net", dev).exists()


def ns_has_eth0(ns: str) -> bool:
    cp = _run(["ip", "-n", ns, "-o", "-4", "addr", "show", "dev", "eth0"], check=False)
    return cp.returncode == 0 and " inet " in cp.stdout


def ensure(layout: plan.Layout, skip_roles: frozenset[str] = frozenset()) -> list[str]:
    """Create the bridge, namespaces and veths that are missing; return what was made. Hosts of
    a role in `skip_roles` get none (LXC lanes bring their own)."""
    made: list[str] = []
    cmds: list[str] = []
    if not link_exists(layout.bridge):
        cmds += plan.bridge_cmds(layout)
        made.append(f"made bridge {layout.bridge}")
    have = netns_list()
    inside: list[tuple[str, list[str]]] = []
    for h in layout.hosts():
        if h.role in skip_roles:
            continue
        if h.netns not in have:
            _run(["ip", "netns", "add", h.netns])
            made.append(f"made netns {h.netns}")
        if not link_exists(h.veth) or not ns_has_eth0(h.netns):
            if link_exists(h.veth):
                cmds.append(f"link del {h.veth}")
            root_side, ns_side = plan.host_cmds(layout, h)
            cmds += root_side
            inside.append((h.netns, ns_side))
            made.append(f"made veth {h.veth}")
    ip_batch(cmds)
    for ns, c in inside:
        ip_batch(c, ns)
    if inside:
        # A recreated host has a new MAC: forget the old one, or connections stall for seconds.
        _run(["ip", "neigh", "flush", "dev", layout.bridge], check=False)
    return made


def box_netns(name: str) -> list[str]:
    pre = plan.netns_prefix(name)
    return sorted(n for n in netns_list() if n.startswith(pre))


def box_links(name: str) -> list[str]:
    pre = plan.netns_prefix(name)
    return sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(pre))


def ns_pids(ns: str) -> list[int]:
    cp = _run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in cp.stdout.split() if x.isdigit()]


def remove(name: str, extra_netns: list[str] | None = None) -> list[str]:
    """Delete every namespace, veth and the bridge named after box `name`."""
    gone: list[str] = []
    cmds = [f"link del {dev}" for dev in box_links(name)]
    for ns in sorted(set(box_netns(name)) | set(extra_netns or [])):
        if ns in netns_list():
            cmds.append(f"netns del {ns}")
            gone.append(ns)
    br = f"{name}br"
    if link_exists(br):
        cmds.append(f"link del {br}")
        gone.append(br)
    if cmds:
        _run(["ip", "-force", "-batch", "-"], input="\n".join(cmds) + "\n", check=False)
    return gone


def default_routes(ns: str) -> list[str]:
    cp = _run(["ip", "-n", ns, "route", "show", "default"], check=False)
    return [ln for ln in cp.stdout.splitlines() if ln.strip()]


def run_in(info: BoxInfo, host: str, argv: list[str], **kw: Any) -> subprocess.CompletedProcess:
    """Run `argv` in a host's network namespace; for a lane also inside its mount namespace
    (entered through its sshd), so /srv/lane is the lane's own."""
    h = info.hosts.get(host)
    if h is None:
        raise NevError(f"no host {host!r} in box {info.name}; hosts: {', '.join(info.hosts)}")
    if h["role"] == "lane":
        from rig.box import state

        st = state.read_state(info.dir)
        rec = st.procs.get(f"{host}.sshd") if st else None
        from rig.box.procs import alive

        if rec is None or not alive(rec):
            raise NevError(f"{host}'s sshd is not running; run `nev box up` to repair the box")
        # An LXC guest has its own user namespace: enter it too, so `runuser -u lane` is the
        # guest's lane (uid 1000 inside, 101000 outside) and root is the guest's root.
        userns = ["-U"] if st and st.lanes_kind != "netns" else []
        full = ["nsenter", "-t", str(rec.pid), *userns, "-n", "-m", "--", *argv]
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
            from rig.box.procs import kill_pids

            kill_pids(procs_left)
        cmds.append(f"netns del {ns}")
    if cmds:
        _run(["ip", "-force", "-batch", "-"], input="\n".join(cmds) + "\n", check=False)
