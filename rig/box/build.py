"""The steps of `nev box up` that (re)build a box, in order (`Build.run`).

Registry and the shared users, the network, then every service whose recorded process is not
alive with the config it was started with is (re)started, the gateway first; box.json is
rewritten after each start so an interrupted `up` still leaves a record `down` can clean from.
Then the files that point nev at the box, the waits until everything answers, and the
development box's forwards.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from bench.oracle import shared as shared_corpora
from lanes.agent.layout import MODEL_ENV
from lanes.base import jsonfile, procs, settings
from lanes.base.errors import NevError
from lanes.base.mask import register_secret
from lanes.base.procs import ProcRec
from lanes.base.ui import info
from lanes.base.ui import info as info_say
from rig.box import (
    forge,
    forwards,
    gateway,
    inventory_services,
    inventory_up,
    lanes_kinds,
    netns,
    plan,
    state,
    units,
    waits,
)
from rig.box.lanes_netns import (
    USER,
    client_key,
    ensure_admin_user,
    ensure_jump_user,
    ensure_user,
    host_key,
)
from rig.box.progress import Progress, Said
from rig.box.sshclient import ssh_client_config
from rig.box.state import BoxInfo, BoxState, LaneInfo

MARKER = ".nev-box"
POOL_CODE = Path(__file__).with_name("pool.py")
NAS_FOLDERS = ("ledger", "archive", "archive/gate-logs", "archive/job-logs", "archive/corpus",
               "ground-truth", "suites", "releases", shared_corpora.FOLDER)


def conf_digest(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(str(f).encode() + b"\0")
        try:
            h.update(f.read_bytes())
        except FileNotFoundError:
            h.update(b"(missing)")
    return h.hexdigest()[:16]


def code_digest() -> str:
    """The box's code and data: a box made by another version is rebuilt (configs rewritten,
    changed services restarted) by the next `up`."""
    here = Path(__file__).parent
    return conf_digest(*sorted(here.glob("*.py")), here / "bank.json")


class Build:
    """One (re)build of the box by `up`: the state it records, what it changed, and its steps.

    A service is (re)started only when its recorded process is not alive with the config it
    was started with; box.json is rewritten after each start.
    """

    def __init__(self, layout: plan.Layout, info: BoxInfo, old: BoxState | None,
                 lanes_kind: str) -> None:
        self.name, self.net, self.dir = info.name, info.net, info.dir
        self.logs = state.logs_dir(info.dir)
        self.layout, self.info = layout, info
        self.st = BoxState(info=info, procs=dict(old.procs) if old else {}, lane_count=layout.lanes,
                           users=list(old.users) if old else [], code=code_digest(),
                           lanes_kind=lanes_kind)
        self.changed: list[str] = []
        self.backend = lanes_kinds.make(lanes_kind, info.dir, self.logs)
        self.hosts = {h.name: h for h in layout.hosts()}
        self.client_pub = ""
        self.hostkeys: list[tuple[str, str]] = []                 # (address, key) to pin
        self.started_sshds: list[tuple[plan.Host, ProcRec]] = []
        self.started_lanes: list[tuple[LaneInfo, ProcRec]] = []
        self.gateway_at = 0.0
        self.progress = Progress(info_say, time.monotonic())

    def phases(self) -> list[tuple[str, Callable[[], None]]]:
        """Every step of the build in order, each with the words its progress line says."""
        return [
            ("folders", self.make_folders),
            ("users", self.register_users),
            ("lanes no longer wanted", self.drop_unwanted_lanes),
            ("network", self.make_network),
            # first: LiteLLM takes ~10 s of CPU to start, the rest happens meanwhile
            ("the gateway (LiteLLM) starting", self.start_gateway),
            ("the lanes' image and files", self.prepare_lanes),
            ("the service hosts' sshd", self.start_service_sshds),
            ("the jump host", self.start_jump_host),
            ("SSH client files", self.write_ssh_client_files),
            ("the lanes", self.start_lanes),
            ("the forge", self.start_forge),
            ("the pools and HAProxy", self.start_pools_and_proxy),
            ("the rig files", self.write_rig_files),
            ("the admin account's sudoers", self.write_admin_sudoers),
            ("waiting for the lanes", self.wait_for_lanes),
            ("the inventory services", self.start_inventory_services),
            ("waiting for the services (the gateway's start)", self.wait_for_services),
            ("the lanes' services (nev rig services install)", self.install_lane_services),
            ("the forwards", self.start_forwards),
        ]

    def run(self, say: Callable[[str], None] = info) -> list[str]:
        """Every step in order, each said on one progress line as it starts, a long one's phases
        as it enters them (a cold build takes minutes: the image, the wheelhouse, LiteLLM's
        start; rig/box/progress.py); what changed."""
        steps = self.phases()
        t0 = time.monotonic()
        self.changed = Said(say, f"  box {self.name}: ", self.changed)   # each said as it happens
        self.progress = Progress(say, t0)
        for i, (what, step) in enumerate(steps, 1):
            say(f"box {self.name}: {what} ({i}/{len(steps)}, {time.monotonic() - t0:.0f} s)")
            with self.progress.step(f"box {self.name}: {what}"):
                step()
        return self.changed

    # ---- starting a service ----

    def log(self, key: str) -> Path:
        """The log of a service: `forge.nginx` logs to logs/forge-nginx.log."""
        return self.logs / f"{key.replace('.', '-')}.log"

    def fresh(self, key: str, *files: Path) -> bool:
        """Alive with the config it was started with; a stale one is stopped here."""
        rec = self.st.procs.get(key)
        if not procs.alive(rec):
            return False
        assert rec is not None
        if rec.conf and rec.conf != conf_digest(*files):
            procs.stop(rec)
            self.changed.append(f"config of {key} changed")
            return False
        return True

    def record(self, rec: ProcRec | None, *files: Path) -> None:
        """A started process recorded (with its config's digest) and box.json rewritten."""
        if rec is not None:
            rec.conf = conf_digest(*files) if files else ""
            self.st.procs[rec.key] = rec
            self.changed.append(f"started {rec.key}")
            state.write_state(self.dir, self.st)

    def start(self, key: str, host: str, argv: list[str], files: tuple[Path, ...] = (),
              env: Mapping[str, str] | None = None, cwd: Path | None = None) -> ProcRec:
        rec = procs.spawn(key, host, argv, self.log(key), env=env, cwd=cwd)
        self.record(rec, *files)
        return rec

    def keep(self, key: str, host: str, argv: list[str], files: tuple[Path, ...] = (),
             env: Mapping[str, str] | None = None, cwd: Path | None = None) -> ProcRec | None:
        """`key` running with the config in `files`: started unless fresh; the new record."""
        return None if self.fresh(key, *files) else self.start(key, host, argv, files, env, cwd)

    # ---- the steps ----

    def make_folders(self) -> None:
        """The box folder, its marker and subfolders, and the share (the NAS) with its folders."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / MARKER).write_text("a rig-in-a-box folder; `nev box down` removes it\n")
        for sub in ("logs", "run", "ssh", "nas"):
            (self.dir / sub).mkdir(exist_ok=True)
        os.chmod(self.dir / "nas", 0o1777)
        # The share's standard folders, open to every lane user like the share itself (the
        # real NAS export is shared by every lane): a folder first made by root on the dev box
        # must not lock the lanes' `lane` user out of the ledger or the archives.
        for sub in NAS_FOLDERS:
            (self.dir / "nas" / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(self.dir / "nas" / sub, 0o1777)

    def register_users(self) -> None:
        """The box in the registry with the shared users it uses; each made when missing."""
        st = self.st
        if USER not in st.users:
            st.users.append(USER)
        state.register(self.name, self.net, self.dir, st.users)
        state.write_state(self.dir, st)
        if ensure_user():
            self._made_user(USER)
        if plan.JUMP_USER not in st.users:
            st.users.append(plan.JUMP_USER)
            state.register(self.name, self.net, self.dir, st.users)
        if ensure_jump_user():
            self._made_user(plan.JUMP_USER)
        if plan.ADMIN_USER not in st.users:
            st.users.append(plan.ADMIN_USER)
            state.register(self.name, self.net, self.dir, st.users)
        if ensure_admin_user():
            self._made_user(plan.ADMIN_USER)

    def _made_user(self, user: str) -> None:
        """Marked as made by this box: `down` removes it when no other box lists it."""
        marker = state.user_marker(user)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(self.name + "\n")
        self.changed.append(f"user {user}")

    def drop_unwanted_lanes(self) -> None:
        """Lanes no longer wanted (the lane count went down), and namespaces of no host."""
        for key in [k for k in self.st.procs if k.startswith("lane")]:
            lane_name = key.split(".")[0]
            if lane_name not in self.info.hosts:
                procs.stop(self.st.procs.pop(key))
                self.backend.remove(self.dir / "lanes" / lane_name)
                self.changed.append(f"removed {lane_name}")
        keep = {*self.info.hosts, "jump", "rig"}  # the jump host and the rig network's own namespace
        stale_ns = [ns for ns in netns.box_netns(self.name)
                    if ns.removeprefix(plan.netns_prefix(self.name)) not in keep]
        if stale_ns:
            netns.remove_some(stale_ns)

    def make_network(self) -> None:
        """The bridge, veths and namespaces, made where missing (an LXC lane has its own namespace)."""
        self.changed += netns.ensure(self.layout, frozenset() if self.backend.uses_netns else frozenset({"lane"}))

    def start_gateway(self) -> None:
        gw, gdir = self.layout.gateway(), self.dir / "gateway"
        genv, _keyfiles, master = gateway.write_files(self.layout, gdir, self.dir / "keys")
        for k in (genv["LITELLM_MASTER_KEY"], *(p.read_text().strip() for p in self.info.keys.values())):
            register_secret(k)
        self.gateway_at = time.monotonic()
        (gdir / "home").mkdir(exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(gdir / "home"),
               "LANG": "C.UTF-8", **genv}
        unit, pids = gdir / "unit", self.dir / "run" / "gateway.pid"
        unit.write_text(gateway.unit_script(env, gdir, master, gw.addr, pids, self.log("gateway.litellm")))
        unit.chmod(0o755)
        files = (gdir / "config.yaml", gdir / "keys.json", gdir / f"{gateway.AUTH_MODULE}.py",
                 gdir / f"{gateway.SPEND_MODULE}.py", unit)
        if self.fresh("gateway.litellm", *files) or self._adopt_restarted(["gateway.litellm"], pids, files):
            return
        # Through its unit, as a role reload restarts it: the unit stops whatever LiteLLM it
        # started last (one a `nev rig` reload left running too), so there is never a second one.
        self.st.procs.pop("gateway.litellm", None)
        run = ["ip", "netns", "exec", gw.netns, str(unit)]
        subprocess.run([*run, "stop"], capture_output=True, timeout=30)
        cp = subprocess.run([*run, "start", "--no-wait"], capture_output=True, text=True, timeout=60)
        if cp.returncode != 0:
            raise NevError(f"could not start the gateway: {cp.stderr.strip() or 'exit ' + str(cp.returncode)}")
        self.record(procs.adopt("gateway.litellm", "gateway", int(pids.read_text().split()[0]), [str(unit), "start"]),
                    *files)

    def prepare_lanes(self) -> None:
        """Every lane's files and keys (through its backend) and its ~/.lane-model-env."""
        # the box's own client key, and a teammate's development boxes' (docs/team.md)
        self.client_pub = "\n".join([client_key(self.info.ssh_key), *state.team_keys(self.dir)])
        image = getattr(self.backend, "image_progress", None)     # an LXC guest's image build

        def watch() -> tuple[str, str] | None:
            at = image() if image else None
            return ("the image: " + at[0], at[1]) if at else None

        with self.progress.watching(watch):
            for lane in self.info.lanes:
                self.progress.phase(f"{lane.name}: its files and keys"
                                    + (", on the image (built once)" if image else ""))
                self.hostkeys.append((lane.addr, self.backend.prepare(lane, self.hosts[lane.name], self.client_pub)))
                _lane_model_env(lane.host_home, self.info.gateway_url)

    def _pin_host_key(self, host_dir: Path, addr: str, comment: str) -> None:
        self.hostkeys.append((addr, host_key(host_dir / "ssh_host_ed25519_key", comment)))

    def _sshd(self, h: plan.Host, cfg: Path, authorized_keys: Path, *more: Path) -> None:
        argv = ["ip", "netns", "exec", h.netns, "/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)]
        if h.name == plan.ADMIN_POOL:
            argv = plan.private_sudoers_argv(str(self.sudoers_dir), str(self.sudoers_file), argv)
        rec = self.keep(f"{h.name}.sshd", h.name, argv, (cfg, authorized_keys, *more))
        if rec is not None:
            self.started_sshds.append((h, rec))

    @property
    def sudoers_dir(self) -> Path:
        """The admin pool host's /etc/sudoers.d; its /etc/sudoers is `sudoers_file`, beside it."""
        return self.dir / "hosts" / plan.ADMIN_POOL / "sudoers.d"

    sudoers_file = property(lambda self: self.sudoers_dir.with_name("sudoers"))

    def _own_keys(self, keys: Path, user: str) -> Path:
        """`user`'s copy of the client key: sshd reads a user's keys as that user, so the copy is
        its own (mode 600), in a folder it can reach wherever the box folder lives (pytest's and
        CI's are mode 700)."""
        keys.parent.mkdir(parents=True, exist_ok=True)
        for d in (keys.parent, keys.parent.parent):
            os.chmod(d, 0o755)
        forge.write_secret(keys, self.client_pub)
        ent = pwd.getpwnam(user)
        os.chown(keys, ent.pw_uid, ent.pw_gid)
        return keys

    def _admin_host(self) -> tuple[Path, ...]:
        """The admin account's key file and the host's own sudo configuration (root's, 0440;
        the drop-in folder 0755 as Debian ships it); the files its sshd is started with."""
        keys = self._own_keys(state.keys_file(self.name, "admin"), plan.ADMIN_USER)
        self.sudoers_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.sudoers_dir, 0o755)
        if not self.sudoers_file.exists() or self.sudoers_file.read_text() != plan.SUDOERS:
            self.sudoers_file.write_text(plan.SUDOERS)     # in place: a bind mount holds the inode
        os.chmod(self.sudoers_file, 0o440)
        return keys, self.sudoers_file

    def start_service_sshds(self) -> None:
        """Service hosts reachable as root (for `nev rig`): sshd in their network namespace; the
        admin pool host's also lets in its admin account, with sudo as that host's own files say."""
        ak = self.dir / "ssh" / "authorized_keys"
        forge.write_secret(ak, self.client_pub)
        for hname in plan.SERVICE_SSH_HOSTS:
            h, hd = self.hosts[hname], self.dir / "hosts" / hname
            self._pin_host_key(hd, h.addr, f"{hname}-host")
            more = self._admin_host() if hname == plan.ADMIN_POOL else ()
            cfg = hd / "sshd_config"
            cfg.write_text(plan.root_sshd_config(h.addr, str(hd / "ssh_host_ed25519_key"),
                                                 str(hd / "sshd.pid"), str(ak),
                                                 admin_keys=str(more[0]) if more else ""))
            self._sshd(h, cfg, ak, *more)

    def start_jump_host(self) -> None:
        """The jump host: the one way in from the development box (key-only, forwards only)."""
        jd = self.dir / "hosts" / "jump"
        self._pin_host_key(jd, self.info.jump_addr, "jump-host")
        jak = self._own_keys(state.keys_file(self.name, "jump"), plan.JUMP_USER)
        jcfg = jd / "sshd_config"
        jcfg.write_text(plan.jump_sshd_config(self.layout, str(jd / "ssh_host_ed25519_key"), str(jd / "sshd.pid"),
                                              str(jak)))
        self._sshd(self.layout.jump(), jcfg, jak)

    def write_ssh_client_files(self) -> None:
        """known_hosts with every host key pinned, and the OpenSSH client config."""
        self.info.known_hosts.write_text(plan.known_hosts_lines(self.hostkeys))
        self.info.ssh_config.write_text(ssh_client_config(self.name, self.info))

    def start_lanes(self) -> None:
        """Each lane not alive with its sshd config, started by its backend."""
        for lane in self.info.lanes:
            cfg = self.dir / "lanes" / lane.name / "sshd_config"
            self.fresh(f"{lane.name}.sshd", cfg)
            rec = self.backend.start(lane, self.hosts[lane.name], self.st.procs.get(f"{lane.name}.sshd"))
            if rec and not self.backend.uses_netns:
                self.changed.append(f"made veth {self.hosts[lane.name].veth} (with guest {self.name}-{lane.name})")
            self.record(rec, cfg)
            if rec:
                self.started_lanes.append((lane, rec))

    def start_forge(self) -> None:
        """The forge (nginx and fcgiwrap serving git over HTTP), its token, the engine repository."""
        fdir, info = self.dir / "forge", self.info
        token = forge.ensure_token(info.forge_token_file)
        register_secret(token)
        fpaths = forge.write_files(fdir, info.forge_addr, token)
        forge.seed_engine(info.forge_repos)
        ns = self.layout.forge().netns
        if not procs.alive(self.st.procs.get("forge.fcgiwrap")):
            Path(fpaths["socket"]).unlink(missing_ok=True)
            self.start("forge.fcgiwrap", "forge", ["ip", "netns", "exec", ns, "/usr/sbin/fcgiwrap", "-c", "4", "-f",
                                                   "-s", f"unix:{fpaths['socket']}"])
        self.keep("forge.nginx", "forge", ["ip", "netns", "exec", ns, "/usr/sbin/nginx", "-e", fpaths["error_log"],
                                           "-p", str(fdir), "-c", str(fdir / "nginx.conf")],
                  (fdir / "nginx.conf", fdir / "htpasswd"))

    def start_pools_and_proxy(self) -> None:
        """Stand-in pools, each replica through its unit script, then HAProxy in front of them."""
        pdir = self.dir / "pools"
        (pdir / "units").mkdir(parents=True, exist_ok=True)
        bank = pdir / "bank.json"
        if not bank.exists():
            shutil.copyfile(Path(__file__).with_name("bank.json"), bank)
        for p, h in zip(plan.POOLS, self.layout.pool_hosts(), strict=True):
            for r in p.replica_names():
                self._replica(p, r, h, bank)
        hcfg = self.dir / "proxy" / "haproxy.cfg"
        hcfg.parent.mkdir(exist_ok=True)
        hcfg.write_text(plan.haproxy_cfg(self.layout, str(self.dir / "run" / "haproxy.pid"),
                                         str(self.dir / "run" / "haproxy.sock")))
        # through its unit, as the tick's mending starts it (rig/serving/mend.py)
        unit, pid = hcfg.with_name("unit"), self.dir / "run" / "haproxy.pid"
        unit.write_text(units.haproxy_script(str(hcfg), str(pid)))
        unit.chmod(0o755)
        if self.fresh("proxy.haproxy", hcfg, unit) or self._adopt_restarted(["proxy.haproxy"], pid, (hcfg, unit)):
            return
        self.st.procs.pop("proxy.haproxy", None)
        run = ["ip", "netns", "exec", self.layout.proxy().netns, str(unit)]
        subprocess.run([*run, "stop"], capture_output=True, timeout=30)
        cp = subprocess.run([*run, "start"], capture_output=True, text=True, timeout=60)
        if cp.returncode != 0:
            why = cp.stderr.strip() or f"exit {cp.returncode}"
            raise NevError(f"could not start HAProxy: {why}")
        self.record(procs.adopt("proxy.haproxy", "proxy", int(pid.read_text().split()[0]), [str(unit), "start"]),
                    hcfg, unit)

    def _replica(self, p: plan.Pool, replica: str, h: plan.Host, bank: Path) -> None:
        """One replica started by its own unit script (as `nev rig start` starts it), its
        processes recorded; one a `nev rig start` left running is stopped and started again."""
        unit = self.dir / "pools" / "units" / f"{p.name}-{replica}"
        unit.write_text(units.unit_script(p, replica, h.addr, sys.executable, str(plan.PROJECT), str(bank),
                                         str(self.dir / "run" / f"{p.name}-{replica}.pids"),
                                         str(self.log(f"{p.name}.{replica}")), str(self.dir / "run")))
        unit.chmod(0o755)
        keys = pool_keys(p, replica)
        files = (bank, POOL_CODE, unit)
        pidfile = self.dir / "run" / f"{unit.name}.pids"
        if all(self.fresh(k, *files) for k in keys) or self._adopt_restarted(keys, pidfile, files):
            return
        for k in keys:
            if k in self.st.procs:
                procs.stop(self.st.procs.pop(k))
        run = ["ip", "netns", "exec", h.netns, str(unit)]
        subprocess.run([*run, "stop"], capture_output=True, timeout=30)
        cp = subprocess.run([*run, "start"], capture_output=True, text=True, timeout=60)
        if cp.returncode != 0:
            raise NevError(f"could not start {p.name}/{replica}: {cp.stderr.strip() or 'exit ' + str(cp.returncode)}")
        pids = (self.dir / "run" / f"{p.name}-{replica}.pids").read_text().split()
        for k, pid in zip(keys, pids, strict=True):
            self.record(procs.adopt(k, p.name, int(pid), [str(unit), "start"]), *files)

    def _adopt_restarted(self, keys: list[str], pidfile: Path, files: tuple[Path, ...]) -> bool:
        """A replica or the gateway an operator restarted through the same unit script (`nev rig
        start`, a role's reload) with the config it was recorded with: the processes its unit's
        `pidfile` names recorded, nothing restarted or reported."""
        recs = [self.st.procs.get(k) for k in keys]
        if any(r is None or r.conf != conf_digest(*files) for r in recs):
            return False
        try:
            pids = [int(x) for x in pidfile.read_text().split()][:len(keys)]
            adopted = [procs.adopt(k, r.host, pid, r.argv) for k, r, pid in zip(keys, recs, pids, strict=True)
                       if r is not None]
        except (OSError, ValueError, NevError):
            return False
        for rec in adopted:
            rec.conf = conf_digest(*files)
            self.st.procs[rec.key] = rec
        state.write_state(self.dir, self.st)
        return True

    def write_rig_files(self) -> None:
        """The folknet and rig files, and the lanes file: what points nev at the box."""
        info = self.info
        assert info.folknet_file is not None and info.rig_file is not None
        jsonfile.write_atomic(info.folknet_file, plan.folknet(self.layout))
        jsonfile.write_atomic(info.rig_file, plan.rig_file(
            self.layout, str(self.dir / "proxy" / "haproxy.cfg"), str(self.dir / "run" / "haproxy.pid"),
            str(self.dir / "gateway" / "config.yaml"), str(info.known_hosts), str(info.ssh_key),
            admin=f"{sys.executable} -I {plan.PROJECT / 'rig' / 'box' / 'haproxy.py'} {self.dir / 'run' / 'haproxy.sock'}",
            units_dir=str(self.dir / "pools" / "units")))
        jsonfile.write_atomic(info.lanes_file, plan.lanes_file(
            [{"ssh": ln.ssh, "root": ln.root, "shared": ln.shared, "name": ln.name} for ln in info.lanes],
            info.forge_url + "engine.git", str(info.nas), info.jump))

    def write_admin_sudoers(self) -> None:
        """The admin pool's drop-in as `nev rig provision-sudo` writes it, when the host has none
        (a box comes up provisioned; one changed since is left as it is)."""
        from rig import rigfile
        from rig.serving import sudoers_drop_ins, sudoers_path

        assert self.info.rig_file is not None
        role = rigfile.load(self.info.rig_file).serving[plan.ADMIN_POOL]
        f = self.sudoers_dir / Path(sudoers_path(role.name)).name
        if not f.exists():
            (text,) = sudoers_drop_ins(role).values()
            tmp = self.sudoers_dir / f".{f.name}.new"           # a name with a dot: sudo skips it
            tmp.write_text(text)
            os.chmod(tmp, 0o440)
            tmp.rename(f)
            self.changed.append(f"sudoers drop-in {f.name} on {plan.ADMIN_POOL}")

    def wait_for_lanes(self) -> None:
        # The box checks its hosts from inside the rig network (the development box itself
        # reaches it only through the jump host).
        for lane, rec in self.started_lanes:
            self.backend.wait(lane, rec)

    def start_inventory_services(self) -> None:
        """The service hosts advertise their roles (mDNS + HTTP inventory). They are namespaces of
        this machine with no boot of their own, so the box runs their advertisers; a lane's
        services are the lane's own (`install_lane_services`). The lanes get this nev first, the
        way `nev lane install` puts it there."""
        st = self.st
        lane_pids = {ln.name: st.procs[f"{ln.name}.sshd"].pid for ln in self.info.lanes}
        svcs, made = inventory_up.prepare(self.layout, self.dir, st.lanes_kind, lane_pids,
                                          say=self.progress.phase)
        self.changed += made
        for key in [k for k, r in st.procs.items() if k.endswith((".advertise", ".collect"))
                    and r.host in lane_pids]:
            procs.stop(st.procs.pop(key))          # a box of before: the lanes run their own
            self.changed.append(f"stopped {key} (the lane runs its own now)")
        state.write_state(self.dir, st)
        for svc in svcs:
            if svc.in_lane:
                continue
            if not self.fresh(svc.key, *svc.conf_files):
                rec = procs.spawn(svc.key, svc.host, svc.argv(), svc.log, env=svc.env, cwd=svc.cwd)
                self.record(rec, *svc.conf_files)

    def install_lane_services(self) -> None:
        """`nev rig services install` with the box's settings, as a user would run it: each
        lane's advertiser, lane0's collector and probe, under the lane's own supervisor and
        @reboot line."""
        declared = inventory_services.inventory_dir(self.dir) / "lanes"
        declared.mkdir(parents=True, exist_ok=True)
        docs = inventory_services.declared(self.layout)
        for ln in self.info.lanes:
            jsonfile.write_atomic(declared / f"{ln.name}.json", docs[ln.name])
        hosts = len([h for h in self.layout.hosts() if h.role not in inventory_services.SKIP_ROLES])
        env = {**os.environ, **self.info.env, "PYTHONPATH": str(plan.PROJECT)}
        env.setdefault(settings.PROBE_EVERY.name, str(inventory_services.PROBE_EVERY))
        cp = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "services", "install",
                             "--declared", str(declared), "--expect", str(hosts)],
                            env=env, cwd=plan.PROJECT, capture_output=True, text=True, timeout=600)
        with open(self.log("services-install"), "a") as log:
            log.write(cp.stdout + cp.stderr)
        if cp.returncode != 0:
            tail = (cp.stderr.strip() or cp.stdout.strip()).splitlines()[-1:]
            raise NevError(f"nev rig services install failed: {' '.join(tail)}; "
                           f"see {self.log('services-install')}")
        self.changed += [ln for ln in cp.stdout.splitlines() if ": changed:" in ln]

    def wait_for_services(self) -> None:
        """Every service answers, checked from inside the rig network; the gateway's start time noted."""
        info, recs = self.info, self.st.procs
        phase = self.progress.phase
        with netns.inside(self.layout.rig_netns):
            if self.started_sshds:
                phase("the service hosts' sshd")
            for h, rec in self.started_sshds:
                waits.wait_port(h.addr, plan.SSH_PORT, 10, rec, self.log(rec.key))
            phase("the forge")
            waits.wait_http(f"http://{info.forge_addr}/health", 10, recs["forge.nginx"], self.log("forge.nginx"))
            phase("the pools and HAProxy")
            for p in plan.POOLS:
                pi, key = info.pools[p.name], pool_keys(p, p.replica_names()[0])[0]
                waits.wait_http(f"http://{pi.addr}:{pi.port}/health", 10, recs[key], self.log(key))
            for pi in info.pools.values():
                waits.wait_port(self.layout.proxy().addr, pi.proxy_port, 10, recs["proxy.haproxy"],
                                self.log("proxy.haproxy"))
            gw_rec = recs["gateway.litellm"]
            phase("the gateway (LiteLLM answers once it has loaded, up to 300 s)")
            waits.wait_http(f"{info.gateway_url}/health/liveliness", 300, gw_rec, self.log("gateway.litellm"))
        if "started gateway.litellm" in self.changed:
            cpu = procs.cpu_seconds(gw_rec.pid)
            self.changed.append(f"gateway answered {time.monotonic() - self.gateway_at:.1f} s after its start"
                                + (f" ({cpu:.1f} s of CPU)" if cpu is not None else ""))

    def start_forwards(self) -> None:
        """The development box's forwards to the forge and the gateway, through the jump host, as
        a user of the real rig holds them: `nev rig forward up` with the box's rig file."""
        st = self.st
        st.forward_state = st.forward_state or str(settings.get_path(settings.STATE_DIR))
        state.write_state(self.dir, st)
        self.changed += forwards.run(st, "up")
        st.complete = True
        state.write_state(self.dir, st)


def pool_keys(p: plan.Pool, replica: str) -> list[str]:
    """box.json's keys for a replica's processes: `gpu0.pool` for a one-replica pool (and a
    pair's head; its worker half `gpu1.worker`), `gpu2.r0` for each replica of a larger pool."""
    if p.pair:
        return [f"{p.name}.pool", f"{p.name}.worker"]
    return [f"{p.name}.pool" if p.replicas == 1 else f"{p.name}.{replica}"]


def _lane_model_env(home: Path, gateway_url: str) -> None:
    """The lane's ~/.lane-model-env, as `nev lane provision` writes it on the real rig: the
    gateway at its rig address (a lane never uses the development box's forward)."""
    if not gateway_url:
        return
    f = home / MODEL_ENV
    text = f"NEV_LANE_MODEL_URL={gateway_url}\n"
    if not f.exists() or f.read_text() != text:
        f.write_text(text)
    st = home.stat()
    os.chown(f, st.st_uid, st.st_gid)
    os.chmod(f, 0o644)
