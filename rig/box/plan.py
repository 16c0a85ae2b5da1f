"""The box's layout as pure functions: names, addresses, and the text of every config file.

Nothing here touches the system; `Box` (core.py) turns these into namespaces, files and
processes. Everything is named from the box name (<= 6 characters: bridge `<name>br`, veths
and namespaces `<name>-<host>`) and addressed from the box net (a /24 inside 198.18.0.0/15,
the range reserved for benchmark testing), so several boxes coexist on one machine.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from bench.folknet import ROUTER_LIMIT_SETTINGS, gateway_limits
from lanes.agent import layout as lane_layout
from lanes.base import sshd
from lanes.base.errors import ConfigError

# this checkout: where `rig` is importable from
PROJECT = Path(__file__).resolve().parent.parent.parent
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,5}$")
MAX_LANES = 9

# Host octets inside the box's /24.
BRIDGE_OCTET = 1
JUMP_OCTET = 2          # the jump host's address on the rig network
FORGE_OCTET = 5
LANE_OCTET0 = 11
GATEWAY_OCTET = 20
PROXY_OCTET = 30
POOL_OCTET0 = 40

# The outside link (development box <-> jump host) is a /30 at the top of the box's /24, which
# the rig network never uses: the development box is .254, the jump host's outside end .253.
OUTSIDE_OCTET = 252
DEV_OCTET = 254
JUMP_OUT_OCTET = 253

SSH_PORT = 22
FORGE_PORT = 80
JUMP_USER = "nevjump"
# The ARM nodes' admin account, on one pool host: no general sudo, only the drop-in `nev rig
# provision-sudo` installs in that host's own /etc/sudoers.d (a box folder bound over it).
ADMIN_USER = "nevadm"
ADMIN_POOL = "gpu0"
# The development box's local forwards (127.0.0.1), one pair of ports per box net.
FORWARD_PORT0 = 30000
GATEWAY_PORT = 4000
GATEWAY_RESTART_TIMEOUT = 300   # LiteLLM's start takes ~10 s of CPU; minutes on a busy 2-core box
POOL_PORT = 8000
PROXY_PORT0 = 8100


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise ConfigError(f"NEV_BOX_NAME={name!r} is not a box name; use 1 to 6 lower-case letters "
                          "or digits starting with a letter (it prefixes interface names)")
    return name


def check_net(net: str) -> str:
    """`198.18.9`, `198.18.9.0` or `198.18.9.0/24` -> `198.18.9` (a /24 inside 198.18.0.0/15)."""
    raw = net.strip()
    s = raw.removesuffix("/24")
    parts = s.split(".")
    if len(parts) == 4 and parts[3] == "0":
        parts = parts[:3]
    ok = len(parts) == 3 and all(p.isdigit() and 0 <= int(p) <= 255 for p in parts)
    if not ok or parts[0] != "198" or parts[1] not in ("18", "19"):
        raise ConfigError(f"NEV_BOX_NET={raw!r} is not a /24 inside 198.18.0.0/15; "
                          "set it like 198.18.9 (the box owns 198.18.9.0/24)")
    return ".".join(str(int(p)) for p in parts)


def check_lanes(n: int) -> int:
    if not 1 <= n <= MAX_LANES:
        raise ConfigError(f"--lanes {n}: a box has 1 to {MAX_LANES} lanes; pick a number in that range")
    return n


@dataclass(frozen=True)
class Host:
    """One host of the box: a network namespace joined to the bridge by a veth pair."""

    name: str       # lane0, forge, gateway, proxy, gpu0 ... (and jump)
    role: str       # lane | forge | gateway | proxy | pool (| jump)
    addr: str
    netns: str
    veth: str       # bridge-side end (in the rig namespace); the host side is always eth0


@dataclass(frozen=True)
class Pool:
    """A stand-in model pool and the one alias the gateway routes to it."""

    name: str
    alias: str
    tier: str
    max_inflight: int
    keys: tuple[str, ...]
    replicas: int = 1      # replicas behind the pool's backend, each its own process, port and server line
    pair: bool = False     # a tensor-parallel pair: a head (behind HAProxy) and a worker half, one unit for both
    rpm: int | None = None   # requests per minute at the gateway (None: no limit)
    tpm: int | None = None   # tokens per minute at the gateway (None: no limit)

    def replica_names(self) -> list[str]:
        """The replicas as the rig file names them (a pair is one replica, `pair`)."""
        return ["pair"] if self.pair else [f"r{i}" for i in range(self.replicas)]

    def server(self, replica: str) -> str:
        """Its server line's name in the pool's backend (a one-replica pool's is the pool's name)."""
        return replica if self.replicas > 1 else self.name

    def port(self, replica: str) -> int:
        return POOL_PORT + (0 if self.pair else self.replica_names().index(replica))

    @property
    def maxconn(self) -> int:
        """Per server line: the alias's in-flight limit shared by its replicas."""
        return self.max_inflight // self.replicas

    def processes(self, replica: str) -> list[tuple[str, int]]:
        """(name, port) of every process the replica's unit runs: a pair's head serves, its
        worker half only stands in for the second node (not behind HAProxy)."""
        if self.pair:
            return [(self.name, POOL_PORT), (f"{self.name}-worker", POOL_PORT + 1)]
        return [(self.name if self.replicas == 1 else f"{self.name}-{replica}", self.port(replica))]


