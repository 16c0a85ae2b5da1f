"""The lanes file (`bench/lane.local.json`, gitignored): lanes[], jump, git_url, nas; and the one
way to open a connection to a lane (`Lane.connect`), through the jump host when one is declared."""

from __future__ import annotations

import getpass
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base import jsonfile, schema, settings
from lanes.base.errors import ConfigError, NevError, NoLaneError, UsageError
from lanes.base.openssh import OpenSsh
from lanes.base.ssh import CONNECT_TIMEOUT, Connection, SshError, Target


@dataclass(frozen=True)
class Lane:
    index: int
    ssh: str
    root: str = "/srv/lane"
    shared: str | None = None
    name: str = ""
    jump: str | None = None    # [user@]host[:port] of the jump host in front of it (None: direct)

    @property
    def target(self) -> Target:
        return Target.parse(self.ssh)

    @property
    def jump_target(self) -> Target | None:
        return Target.parse(self.jump, default_user=getpass.getuser()) if self.jump else None

    def connection(self, timeout: float = CONNECT_TIMEOUT) -> Connection:
        """The one way to reach this lane: through its jump host when it has one, both host keys
        pinned (NEV_KNOWN_HOSTS), the same key (NEV_SSH_KEY). Not yet connected."""
        return Connection(self.target, timeout=timeout, jump=self.jump_target)

    def connect(self, timeout: float = CONNECT_TIMEOUT) -> Connection:
        return self.connection(timeout).connect()

    def openssh(self, timeout: float = CONNECT_TIMEOUT) -> OpenSsh:
        """The same route, pins and key for the OpenSSH client: each session one `ssh` process
        (a gate's channel; no paramiko loaded)."""
        return OpenSsh(self.target, timeout=timeout, jump=self.jump_target)

    def answers(self, timeout: float = CONNECT_TIMEOUT) -> bool:
        """True when the lane accepts a BatchMode-style login within `timeout` and runs `true`."""
        try:
            with self.connect(timeout) as c:
                return c.run("true", timeout=timeout).exit_status == 0
        except NevError:
            return False

    @property
    def label(self) -> str:
        return f"lane {self.index}" + (f" ({self.name})" if self.name else "")

    @property
    def shared_dir(self) -> str:
        """The NAS folder as seen on this lane: its own `shared` (lanes file), else NEV_LANE_SHARED."""
        return self.shared or settings.value(settings.LANE_SHARED)


@dataclass(frozen=True)
class LanesFile:
    path: Path | None
    lanes: list[Lane] = field(default_factory=list)
    git_url: str | None = None
    nas: str | None = None
    primary: str | None = None
    jump: str | None = None


def _jump_field(f: jsonfile.Fields, obj: dict, where: str) -> str | None:
    """A `jump` field: an SSH address, or "" for none (a lane reached directly)."""
    if "jump" not in obj:
        return None
    value = f.get(obj, "jump", str, where)
    if value:
        try:
            Target.parse(value)
        except SshError as e:
            raise f.fail(f"{where}.jump" if where else "jump", f"is not an SSH address ({e})") from None
    return value


# Every key the lanes file may hold, from its schema (docs/lanes.schema.json): any other is
# refused, naming the close one (a misspelt `jmup` would otherwise send nev straight to the lane,
# past its jump host).
TOP_KEYS = schema.keys("lanes")
LANE_KEYS = schema.keys("lanes", "lanes")


def load(path: Path) -> LanesFile:
    data = jsonfile.load(path, "lanes file")
    f = jsonfile.Fields(path)
    top = f.known(f.obj(data, "(top level)"), TOP_KEYS, "")
    raw_lanes = f.get(top, "lanes", list, "")
    top_jump = _jump_field(f, top, "")
    env_jump = settings.get(settings.LANE_JUMP)
    default_jump = env_jump if env_jump is not None else top_jump
    lanes = []
    for i, item in enumerate(raw_lanes):
        where = f"lanes[{i}]"
        if isinstance(item, str):
            item = {"ssh": item}
        obj = f.known(f.obj(item, where), LANE_KEYS, where)
        ssh = f.get(obj, "ssh", str, where)
        try:
            Target.parse(ssh)
        except SshError as e:
            raise f.fail(f"{where}.ssh", f"is not an SSH address ({e})") from None
        own_jump = _jump_field(f, obj, where)
        root = f.get(obj, "root", str, where, False, "/srv/lane")
        shared = f.get(obj, "shared", str, where, False)
        for key, value in (("root", root), ("shared", shared)):
            if value is not None and not (value.startswith("/") and "\0" not in value and "\n" not in value):
                raise f.fail(f"{where}.{key}", f"is {value!r}, not an absolute path on the lane (such as /srv/lane)")
        lanes.append(Lane(index=i, ssh=ssh, root=root,
                          shared=shared,
                          name=f.get(obj, "name", str, where, False, ""),
                          jump=(own_jump if own_jump is not None else default_jump) or None))
    return LanesFile(path=path, lanes=lanes, git_url=f.get(top, "git_url", str, "", False),
                     nas=f.get(top, "nas", str, "", False), primary=f.get(top, "primary", str, "", False),
                     jump=default_jump or None)


