"""Lane backend "lxc": each box lane is a real unprivileged LXC guest made by `lanes.create`.

The same scripts as `nev lane create --backend lxc`, run on this machine (node "local"): a
cached, uid-shifted Debian image, one overlay per lane under the box's own absolute lxcpath
(`/var/lib/nev-lxc/boxes/<name>/lxc`), the guest's veth `<name>-laneN` on the box bridge at the
lane's address. The lane's `/srv/lane` and `/home/lane` are binds of the box's lane folders (as
with netns lanes), the NAS is bound at `/srv/lane-shared`, and the host's Rust toolchain
read-only at `/srv/toolchain`. The guest's root (uid 100000) must be able to reach every bind
source and its lxcpath, and the box folder may sit under a mode-700 folder (/root, pytest's
tmp): so each source is first bound at `/var/lib/nev-lxc/boxes/<name>/mnt/<lane>/` and the
guest binds that.

The guest boots the image's own init (systemd) with cron and PTYs, as a real lane does: a reboot
inside it is a reboot, and its `@reboot` lines and services start it up again with nothing done
here. LXC makes the guest's veth at every boot and runs the lane's `net-up` script, which moves
the host side into the rig namespace and onto its bridge (the bridge lives in a network
namespace of its own, which LXC's `lxc.net.0.link` cannot name). The recorded process of a lane
is the guest's init when the box started it; `guests.init_pid` gives the current one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from lanes import create, create_lxc
from lanes.agent import layout
from lanes.base import procs
from lanes.base.errors import NevError
from lanes.base.procs import ProcRec
from lanes.hostexec import LOCAL, Node
from rig.box import guests, plan
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


def net_up_script(box: str, netns: str) -> str:
    """What LXC runs on this machine each time the guest's veth is made (every boot): the host
    side into the rig namespace, onto the bridge; stale neighbours of the address forgotten (a
    new boot is a new MAC); the guest's network namespace named for `ip netns exec`."""
    rig, bridge = f"{box}-rig", f"{box}br"
    return f"""#!/bin/sh
# written by the rig-in-a-box (rig/box/lanes_lxc.py); LXC runs it as lxc.net.0.script.up
set -eu
dev="${{LXC_NET_PEER:-$5}}"
ip -n {rig} link del "$dev" 2>/dev/null || true
ip link set "$dev" netns {rig}
ip -n {rig} link set "$dev" master {bridge} up
"""


def start_host_script(netns: str, addr: str, box: str) -> str:
    return f"""#!/bin/sh
# written by the rig-in-a-box (rig/box/lanes_lxc.py); LXC runs it as lxc.hook.start-host
ip netns delete {netns} 2>/dev/null || true
ip netns attach {netns} "$LXC_PID" || true
ip -n {box}-rig neigh flush to {addr} 2>/dev/null || true
ip -n {box}-jump neigh flush to {addr} 2>/dev/null || true
exit 0
"""