# One alias per pool; `batch` may use every alias, `writer` only the first. gpu1 is the seed's
# tensor-parallel pair (one unit starts both halves); gpu2 is the seed's two-replica alias (either
# replica can stop alone), where the serving commands drain one replica while the other serves.
POOLS: tuple[Pool, ...] = (
    Pool("gpu0", "qwen3.8-27b-fast", "sampling", 8, ("batch", "writer")),
    Pool("gpu1", "deepseek-v4.1-flash", "capacity", 2, ("batch",), pair=True),
    Pool("gpu2", "qwen3.8-flash-next", "sampling", 8, ("batch",), replicas=2),
)
KEY_NAMES = ("batch", "writer")


@dataclass(frozen=True)
class Layout:
    name: str
    net: str
    lanes: int

    @property
    def bridge(self) -> str:
        return f"{self.name}br"

    @property
    def rig_netns(self) -> str:
        """The namespace that holds the rig network's bridge (never the root namespace)."""
        return f"{self.name}-rig"

    def jump(self) -> Host:
        """The one way in: on the rig bridge (eth0) and on the outside link (eth1)."""
        return self.host("jump", "jump", JUMP_OCTET)

    @property
    def outside_veth(self) -> str:
        """The development box's end of the outside link (root namespace)."""
        return f"{self.name}-out"

    @property
    def jump_spec(self) -> str:
        """How the development box reaches the jump host: user@addr (port 22)."""
        return f"{JUMP_USER}@{self.addr(JUMP_OUT_OCTET)}"

    def forward_port(self, what: str) -> int:
        """The development box's local port forwarding to the forge (0) or the gateway (1)."""
        a, b, c = (int(x) for x in self.net.split("."))
        return FORWARD_PORT0 + (b - 18) * 2560 + c * 10 + ("forge", "gateway").index(what)

    def addr(self, octet: int) -> str:
        """The address with this last octet in the box's /24: a host's, the bridge's (BRIDGE_OCTET),
        either end of the outside link (DEV_OCTET, JUMP_OUT_OCTET)."""
        return f"{self.net}.{octet}"

    def host(self, host: str, role: str, octet: int) -> Host:
        return Host(host, role, self.addr(octet), f"{self.name}-{host}", f"{self.name}-{host}")

    def lane_hosts(self) -> list[Host]:
        return [self.host(f"lane{i}", "lane", LANE_OCTET0 + i) for i in range(self.lanes)]

    def forge(self) -> Host:
        return self.host("forge", "forge", FORGE_OCTET)

    def gateway(self) -> Host:
        return self.host("gateway", "gateway", GATEWAY_OCTET)

    def proxy(self) -> Host:
        return self.host("proxy", "proxy", PROXY_OCTET)

    def pool_hosts(self) -> list[Host]:
        return [self.host(p.name, "pool", POOL_OCTET0 + i) for i, p in enumerate(POOLS)]

    def hosts(self) -> list[Host]:
        return [self.forge(), *self.lane_hosts(), self.gateway(), self.proxy(), *self.pool_hosts()]

    def proxy_port(self, pool: str) -> int:
        return PROXY_PORT0 + [p.name for p in POOLS].index(pool)

    def forge_url(self, local: bool = False) -> str:
        """The forge's git base at its rig address, or (local) through the development box's
        forward, as the development box reaches it."""
        where = self._forwarded("forge") if local else self.forge().addr
        return f"http://{where}/git/"

    def gateway_url(self, local: bool = False) -> str:
        where = self._forwarded("gateway") if local else f"{self.gateway().addr}:{GATEWAY_PORT}"
        return f"http://{where}"

    def _forwarded(self, what: str) -> str:
        return f"127.0.0.1:{self.forward_port(what)}"


