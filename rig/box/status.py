"""`nev box status`: each host and service of the box, up or not, with addresses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lanes.base import procs
from rig.box import netns, plan, waits

if TYPE_CHECKING:
    from rig.box.core import Box
    from rig.box.state import BoxInfo, BoxState

# process key suffix -> port it serves on its host's address (None: no port)
SERVICE_PORTS: dict[str, int | None] = {
    "sshd": plan.SSH_PORT, "nginx": plan.FORGE_PORT, "fcgiwrap": None,
    "litellm": plan.GATEWAY_PORT, "pool": plan.POOL_PORT, "haproxy": None,
}


def rows(box: Box) -> list[dict]:
    st = box.up_state()   # a box that is not up: the error names the boxes that are
    info = st.info
    assert info is not None
    have = netns.netns_list()
    rig = info.rig_netns
    out = [{"host": "(rig)", "addr": info.bridge_addr, "what": f"bridge {info.bridge} in {rig}",
            "up": netns.link_exists(info.bridge, rig), "detail": "the rig network"},
           {"host": "(dev box)", "addr": info.dev_addr, "what": f"outside link {box.name}-out",
            "up": netns.link_exists(f"{box.name}-out"), "detail": f"to the jump host {info.jump_addr}"}]
    hosts = {**info.hosts, "jump": {"addr": info.jump_rig_addr, "netns": f"{box.name}-jump", "role": "jump"}}
    # Ports are checked from inside the rig network: the development box has no route there.
    with netns.inside(rig):
        for host, h in hosts.items():
            out += _host_rows(st, info, have, rig, host, h)
    return out


def _host_rows(st: BoxState, info: BoxInfo, have: set[str], rig: str, host: str,
               h: dict[str, str]) -> list[dict]:
    out: list[dict] = []
    if h["role"] == "lane" and st.lanes_kind != "netns":
        # an LXC guest: its own network namespace, its veth on the bridge
        ok = netns.link_exists(h["netns"], rig)
        out.append({"host": host, "addr": h["addr"], "what": f"{st.lanes_kind} guest {info.name}-{host}",
                    "up": ok, "detail": "" if ok else "guest stopped or its veth missing"})
    else:
        ok = h["netns"] in have and netns.ns_has_eth0(h["netns"])
        out.append({"host": host, "addr": h["addr"], "what": f"netns {h['netns']}", "up": ok,
                    "detail": "" if ok else "namespace or its veth missing"})
    for key, rec in st.procs.items():
        if rec.host != host:
            continue
        svc = key.split(".", 1)[1]
        up = procs.alive(rec)
        detail = f"pid {rec.pid}" if up else "not running"
        port = SERVICE_PORTS.get(svc)
        if up and port is not None:
            if waits.port_open(h["addr"], port):
                detail += f", :{port} answers"
            else:
                up, detail = False, detail + f", :{port} does not answer"
        if up and svc == "haproxy":
            ports = [info.pools[p].proxy_port for p in info.pools]
            bad = [p for p in ports if not waits.port_open(h["addr"], p)]
            detail += f", :{','.join(map(str, ports))}" + (f" ({bad} silent)" if bad else " answer")
            up = not bad
        out.append({"host": host, "addr": h["addr"], "what": svc, "up": up, "detail": detail})
    return out