class LxcLanes(BoxLanes):
    kind = "lxc"
    uses_netns = False

    def __init__(self, box_dir: Path, log_dir: Path) -> None:
        super().__init__(box_dir, log_dir)
        self.node = Node(LOCAL)
        self.cache = create.cache()
        self.base = guests.base(box_dir)
        self.lxcpath = guests.lxcpath(box_dir)
        self.recipe = create_lxc.ImageRecipe()

    def image_progress(self) -> tuple[str, str] | None:
        """Where the lanes' image build is (`create_lxc.image_progress`), None when none runs."""
        try:
            log = Path(create_lxc.image_log(self.recipe, self.cache)).read_text(errors="replace")
        except FileNotFoundError:
            return None
        return create_lxc.image_progress(log)

    def container(self, lane_name: str) -> str:
        return guests.container(self.box_dir, lane_name)

    def hooks(self, lane: LaneInfo) -> tuple[Path, Path]:
        d = self.staged(lane.name).parent / f"{lane.name}.hooks"
        return d / "net-up", d / "start-host"

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

    def spec(self, lane: LaneInfo, host: plan.Host) -> create_lxc.LxcLane:
        st = self.staged(lane.name)
        binds = [create.Bind(str(st / name), target, ro) for _src, name, target, ro in self.sources(lane)]
        ncpu = os.cpu_count() or 1
        # No bridge for LXC: the box's bridge is in the rig namespace; the net-up hook moves the
        # veth there at every boot.
        net_up, start_host = self.hooks(lane)
        return create_lxc.LxcLane(name=self.container(lane.name), bridge="",
                              addr=lane.addr, cpus=ncpu, memory_gb=4, disk_gb=20, lxcpath=self.lxcpath,
                              cache=self.cache, recipe=self.recipe, binds=tuple(binds),
                              veth=host.veth,
                              autostart=False, net_up=str(net_up), start_host=str(start_host))

    def prepare(self, lane: LaneInfo, host: plan.Host, client_pub: str) -> str:
        d = self.lane_dir(lane)
        d.mkdir(parents=True, exist_ok=True)
        spec = self.spec(lane, host)
        self.make_home(lane, spec.lane_uid, spec.lane_uid, client_pub)
        for src, name, _target, ro in self.sources(lane):
            _bind(src, self.staged(lane.name) / name, ro)
        net_up, start_host = self.hooks(lane)
        net_up.parent.mkdir(parents=True, exist_ok=True)
        box = self.box_dir.name
        for path, text in ((net_up, net_up_script(box, lane.netns)),
                           (start_host, start_host_script(lane.netns, lane.addr, box))):
            path.write_text(text)
            path.chmod(0o755)
        tc = host_toolchain()
        hk = d / "ssh_host_ed25519_key"
        pinned = host_key(hk, f"{lane.name}-host")
        # The image's key rides in the config as a comment: its digest restarts the guest when
        # either changes (a new declared list is a new image, and the lane moves onto it).
        # So does the guest's LXC config (its mounts, the sandbox's uncovered proc among them).
        lxc = hashlib.sha256(create_lxc.lxc_config(spec).encode()).hexdigest()[:16]
        sshd = (create_lxc.guest_sshd_config(lane.addr, toolchain=tc is not None)
                + f"# image {self.recipe.key}\n# lxc config {lxc}\n")
        (d / "sshd_config").write_text(sshd)
        files = create_lxc.GuestFiles(host_key=hk.read_text(), host_key_pub=hk.with_suffix(".pub").read_text(),
                                  authorized_keys=client_pub + "\n", sshd_config=sshd, lane_home_in_delta=False)
        create_lxc.ensure_image(self.node, self.recipe, self.cache)
        self.node.run(create_lxc.write_script(spec, files), what=f"writing lane {spec.name}")
        return pinned

    def start(self, lane: LaneInfo, host: plan.Host, rec: ProcRec | None) -> ProcRec | None:
        if procs.alive(rec):
            return None
        spec = self.spec(lane, host)
        ran = self.node.run(create_lxc.start_script(spec), what=f"starting lane {spec.name}")
        init = create_lxc.parse_pid(ran.out)
        st = procs.start_time(init) if init is not None else None
        if init is None or st is None:
            raise NevError(f"lane {spec.name} did not start; see {spec.dir}/lxc.log")
        # The record is the guest's init. A guest that rebooted on its own has a new one: the
        # box records it again here ("unchanged: ... running"), it does not restart it.
        return ProcRec(key=f"{lane.name}.sshd", host=lane.name, pid=init, start=st,
                       argv=["lxc-start", "-P", spec.lxcpath, "-n", spec.name, "-d"])

    def wait(self, lane: LaneInfo, rec: ProcRec) -> None:
        self.wait_ssh(lane, rec, 20, Path(self.lxcpath) / self.container(lane.name) / "lxc.log")

    def remove(self, lane_dir: Path) -> None:
        name = self.container(lane_dir.name)
        if (Path(self.lxcpath) / name).exists():
            create_lxc.destroy_lxc(self.node, name, self.lxcpath)
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)   # the name start() gave
        st = self.staged(lane_dir.name)
        if st.is_dir():
            for sub in st.iterdir():
                _unmount(sub)
                try:
                    sub.rmdir()    # never anything recursive: these are binds of real data
                except OSError:
                    pass
            hooks = st.parent / f"{lane_dir.name}.hooks"
            for f in (hooks / "net-up", hooks / "start-host"):
                f.unlink(missing_ok=True)
            try:
                hooks.rmdir()
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
