"""Lane backend "netns": a lane is a network namespace running sshd in a private mount namespace.

The seam is `rig.box.lanes_backend.LaneBackend`; the LXC backend (`lanes_lxc.py`) implements the
same methods.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

from lanes.base import procs
from lanes.base.errors import NevError
from lanes.base.procs import ProcRec
from rig.box import plan
from rig.box.lanes_backend import BoxLanes
from rig.box.state import LaneInfo

USER = "lane"
HOME = Path("/home/lane")
LANE_ROOT = "/srv/lane"
LANE_SHARED = "/srv/lane-shared"


def ensure_user() -> bool:
    """Create the shared `lane` user when missing (key-only: no password). True when created."""
    try:
        pwd.getpwnam(USER)
        created = False
    except KeyError:
        created = True
    if created:
        cp = subprocess.run(["useradd", "-M", "-d", str(HOME), "-s", "/bin/bash", "-U", USER],
                            capture_output=True, text=True)
        if cp.returncode != 0 and "already exists" not in cp.stderr:
            raise NevError(f"could not create user {USER}: {cp.stderr.strip()}")
        # useradd leaves the account locked, which sshd refuses even for keys.
        subprocess.run(["usermod", "-p", "*", USER], check=True, capture_output=True)
        created = cp.returncode == 0
        spool = Path("/var/spool/cron/crontabs", USER)
        if created and spool.exists() and spool.stat().st_uid != pwd.getpwnam(USER).pw_uid:
            spool.unlink()         # left by an earlier `lane` user with another uid
    HOME.mkdir(mode=0o755, exist_ok=True)          # mount point for each lane's own home
    Path(LANE_ROOT).parent.mkdir(exist_ok=True)    # /srv: the lanes' private mounts go over it
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    return created


def _ensure_keyonly_user(user: str, shell: str, home: str = "/nonexistent") -> bool:
    """A key-only user with no home of its own (no password; unlocked, as sshd refuses a locked
    account even for keys). True when created."""
    try:
        pwd.getpwnam(user)
        return False
    except KeyError:
        pass
    cp = subprocess.run(["useradd", "-M", "-d", home, "-s", shell, "-U", user],
                        capture_output=True, text=True)
    if cp.returncode != 0 and "already exists" not in cp.stderr:
        raise NevError(f"could not create user {user}: {cp.stderr.strip()}")
    subprocess.run(["usermod", "-p", "*", user], check=True, capture_output=True)
    return cp.returncode == 0


def ensure_jump_user() -> bool:
    """The jump host's user: key-only, no shell (it may only open TCP forwards). True when created."""
    from rig.box.plan import JUMP_USER

    return _ensure_keyonly_user(JUMP_USER, "/usr/sbin/nologin")


def ensure_admin_user() -> bool:
    """The admin pool host's account: key-only, a shell, in no group that sudo knows. True when created."""
    from rig.box.plan import ADMIN_USER

    return _ensure_keyonly_user(ADMIN_USER, "/bin/sh", home="/")     # a session starts in a folder that exists


def remove_jump_user() -> None:
    from rig.box.plan import JUMP_USER

    subprocess.run(["userdel", JUMP_USER], capture_output=True)


def remove_admin_user() -> None:
    from rig.box.plan import ADMIN_USER

    subprocess.run(["userdel", ADMIN_USER], capture_output=True)


def _drop_crontab(user: str) -> None:
    """A removed user's crontab outlives it (userdel leaves the spool file): a user made again
    later gets another uid and could never replace the old file (crontab: rename: EPERM)."""
    subprocess.run(["crontab", "-r", "-u", user], capture_output=True)
    Path("/var/spool/cron/crontabs", user).unlink(missing_ok=True)


def remove_user() -> None:
    _drop_crontab(USER)
    subprocess.run(["userdel", USER], capture_output=True)
    try:
        HOME.rmdir()
    except OSError:
        pass


def host_toolchain() -> tuple[str, str] | None:
    """The host's rustup home and cargo bin folder, when Rust is installed through rustup."""
    home = Path(os.environ.get("HOME") or "/root")
    rustup = Path(os.environ.get("RUSTUP_HOME") or home / ".rustup")
    cargo_bin = Path(os.environ.get("CARGO_HOME") or home / ".cargo") / "bin"
    if (rustup / "toolchains").is_dir() and (cargo_bin / "cargo").exists():
        return str(rustup), str(cargo_bin)
    return None


def keygen(path: Path, comment: str) -> None:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                       check=True, capture_output=True)


def host_key(path: Path, comment: str) -> str:
    """A host's key, made when missing; its public half as known_hosts pins it (type and key)."""
    keygen(path, comment)
    pub = path.with_suffix(".pub").read_text().split()
    return f"{pub[0]} {pub[1]}"


def client_key(path: Path) -> str:
    keygen(path, "nev-box-client")
    return path.with_suffix(".pub").read_text().strip()


class NetnsLanes(BoxLanes):
    kind = "netns"
    uses_netns = True

    def prepare(self, lane: LaneInfo, host: plan.Host, client_pub: str) -> str:
        d = self.lane_dir(lane)
        ent = pwd.getpwnam(USER)
        self.make_home(lane, ent.pw_uid, ent.pw_gid, client_pub)
        hk = d / "ssh_host_ed25519_key"
        pinned = host_key(hk, f"{lane.name}-host")
        (d / "sshd_config").write_text(plan.sshd_config(host.addr, str(hk), str(d / "sshd.pid"),
                                                        toolchain=host_toolchain() is not None))
        return pinned

    def start(self, lane: LaneInfo, host: plan.Host, rec: ProcRec | None) -> ProcRec | None:
        if procs.alive(rec):
            return None
        d = self.lane_dir(lane)
        argv = ["ip", "netns", "exec", host.netns,
                "unshare", "--mount", "--propagation", "private",
                "sh", "-c", plan.LANE_MOUNTS_SH, "lane-mounts",
                str(lane.host_root), str(self.box_dir / "nas"), str(lane.host_home), str(HOME),
                *(host_toolchain() or ("-", "-")),
                "/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")]
        return procs.spawn(f"{lane.name}.sshd", lane.name, argv, self.log_dir / f"{lane.name}-sshd.log")

    def wait(self, lane: LaneInfo, rec: ProcRec) -> None:
        self.wait_ssh(lane, rec, 10, self.log_dir / f"{lane.name}-sshd.log")

    def remove(self, lane_dir: Path) -> None:
        return None
