"""The LXC backend of `nev lane create`: the image (a debootstrap minbase rootfs with the lane's
packages, built once per recipe, kept uid-shifted for the unprivileged id map) and one lane, an
overlay on that image, written and started on a plain Debian LXC host (`lanes/create.py` has the
overview and what both backends share)."""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from lanes import audio, busy, guestlist
from lanes.agent import layout
from lanes.base import sshd
from lanes.base.errors import ConfigError, NevError
from lanes.base.exitcodes import Exit
from lanes.base.ui import info
from lanes.create import (
    CACHE,
    LXCPATH,
    Bind,
    check_abs,
    check_name,
    heredoc,
    known_hosts_line,
    lane_keys,
)
from lanes.hostexec import Node

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
IDMAP_BASE = 100000
IDMAP_SIZE = 65536
LANE_UID = 1000
# What the image holds: the image part of the one declared list (`lanes/guestlist.py`).
PACKAGES = guestlist.packages(guestlist.Stage.IMAGE)
RECIPE_VERSION = "3"
# The guest boots its own init, as a real lane does: systemd starts sshd and cron (so the lane
# user's @reboot lines run at every boot), and a reboot inside the guest is a reboot. systemd,
# not sysvinit: measured here (docs/lane-machines.md), it boots to a listening sshd in 0.74 s
# against sysvinit's 1.54 s, and reboots in 0.66 s against 1.93 s.
INIT_PACKAGES = ("systemd-sysv",)
# Units a guest without a console or a debug filesystem has no use for (masked in the image).
MASKED_UNITS = ("console-getty.service", "sys-kernel-debug.mount", "getty@.service")


# ---- the image -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageRecipe:
    suite: str = SUITE
    mirror: str = MIRROR
    security: str = SECURITY_MIRROR
    packages: tuple[str, ...] = PACKAGES + INIT_PACKAGES
    idmap_base: int = IDMAP_BASE
    lane_uid: int = LANE_UID

    @property
    def sources(self) -> str:
        """The guest's apt sources: this machine's suites (updates and security too), so the
        guest's browsers are the versions this machine has."""
        return (f"deb {self.mirror} {self.suite} main\n"
                f"deb {self.mirror} {self.suite}-updates main\n"
                f"deb {self.security} {self.suite}-security main\n")

    @property
    def key(self) -> str:
        """A digest of everything the image is made from, the whole declared list included (a
        package that moves from provisioning into the image makes a new image too)."""
        text = "\n".join([RECIPE_VERSION, self.suite, self.sources, " ".join(sorted(self.packages)),
                          guestlist.digest_text(), str(self.lane_uid), " ".join(MASKED_UNITS),
                          audio.digest()])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def rootfs(self, cache: str = CACHE) -> str:
        """The uid-shifted image, the read-only lower layer of every lane made from it."""
        return f"{cache}/images/{self.key}-u{self.idmap_base}/rootfs"


def _in_build(rel: str, content: str, mode: str) -> str:
    """heredoc() for a file of the image being built ("$B/raw/REL": $B is expanded)."""
    return heredoc(f"$B/raw/{rel}", content, mode).replace(shlex.quote(f"$B/raw/{rel}"), f'"$B/raw/{rel}"')


IMAGE_PHASE = "== nev image: "      # a line of the image build's log: the phase it enters


def image_log(recipe: ImageRecipe, cache: str = CACHE) -> str:
    """The image build's log, there while the image is built (by whichever builder)."""
    return f"{cache}/images/.build-{recipe.key}.log"


def image_progress(log: str) -> tuple[str, str] | None:
    """Where an image build is, from its log (`image_log`): its phase and a detail (debootstrap's
    last step, the packages set up so far); None before the first phase."""
    phase: str | None = None
    after: list[str] = []
    for ln in log.splitlines():
        if ln.startswith(IMAGE_PHASE):
            phase, after = ln[len(IMAGE_PHASE):], []
        else:
            after.append(ln)
    if phase is None:
        return None
    detail = ""
    if phase.startswith("debootstrap"):
        detail = next((ln[3:].strip() for ln in reversed(after) if ln.startswith("I: ")), "")
    elif phase.startswith("apt-get install"):
        done = sum(1 for ln in after if ln.startswith("Setting up "))
        total = next((m.group(1) for ln in after if (m := re.search(r"(\d+) newly installed", ln))),
                     None)
        detail = f"{done} of {total} set up" if total else f"{done} set up"
    return phase, detail


