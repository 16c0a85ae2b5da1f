"""`Box`: bring the rig-in-a-box up (idempotently, repairing what is dead), down, and report.

The order of `up`: registry and lock, the shared user, the network, then every service whose
recorded process is not alive is (re)started; box.json is rewritten after each start so an
interrupted `up` still leaves a record `down` can clean from.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lanes.agent.layout import MODEL_ENV
from lanes.base import jsonfile, settings
from lanes.base.errors import NevError
from lanes.base.mask import register_secret
from rig.box import forge, gateway, inventory_up, lanes_backend, netns, plan, procs, state
from rig.box.lanes_netns import (
    HOME,
    LANE_ROOT,
    LANE_SHARED,
    USER,
    client_key,
    ensure_jump_user,
    ensure_user,
    keygen,
    remove_jump_user,
    remove_user,
)
from rig.box.state import BoxInfo, BoxState, LaneInfo, PoolInfo, ProcRec

MARKER = ".nev-box"
POOL_CODE = Path(__file__).with_name("pool.py")
PROJECT = Path(__file__).resolve().parent.parent.parent   # where `rig` is importable from


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


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise NevError(f"`nev box {what}` needs root for network namespaces; run it as root (sudo)", 1)


@dataclass
class UpResult:
    info: BoxInfo
    changed: list[str] = field(default_factory=list)
    seconds: float = 0.0


NAS_FOLDERS = ("ledger", "archive", "archive/gate-logs", "archive/job-logs", "archive/corpus",
               "ground-truth", "suites", "releases")


class Box:
    def __init__(self, name: str, net: str, box_dir: Path, lanes: str | None = None) -> None:
        self.name = plan.check_name(name)
        self.net = plan.check_net(net)
        self.dir = box_dir.absolute()
        # How lanes are made (rig/box/lanes_backend.py): NEV_BOX_LANES, LXC guests unless set.
        self.lane_backend = lanes or settings.value(settings.BOX_LANES)
        if self.lane_backend not in lanes_backend.BACKENDS:
            raise NevError(f"NEV_BOX_LANES={self.lane_backend!r} is unknown; use one of "
                           f"{', '.join(lanes_backend.BACKENDS)}")

    @classmethod
    def from_settings(cls, environ: Mapping[str, str] | None = None, default_name: str | None = None,
                      default_net: str | None = None) -> Box:
        env = os.environ if environ is None else environ
        name = settings.given(settings.BOX_NAME, env) or default_name or settings.value(settings.BOX_NAME)
        net = settings.given(settings.BOX_NET, env) or default_net or settings.value(settings.BOX_NET)
        base = settings.path(settings.BOX_DIR, env)
        return cls(name, net, base / plan.check_name(name), settings.get(settings.BOX_LANES, env))

    # ---- paths ----

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def jump_keys_file(self) -> Path:
        return state.REGISTRY / "jump" / self.name / "authorized_keys"

    def _lane_info(self, h: plan.Host, i: int) -> LaneInfo:
        d = self.dir / "lanes" / h.name
        return LaneInfo(index=i, name=h.name, netns=h.netns, addr=h.addr, ssh=f"{USER}@{h.addr}:{plan.SSH_PORT}",
                        root=LANE_ROOT, shared=LANE_SHARED, host_root=d / "root", host_home=d / "home")

    def _info(self, layout: plan.Layout) -> BoxInfo:
        fd = self.dir / "forge"
        lanes = [self._lane_info(h, i) for i, h in enumerate(layout.lane_hosts())]
        info = BoxInfo(
            name=self.name, dir=self.dir, net=self.net, bridge=layout.bridge, bridge_addr=layout.bridge_addr,
            lanes=lanes, known_hosts=self.dir / "ssh" / "known_hosts", ssh_key=self.dir / "ssh" / "id_ed25519",
            ssh_config=self.dir / "ssh" / "config", lanes_file=self.dir / "lane.local.json",
            forge_url=layout.forge_base, forge_addr=layout.forge().addr, forge_user=forge.USER,
            forge_token_file=fd / "token", forge_askpass=fd / "askpass", forge_access_log=fd / "access.log",
            forge_repos=fd / "repos", nas=self.dir / "nas",
            hosts={h.name: {"addr": h.addr, "netns": h.netns, "role": h.role} for h in layout.hosts()},
            gateway_url=layout.gateway_url, gateway_addr=layout.gateway().addr,
            master_key_file=self.dir / "keys" / "master.key",
            keys={k: self.dir / "keys" / f"{k}.key" for k in plan.KEY_NAMES},
            aliases={p.alias: p.name for p in plan.POOLS}, proxy_addr=layout.proxy().addr,
            pools={p.name: PoolInfo(name=p.name, netns=h.netns, addr=h.addr, port=plan.POOL_PORT,
                                    control_url=f"http://{h.addr}:{plan.POOL_PORT}/control", alias=p.alias,
                                    max_inflight=p.max_inflight, proxy_port=layout.proxy_port(p.name))
                   for p, h in zip(plan.POOLS, layout.pool_hosts(), strict=True)},
            proxy_stats_socket=self.dir / "run" / "haproxy.sock",
            folknet_file=self.dir / "folknet.json", rig_file=self.dir / "rig.local.json",
            rig_netns=layout.rig_netns, jump=layout.jump_spec, jump_addr=layout.jump_outside_addr,
            jump_rig_addr=layout.jump().addr, dev_addr=layout.dev_addr,
            forge_local_url=layout.forge_local_base, gateway_local_url=layout.gateway_local_url,
        )
        info.env = self._env(info)
        return info

    def _env(self, info: BoxInfo) -> dict[str, str]:
        # What a user of the real rig sets: the jump host, the forge and the gateway through the
        # development box's forwards, and the rig addresses the lanes use.
        env = {
            "NEV_BOX_NAME": self.name, "NEV_BOX_NET": self.net, "NEV_BOX_DIR": str(self.dir.parent),
            "NEV_LANES_FILE": str(info.lanes_file), "NEV_KNOWN_HOSTS": str(info.known_hosts),
            "NEV_SSH_KEY": str(info.ssh_key), "NEV_LANE_JUMP": info.jump,
            "NEV_LANE_GIT_URL": info.forge_url + "engine.git",
            "NEV_FORGE_URL": info.forge_local_url + "engine.git",
            "NEV_FORGE_USER": info.forge_user, "NEV_FORGE_TOKEN_FILE": str(info.forge_token_file),
        }
        if info.gateway_url:
            env.update({"NEV_MODEL_URL": info.gateway_local_url, "NEV_LANE_MODEL_URL": info.gateway_url})
        if info.keys.get("batch"):
            env["NEV_MODEL_KEY_FILE"] = str(info.keys["batch"])
        if info.folknet_file:
            env["NEV_FOLKNET_FILE"] = str(info.folknet_file)
        if info.rig_file:
            env["NEV_RIG_FILE"] = str(info.rig_file)
        return env

    @contextmanager
    def _lock(self) -> Iterator[None]:
        d = state.REGISTRY / "locks"
        d.mkdir(parents=True, exist_ok=True)
        with open(d / f"{self.name}.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # ---- reading ----

    def state(self) -> BoxState | None:
        return state.read_state(self.dir)

    def info(self) -> BoxInfo:
        st = self.state()
        if st is None or st.info is None:
            raise NevError(f"box {self.name} is not up (no {state.state_path(self.dir)}); run `nev box up`")
        return st.info

    def health(self, st: BoxState) -> dict[str, bool]:
        """Each network object and recorded process of the box: present/alive or not."""
        assert st.info is not None
        rig = st.info.rig_netns
        out: dict[str, bool] = {f"bridge {st.info.bridge}": bool(rig) and netns.link_exists(st.info.bridge, rig)}
        have = netns.netns_list()
        jump_ns = f"{self.name}-jump"
        out[f"outside link {self.name}-out"] = (netns.link_exists(f"{self.name}-out") and jump_ns in have
                                                and netns.ns_has_addr(jump_ns, "eth1"))
        for h in [*st.info.hosts.values(), {"netns": jump_ns, "role": "jump"}]:
            out[f"veth {h['netns']}"] = bool(rig) and netns.link_exists(h["netns"], rig)
            if h["role"] == "lane" and st.lanes_kind != "netns":
                continue
            out[f"netns {h['netns']}"] = h["netns"] in have
        for key, rec in st.procs.items():
            out[key] = procs.alive(rec)
        return out

    # ---- up ----

    def up(self, lanes: int | None = None) -> BoxInfo:
        return self.bring_up(lanes).info

    def bring_up(self, lanes: int | None = None) -> UpResult:
        require_root("up")
        t0 = time.monotonic()
        with self._lock():
            old = self.state()
            n = plan.check_lanes(lanes if lanes is not None else (old.lane_count if old and old.lane_count else 2))
            why = state.conflicts(self.name, self.net, self.dir, state.registry_entries())
            if why:
                raise NevError(why)
            if old and old.info and old.info.net != self.net:
                raise NevError(f"box {self.name} is up on net {old.info.net}, not {self.net}; "
                               "run `nev box down` first to move it")
            if old and old.info and old.lanes_kind != self.lane_backend and old.procs:
                raise NevError(f"box {self.name} has {old.lanes_kind} lanes, not {self.lane_backend}; "
                               "run `nev box down` first to change NEV_BOX_LANES")
            if (old and old.info and old.complete and old.lane_count == n and old.code == code_digest()
                    and all(self.health(old).values()) and self.forwards_answer(old.info)):
                return UpResult(old.info, [], time.monotonic() - t0)
            changed = self._build(old, n)
            st = self.state()
            assert st is not None and st.info is not None
            return UpResult(st.info, changed, time.monotonic() - t0)

    def _build(self, old: BoxState | None, n: int) -> list[str]:
        layout = plan.Layout(self.name, self.net, n)
        info = self._info(layout)
        changed: list[str] = []
        st = BoxState(info=info, procs=dict(old.procs) if old else {}, lane_count=n,
                      users=list(old.users) if old else [], code=code_digest(), lanes_kind=self.lane_backend)
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
        if USER not in st.users:
            st.users.append(USER)
        state.register(self.name, self.net, self.dir, st.users)
        state.write_state(self.dir, st)
        if ensure_user():
            (state.REGISTRY / "users").mkdir(parents=True, exist_ok=True)
            (state.REGISTRY / "users" / f"{USER}.created").write_text(self.name + "\n")
            changed.append(f"user {USER}")
        if plan.JUMP_USER not in st.users:
            st.users.append(plan.JUMP_USER)
            state.register(self.name, self.net, self.dir, st.users)
        if ensure_jump_user():
            (state.REGISTRY / "users").mkdir(parents=True, exist_ok=True)
            (state.REGISTRY / "users" / f"{plan.JUMP_USER}.created").write_text(self.name + "\n")
            changed.append(f"user {plan.JUMP_USER}")

        # Lanes no longer wanted (the lane count went down).
        backend = lanes_backend.make(self.lane_backend, self.dir, self.logs)
        for key in [k for k in st.procs if k.startswith("lane")]:
            lane_name = key.split(".")[0]
            if lane_name not in info.hosts:
                procs.stop(st.procs.pop(key))
                backend.remove(self.dir / "lanes" / lane_name)
                changed.append(f"removed {lane_name}")
        keep = {*info.hosts, "jump", "rig"}     # the jump host and the rig network's own namespace
        stale_ns = [ns for ns in netns.box_netns(self.name)
                    if ns.removeprefix(plan.netns_prefix(self.name)) not in keep]
        if stale_ns:
            netns.remove_some(stale_ns)

        changed += netns.ensure(layout, frozenset() if backend.uses_netns else frozenset({"lane"}))

        def fresh(key: str, *files: Path) -> bool:
            """Alive with the config it was started with; a stale one is stopped here."""
            rec = st.procs.get(key)
            if not procs.alive(rec):
                return False
            assert rec is not None
            if rec.conf and rec.conf != conf_digest(*files):
                procs.stop(rec)
                changed.append(f"config of {key} changed")
                return False
            return True

        def record(rec: ProcRec | None, *files: Path) -> None:
            if rec is not None:
                rec.conf = conf_digest(*files) if files else ""
                st.procs[rec.key] = rec
                changed.append(f"started {rec.key}")
                state.write_state(self.dir, st)

        # The gateway first: LiteLLM takes ~10 s of CPU to start, the rest happens meanwhile.
        gw = layout.gateway()
        gdir = self.dir / "gateway"
        genv, _keyfiles, _master = gateway.write_files(layout, gdir, self.dir / "keys")
        for k in (genv["LITELLM_MASTER_KEY"], *(p.read_text().strip() for p in info.keys.values())):
            register_secret(k)
        t_gw = time.monotonic()
        if not fresh("gateway.litellm", gdir / "config.yaml", gdir / "keys.json", gdir / f"{gateway.AUTH_MODULE}.py"):
            (gdir / "home").mkdir(exist_ok=True)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(gdir / "home"),
                   "LANG": "C.UTF-8", **genv}
            record(procs.spawn("gateway.litellm", "gateway", gateway.argv(gw.netns, gw.addr, gdir / "config.yaml"),
                               self.logs / "gateway-litellm.log", env=env, cwd=gdir),
                   gdir / "config.yaml", gdir / "keys.json", gdir / f"{gateway.AUTH_MODULE}.py")

        # Lanes.
        pub = client_key(info.ssh_key)
        hostkeys: list[tuple[str, str]] = []
        started_services: list[tuple[plan.Host, ProcRec]] = []
        hosts = {h.name: h for h in layout.hosts()}
        for lane in info.lanes:
            hostkeys.append((lane.addr, backend.prepare(lane, hosts[lane.name], pub)))
            _lane_model_env(lane.host_home, info.gateway_url)
        # Service hosts reachable as root (for `nev rig`): sshd in their network namespace.
        ak = self.dir / "ssh" / "authorized_keys"
        forge.write_secret(ak, pub)
        for hname in plan.SERVICE_SSH_HOSTS:
            h = hosts[hname]
            hd = self.dir / "hosts" / hname
            keygen(hd / "ssh_host_ed25519_key", f"{hname}-host")
            hp = (hd / "ssh_host_ed25519_key.pub").read_text().split()
            hostkeys.append((h.addr, f"{hp[0]} {hp[1]}"))
            cfg = hd / "sshd_config"
            cfg.write_text(plan.root_sshd_config(h.addr, str(hd / "ssh_host_ed25519_key"),
                                                 str(hd / "sshd.pid"), str(ak)))
            if not fresh(f"{hname}.sshd", cfg, ak):
                rec = procs.spawn(f"{hname}.sshd", hname, ["ip", "netns", "exec", h.netns, "/usr/sbin/sshd",
                                                            "-D", "-e", "-f", str(cfg)], self.logs / f"{hname}-sshd.log")
                record(rec, cfg, ak)
                started_services.append((h, rec))
        # The jump host: the one way in from the development box (key-only, forwards only).
        jump = layout.jump()
        jd = self.dir / "hosts" / "jump"
        keygen(jd / "ssh_host_ed25519_key", "jump-host")
        jp = (jd / "ssh_host_ed25519_key.pub").read_text().split()
        hostkeys.append((info.jump_addr, f"{jp[0]} {jp[1]}"))
        jcfg = jd / "sshd_config"
        # sshd reads a user's keys as that user: the jump user's copy is its own (mode 600), in a
        # folder it can reach wherever the box folder lives (pytest's and CI's are mode 700).
        jak = self.jump_keys_file
        jak.parent.mkdir(parents=True, exist_ok=True)
        for d in (jak.parent, jak.parent.parent):
            os.chmod(d, 0o755)
        forge.write_secret(jak, pub)
        jent = pwd.getpwnam(plan.JUMP_USER)
        os.chown(jak, jent.pw_uid, jent.pw_gid)
        jcfg.write_text(plan.jump_sshd_config(layout, str(jd / "ssh_host_ed25519_key"), str(jd / "sshd.pid"), str(jak)))
        if not fresh("jump.sshd", jcfg, jak):
            jrec = procs.spawn("jump.sshd", "jump", ["ip", "netns", "exec", jump.netns, "/usr/sbin/sshd",
                                                     "-D", "-e", "-f", str(jcfg)], self.logs / "jump-sshd.log")
            record(jrec, jcfg, jak)
            started_services.append((jump, jrec))
        info.known_hosts.write_text(plan.known_hosts_lines(hostkeys))
        info.ssh_config.write_text(self._ssh_config(info))
        started_lanes = []
        for lane in info.lanes:
            cfg = self.dir / "lanes" / lane.name / "sshd_config"
            fresh(f"{lane.name}.sshd", cfg)
            lrec = backend.start(lane, hosts[lane.name], st.procs.get(f"{lane.name}.sshd"))
            if lrec and not backend.uses_netns:
                changed.append(f"made veth {hosts[lane.name].veth} (with guest {self.name}-{lane.name})")
            record(lrec, cfg)
            if lrec:
                started_lanes.append((lane, lrec))

        # Forge.
        fdir = self.dir / "forge"
        token = forge.ensure_token(info.forge_token_file)
        register_secret(token)
        fpaths = forge.write_files(fdir, info.forge_addr, token)
        forge.seed_engine(info.forge_repos)
        fg = layout.forge()
        fcgi = st.procs.get("forge.fcgiwrap")
        if not procs.alive(fcgi):
            Path(fpaths["socket"]).unlink(missing_ok=True)
            fcgi = procs.spawn("forge.fcgiwrap", "forge",
                               ["ip", "netns", "exec", fg.netns, "/usr/sbin/fcgiwrap", "-c", "4", "-f",
                                "-s", f"unix:{fpaths['socket']}"], self.logs / "forge-fcgiwrap.log")
            record(fcgi)
        if not fresh("forge.nginx", fdir / "nginx.conf", fdir / "htpasswd"):
            record(procs.spawn("forge.nginx", "forge",
                               ["ip", "netns", "exec", fg.netns, "/usr/sbin/nginx", "-e", fpaths["error_log"],
                                "-p", str(fdir), "-c", str(fdir / "nginx.conf")], self.logs / "forge-nginx.log"),
                   fdir / "nginx.conf", fdir / "htpasswd")

        # Stand-in pools, then HAProxy in front of them.
        pdir = self.dir / "pools"
        pdir.mkdir(exist_ok=True)
        bank = pdir / "bank.json"
        if not bank.exists():
            shutil.copyfile(Path(__file__).with_name("bank.json"), bank)
        pool_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(PROJECT),
                    "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        for p, h in zip(plan.POOLS, layout.pool_hosts(), strict=True):
            if not fresh(f"{p.name}.pool", bank, POOL_CODE):
                record(procs.spawn(f"{p.name}.pool", p.name, [
                    "ip", "netns", "exec", h.netns, sys.executable, "-m", "rig.box.pool", "--addr", h.addr,
                    "--port", str(plan.POOL_PORT), "--name", p.name, "--bank", str(bank),
                    "--model", f"{p.alias}={p.tier}", "--max-inflight", str(p.max_inflight)],
                    self.logs / f"{p.name}-pool.log", env=pool_env, cwd=PROJECT), bank, POOL_CODE)
        px = layout.proxy()
        hcfg = self.dir / "proxy" / "haproxy.cfg"
        hcfg.parent.mkdir(exist_ok=True)
        hcfg.write_text(plan.haproxy_cfg(layout, str(self.dir / "run" / "haproxy.pid"),
                                        str(self.dir / "run" / "haproxy.sock")))
        if not fresh("proxy.haproxy", hcfg):
            record(procs.spawn("proxy.haproxy", "proxy", ["ip", "netns", "exec", px.netns, "/usr/sbin/haproxy",
                                                          "-W", "-db", "-f", str(hcfg)], self.logs / "proxy-haproxy.log"), hcfg)
        assert info.folknet_file is not None and info.rig_file is not None
        jsonfile.write_atomic(info.folknet_file, plan.folknet(layout))
        jsonfile.write_atomic(info.rig_file, plan.rig_file(layout, str(hcfg), str(self.dir / "run" / "haproxy.pid"),
                                                           str(gdir / "config.yaml"), str(info.known_hosts),
                                                           str(info.ssh_key)))

        # Files that point nev at the box.
        jsonfile.write_atomic(info.lanes_file, plan.lanes_file(
            [{"ssh": ln.ssh, "root": ln.root, "shared": ln.shared, "name": ln.name} for ln in info.lanes],
            info.forge_url + "engine.git", str(info.nas), info.jump))

        # Wait for everything to answer: the box checks its hosts from inside the rig network
        # (the development box itself reaches it only through the jump host).
        for lane, rec in started_lanes:
            backend.wait(lane, rec)

        # Every host advertises its role (mDNS + HTTP inventory) and lane0 collects, as on the
        # rig; lane services run the lane's own nev, installed the way `nev lane install` does.
        lane_pids = {ln.name: st.procs[f"{ln.name}.sshd"].pid for ln in info.lanes}
        svcs, made = inventory_up.prepare(layout, self.dir, st.lanes_kind, lane_pids)
        changed += made
        restarted = {lane.name for lane, _rec in started_lanes}
        for svc in svcs:                                   # advertisers first, lane0.collect last
            if svc.in_lane and svc.host in restarted and svc.key in st.procs:
                procs.stop(st.procs.pop(svc.key))          # it held the lane's old namespaces
            if not fresh(svc.key, *svc.conf_files):
                pid = lane_pids[svc.host] if svc.in_lane else None
                record(procs.spawn(svc.key, svc.host, svc.argv(pid), svc.log, env=svc.env, cwd=svc.cwd),
                       *svc.conf_files)

        with netns.inside(layout.rig_netns):
            for h, rec in started_services:
                procs.wait_port(h.addr, plan.SSH_PORT, 10, rec, self.logs / f"{h.name}-sshd.log")
            procs.wait_http(f"http://{info.forge_addr}/health", 10, st.procs["forge.nginx"],
                            self.logs / "forge-nginx.log")
            for pi in info.pools.values():
                rec = st.procs[f"{pi.name}.pool"]
                procs.wait_http(f"http://{pi.addr}:{pi.port}/health", 10, rec, self.logs / f"{pi.name}-pool.log")
            for pi in info.pools.values():
                procs.wait_port(px.addr, pi.proxy_port, 10, st.procs["proxy.haproxy"], self.logs / "proxy-haproxy.log")
            gw_rec = st.procs["gateway.litellm"]
            procs.wait_http(f"{info.gateway_url}/health/liveliness", 300, gw_rec, self.logs / "gateway-litellm.log")
        if "started gateway.litellm" in changed:
            cpu = procs.cpu_seconds(gw_rec.pid)
            changed.append(f"gateway answered {time.monotonic() - t_gw:.1f} s after its start"
                           + (f" ({cpu:.1f} s of CPU)" if cpu is not None else ""))
        # The development box's forwards to the forge and the gateway, through the jump host, as
        # a user of the real rig holds them: `nev rig forward up` with the box's rig file.
        st.forward_state = st.forward_state or str(settings.get_path(settings.STATE_DIR))
        state.write_state(self.dir, st)
        changed += self.forwards(st, "up")
        st.complete = True
        state.write_state(self.dir, st)
        return changed

    def forwards(self, st: BoxState, action: str) -> list[str]:
        """`nev rig forward up|down` for the box's rig file; the lines it printed, or a NevError."""
        assert st.info is not None and st.info.rig_file is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
        env.update(PYTHONPATH=str(PROJECT), NEV_RIG_FILE=str(st.info.rig_file),
                   NEV_STATE_DIR=st.forward_state or str(settings.get_path(settings.STATE_DIR)))
        cp = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "forward", action], cwd=PROJECT, env=env,
                            capture_output=True, text=True, timeout=120)
        lines = [ln.strip() for ln in (cp.stdout + cp.stderr).splitlines() if ln.strip()]
        if cp.returncode != 0 and action == "up":
            why = " | ".join(ln for ln in lines if "DOWN" in ln) or (lines[-1] if lines else f"exit {cp.returncode}")
            raise NevError(f"the box's forwards did not come up: {why}")
        return [f"forward {ln}" for ln in lines if "already running" not in ln]

    def forwards_answer(self, info: BoxInfo) -> bool:
        """Both forwards answer a real request (the forge 401, the gateway's health route)."""
        from rig.forward import check

        return all(check.probe(what, int(url.rsplit(":", 1)[1].split("/")[0])).up
                   for what, url in (("forge", info.forge_local_url), ("gateway", info.gateway_local_url)))

    def _ssh_config(self, info: BoxInfo) -> str:
        """An OpenSSH client config as a user of the real rig has one: every rig host through
        the jump host (ProxyJump), every host key pinned."""
        common = f"""    IdentityFile {info.ssh_key}
    IdentitiesOnly yes
    UserKnownHostsFile {info.known_hosts}
    StrictHostKeyChecking yes
    BatchMode yes
    KexAlgorithms curve25519-sha256
"""
        jump_alias = f"{self.name}-jump"
        out = [f"""Host {jump_alias} {info.jump_addr}
    HostName {info.jump_addr}
    User {plan.JUMP_USER}
{common}"""]
        hosts = [(ln.name, ln.addr, USER) for ln in info.lanes]
        hosts += [(h, info.hosts[h]["addr"], "root") for h in plan.SERVICE_SSH_HOSTS]
        for name, addr, user in hosts:
            out.append(f"""Host {self.name}-{name} {addr}
    HostName {addr}
    User {user}
    ProxyJump {jump_alias}
{common}""")
        return "".join(out)

    # ---- down ----

    def down(self) -> list[str]:
        """Stop every recorded process, remove namespaces, veths, bridge, the user (when no
        other box lists it) and the box folder. Works on a box whose processes are gone."""
        require_root("down")
        done: list[str] = []
        with self._lock():
            other = state.registry_entries().get(self.name)
            if other and Path(other.get("dir", "")) != self.dir and state.registry_live(other):
                raise NevError(f"box {self.name!r} belongs to {other.get('dir')}, not {self.dir}; "
                               "nothing was removed (set NEV_BOX_DIR to that folder's parent)")
            st = self.state()
            if st and st.info and st.info.rig_file and st.info.rig_file.exists():
                try:
                    done += self.forwards(st, "down")
                except (OSError, subprocess.SubprocessError) as e:
                    done.append(f"forwards not stopped: {e}")
            if st:
                for rec in reversed(list(st.procs.values())):
                    if procs.stop(rec):
                        done.append(f"stopped {rec.key} (pid {rec.pid})")
            # Children of those (nginx workers) leave on their own; sessions of the box's lanes
            # and anything run_in started live on in its namespaces: end them.
            deadline = time.monotonic() + 1.0
            while any(netns.ns_pids(ns) for ns in netns.box_netns(self.name)) and time.monotonic() < deadline:
                time.sleep(0.05)
            for ns in netns.box_netns(self.name):
                left = netns.ns_pids(ns)
                if left:
                    procs.kill_pids(left)
                    done.append(f"ended {len(left)} leftover process(es) in {ns}")
            if done:
                time.sleep(0.05)
            done += [f"removed {x}" for x in netns.remove(self.name, net=self.net)]
            backend = lanes_backend.make(st.lanes_kind if st else self.lane_backend, self.dir, self.logs)
            for ln in (st.info.lanes if st and st.info else []):
                backend.remove(self.dir / "lanes" / ln.name)
            entries = state.registry_entries()
            users = st.users if st else [USER]
            marker = state.REGISTRY / "users" / f"{USER}.created"
            if USER in users and USER not in state.users_elsewhere(self.name, entries) and marker.exists():
                remove_user()
                marker.unlink(missing_ok=True)
                done.append(f"removed user {USER}")
            jmarker = state.REGISTRY / "users" / f"{plan.JUMP_USER}.created"
            if plan.JUMP_USER not in state.users_elsewhere(self.name, entries) and jmarker.exists():
                remove_jump_user()
                jmarker.unlink(missing_ok=True)
                done.append(f"removed user {plan.JUMP_USER}")
            state.unregister(self.name)
            shutil.rmtree(self.jump_keys_file.parent, ignore_errors=True)
            if (self.dir / MARKER).exists():
                shutil.rmtree(self.dir, ignore_errors=True)
                done.append(f"removed {self.dir}")
        return done


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


__all__ = ["Box", "BoxInfo", "HOME", "require_root"]