def default_jump() -> Target | None:
    """The jump host in front of the rig's machines: NEV_LANE_JUMP, else the lanes file's `jump`
    (for commands that reach a node rather than a listed lane: `nev lane create|destroy`)."""
    spec = settings.get(settings.LANE_JUMP)
    if spec is None:
        spec = _read(lanes_file_path(), strict=False).jump
    return Target.parse(spec, default_user=getpass.getuser()) if spec else None


def lanes_file_path() -> Path:
    return settings.path(settings.LANES_FILE)


def _read(path: Path, strict: bool = True) -> LanesFile:
    """The lanes file at `path`; none (no lanes) when it is absent, unless NEV_LANES_FILE names it
    and lanes are needed (`strict`): a file asked for by name and missing is then one line naming
    it (exit 3), never "no lanes"."""
    if path.exists():
        return load(path)
    named = settings.given(settings.LANES_FILE) is not None
    if strict and named and not settings.get(settings.LANE_SSH):
        where = settings.source(settings.LANES_FILE)
        name = "NEV_LANES_FILE" if where.startswith("NEV_") else f"lanes_file in {where}"
        raise NoLaneError(f"no build lane configured: the lanes file {path} that {name} names "
                          "does not exist; write it there (docs/quickstart.md) or fix "
                          f"{name.split(' in ')[0]}; nothing ran")
    return LanesFile(path=None)


def lanes_configured(environ: Mapping[str, str]) -> bool:
    """A build lane is configured (NEV_LANE_SSH, or lanes in the lanes file)."""
    # Cheap first: with no NEV_LANE_SSH and no lanes file, no lanes file is read.
    lanes_file = settings.get_path(settings.LANES_FILE, environ)
    if not settings.get(settings.LANE_SSH, environ) and (lanes_file is None
                                                         or not lanes_file.exists()):
        return False
    return bool(configured(require=False).lanes)


def configured(require: bool = True, strict: bool | None = None) -> LanesFile:
    """The lanes in effect: NEV_LANE_SSH wins over the lanes file. A lanes file NEV_LANES_FILE
    names and missing is refused when lanes are needed (`strict`, by default `require`)."""
    one = settings.get(settings.LANE_SSH)
    path = lanes_file_path()
    base = _read(path, require if strict is None else strict)
    if one:
        root = base.lanes[0].root if base.lanes else "/srv/lane"
        jump = base.jump if base.path else settings.get(settings.LANE_JUMP)
        base = LanesFile(path=base.path, lanes=[Lane(0, one, root=root, jump=jump or None)], git_url=base.git_url,
                         nas=base.nas, primary=base.primary, jump=jump or None)
    if require and not base.lanes:
        raise NoLaneError(f"no build lane configured: set NEV_LANE_SSH or list lanes in {path}; nothing ran")
    return base


def choose_lane_index(flag: int | None, preferred: str | None, lane_ssh: str | None) -> tuple[int, bool]:
    """(index, use NEV_LANE_SSH's lane), pure: --lane, else the preferred setting's index (such
    as NEV_DAGU_LANE), else NEV_LANE_SSH (as lane 0), else 0."""
    if flag is not None:
        return flag, False
    if preferred not in (None, ""):
        try:
            return int(str(preferred)), False
        except ValueError:
            raise ConfigError(f"lane index {preferred!r} is not a number; set it to 0, 1, ...") from None
    return 0, bool(lane_ssh)


def chosen(flag: int | None, preferred: settings.Setting | None = None) -> Lane:
    """The one lane a command works on (the one place that chooses it): --lane N, else the
    `preferred` setting's index, else NEV_LANE_SSH's lane, else lane 0 of the lanes file. Every
    lane keeps its jump host (the file's, NEV_LANE_JUMP or its own)."""
    pref = settings.get(preferred) if preferred is not None else None
    try:
        index, use_ssh = choose_lane_index(flag, pref, settings.get(settings.LANE_SSH))
    except ConfigError:
        assert preferred is not None
        raise ConfigError(f"{preferred.name}={pref!r} is not a lane index; set it to 0, 1, ...") from None
    if use_ssh:
        return configured().lanes[0]
    path = lanes_file_path()
    lf = _read(path)
    if not lf.lanes:
        if settings.get(settings.LANE_SSH) and index == 0:
            return configured().lanes[0]
        raise NoLaneError(f"no lanes listed in {path}; list them there (or set NEV_LANE_SSH for one lane)")
    if flag is None and preferred is not None and not 0 <= index < len(lf.lanes):
        # the setting chose it, not a --lane the user typed: the setting is named
        raise ConfigError(f"{preferred.name}={pref}: only {len(lf.lanes)} lane(s) configured "
                          f"({lf.path}); set it to 0..{len(lf.lanes) - 1}, or give --lane N")
    return pick(lf, index)[0]


def pick(lf: LanesFile, index: int | None) -> list[Lane]:
    if index is None:
        return lf.lanes
    if not 0 <= index < len(lf.lanes):
        raise UsageError(f"--lane {index}: only {len(lf.lanes)} lane(s) configured "
                          f"({lf.path or 'NEV_LANE_SSH'}); pick 0..{len(lf.lanes) - 1}")
    return [lf.lanes[index]]
