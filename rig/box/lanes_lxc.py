"""Lane backend "lxc": each box lane is a real unprivileged LXC guest made by `lanes.create`.

The same scripts as `nev lane create --backend lxc`, run on this machine (node "local"): a
cached, uid-shifted Debian image, one overlay per lane under the box's own absolute lxcpath
(`/var/lib/nev-lxc/boxes/<name>/lxc`), the guest's veth `<name>-laneN` on the box bridge at the
lane's address. The lane's `/srv/lane` and `/home/lane` are binds of the box's lane folders (as
with netns lanes), the NAS is bound at `/srv/lane-shared`, and the host's Rust toolchain
read-only at `/srv/toolchain`. The guest's root (uid 100000) must be able to reach every bind
source and its lxcpath, and the box folder may sit under a mode-700 folder (/root, pytest's
tmp): so each source is first bound at `/var/lib/nev-lxc/boxes/<name>/mnt/<lane>/` and the
guest binds that. The recorded process of a lane is the guest's init; `run_in` nsenters it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

from lanes import create
from lanes.agent import layout
from lanes.base import procs
from lanes.base.errors import NevError
from lanes.base.procs import ProcRec
from lanes.hostexec import LOCAL, Node
from rig.box import plan
from rig.box.lanes_backend import BoxLanes
from rig.box.lanes_netns import HOME, LANE_ROOT, LANE_SHARED, host_key, host_toolchain
from rig.box.state import LaneInfo


def _is_mount(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def _bind(src: str, dst: Path, ro: bool) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    # the guest's root (a mapped uid) walks through the staging folder: open to it whatever the
    # umask was when it was made
    os.chmod(dst.parent, 0o755)
    if _is_mount(dst):
        return
    steps = [["mount", "--bind", src, str(dst)]] + ([["mount", "-o", "remount,bind,ro", str(dst)]] if ro else [])
    for argv in steps:
        cp = subprocess.run(argv, capture_output=True, text=True)
        if cp.returncode != 0:
            raise NevError(f"could not bind {src} at {dst}: {cp.stderr.strip()}")


def _unmount(path: Path) -> None:
    while _is_mount(path):
        if subprocess.run(["umount", "-l", str(path)], capture_output=True).returncode != 0:
            break


def _child(pid: int, timeout: float) -> int | None:
    """The first child of `pid` (init.lxc's one child is lane-init, exec'd into sshd)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return None
        if kids:
            return int(kids[0])
        time.sleep(0.02)
    return None