def image_script(recipe: ImageRecipe, cache: str = CACHE) -> str:
    """Build the image unless it is cached. Built beside, then renamed into place: a cached
    image is never written again, so lanes using it are safe."""
    cache = check_abs(cache, "image cache")
    img = recipe.rootfs(cache)
    q = shlex.quote
    pkgs = " ".join(q(p) for p in recipe.packages)
    b = image_log(recipe, cache).removesuffix(".log")
    masks = "\n".join(f'ln -sf /dev/null "$B/raw/etc/systemd/system/{u}"' for u in MASKED_UNITS)
    return f"""set -eu
mkdir -p {q(cache)}/images
exec 9>{q(cache)}/images/.lock
flock 9
if [ -d {q(img)} ]; then echo "unchanged: image {recipe.key}"; exit 0; fi
B={q(b)}
rm -rf "$B"; mkdir -p "$B"
phase() {{ echo "{IMAGE_PHASE}$*" >> "$B.log"; }}   # where the build is (image_progress)
: > "$B.log"
phase debootstrap {q(recipe.suite)}
debootstrap --variant=minbase {q(recipe.suite)} "$B/raw" {q(recipe.mirror)} >>"$B.log" 2>&1 || {{ tail -5 "$B.log" >&2; exit 1; }}
printf '#!/bin/sh\\nexit 101\\n' > "$B/raw/usr/sbin/policy-rc.d"; chmod 755 "$B/raw/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$B/raw/etc/resolv.conf" 2>/dev/null || true
{_in_build('etc/apt/sources.list', recipe.sources, '644')}phase apt-get update
chroot "$B/raw" apt-get update >>"$B.log" 2>&1 || {{ tail -5 "$B.log" >&2; exit 1; }}
phase apt-get install, {len(recipe.packages)} packages and what they need
DEBIAN_FRONTEND=noninteractive chroot "$B/raw" apt-get install -y --no-install-recommends {pkgs} >>"$B.log" 2>&1 || {{ tail -5 "$B.log" >&2; exit 1; }}
chroot "$B/raw" apt-get clean
rm -f "$B/raw/etc/ssh/ssh_host_"*
rm -f "$B/raw/usr/sbin/policy-rc.d"
mkdir -p "$B/raw/etc/systemd/system"
{masks}
{audio.install_script('"$B/raw"')}chroot "$B/raw" useradd -m -u {recipe.lane_uid} -U -s /bin/bash lane
chroot "$B/raw" usermod -p '*' lane
mkdir -p "$B/raw/srv/lane" "$B/raw/srv/lane-shared" "$B/raw/srv/toolchain/rustup" "$B/raw/srv/toolchain/cargo-bin" "$B/raw/root/.ssh"
chroot "$B/raw" chown lane:lane /srv/lane
phase the uid shift for the id map
mkdir "$B/shifted"
# uid-shift for the id map: tar rewrites every owner (+U -> +U+BASE) and root extracts it;
# modes (setuid bits too) are restored after the chown.
find "$B/raw" -xdev -printf '%U\n%G\n' | sort -un | awk -v b={recipe.idmap_base} -v n={IDMAP_SIZE} '$1 >= n {{ print "uid " $1 " outside the id map" > "/dev/stderr"; exit 1 }} {{ print "+" $1 " +" $1 + b }}' > "$B/idmap"
tar -C "$B/raw" --numeric-owner --owner-map="$B/idmap" --group-map="$B/idmap" --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* -cpf - . | tar -C "$B/shifted" --numeric-owner -xpf -
mkdir -p {q(img.rsplit('/', 1)[0])}
mv "$B/shifted" {q(img)}
rm -rf "$B" "$B.log"
echo "changed: image {recipe.key} built"
"""


