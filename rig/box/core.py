"""`Box`: bring the rig-in-a-box up (idempotently, repairing what is dead), down, and report.

`up` takes the registry entry and the lock, and returns at once when the box is complete,
healthy and made by this code; otherwise `rig/box/build.py` (re)builds it, step by step.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from lanes.base import procs, settings
from lanes.base.errors import NevError
from rig.box import forge, forwards, lanes_kinds, netns, plan, state
from rig.box.build import MARKER, Build, code_digest
from rig.box.lanes_netns import (
    HOME,
    LANE_ROOT,
    LANE_SHARED,
    USER,
    remove_admin_user,
    remove_jump_user,
    remove_user,
)
from rig.box.state import BoxInfo, BoxState, LaneInfo, PoolInfo


def require_root(what: str) -> None:
    """The box is the one part of nev that needs root on Debian: one line saying so otherwise."""
    missing = [w for w, ok in (("root", os.geteuid() == 0),
                               ("Debian", os.path.exists("/etc/debian_version"))) if not ok]
    if missing:
        raise NevError(f"`nev box {what}` needs root on Debian 12 (network namespaces, LXC guests, "
                       f"users, Debian packages), and this is not {' or '.join(missing)}; every "
                       "other command works from a client install without either (README)", 1)


def git_credential_env(url: str, user: str, token_file: Path) -> dict[str, str]:
    """Git config through the environment (git >= 2.31): a credential helper for `url`'s scheme,
    host and port only, answering `user` and the token read from `token_file` when git asks."""
    parts = urlsplit(url)
    helper = ("!f() { test \"$1\" = get || exit 0; echo username=" + shlex.quote(user)
              + "; echo \"password=$(cat " + shlex.quote(str(token_file)) + ")\"; }; f")
    return {"GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": f"credential.{parts.scheme}://{parts.netloc}.helper",
            "GIT_CONFIG_VALUE_0": helper}


@dataclass
class UpResult:
    info: BoxInfo
    changed: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Box:
    def __init__(self, name: str, net: str, box_dir: Path, lanes: str | None = None) -> None:
        self.name = plan.check_name(name)
        self.net = plan.check_net(net)
        self.dir = box_dir.absolute()
        # How lanes are made (rig/box/lanes_kinds.py): NEV_BOX_LANES, LXC guests unless set.
        self.lane_backend = lanes or settings.value(settings.BOX_LANES)
        if self.lane_backend not in lanes_kinds.BACKENDS:
            raise NevError(f"NEV_BOX_LANES={self.lane_backend!r} is unknown; use one of "
                           f"{', '.join(lanes_kinds.BACKENDS)}")

    @classmethod
    def from_settings(cls, environ: Mapping[str, str] | None = None, default_name: str | None = None,
                      default_net: str | None = None) -> Box:
        env = os.environ if environ is None else environ
        name = settings.given(settings.BOX_NAME, env) or default_name or settings.value(settings.BOX_NAME)
        net = settings.given(settings.BOX_NET, env) or default_net or settings.value(settings.BOX_NET)
        base = settings.path(settings.BOX_DIR, env)
        return cls(name, net, base / plan.check_name(name), settings.get(settings.BOX_LANES, env))

    @classmethod
    def find(cls, environ: Mapping[str, str] | None = None) -> Box:
        """The box a reading command (`nev box env`, `status`, `shape`) means, from any folder:
        with NEV_BOX_DIR set, as `from_settings`; else through the machine-wide registry (every
        box registers its folder), by NEV_BOX_NAME or, unset, the only box up. Never for `up` or
        `down`: those act on the box of this folder's settings."""
        env = os.environ if environ is None else environ
        if settings.given(settings.BOX_DIR, env):
            return cls.from_settings(env)
        got = state.resolve(settings.given(settings.BOX_NAME, env), state.registry_entries(),
                            settings.value(settings.BOX_NAME, {}))
        if isinstance(got, str):
            raise NevError(got)
        return cls(str(got.get("name")), str(got.get("net")), Path(str(got.get("dir"))),
                   settings.get(settings.BOX_LANES, env))

    # ---- paths ----

    @property
    def logs(self) -> Path:
        return state.logs_dir(self.dir)

    def _lane_info(self, h: plan.Host, i: int) -> LaneInfo:
        d = self.dir / "lanes" / h.name
        return LaneInfo(index=i, name=h.name, netns=h.netns, addr=h.addr, ssh=f"{USER}@{h.addr}:{plan.SSH_PORT}",
                        root=LANE_ROOT, shared=LANE_SHARED, host_root=d / "root", host_home=d / "home")

    def _info(self, layout: plan.Layout) -> BoxInfo:
        fd = self.dir / "forge"
        lanes = [self._lane_info(h, i) for i, h in enumerate(layout.lane_hosts())]
        info = BoxInfo(
            name=self.name, dir=self.dir, net=self.net, bridge=layout.bridge, bridge_addr=layout.addr(plan.BRIDGE_OCTET),
            lanes=lanes, known_hosts=self.dir / "ssh" / "known_hosts", ssh_key=self.dir / "ssh" / "id_ed25519",
            ssh_config=self.dir / "ssh" / "config", lanes_file=self.dir / "lane.local.json",
            forge_url=layout.forge_url(), forge_addr=layout.forge().addr, forge_user=forge.USER,
            forge_token_file=fd / "token", forge_askpass=fd / "askpass", forge_access_log=fd / "access.log",
            forge_repos=fd / "repos", nas=self.dir / "nas",
            hosts={h.name: {"addr": h.addr, "netns": h.netns, "role": h.role} for h in layout.hosts()},
            gateway_url=layout.gateway_url(), gateway_addr=layout.gateway().addr,
            master_key_file=self.dir / "keys" / "master.key",
            keys={k: self.dir / "keys" / f"{k}.key" for k in plan.KEY_NAMES},
            aliases={p.alias: p.name for p in plan.POOLS}, proxy_addr=layout.proxy().addr,
            pools={p.name: PoolInfo(name=p.name, netns=h.netns, addr=h.addr, port=plan.POOL_PORT,
                                    control_url=f"http://{h.addr}:{plan.POOL_PORT}/control", alias=p.alias,
                                    max_inflight=p.max_inflight, proxy_port=layout.proxy_port(p.name),
                                    replicas={r: p.port(r) for r in p.replica_names()})
                   for p, h in zip(plan.POOLS, layout.pool_hosts(), strict=True)},
            proxy_stats_socket=self.dir / "run" / "haproxy.sock",
            folknet_file=self.dir / "folknet.json", rig_file=self.dir / "rig.local.json",
            rig_netns=layout.rig_netns, jump=layout.jump_spec, jump_addr=layout.addr(plan.JUMP_OUT_OCTET),
            jump_rig_addr=layout.jump().addr, dev_addr=layout.addr(plan.DEV_OCTET),
            forge_local_url=layout.forge_url(local=True), gateway_local_url=layout.gateway_url(local=True),
        )
        info.env = self.env_for(info)
        return info

    def env_for(self, info: BoxInfo) -> dict[str, str]:
        """The settings that point nev at the box (`nev box env`): what a user of the real rig
        sets, the jump host, the forge and the gateway through the development box's forwards,
        the rig addresses the lanes use, and every key and declaration file the box holds for
        its commands (the gateway's admin key for `nev rig drift` too)."""
        env = {
            "NEV_BOX_NAME": info.name, "NEV_BOX_NET": info.net, "NEV_BOX_DIR": str(info.dir.parent),
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
        if info.gateway_url and info.master_key_file:
            env["NEV_GATEWAY_ADMIN_KEY_FILE"] = str(info.master_key_file)
        if info.folknet_file:
            env["NEV_FOLKNET_FILE"] = str(info.folknet_file)
        if info.rig_file:
            env["NEV_RIG_FILE"] = str(info.rig_file)
        if info.gateway_url:
            # where each job's own key goes: the gateway role's keys file, as the rig file names it
            env["NEV_GATEWAY_KEYS_FILE"] = f"root@{info.gateway_addr}:{self.dir / 'gateway' / 'keys.json'}"
        return env

    def shell_env(self, st: BoxState) -> dict[str, str]:
        """`nev box env`: `env_for` and what a person's shell needs besides (the tests and the demo
        set their own): the rig's own snapshot and Dagu runs (lane 0's, as `nev box up` installs
        them), the state folder the box's forwards run under, and a git credential helper for the
        forge's forward, so `git clone "$NEV_FORGE_URL"` asks nothing. The helper reads the token
        file when git asks: the token itself is never in the environment."""
        assert st.info is not None
        env = self.env_for(st.info)
        env.update({"NEV_INVENTORY_LANE": "0", "NEV_DAGU_LANE": "0"})
        if st.forward_state:
            env["NEV_STATE_DIR"] = st.forward_state
        if st.info.forge_local_url:
            env.update(git_credential_env(st.info.forge_local_url, st.info.forge_user,
                                          st.info.forge_token_file))
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
        st = self.up_state()
        assert st.info is not None
        return st.info

    def up_state(self) -> BoxState:
        """The recorded state of a box that is up; else why not, naming the boxes that are."""
        st = self.state()
        if st is None or st.info is None:
            where = f"box {self.name} is not up in {self.dir} (no box.json there)"
            got = state.resolve(self.name, state.registry_entries(), self.name)
            if not isinstance(got, str):
                raise NevError(f"{where}; the registry has it in {got.get('dir')}: "
                               "unset NEV_BOX_DIR (or set it to that folder's parent)")
            raise NevError(f"{where}; {got}")
        return st

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
                    and all(self.health(old).values()) and forwards.answer(old.info)
                    and self._keys_as_wanted(old.info)):
                return UpResult(old.info, [], time.monotonic() - t0)
            layout = plan.Layout(self.name, self.net, n)
            changed = Build(layout, self._info(layout), old, self.lane_backend).run()
            st = self.state()
            assert st is not None and st.info is not None
            return UpResult(st.info, changed, time.monotonic() - t0)

    def _keys_as_wanted(self, info: BoxInfo) -> bool:
        """Whether the jump host lets in exactly the box's client key and the team's
        (`state.team_keys`): a teammate's key added or taken away is an up's work."""
        try:
            text = state.keys_file(self.name, "jump").read_text()
            have = {ln.strip() for ln in text.splitlines()}
            own = info.ssh_key.with_suffix(".pub").read_text().strip()
        except OSError:
            return False
        return have - {""} == {own, *state.team_keys(self.dir)}

    # ---- down ----

    def down(self) -> list[str]:
        """Stop every recorded process, remove namespaces, veths, bridge, the user (when no
        other box lists it) and the box folder. Works on a box whose processes are gone."""
        require_root("down")
        with self._lock():
            other = state.registry_entries().get(self.name)
            if other and Path(other.get("dir", "")) != self.dir and state.registry_live(other):
                raise NevError(f"box {self.name!r} belongs to {other.get('dir')}, not {self.dir}; "
                               "nothing was removed (set NEV_BOX_DIR to that folder's parent)")
            st = self.state()
            done = self._end_processes(st)
            done += [f"removed {x}" for x in netns.remove(self.name, net=self.net)]
            backend = lanes_kinds.make(st.lanes_kind if st else self.lane_backend, self.dir, self.logs)
            for ln in (st.info.lanes if st and st.info else []):
                backend.remove(self.dir / "lanes" / ln.name)
            done += self._remove_users(st)
            state.unregister(self.name)
            shutil.rmtree(state.keys_file(self.name, "jump").parent, ignore_errors=True)
            shutil.rmtree(state.keys_file(self.name, "admin").parent, ignore_errors=True)
            if (self.dir / MARKER).exists():
                shutil.rmtree(self.dir, ignore_errors=True)
                done.append(f"removed {self.dir}")
        return done

    def _end_processes(self, st: BoxState | None) -> list[str]:
        """The forwards, every recorded process, then whatever still runs in the box's namespaces."""
        done: list[str] = []
        if st and st.info and st.info.rig_file and st.info.rig_file.exists():
            try:
                done += forwards.run(st, "down")
            except (OSError, subprocess.SubprocessError) as e:
                done.append(f"forwards not stopped: {e}")
        for rec in reversed(list(st.procs.values()) if st else []):
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
        return done

    def _remove_users(self, st: BoxState | None) -> list[str]:
        """The shared users this machine's boxes made, once no other box lists them."""
        elsewhere = state.users_elsewhere(self.name, state.registry_entries())
        listed = st.users if st else [USER]
        done = []
        for user, remove, ours in ((USER, remove_user, USER in listed), (plan.JUMP_USER, remove_jump_user, True),
                                   (plan.ADMIN_USER, remove_admin_user, True)):
            marker = state.user_marker(user)
            if ours and user not in elsewhere and marker.exists():
                remove()
                marker.unlink(missing_ok=True)
                done.append(f"removed user {user}")
        return done


__all__ = ["Box", "BoxInfo", "HOME", "require_root"]