def netns_prefix(name: str) -> str:
    return f"{name}-"


# ---- network commands (for `ip -batch`) -------------------------------------------------------


def bridge_cmds(layout: Layout) -> list[str]:
    """Run in the rig namespace: the bridge, with the box's own address on it (for the box's
    health checks and the lanes' apt proxy), never in the root namespace."""
    return [f"link add {layout.bridge} type bridge",
            f"addr add {layout.addr(BRIDGE_OCTET)}/24 dev {layout.bridge}",
            f"link set {layout.bridge} up", "link set lo up"]


def host_cmds(layout: Layout, h: Host) -> tuple[list[str], list[str]]:
    """The veth pair of one host (commands run in the rig namespace, then in the host's): its
    host side is named eth0, and the host gets no default route."""
    return ([f"link add {h.veth} type veth peer name eth0 netns {h.netns}",
             f"link set {h.veth} master {layout.bridge} up"],
            [f"addr add {h.addr}/24 dev eth0", "link set eth0 up", "link set lo up"])


def outside_cmds(layout: Layout) -> tuple[list[str], list[str]]:
    """The outside link (commands run in the root namespace, then in the jump host's): a /30 of
    its own, so the development box gets a route to the jump host's outside end and nothing
    else; the rig's /24 is made unreachable in the root namespace, so no packet for a rig
    address ever leaves through the machine's default route."""
    j = layout.jump()
    return ([f"link add {layout.outside_veth} type veth peer name eth1 netns {j.netns}",
             f"addr add {layout.addr(DEV_OCTET)}/30 dev {layout.outside_veth}",
             f"link set {layout.outside_veth} up",
             f"route replace unreachable {layout.net}.0/24"],
            [f"addr add {layout.addr(JUMP_OUT_OCTET)}/30 dev eth1", "link set eth1 up"])


def tbf_cmd(dev: str, kbit: int) -> list[str]:
    """A token-bucket filter on one interface's egress (one direction of the link)."""
    burst = max(1600, kbit * 1000 // 8 // 50)   # about 20 ms worth, at least a packet or so
    return ["qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{kbit}kbit",
            "burst", str(burst), "latency", "400ms"]


# ---- lanes -----------------------------------------------------------------------------------


def sshd_config(addr: str, host_key: str, pid_file: str, user: str = "lane", toolchain: bool = False) -> str:
    return sshd.config("one box lane (written by nev box)", [f"{addr}:{SSH_PORT}"], host_key, pid_file,
                       ".ssh/authorized_keys", user, env=lane_layout.TOOLCHAIN_ENV if toolchain else None,
                       options=["AllowTcpForwarding yes", "Subsystem sftp internal-sftp"])


def jump_sshd_config(layout: Layout, host_key: str, pid_file: str, authorized_keys: str) -> str:
    """The jump host's sshd: on both its interfaces, key-only, one user who may only open TCP
    forwards to the rig's hosts (no shell, no tty, no agent, no remote forwards)."""
    # Every address of the rig network but the bridge's and the jump host's own (lanes made later
    # by `nev lane create` live there too); never loopback, never the outside link.
    permit = " ".join(f"{layout.addr(i)}:*" for i in range(JUMP_OCTET + 1, OUTSIDE_OCTET))
    return sshd.config(
        "the box's jump host (written by nev box)",
        [f"{layout.addr(JUMP_OUT_OCTET)}:{SSH_PORT}", f"{layout.jump().addr}:{SSH_PORT}"],
        host_key, pid_file, authorized_keys, JUMP_USER,
        options=["# The key file lives in the box folder (see root_sshd_config).", "StrictModes no",
                 "AllowTcpForwarding local", f"PermitOpen {permit}", "AllowAgentForwarding no",
                 "AllowStreamLocalForwarding no", "GatewayPorts no", "PermitTunnel no", "PermitTTY no",
                 "ForceCommand /usr/sbin/nologin"])


def root_sshd_config(addr: str, host_key: str, pid_file: str, authorized_keys: str,
                     admin_keys: str = "") -> str:
    """sshd for root on a service host (proxy, gateway), so `nev rig` reaches it as on the rig;
    with `admin_keys`, the admin account too (its key file one it can read, as sshd reads it as
    that user)."""
    admin = [f"Match User {ADMIN_USER}", f"    AuthorizedKeysFile {admin_keys}"] if admin_keys else []
    return sshd.config(
        "a box service host (written by nev box)", [f"{addr}:{SSH_PORT}"], host_key, pid_file,
        authorized_keys, f"root {ADMIN_USER}" if admin_keys else "root", "prohibit-password",
        # The key file is written by nev box (root, mode 600) in the box folder, which may sit inside
        # a checkout under a world-writable /tmp (CI clones anywhere): sshd's path check would refuse it.
        options=["StrictModes no", "AllowTcpForwarding no", "Subsystem sftp internal-sftp", *admin])


# The admin pool host's sudo configuration is its own: its sshd (and every session through it)
# runs in a mount namespace where $1 (a box folder) is /etc/sudoers.d and $2 /etc/sudoers; this
# machine's own files are never written. `ip netns exec` then copies those mounts.
PRIVATE_SUDOERS_SH = """set -e
mount --bind "$1" /etc/sudoers.d
mount --bind "$2" /etc/sudoers
shift 2
exec "$@"
"""

# Debian's /etc/sudoers (sudo 1.9), without its comments: root, the sudo group, the drop-ins.
SUDOERS = """# the box's admin host's /etc/sudoers (written by nev box): Debian's default
Defaults\tenv_reset
Defaults\tmail_badpass
Defaults\tsecure_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
Defaults\tuse_pty
root\tALL=(ALL:ALL) ALL
%sudo\tALL=(ALL:ALL) ALL
@includedir /etc/sudoers.d
"""


def private_sudoers_argv(sudoers_dir: str, sudoers_file: str, argv: list[str]) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE_SUDOERS_SH, "sh",
            sudoers_dir, sudoers_file, *argv]