# ---- one lxc lane ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LxcLane:
    name: str
    bridge: str
    addr: str                 # the guest's address on the bridge (a /24)
    cpus: int = 96
    memory_gb: int = 96
    disk_gb: int = 200        # recorded; an overlay on the node's filesystem has no quota
    lxcpath: str = LXCPATH
    cache: str = CACHE
    recipe: ImageRecipe = field(default_factory=ImageRecipe)
    binds: tuple[Bind, ...] = ()
    veth: str | None = None   # host-side veth name (else LXC picks one)
    autostart: bool = True
    net_up: str | None = None      # a script on the node LXC runs when the veth is made (each boot)
    start_host: str | None = None  # a script on the node LXC runs when the guest's init is made

    def __post_init__(self) -> None:
        check_name(self.name)
        check_abs(self.lxcpath, "lxcpath (-P)")
        check_abs(self.cache, "image cache")
        if self.cpus < 1 or self.memory_gb < 1 or self.disk_gb < 1:
            raise ConfigError("--cpus, --memory-gb and --disk-gb must be at least 1")
        if not re.match(r"^\d+\.\d+\.\d+\.\d+$", self.addr):
            raise ConfigError(f"--addr {self.addr!r} is not an IPv4 address")

    @property
    def dir(self) -> str:
        return f"{self.lxcpath}/{self.name}"

    @property
    def delta(self) -> str:
        return f"{self.dir}/delta"

    @property
    def root_uid(self) -> int:
        return self.recipe.idmap_base

    @property
    def lane_uid(self) -> int:
        return self.recipe.idmap_base + self.recipe.lane_uid


def lxc_config(lane: LxcLane) -> str:
    base = lane.recipe.idmap_base
    lines = [
        "# lane guest written by `nev lane create --backend lxc`; the script is the record",
        f"lxc.uts.name = {lane.name}",
        f"lxc.rootfs.path = overlay:{lane.recipe.rootfs(lane.cache)}:{lane.delta}",
        "lxc.rootfs.options = userxattr",
        f"lxc.idmap = u 0 {base} {IDMAP_SIZE}",
        f"lxc.idmap = g 0 {base} {IDMAP_SIZE}",
        # the image's own init (systemd); halt is SIGRTMIN+3 for it, reboot LXC's SIGINT
        "lxc.init.cmd = /sbin/init",
        "lxc.signal.halt = SIGRTMIN+3",
        "lxc.apparmor.profile = unconfined",
        "lxc.net.0.type = veth",
        # LXC attaches the host-side veth to the bridge at every boot, reboots included.
        *([f"lxc.net.0.link = {lane.bridge}"] if lane.bridge else []),
        "lxc.net.0.flags = up",
        "lxc.net.0.name = eth0",
        f"lxc.net.0.ipv4.address = {lane.addr}/24",
    ]
    if lane.veth:
        lines.append(f"lxc.net.0.veth.pair = {lane.veth}")
    if lane.net_up:
        lines.append(f"lxc.net.0.script.up = {check_abs(lane.net_up, 'net-up script')}")
    if lane.start_host:
        lines.append(f"lxc.hook.start-host = {check_abs(lane.start_host, 'start-host script')}")
    lines += [
        "lxc.mount.auto = proc:mixed sys:ro cgroup:mixed",
        # The sandbox (docs/sandbox.md) mounts a /proc of its own inside a user namespace; the kernel
        # allows that only where a proc and a sysfs mount are fully visible, which proc:mixed is
        # not. Uncovered mounts out of the way do it, as LXC's own nesting.conf (pct: nesting=1).
        "lxc.mount.entry = proc dev/.lxc/proc proc create=dir,optional 0 0",
        "lxc.mount.entry = sys dev/.lxc/sys sysfs create=dir,optional 0 0",
        "lxc.autodev = 1",
        # PTYs (a devpts of the guest's own at /dev/pts) for `ssh -tt`, Ansible and a person's
        # shell; no console ttys (no getty runs)
        "lxc.pty.max = 64",
        "lxc.tty.max = 0",
        f"lxc.start.auto = {1 if lane.autostart else 0}",
        # cgroup2 (Debian 12, Proxmox) and, for a node on the legacy hierarchy, cgroup v1: LXC
        # ignores the keys of the hierarchy the node does not run.
        f"lxc.cgroup2.cpu.max = {lane.cpus * 100000} 100000",
        f"lxc.cgroup2.memory.max = {lane.memory_gb}G",
        "lxc.cgroup.cpu.cfs_period_us = 100000",
        f"lxc.cgroup.cpu.cfs_quota_us = {lane.cpus * 100000}",
        f"lxc.cgroup.memory.limit_in_bytes = {lane.memory_gb}G",
        f"# disk: {lane.disk_gb} GB asked; the overlay delta lives on the node's filesystem (no quota)",
    ]
    for b in lane.binds:
        opts = "bind,create=dir" + (",ro" if b.readonly else "")
        lines.append(f"lxc.mount.entry = {b.source} {b.target.lstrip('/')} none {opts} 0 0")
    return "\n".join(lines) + "\n"