class LxcLanes(BoxLanes):
    kind = "lxc"
    uses_netns = False

    def __init__(self, box_dir: Path, log_dir: Path) -> None:
        super().__init__(box_dir, log_dir)
        self.node = Node(LOCAL)
        self.cache = create.cache()
        self.base = Path(self.cache) / "boxes" / box_dir.name
        self.lxcpath = str(self.base / "lxc")
        self.recipe = create.ImageRecipe()

    def container(self, lane_name: str) -> str:
        return f"{self.box_dir.name}-{lane_name}"

    def staged(self, lane_name: str) -> Path:
        return self.base / "mnt" / lane_name

    def sources(self, lane: LaneInfo) -> list[tuple[str, str, str, bool]]:
        """(source on the host, staged name, target in the guest, read-only)."""
        out = [(str(lane.host_root), "root", LANE_ROOT, False), (str(lane.host_home), "home", str(HOME), False),
               (str(self.box_dir / "nas"), "nas", LANE_SHARED, False)]
        tc = host_toolchain()
        if tc is not None:
            out += [(tc[0], "rustup", f"{layout.TOOLCHAIN}/rustup", True),
                    (tc[1], "cargo-bin", f"{layout.TOOLCHAIN}/cargo-bin", True)]
        return out

    def spec(self, lane: LaneInfo, host: plan.Host) -> create.LxcLane:
        st = self.staged(lane.name)
        binds = [create.Bind(str(st / name), target, ro) for _src, name, target, ro in self.sources(lane)]
        ncpu = os.cpu_count() or 1
        # No bridge for LXC: the box's bridge is in the rig namespace; start() moves the veth there.
        return create.LxcLane(name=self.container(lane.name), bridge="",
                              addr=lane.addr, cpus=ncpu, memory_gb=4, disk_gb=20, lxcpath=self.lxcpath,
                              cache=self.cache, recipe=self.recipe, binds=tuple(binds), veth=host.veth, autostart=False)

    def prepare(self, lane: LaneInfo, host: plan.Host, client_pub: str) -> str:
        d = self.lane_dir(lane)
        d.mkdir(parents=True, exist_ok=True)
        spec = self.spec(lane, host)
        self.make_home(lane, spec.lane_uid, spec.lane_uid, client_pub)
        for src, name, _target, ro in self.sources(lane):
            _bind(src, self.staged(lane.name) / name, ro)
        tc = host_toolchain()
        hk = d / "ssh_host_ed25519_key"
        pinned = host_key(hk, f"{lane.name}-host")
        # The image's key rides in the config as a comment: its digest restarts the guest when
        # either changes (a new declared list is a new image, and the lane moves onto it).
        # So does the guest's LXC config (its mounts, the sandbox's uncovered proc among them).
        lxc = hashlib.sha256(create.lxc_config(spec).encode()).hexdigest()[:16]
        sshd = (create.guest_sshd_config(lane.addr, toolchain=tc is not None)
                + f"# image {self.recipe.key}\n# lxc config {lxc}\n")
        (d / "sshd_config").write_text(sshd)
        files = create.GuestFiles(host_key=hk.read_text(), host_key_pub=hk.with_suffix(".pub").read_text(),
                                  authorized_keys=client_pub + "\n", sshd_config=sshd, lane_home_in_delta=False)
        create.ensure_image(self.node, self.recipe, self.cache)
        self.node.run(create.write_script(spec, files), what=f"writing lane {spec.name}")
        return pinned

    def start(self, lane: LaneInfo, host: plan.Host, rec: ProcRec | None) -> ProcRec | None:
        if procs.alive(rec):
            return None
        spec = self.spec(lane, host)
        ran = self.node.run(create.start_script(spec), what=f"starting lane {spec.name}")
        init = create.parse_pid(ran.out)
        if init is None or procs.start_time(init) is None:
            raise NevError(f"lane {spec.name} did not start; see {spec.dir}/lxc.log")
        # The record is the guest's sshd (init's child), as for a netns lane: killing it ends the
        # guest too (init.lxc exits with its child), and helpers that spare "the lane's sshd"
        # spare the right process.
        pid = _child(init, 5.0) or init
        st = procs.start_time(pid)
        if st is None:
            raise NevError(f"lane {spec.name} stopped at once; see {spec.dir}/console.log")
        # A name for the guest's network namespace, so `ip netns exec <box>-laneN` works as for
        # a netns lane (and `down` finds it); the guest's processes keep it alive.
        subprocess.run(["ip", "netns", "delete", lane.netns], capture_output=True)
        subprocess.run(["ip", "netns", "attach", lane.netns, str(init)], capture_output=True, check=True)
        # The guest's host-side veth joins the rig network's bridge, inside the rig namespace.
        box = self.box_dir.name
        rig, bridge = f"{box}-rig", f"{box}br"
        if Path("/sys/class/net", host.veth).exists():
            # The guest this one replaces (a restart on a config change) may not have taken its
            # veth with it yet: that one, in the rig namespace, is stale.
            subprocess.run(["ip", "-n", rig, "link", "del", host.veth], capture_output=True)
            for argv in (["ip", "link", "set", host.veth, "netns", rig],
                         ["ip", "-n", rig, "link", "set", host.veth, "master", bridge, "up"]):
                cp = subprocess.run(argv, capture_output=True, text=True)
                if cp.returncode != 0:
                    raise NevError(f"lane {spec.name}: {' '.join(argv)} failed: {cp.stderr.strip()}")
            subprocess.run(["ip", "-n", rig, "neigh", "flush", "to", lane.addr, "dev", bridge], capture_output=True)
            subprocess.run(["ip", "-n", f"{box}-jump", "neigh", "flush", "to", lane.addr], capture_output=True)
        return ProcRec(key=f"{lane.name}.sshd", host=lane.name, pid=pid, start=st,
                       argv=["lxc-start", "-P", spec.lxcpath, "-n", spec.name, "-d"])

    def wait(self, lane: LaneInfo, rec: ProcRec) -> None:
        self.wait_ssh(lane, rec, 20, Path(self.lxcpath) / self.container(lane.name) / "lxc.log")

    def remove(self, lane_dir: Path) -> None:
        name = self.container(lane_dir.name)
        if (Path(self.lxcpath) / name).exists():
            create.destroy_lxc(self.node, name, self.lxcpath)
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)   # the name start() gave
        st = self.staged(lane_dir.name)
        if st.is_dir():
            for sub in st.iterdir():
                _unmount(sub)
                try:
                    sub.rmdir()    # never anything recursive: these are binds of real data
                except OSError:
                    pass
            try:
                st.rmdir()
            except OSError:
                pass
        for d in (self.base / "mnt", Path(self.lxcpath), self.base):
            try:
                d.rmdir()          # only when no other lane of this box is left
            except OSError:
                pass