SERVICE_SSH_HOSTS = ("gateway", "proxy", *(p.name for p in POOLS))


# The lane's private mounts, run under `unshare --mount --propagation private`: a tmpfs is
# staged on /mnt (private to this namespace), the lane's root and the NAS are bound into it,
# and the host's Rust toolchain read-only when there is one ($5 rustup home, $6 cargo bin
# folder, "-" for none; /root is mode 700, so the lane could not reach it there); then the
# whole is moved over /srv, and the lane's own home is bound over /home/lane.
LANE_MOUNTS_SH = """set -e
mount -t tmpfs -o mode=755,size=1m nevlane /mnt
mkdir /mnt/lane /mnt/lane-shared
mount --bind "$1" /mnt/lane
mount --bind "$2" /mnt/lane-shared
if [ "$5" != - ]; then
  mkdir -p /mnt/toolchain/rustup /mnt/toolchain/cargo-bin
  mount --bind "$5" /mnt/toolchain/rustup
  mount -o remount,bind,ro /mnt/toolchain/rustup
  mount --bind "$6" /mnt/toolchain/cargo-bin
  mount -o remount,bind,ro /mnt/toolchain/cargo-bin
fi
mount --move /mnt /srv
mount --bind "$3" "$4"
shift 6
exec "$@"
"""


def known_hosts_lines(entries: list[tuple[str, str]]) -> str:
    """`addr keytype base64` lines, one per lane (port 22 needs no brackets)."""
    return "".join(f"{addr} {pub}\n" for addr, pub in entries)


def lanes_file(lane_entries: list[dict], git_url: str, nas: str, jump: str | None = None) -> dict:
    return {"lanes": lane_entries, "git_url": git_url, "nas": nas, "primary": "main",
            **({"jump": jump} if jump else {})}


# ---- forge -----------------------------------------------------------------------------------