def guest_sshd_config(addr: str, toolchain: bool) -> str:
    """sshd in the guest: key-only, `lane` for gates and root (for provisioning over SSH)."""
    return sshd.config("a lane guest (written by nev lane create)", [f"{addr}:22"], "/etc/ssh/ssh_host_ed25519_key",
                       "/run/sshd.pid", ".ssh/authorized_keys", "lane root", "prohibit-password",
                       env=layout.TOOLCHAIN_ENV if toolchain else None,
                       options=["AllowTcpForwarding yes", "Subsystem sftp internal-sftp"])


@dataclass(frozen=True)
class GuestFiles:
    """What goes into a new lane's delta before its first start."""

    host_key: str             # private key (OpenSSH format); travels on stdin only
    host_key_pub: str
    authorized_keys: str      # for lane and root
    sshd_config: str
    lane_home_in_delta: bool = True   # False when /home/lane is a bind from the node


def write_script(lane: LxcLane, files: GuestFiles) -> str:
    """Write the lane's config and the guest files in its delta. Rewriting them is harmless
    (same key, same config), so a lane whose files changed is brought up to date; a lane that
    already existed says `unchanged`."""
    q = shlex.quote
    d, delta = lane.dir, lane.delta
    r, u = lane.root_uid, lane.lane_uid
    out = f"""set -eu
if [ -e {q(d)}/config ]; then new=0; else new=1; fi
mkdir -p {q(delta)}/etc/ssh {q(delta)}/root/.ssh
# the guest's root makes the overlay's work folder beside the delta
chown {r}:{r} {q(d)} {q(delta)} {q(delta)}/etc {q(delta)}/etc/ssh {q(delta)}/root {q(delta)}/root/.ssh
chmod 700 {q(delta)}/root {q(delta)}/root/.ssh
"""
    out += heredoc(f"{delta}/etc/ssh/ssh_host_ed25519_key", files.host_key, "600", f"{r}:{r}")
    out += heredoc(f"{delta}/etc/ssh/ssh_host_ed25519_key.pub", files.host_key_pub, "644", f"{r}:{r}")
    out += heredoc(f"{delta}/etc/ssh/sshd_config", files.sshd_config, "644", f"{r}:{r}")
    # the guest's own init sets the hostname from /etc/hostname (the image's is the build host's)
    out += heredoc(f"{delta}/etc/hostname", lane.name + "\n", "644", f"{r}:{r}")
    out += heredoc(f"{delta}/root/.ssh/authorized_keys", files.authorized_keys, "600", f"{r}:{r}")
    if files.lane_home_in_delta:
        out += f"""mkdir -p {q(delta)}/home/lane/.ssh
chown {r}:{r} {q(delta)}/home; chown {u}:{u} {q(delta)}/home/lane {q(delta)}/home/lane/.ssh
chmod 755 {q(delta)}/home/lane; chmod 700 {q(delta)}/home/lane/.ssh
"""
        out += heredoc(f"{delta}/home/lane/.ssh/authorized_keys", files.authorized_keys, "600", f"{u}:{u}")
    out += heredoc(f"{d}/config", lxc_config(lane), "644")
    out += (f'if [ $new = 1 ]; then echo "changed: lane {lane.name} written in {lane.lxcpath}"; '
            f'else echo "unchanged: lane {lane.name} exists in {lane.lxcpath}"; fi\n')
    return out


