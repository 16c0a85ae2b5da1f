"""`rig/rig.local.json` (gitignored): roles, their hosts, files and commands, the jump host, port
forwards, and the key each host is reached with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base import jsonfile, schema, settings
from lanes.base.notify import Webhook
from lanes.base.notify import parse as parse_notify
from lanes.base.ssh import SshError, Target
from rig.serving import declared, sudoers
from rig.serving.declared import ServingRole

DEFAULT_HOST_STORE = "/var/lib/nev/rig-snapshots"
DEFAULT_HEALTH_TIMEOUT = 20.0
CHECKS = ("forge", "gateway", "tcp")
_FORWARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Role:
    name: str
    hosts: list[str]
    files: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    validate: str | None = None
    reload: str | None = None
    health: str | None = None
    masks: list[str] = field(default_factory=list)
    # path -> validate command ({path} is the temporary copy); the role's `validate`
    # belongs to its first file unless that file's object names its own.
    validates: dict[str, str] = field(default_factory=dict)
    volatile: list[str] = field(default_factory=list)
    health_timeout: float = DEFAULT_HEALTH_TIMEOUT
    # a proxy role's HAProxy runtime API: a command that sends its stdin to the admin socket
    # and prints the answer (e.g. `socat stdio /run/haproxy/admin.sock`)
    admin: str | None = None
    # its daemon's start, and a status that exits 0 while it runs: the tick starts a proxy role's
    # dead HAProxy with them (rig/serving/mend.py)
    start: str | None = None
    status: str | None = None
    # a gateway role's per-key allowlists on its host: {id: {"name": KEY, "models": [ALIAS...]}}
    keys_file: str | None = None
    ssh_key: Path | None = None   # its hosts' key unless `hosts` gives one (see Keys)

    def validate_for(self, path: str) -> str | None:
        return self.validates.get(path)


@dataclass(frozen=True)
class Forward:
    """A local port on 127.0.0.1 forwarded through the jump host to `target` (host:port)."""

    name: str
    local_port: int
    target_host: str
    target_port: int
    check: str = "tcp"  # forge | gateway | tcp (see rig.forward.check)

    @property
    def target(self) -> str:
        h = self.target_host
        return f"[{h}]:{self.target_port}" if ":" in h else f"{h}:{self.target_port}"

    @property
    def local(self) -> str:
        return f"127.0.0.1:{self.local_port}"


@dataclass(frozen=True)
class Keys:
    """The key file each account on a host is reached with (pure):

        the `hosts` entry for the account (`user@host`)    hosts["admin@arm-node-1"].ssh_key
        else the `hosts` entry for the host                 hosts["arm-node-1"].ssh_key
        else the key of the role listing the account        roles.arm-node.ssh_key (serving.X too)
        else the file's `ssh_key`                           (None: NEV_SSH_KEY, else ssh's own)

    The port never counts; the jump host takes its key the same way."""

    default: Path | None = None
    hosts: dict[str, Path] = field(default_factory=dict)   # `host` or `user@host`
    roles: dict[str, Path] = field(default_factory=dict)   # `user@host` -> the key of its role

    def key_for(self, spec: str) -> Path | None:
        t = Target.parse(spec, default_user="root")
        account = f"{t.user}@{t.host}"
        for name in (account, t.host):
            if name in self.hosts:
                return self.hosts[name]
        return self.roles.get(account, self.default)


@dataclass(frozen=True)
class RigFile:
    path: Path
    roles: dict[str, Role]
    jump: str | None = None
    seeds: list[str] = field(default_factory=list)
    host_store: str = DEFAULT_HOST_STORE
    known_hosts: Path | None = None
    ssh_key: Path | None = None
    forwards: dict[str, Forward] = field(default_factory=dict)
    serving: dict[str, ServingRole] = field(default_factory=dict)
    keys: Keys | None = None      # None: every host takes `ssh_key`
    notify: Webhook | None = None   # the operator's webhook (lanes/base/notify.py reads it)

    def key_for(self, spec: str) -> Path | None:
        """The key file for the host `spec` ([user@]host[:port], root by default): see Keys."""
        return self.keys.key_for(spec) if self.keys is not None else self.ssh_key


# Every key the rig file declares (rig/rig.example.json, docs/settings.md): another is a typo, refused.
# The keys each object may hold, from the rig file's schema (docs/rig.schema.json).
TOP_KEYS = schema.keys("rig")
ROLE_KEYS = schema.keys("rig", "roles")
FILE_KEYS = schema.keys("rig", "roles", "files")
HOST_KEYS = schema.keys("rig", "hosts")
FORWARD_KEYS = schema.keys("rig", "forwards")


def _regexes(f: jsonfile.Fields, obj: dict, key: str, where: str) -> list[str]:
    items = f.str_list(obj, key, where)
    for i, rx in enumerate(items):
        try:
            re.compile(rx)
        except re.error as e:
            raise f.fail(f"{where}.{key}[{i}]", f"is not a valid regular expression ({e})") from None
    return items


def _masks(f: jsonfile.Fields, obj: dict, where: str) -> list[str]:
    items = f.str_list(obj, "masks", where)
    for i, m in enumerate(items):
        if m.startswith("re:"):
            try:
                re.compile(m[3:])
            except re.error as e:
                raise f.fail(f"{where}.masks[{i}]", f"is not a valid regular expression ({e})") from None
    return items


def _target(f: jsonfile.Fields, spec: str, field_name: str) -> None:
    try:
        Target.parse(spec, default_user="root")
    except SshError as e:
        raise f.fail(field_name, f"is not an SSH address ({e})") from None


def _role(f: jsonfile.Fields, name: str, obj: object) -> Role:
    where = f"roles.{name}"
    o = f.known(f.obj(obj, where), ROLE_KEYS, where)
    hosts = f.str_list(o, "hosts", where, required=True)
    if not hosts:
        raise f.fail(f"{where}.hosts", "is empty; name at least one host")
    for i, h in enumerate(hosts):
        _target(f, h, f"{where}.hosts[{i}]")
    files: list[str] = []
    validates: dict[str, str] = {}
    for i, item in enumerate(f.get(o, "files", list, where, required=False, default=[])):
        fw = f"{where}.files[{i}]"
        if isinstance(item, str):
            path = item
        else:
            fo = f.known(f.obj(item, fw), FILE_KEYS, fw)
            path = f.get(fo, "path", str, fw)
            v = f.get(fo, "validate", str, fw, required=False)
            if v:
                validates[path] = v
        if not path.startswith("/"):
            raise f.fail(fw, f"is not an absolute path ({path!r}); give the file's full path on the host")
        if path in files:
            raise f.fail(fw, f"lists {path} twice; list each file once")
        files.append(path)
    validate = f.get(o, "validate", str, where, required=False)
    if validate and files and files[0] not in validates:
        validates[files[0]] = validate
    for path, v in validates.items():
        if "{path}" not in v:
            raise f.fail(f"{where}.validate", f"for {path} has no {{path}}; the command must check the "
                         "temporary copy, e.g. haproxy -c -f {path}")
    timeout = f.get(o, "health_timeout", (int, float), where, required=False, default=DEFAULT_HEALTH_TIMEOUT)
    if timeout <= 0:
        raise f.fail(f"{where}.health_timeout", "must be a positive number of seconds")
    return Role(name=name, hosts=hosts, files=files,
                commands=f.str_list(o, "commands", where),
                validate=validate,
                reload=f.get(o, "reload", str, where, required=False),
                health=f.get(o, "health", str, where, required=False),
                masks=_masks(f, o, where), validates=validates,
                volatile=_regexes(f, o, "volatile", where), health_timeout=float(timeout),
                admin=f.get(o, "admin", str, where, required=False),
                start=f.get(o, "start", str, where, required=False),
                status=f.get(o, "status", str, where, required=False),
                keys_file=f.get(o, "keys_file", str, where, required=False),
                ssh_key=_rel(Path(f.path), f.get(o, "ssh_key", str, where, required=False)))


def _port(f: jsonfile.Fields, value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise f.fail(where, f"must be a port number from 1 to 65535, not {value!r}")
    return value


def _forward(f: jsonfile.Fields, name: str, obj: object) -> Forward:
    where = f"forwards.{name}"
    if not _FORWARD_NAME.fullmatch(name):
        raise f.fail(where, "has a bad name; use letters, digits, '.', '_' or '-' (it names a state file)")
    o = f.known(f.obj(obj, where), FORWARD_KEYS, where)
    port = _port(f, f.get(o, "local_port", int, where), f"{where}.local_port")
    target = f.get(o, "target", str, where).strip()
    host, sep, tport = target.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not tport.isdigit():
        raise f.fail(f"{where}.target", f"must be host:port as the jump host sees it, not {target!r}")
    check = f.get(o, "check", str, where, required=False, default="tcp")
    if check not in CHECKS:
        raise f.fail(f"{where}.check", f"must be one of {', '.join(CHECKS)}, not {check!r}")
    return Forward(name=name, local_port=port, target_host=host,
                   target_port=_port(f, int(tport), f"{where}.target's port"), check=check)


def _forwards(f: jsonfile.Fields, top: dict, jump: str | None) -> dict[str, Forward]:
    out: dict[str, Forward] = {}
    for name, obj in f.get(top, "forwards", dict, "", required=False, default={}).items():
        fw = _forward(f, name, obj)
        taken = [o.name for o in out.values() if o.local_port == fw.local_port]
        if taken:
            raise f.fail(f"forwards.{name}.local_port", f"{fw.local_port} is also forwards.{taken[0]}'s; "
                         "give each forward its own port")
        out[name] = fw
    if out and not jump:
        raise f.fail("jump", "is missing; forwards go through the jump host: add \"jump\": \"[user@]host[:port]\"")
    return out


def load(path: Path) -> RigFile:
    data = jsonfile.load(path, "rig file")
    f = jsonfile.Fields(path)
    top = f.known(f.obj(data, "(top level)"), TOP_KEYS, "")
    roles: dict[str, Role] = {}
    for name, obj in f.get(top, "roles", dict, "", required=False, default={}).items():
        roles[name] = _role(f, name, obj)
    jump = f.get(top, "jump", str, "", required=False)
    if jump:
        _target(f, jump, "jump")
    store = f.get(top, "host_store", str, "", required=False, default=DEFAULT_HOST_STORE)
    if not store.startswith("/") or store.rstrip("/") == "":
        raise f.fail("host_store", f"must be an absolute folder other than / ({store!r})")
    kh = f.get(top, "known_hosts", str, "", required=False)
    key = f.get(top, "ssh_key", str, "", required=False)
    serving = declared.load(f, top, set(roles))
    roles.update(_sudo_roles(f, serving, roles))
    return RigFile(path=path, roles=roles, jump=jump, seeds=f.str_list(top, "seeds", ""),
                   host_store=store.rstrip("/"),
                   known_hosts=_rel(path, kh), ssh_key=_rel(path, key),
                   forwards=_forwards(f, top, jump), serving=serving,
                   keys=_keys(f, top, path, _rel(path, key), roles, serving, jump),
                   notify=parse_notify(f, top, path))


def _account(spec: str) -> tuple[str, str]:
    t = Target.parse(spec, default_user="root")
    return f"{t.user}@{t.host}", t.host


def _key_file(f: jsonfile.Fields, where: str, path: Path, reached: str) -> Path:
    if not path.is_file():
        raise f.fail(where, f"names {path}, which does not exist, so {reached} cannot be reached; "
                     "give the private key file that host takes")
    return path


def _keys(f: jsonfile.Fields, top: dict, path: Path, default: Path | None, roles: dict[str, Role],
          serving: dict[str, ServingRole], jump: str | None) -> Keys:
    """The `hosts` section and the roles' `ssh_key`s; a key file that does not exist, a `hosts`
    entry naming no host of the file, and an account two roles give two keys are refused."""
    accounts = {_account(h) for r in roles.values() for h in r.hosts}
    accounts |= {_account(rep.host) for s in serving.values() for rep in s.replicas.values()}
    if jump:
        accounts.add(_account(jump))
    hosts: dict[str, Path] = {}
    for name, obj in f.get(top, "hosts", dict, "", required=False, default={}).items():
        where = f"hosts.{name}"
        o = f.known(f.obj(obj, where), HOST_KEYS, where)
        if not any(name in pair for pair in accounts):
            known = sorted({h for _a, h in accounts})
            raise f.fail(where, "names no host of this file; name a host (one of "
                         f"{', '.join(known) or 'none'}) or an account on one (user@host), "
                         "without a port")
        key = _rel(path, f.get(o, "ssh_key", str, where))
        if key is None:
            raise f.fail(f"{where}.ssh_key", "is empty; give the private key file the host takes")
        hosts[name] = _key_file(f, f"{where}.ssh_key", key, name)
    given = [(f"roles.{r.name}", r.ssh_key, r.hosts) for r in roles.values()]
    given += [(f"serving.{s.name}", _rel(path, s.ssh_key),
               [rep.host for rep in s.replicas.values()]) for s in serving.values()]
    role_keys: dict[str, tuple[Path, str]] = {}
    for where, key, specs in given:
        if key is None:
            continue
        _key_file(f, f"{where}.ssh_key", key, ", ".join(specs))
        for a, h in map(_account, specs):
            if a in hosts or h in hosts:
                continue
            prev = role_keys.get(a)
            if prev is not None and prev[0] != key:
                own = f'"hosts": {{"{a}": {{"ssh_key": "..."}}}}'
                raise f.fail(f"{where}.ssh_key", f"gives {a} another key than {prev[1]}.ssh_key "
                             f"does; give that host its own: {own}")
            role_keys[a] = (key, where)
    return Keys(default=default, hosts=hosts, roles={a: k for a, (k, _w) in role_keys.items()})


def _sudo_roles(f: jsonfile.Fields, serving: dict[str, ServingRole], roles: dict[str, Role]) -> dict[str, Role]:
    """Per serving role with `sudo` replicas, the snapshot role holding its sudoers drop-in
    (`nev rig provision-sudo` installs it; snapshot, diff and restore see it like any file)."""
    out = {}
    for s in serving.values():
        if not sudoers.sudo_replicas(s):
            continue
        name, path = sudoers.role_name(s.name), sudoers.path(s.name)
        if name in roles:
            raise f.fail(f"roles.{name}", f"is the role nev keeps serving.{s.name}'s sudoers drop-in in; "
                         "give your role another name")
        out[name] = Role(name=name, hosts=sudoers.root_hosts(s), files=[path], validates={path: sudoers.VALIDATE},
                         health=sudoers.HEALTH)
    return out


def _rel(base: Path, p: str | None) -> Path | None:
    if not p:
        return None
    q = Path(p).expanduser()
    return q if q.is_absolute() else (base.parent / q)


def default_path() -> Path:
    return settings.path(settings.RIG_FILE)