def ssha(password: str, salt: bytes) -> str:
    """An nginx-readable `{SSHA}` password hash (so no tool needs the token on its command line)."""
    digest = hashlib.sha1(password.encode() + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


def ssha_matches(stored: str, password: str) -> bool:
    if not stored.startswith("{SSHA}"):
        return False
    try:
        raw = base64.b64decode(stored[6:])
    except ValueError:
        return False
    return len(raw) > 20 and ssha(password, raw[20:]) == stored


def nginx_conf(addr: str, d: dict[str, str]) -> str:
    """The forge: nginx + fcgiwrap + git http-backend behind basic auth (token as password)."""
    return f"""# the box forge (written by nev box)
worker_processes 1;
daemon off;
user root root;
pid {d['pid']};
error_log {d['error_log']} warn;
events {{ worker_connections 256; }}
http {{
    log_format forge '$remote_addr $remote_user [$time_local] "$request" $status $body_bytes_sent';
    access_log {d['access_log']} forge;
    client_body_temp_path {d['tmp']}/body;
    proxy_temp_path {d['tmp']}/proxy;
    fastcgi_temp_path {d['tmp']}/fastcgi;
    uwsgi_temp_path {d['tmp']}/uwsgi;
    scgi_temp_path {d['tmp']}/scgi;
    server {{
        listen {addr}:{FORGE_PORT};
        client_max_body_size 0;
        location = /health {{ return 200 "ok\\n"; }}
        location ~ ^/git(/.*)$ {{
            auth_basic "forge";
            auth_basic_user_file {d['htpasswd']};
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME /usr/lib/git-core/git-http-backend;
            fastcgi_param GIT_PROJECT_ROOT {d['repos']};
            fastcgi_param GIT_HTTP_EXPORT_ALL "";
            fastcgi_param PATH_INFO $1;
            fastcgi_param REMOTE_USER $remote_user;
            fastcgi_read_timeout 600s;
            fastcgi_request_buffering off;
            fastcgi_pass unix:{d['socket']};
        }}
    }}
}}
"""


def askpass_script(user: str, token_file: str) -> str:
    """GIT_ASKPASS helper: answers the user name and reads the token from its file."""
    return f"""#!/bin/sh
case "$1" in
  Username*) echo {user} ;;
  *) cat {token_file} ;;
esac
"""


# ---- proxy, gateway, pools -------------------------------------------------------------------


def haproxy_cfg(layout: Layout, pid_file: str, stats_socket: str) -> str:
    """Debian's HAProxy, one frontend/backend per pool, `maxconn` per server: past it, requests
    wait in the backend's queue and are served in turn (as on the real rig)."""
    out = [f"""# the box's pool proxy (written by nev box)
global
    pidfile {pid_file}
    stats socket {stats_socket} mode 600 level admin
    maxconn 512
defaults
    mode http
    timeout connect 5s
    timeout client 15m
    timeout server 15m
    timeout queue 15m
"""]
    for i, p in enumerate(POOLS):
        port = layout.proxy_port(p.name)
        pool_addr = layout.pool_hosts()[i].addr
        servers = "".join(f"    server {p.server(r)} {pool_addr}:{p.port(r)} maxconn {p.maxconn}\n"
                          for r in p.replica_names())
        balance = "    balance leastconn\n" if p.replicas > 1 else ""
        out.append(f"""frontend fe_{p.name}
    bind {layout.proxy().addr}:{port}
    default_backend be_{p.name}
backend be_{p.name}
{balance}{servers}""")
    return "".join(out)


def serving(layout: Layout, units_dir: str) -> dict:
    """The serving roles of the rig file: per pool, its backend, aliases and replicas, each with
    its host, server line and unit commands (a pair's halves named, started only as one)."""
    out = {}
    for p, h in zip(POOLS, layout.pool_hosts(), strict=True):
        replicas = {}
        for r in p.replica_names():
            unit = f"{units_dir}/{p.name}-{r}"
            admin = p.name == ADMIN_POOL
            replicas[r] = {"host": f"{ADMIN_USER if admin else 'root'}@{h.addr}", "server": p.server(r),
                           "start": f"{unit} start", "stop": f"{unit} stop", "status": f"{unit} status",
                           **({"sudo": True} if admin else {}),
                           **({"halves": ["head", "worker"]} if p.pair else {})}
        out[p.name] = {"proxy": "proxy", "backend": f"be_{p.name}", "aliases": [p.alias], "replicas": replicas}
    return out


ROUTER_SETTINGS = {"num_retries": 0, **ROUTER_LIMIT_SETTINGS}


def litellm_config(layout: Layout, custom_auth_module: str,
                   spend_module: str | None = None) -> dict:
    """The real LiteLLM proxy: one alias per pool, through HAProxy; master key from the
    environment; per-key allowlists and spend caps by custom_auth (no database), the spend kept
    by a success callback (`spend_module`); no retries; each alias's declared limits
    (`max_parallel_requests`, `rpm`, `tpm`) enforced by LiteLLM's router for every caller
    (bench/folknet.py `gateway_limits`)."""
    models = []
    for p in POOLS:
        models.append({
            "model_name": p.alias,
            "litellm_params": {
                "model": f"openai/{p.alias}",
                "api_base": f"http://{layout.proxy().addr}:{layout.proxy_port(p.name)}/v1",
                "api_key": "stand-in-pool-needs-no-key",
                "max_retries": 0,
                "timeout": 900,
                **gateway_limits(p.max_inflight, p.rpm, p.tpm),
            },
        })
    return {
        "model_list": models,
        "litellm_settings": {"num_retries": 0, "request_timeout": 900,
                             "enable_post_custom_auth_checks": True, "telemetry": False,
                             **({"callbacks": [f"{spend_module}.handler"]}
                                if spend_module else {})},
        "router_settings": dict(ROUTER_SETTINGS),
        "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY",
                             "custom_auth": f"{custom_auth_module}.user_api_key_auth",
                             "custom_auth_run_common_checks": True},
    }