def host_script(recipe: ImageRecipe) -> str:
    """What the node itself needs for root to start unprivileged guests: root's subordinate id
    range covering the guest's id map (lxc-start maps ids through newuidmap, which checks it).
    The only change made to the node's own configuration."""
    b, last = recipe.idmap_base, recipe.idmap_base + IDMAP_SIZE - 1
    return f"""set -eu
if grep -qx 'root:{b}:{IDMAP_SIZE}' /etc/subuid && grep -qx 'root:{b}:{IDMAP_SIZE}' /etc/subgid; then
  echo "unchanged: root's subordinate ids {b}-{last}"
else
  grep -qx 'root:{b}:{IDMAP_SIZE}' /etc/subuid || usermod --add-subuids {b}-{last} root
  grep -qx 'root:{b}:{IDMAP_SIZE}' /etc/subgid || usermod --add-subgids {b}-{last} root
  echo "changed: root's subordinate ids {b}-{last}"
fi
"""


def create_script(lane: LxcLane, files: GuestFiles, restart: bool = False) -> str:
    return write_script(lane, files) + start_script(lane, restart)


class Apply(Enum):
    """What `nev lane create` does with a lane that may exist already (`decide_apply`)."""

    WRITE = "write"            # new, stopped, or its config unchanged: write (start if stopped)
    RESTART = "restart"        # running with a changed config: write, stop, start again
    REFUSE_BUSY = "busy"       # running with a changed config, but busy: nothing changed


def decide_apply(old_config: str | None, new_config: str, running: bool,
                 busy_procs: list[tuple[int, str]]) -> Apply:
    """A config change (a bind, the NAS: the seed's bench/lane-nas.sh) reaches a running guest
    only by a restart, and a guest is not restarted under work (pure).

    | the lane | its config | busy (LANE_BUSY_COMMANDS) | create |
    |---|---|---|---|
    | absent or stopped | any | - | written (and started) |
    | running | unchanged | - | unchanged |
    | running | changed | no | written, then restarted |
    | running | changed | yes | refused, nothing changed (exit 3: try again when idle) |
    """
    if old_config is None or not running or old_config == new_config:
        return Apply.WRITE
    return Apply.REFUSE_BUSY if busy_procs else Apply.RESTART


def current_script(lane: LxcLane) -> str:
    """Prints the lane's state (`state: RUNNING`, `STOPPED`, or `none`) and then its config file."""
    q = shlex.quote
    return f"""if [ -e {q(lane.dir)}/config ]; then
  echo "state: $(lxc-info -P {q(lane.lxcpath)} -n {q(lane.name)} -sH)"; cat {q(lane.dir)}/config
else echo "state: none"; fi
"""


def parse_current(out: str) -> tuple[str | None, bool]:
    """(the config, None when there is no lane; whether it runs) from `current_script`'s output."""
    first, _, rest = out.partition("\n")
    state = first.removeprefix("state: ").strip()
    return (None if state == "none" else rest), state == "RUNNING"


def guest_ps_script(lane: LxcLane) -> str:
    """The guest's processes as `busy.PS_COMMAND` lists them, asked through LXC on the node."""
    q = shlex.quote
    return f"lxc-attach -P {q(lane.lxcpath)} -n {q(lane.name)} -- {busy.PS_COMMAND}\n"


def start_script(lane: LxcLane, restart: bool = False) -> str:
    q = shlex.quote
    stop = (f"""if [ "$(lxc-info -P {q(lane.lxcpath)} -n {q(lane.name)} -sH)" = RUNNING ]; then
  lxc-stop -P {q(lane.lxcpath)} -n {q(lane.name)} -t 60
  echo "changed: lane {lane.name} stopped to apply its changed config"
fi
""" if restart else "")
    return stop + f"""if [ "$(lxc-info -P {q(lane.lxcpath)} -n {q(lane.name)} -sH)" = RUNNING ]; then
  echo "unchanged: lane {lane.name} running"
else
  lxc-start -P {q(lane.lxcpath)} -n {q(lane.name)} -d -L {q(lane.dir)}/console.log -o {q(lane.dir)}/lxc.log -l INFO
  lxc-wait -P {q(lane.lxcpath)} -n {q(lane.name)} -s RUNNING -t 20
  # a guest re-made at the same address has a new MAC: forget the old one, or connections stall
  {f"ip neigh flush to {q(lane.addr)} dev {q(lane.bridge)} 2>/dev/null || true" if lane.bridge else ":"}
  echo "changed: lane {lane.name} started"
fi
echo "pid: $(lxc-info -P {q(lane.lxcpath)} -n {q(lane.name)} -pH)"
"""


