"""The box's inventory services, described purely: one advertiser per host, the collector on lane0.

Every host of the box advertises with its real role and what it serves (`nev rig advertise
--inventory FILE`, on its own rig address only), and lane0 runs the collector (`nev rig collect
--every S`) as the `lane` user, so the snapshot lands where a lane keeps it
(`~/.local/share/nev/inventory.json` in the lane's home, the default of NEV_INVENTORY), where
`nev rig status --lane 0` and `nev job run` on the lane read it. This module only says what to
run, where, as whom and with which files; `Box` (core.py) starts and records the processes.

| service | host | runs in | as | command |
|---|---|---|---|---|
| `<host>.advertise` | forge, gateway, proxy, gpuN | `ip netns exec <netns>` | root | `nev rig advertise --interface ADDR --port 8787 --name HOST --inventory FILE` |
| `laneN.advertise` | each lane | the lane's network and mount namespaces (`nsenter -t <sshd pid> -n -m`; an LXC guest's user namespace too, `-U`) | `lane` (`setpriv`) | the same |
| `lane0.collect` | lane0 | the same as lane0's advertiser | `lane` | `nev rig collect --interface ADDR --every 60 --expect N` |

Lane services run the lane's own nev (`~/.local/bin/nev`, put there by `nev lane install`, as on
the real rig: this machine's Python may live in a mode-700 folder such as /root/.pyenv, which the
lane user cannot enter), so the lane must have this nev before they start
(`inventory_up.prepare`); service hosts run this checkout's nev as root.
A lane's files (its `--inventory`, and for the collector the declared folknet and the rig file)
are copied into the lane's own home (`~/.config/nev/`), since the box folder may sit under a
mode-700 folder (pytest's, CI's) the lane user cannot enter, and an LXC guest does not see the
box folder at all (its home is a bind of the box's lane home, so the copies are what it sees).
A host of role `jump` gets none: nothing of this project runs on the jump host.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lanes import selfinstall
from lanes.base import jsonfile, settings
from rig.box import plan
from rig.box.lanes_netns import HOME, LANE_ROOT, LANE_SHARED, USER

PORT = settings.get_int(settings.INVENTORY_PORT, {})      # its default; tests start their own on 8790+
COLLECTOR = "lane0"
COLLECT_EVERY = 30
PROBE_EVERY = 60        # the box's lane probes every minute (NEV_PROBE_EVERY; the rig: 300)
COLLECT_TIMEOUT = 3
LANE_NEV = f"{HOME}/.local/bin/nev"                        # `nev lane install` links it there
HARDWARE_CLASS = "rig-in-a-box"
SKIP_ROLES = frozenset({"jump"})
_INVENTORY_CODE = plan.PROJECT / "rig" / "inventory"


@dataclass(frozen=True)
class Service:
    """One inventory process of the box.

    `inner` is the command as run inside the host's namespaces; `argv()` is the whole command
    to spawn from the root namespace: `ip netns exec NETNS ...` for a service host, `nsenter -t
    PID -n -m -- ...` for a lane (PID: the lane's recorded sshd, whose namespaces hold the
    lane's own /home/lane and /srv/lane).
    """

    key: str                       # "lane0.advertise", "gateway.advertise", "lane0.collect"
    host: str
    netns: str
    in_lane: bool
    user: str                      # who the process runs as (lane services: `setpriv` to `lane`)
    inner: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path = plan.PROJECT
    log: Path = Path("/dev/null")
    conf_files: tuple[Path, ...] = ()   # a change to any of these should restart it
    userns: bool = False           # the lane is an LXC guest: enter its user namespace too

    def argv(self, lane_pid: int | None = None) -> list[str]:
        if not self.in_lane:
            return ["ip", "netns", "exec", self.netns, *self.inner]
        if lane_pid is None:
            raise ValueError(f"{self.key} runs inside {self.host}'s namespaces: give its sshd's PID")
        return ["nsenter", "-t", str(lane_pid), *(["-U"] if self.userns else []), "-n", "-m", "--", *self.inner]


def inventory_dir(box_dir: Path) -> Path:
    return box_dir / "inventory"


def inventory_file(box_dir: Path, host: str) -> Path:
    return inventory_dir(box_dir) / f"{host}.json"


LANE_CONFIG = ".config/nev"    # inside the lane's home: the files its services read


def lane_file(box_dir: Path, lane: str, name: str) -> tuple[Path, str]:
    """A file for a lane's service: (its path on this machine, its path as the lane sees it)."""
    return (box_dir / "lanes" / lane / "home" / LANE_CONFIG / name, f"{HOME}/{LANE_CONFIG}/{name}")


def as_lane(argv: list[str]) -> tuple[str, ...]:
    """`argv` run as the lane user. setpriv execs it (unlike runuser, which stays as a parent and
    SIGKILLs its child 2 s after a SIGTERM), so the recorded PID is the service itself."""
    return ("setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", "--", *argv)


def _hosts(layout: plan.Layout) -> list[plan.Host]:
    return [h for h in layout.hosts() if h.role not in SKIP_ROLES]


def declared(layout: plan.Layout) -> dict[str, dict[str, object]]:
    """Each host's declared inventory (what `--inventory FILE` holds), by host name: JSON
    documents built to be written. No secret: no key, token or password, and no field whose name
    looks secret (the advertiser would drop it)."""
    out: dict[str, dict[str, object]] = {}
    pools = {p.name: p for p in plan.POOLS}
    for h in _hosts(layout):
        doc: dict[str, object] = {"name": h.name, "role": h.role, "hardware_class": HARDWARE_CLASS,
                                  "gpus": [], "models": [], "pools": [], "serving": []}
        if h.role == "lane":
            doc["ssh"] = {"user": USER, "port": plan.SSH_PORT}
            serving: list[dict[str, object]] = [
                {"unit": "sshd", "port": plan.SSH_PORT, "user": USER, "root": LANE_ROOT, "shared": LANE_SHARED},
                {"unit": "dagu", "address": "127.0.0.1", "port": settings.get_int(settings.DAGU_PORT, {})},
            ]
            if h.name == COLLECTOR:
                serving.append({"unit": "nev rig collect", "every_s": COLLECT_EVERY,
                                "snapshot": settings.INVENTORY.default})
            doc["serving"] = serving
        elif h.role == "forge":
            doc["serving"] = [{"unit": "nginx + git http-backend", "protocol": "git smart-HTTP",
                               "port": plan.FORGE_PORT, "path": "/git/", "auth": "basic"}]
        elif h.role == "gateway":
            doc["ssh"] = {"user": "root", "port": plan.SSH_PORT}
            doc["models"] = [p.alias for p in plan.POOLS]
            doc["serving"] = [{"unit": "litellm", "port": plan.GATEWAY_PORT,
                               "aliases": [p.alias for p in plan.POOLS]}]
        elif h.role == "proxy":
            doc["ssh"] = {"user": "root", "port": plan.SSH_PORT}
            doc["serving"] = [{"unit": "haproxy", "frontend": f"fe_{p.name}", "port": layout.proxy_port(p.name),
                               "pool": p.name, "alias": p.alias, "maxconn": p.max_inflight,
                               "backend": f"{ph.addr}:{plan.POOL_PORT}"}
                              for p, ph in zip(plan.POOLS, layout.pool_hosts(), strict=True)]
        elif h.role == "pool":
            p = pools[h.name]
            doc.update(
                hardware_class=f"{HARDWARE_CLASS} stand-in pool",
                gpus=[{"stand_in": True, "model": "none (a stand-in answers from a bank of functions)",
                       "count": 0}],
                models=[p.alias], pools=[p.name],
                serving=[{"unit": "rig.box.pool", "port": plan.POOL_PORT, "alias": p.alias, "tier": p.tier,
                          "max_inflight": p.max_inflight, "stand_in": True}],
                notes="STAND-IN for a GPU server: no GPU, no model")
        out[h.name] = doc
    return out


def lane_nev_marker(box_dir: Path, lane: str) -> Path:
    """The lane's `nev lane install` marker, seen from this machine: a new install restarts its services."""
    return box_dir / "lanes" / lane / "home" / selfinstall.MARKER


def services(layout: plan.Layout, box_dir: Path, lanes_kind: str = "netns",
             python: str = sys.executable, every: int = COLLECT_EVERY) -> list[Service]:
    """Every inventory service of the box, in start order (advertisers first, then the collector)."""
    base = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    root_env = {**base, "PYTHONPATH": str(plan.PROJECT),
                "HOME": str(inventory_dir(box_dir) / "home")}
    lane_env = {**base, "HOME": str(HOME)}
    logs = box_dir / "logs"
    userns = lanes_kind != "netns"
    adv_code = (_INVENTORY_CODE / "advertise.py",)
    out: list[Service] = []
    hosts = _hosts(layout)
    for h in hosts:
        in_lane = h.role == "lane"
        inv = inventory_file(box_dir, h.name)
        args = ["rig", "advertise", "--interface", h.addr, "--port", str(PORT), "--name", h.name,
                "--inventory", str(inv)]
        if in_lane:
            inv, seen = lane_file(box_dir, h.name, "host-inventory.json")
            args[-1] = seen
            out.append(Service(f"{h.name}.advertise", h.name, h.netns, True, USER,
                               as_lane([LANE_NEV, *args]), lane_env, plan.PROJECT,
                               logs / f"{h.name}-advertise.log", (inv, lane_nev_marker(box_dir, h.name)), userns))
        else:
            out.append(Service(f"{h.name}.advertise", h.name, h.netns, False, "root",
                               (python, "-m", "rig.cli", *args), root_env, plan.PROJECT,
                               logs / f"{h.name}-advertise.log", (inv, *adv_code)))
    lane = next((h for h in hosts if h.name == COLLECTOR), None)
    if lane is not None:
        (folknet_file, folknet_seen), (rig_file, rig_seen) = (lane_file(box_dir, lane.name, n)
                                                              for n in ("folknet.json", "rig.local.json"))
        args = ["rig", "collect", "--interface", lane.addr, "--every", str(every),
                "--timeout", str(COLLECT_TIMEOUT), "--expect", str(len(out))]
        # NEV_INVENTORY is left to its default: relative to the lane's home, as on the real rig.
        cenv = {**lane_env, "NEV_FOLKNET_FILE": folknet_seen, "NEV_RIG_FILE": rig_seen}
        out.append(Service(f"{lane.name}.collect", lane.name, lane.netns, True, USER,
                           as_lane([LANE_NEV, *args]), cenv, plan.PROJECT,
                           logs / f"{lane.name}-collect.log",
                           (folknet_file, rig_file, lane_nev_marker(box_dir, lane.name)), userns))
    return out


def write_inventory_files(layout: plan.Layout, box_dir: Path) -> dict[str, Path]:
    """Write each host's declared inventory (mode 644: the lane user reads its own); by host name."""
    inventory_dir(box_dir).mkdir(parents=True, exist_ok=True)
    (inventory_dir(box_dir) / "home").mkdir(exist_ok=True)
    paths: dict[str, Path] = {}
    lanes = {h.name for h in layout.lane_hosts()}
    for name, doc in declared(layout).items():
        paths[name] = inventory_file(box_dir, name)
        jsonfile.write_atomic(paths[name], doc)
        if name in lanes:
            _lane_copy(box_dir, name, "host-inventory.json", paths[name])
    if COLLECTOR in lanes:
        for n in ("folknet.json", "rig.local.json"):
            if (box_dir / n).exists():
                _lane_copy(box_dir, COLLECTOR, n, box_dir / n)
    return paths


def _lane_copy(box_dir: Path, lane: str, name: str, src: Path) -> None:
    """Copy a file into the lane's ~/.config/nev (owned like the lane's home; rewritten only when
    it changed, so the service's restart-on-change sees real changes only)."""
    dest, _seen = lane_file(box_dir, lane, name)
    home = box_dir / "lanes" / lane / "home"
    st = home.stat()
    data = src.read_bytes()
    for d in (home / ".config", dest.parent):
        d.mkdir(mode=0o755, exist_ok=True)
        os.chown(d, st.st_uid, st.st_gid)
    if not dest.exists() or dest.read_bytes() != data:
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    os.chown(dest, st.st_uid, st.st_gid)