def key_allowlists() -> dict[str, list[str]]:
    """Key name -> aliases it may use."""
    return {k: [p.alias for p in POOLS if k in p.keys] for k in KEY_NAMES}


def folknet(layout: Layout) -> dict:
    return {"schema": 1, "providers": ["self-hosted"],
            "aliases": {p.alias: {"pool": p.name, "max_inflight": p.max_inflight,
                                  **({"rpm": p.rpm} if p.rpm is not None else {}),
                                  **({"tpm": p.tpm} if p.tpm is not None else {}),
                                  "provider": "self-hosted", "tier": p.tier, "keys": list(p.keys)}
                        for p in POOLS}}


def rig_file(layout: Layout, haproxy_cfg_path: str, haproxy_pid: str, litellm_cfg_path: str,
             known_hosts: str = "", ssh_key: str = "", admin: str = "", units_dir: str = "") -> dict:
    """Roles on the box's service hosts, reachable as root over SSH through the jump host (pinned
    keys), and the development box's forwards to the forge and the gateway."""
    gw = layout.gateway().addr
    return {
        "jump": layout.jump_spec,
        **({"known_hosts": known_hosts} if known_hosts else {}),
        **({"ssh_key": ssh_key} if ssh_key else {}),
        "forwards": {
            "forge": {"local_port": layout.forward_port("forge"),
                      "target": f"{layout.forge().addr}:{FORGE_PORT}", "check": "forge"},
            "gateway": {"local_port": layout.forward_port("gateway"),
                        "target": f"{gw}:{GATEWAY_PORT}", "check": "gateway"},
        },
        "seeds": [],
        **({"serving": serving(layout, units_dir)} if units_dir else {}),
        "roles": {
            "proxy": {"hosts": [f"root@{layout.proxy().addr}"], "files": [haproxy_cfg_path],
                      "commands": ["haproxy -v"], "validate": "haproxy -c -q -f {path}",
                      "reload": f"kill -USR2 $(cat {haproxy_pid})",
                      "health": f"haproxy -c -q -f {haproxy_cfg_path}",
                      **({"admin": admin} if admin else {}),
                      # its unit (rig/box/units.py): the tick starts a dead HAProxy with it
                      **({"start": f"{Path(haproxy_cfg_path).with_name('unit')} start",
                          "status": f"{Path(haproxy_cfg_path).with_name('unit')} status"}
                         if units_dir else {})},
            # the keys file (digests and allowlists, no secret) is in the snapshot with the config
            "gateway": {"hosts": [f"root@{gw}"], "masks": ["master_key"],
                        "files": [litellm_cfg_path, str(Path(litellm_cfg_path).with_name("keys.json"))],
                        "keys_file": str(Path(litellm_cfg_path).with_name("keys.json")),
                        "validate": "python3 -c 'import sys,yaml; yaml.safe_load(open(sys.argv[1]))' {path}",
                        # LiteLLM has no reload: its unit restarts it and waits until it answers
                        "reload": f"{Path(litellm_cfg_path).with_name('unit')} restart",
                        "health": f"curl -fsS --noproxy '*' http://{gw}:{GATEWAY_PORT}/health/liveliness",
                        "health_timeout": GATEWAY_RESTART_TIMEOUT},
        },
    }


def dumps(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"