def destroy_script(name: str, lxcpath: str = LXCPATH) -> str:
    q = shlex.quote
    p = check_abs(lxcpath, "lxcpath (-P)")
    check_name(name)
    return f"""set -eu
if [ ! -e {q(p)}/{q(name)}/config ]; then echo "unchanged: no lane {name} in {p}"; exit 0; fi
if [ "$(lxc-info -P {q(p)} -n {q(name)} -sH)" != STOPPED ]; then lxc-stop -P {q(p)} -n {q(name)} -k; fi
lxc-destroy -P {q(p)} -n {q(name)}
rm -rf {q(p)}/{q(name)}
# cgroups a failed start can leave behind (empty folders; rmdir refuses anything else)
for c in /sys/fs/cgroup/lxc.payload.{name} /sys/fs/cgroup/lxc.monitor.{name} /sys/fs/cgroup/lxc.monitor.{name}-* \
         /sys/fs/cgroup/*/lxc.payload.{name} /sys/fs/cgroup/*/lxc.monitor.{name} /sys/fs/cgroup/*/lxc.monitor.{name}-*; do
  [ -d "$c" ] && rmdir "$c" 2>/dev/null || true
done
echo "changed: lane {name} destroyed"
"""


def parse_pid(out: str) -> int | None:
    m = re.search(r"^pid: (\d+)$", out, re.M)
    return int(m.group(1)) if m else None


def changes(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(("changed:", "unchanged:"))]


def ensure_image(node: Node, recipe: ImageRecipe, cache: str = CACHE) -> list[str]:
    """The node's subordinate ids and the cached image (built once per recipe)."""
    host = changes(node.run(host_script(recipe), what="setting up the LXC host").out)
    return host + changes(node.run(image_script(recipe, cache), what="building the lane image").out)


def create_lxc(node: Node, lane: LxcLane, files: GuestFiles) -> tuple[list[str], int]:
    """Build or reuse the image, write the lane, start it. Returns the step lines and the
    guest's init PID (on the node)."""
    steps = ensure_image(node, lane.recipe, lane.cache)
    old, running = parse_current(node.run(current_script(lane), what=f"reading lane {lane.name}").out)
    procs: list[tuple[int, str]] = []
    if old is not None and running and old != lxc_config(lane):
        ps = node.run(guest_ps_script(lane), what=f"listing lane {lane.name}'s processes").out
        procs = busy.busy_processes(ps, busy.pattern())
    action = decide_apply(old, lxc_config(lane), running, procs)
    if action is Apply.REFUSE_BUSY:
        named = ", ".join(f"{c} (pid {p})" for p, c in procs[:5]) + (" ..." if len(procs) > 5 else "")
        raise NevError(f"lane {lane.name} is busy ({named}) and its changed config needs a restart; "
                       "run again when it is idle (busy: LANE_BUSY_COMMANDS); nothing changed",
                       Exit.UNAVAILABLE)
    ran = node.run(create_script(lane, files, action is Apply.RESTART), what=f"creating lane {lane.name}")
    pid = parse_pid(ran.out)
    if pid is None:
        raise NevError(f"lane {lane.name} on {node} did not report its PID; see {lane.dir}/lxc.log there")
    return steps + changes(ran.out), pid


def destroy_lxc(node: Node, name: str, lxcpath: str = LXCPATH) -> list[str]:
    return changes(node.run(destroy_script(name, lxcpath), what=f"destroying lane {name}").out)


def run_create_lxc(node: Node, lane: LxcLane, authorized_keys: str, out_dir: Path,
                   toolchain: bool = False) -> int:
    priv, pub = lane_keys(out_dir, lane.name)
    files = GuestFiles(host_key=priv, host_key_pub=pub, authorized_keys=authorized_keys,
                       sshd_config=guest_sshd_config(lane.addr, toolchain))
    steps, pid = create_lxc(node, lane, files)
    for s in steps:
        print(s)
    line = known_hosts_line(lane.addr, pub)
    (out_dir / "known_hosts").write_text(line + "\n")
    info(f"lane {lane.name} is running on {node} (init pid {pid}), address {lane.addr}")
    info(f"pin its host key (also in {out_dir / 'known_hosts'}):")
    print(line)
    info(f'lanes file entry: {{"ssh": "lane@{lane.addr}", "root": "/srv/lane", "name": "{lane.name}"}}')
    return 0
