"""The recorded state of a box, as plain data: `BoxInfo` (what other code uses) and the
process records.

`box.json` holds both: the info fields at the top level, plus `procs` (every process the box
started: PID and kernel start time, so a reused PID is never mistaken for ours), `lane_count`
and `users`. A machine-wide registry (`/var/lib/nev-box/boxes/<name>.json`) lists every box on
this machine, so boxes never take each other's names or nets and a shared user is removed only
by the last box that lists it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base import jsonfile, settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.procs import ProcRec

REGISTRY = settings.path(settings.BOX_REGISTRY)


@dataclass
class LaneInfo:
    index: int
    name: str
    netns: str
    addr: str
    ssh: str
    root: str
    shared: str
    host_root: Path
    host_home: Path


@dataclass
class PoolInfo:
    name: str
    netns: str
    addr: str
    port: int
    control_url: str
    alias: str
    max_inflight: int
    proxy_port: int
    replicas: dict[str, int] = field(default_factory=dict)   # replica (as the rig file names it) -> port


@dataclass
class BoxInfo:
    name: str
    dir: Path
    net: str
    bridge: str
    bridge_addr: str
    lanes: list[LaneInfo]
    known_hosts: Path
    ssh_key: Path
    ssh_config: Path
    lanes_file: Path
    forge_url: str
    forge_addr: str
    forge_user: str
    forge_token_file: Path
    forge_askpass: Path
    forge_access_log: Path
    forge_repos: Path
    nas: Path
    gateway_url: str = ""
    gateway_addr: str = ""
    master_key_file: Path | None = None
    keys: dict[str, Path] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    proxy_addr: str = ""
    pools: dict[str, PoolInfo] = field(default_factory=dict)
    proxy_stats_socket: Path | None = None
    folknet_file: Path | None = None
    rig_file: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    hosts: dict[str, dict[str, str]] = field(default_factory=dict)   # host -> {addr, netns, role}
    # The real rig's network: the rig's bridge in a namespace of its own, the jump host as the
    # one way in, and the development box's local forwards to the forge and the gateway.
    rig_netns: str = ""
    jump: str = ""                 # user@addr the development box reaches the jump host at
    jump_addr: str = ""            # the jump host's outside address (the development box's side)
    jump_rig_addr: str = ""        # the jump host's address on the rig network
    dev_addr: str = ""             # the development box's end of the outside link
    forge_local_url: str = ""      # the forge through the development box's forward (…/git/)
    gateway_local_url: str = ""    # the gateway through the development box's forward

    # ---- derived values ----

    def lane(self, index: int) -> LaneInfo:
        return self.lanes[index]

    def dev_url(self, url: str) -> str:
        """A rig-side forge or gateway URL as the development box reaches it (its forward)."""
        for rig, local in ((self.forge_url, self.forge_local_url),
                           (self.gateway_url, self.gateway_local_url)):
            if rig and local and url.startswith(rig.rstrip("/")):
                return local.rstrip("/") + url[len(rig.rstrip("/")):]
        return url

    def to_json(self) -> dict[str, object]:
        def conv(v: object) -> object:
            if isinstance(v, Path):
                return str(v)
            if isinstance(v, dict):
                return {k: conv(x) for k, x in v.items()}
            if isinstance(v, list):
                return [conv(x) for x in v]
            return v

        return {k: conv(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> BoxInfo:
        d = dict(data)
        paths = {"dir", "known_hosts", "ssh_key", "ssh_config", "lanes_file", "forge_token_file",
                 "forge_askpass", "forge_access_log", "forge_repos", "nas", "master_key_file", "proxy_stats_socket",
                 "folknet_file", "rig_file"}
        names = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in names}
        for k in paths:
            if d.get(k) is not None:
                d[k] = Path(d[k])
        d["lanes"] = [LaneInfo(**{**ln, "host_root": Path(ln["host_root"]),
                                  "host_home": Path(ln["host_home"])}) for ln in d.get("lanes", [])]
        d["keys"] = {k: Path(v) for k, v in d.get("keys", {}).items()}
        d["pools"] = {k: PoolInfo(**v) for k, v in d.get("pools", {}).items()}
        return cls(**d)


@dataclass
class BoxState:
    """Everything box.json records."""

    info: BoxInfo | None
    procs: dict[str, ProcRec] = field(default_factory=dict)
    lane_count: int = 0
    users: list[str] = field(default_factory=list)
    complete: bool = False
    code: str = ""    # digest of the box's own code and data: a new version rebuilds the box
    lanes_kind: str = "netns"   # the lane backend the box was built with (NEV_BOX_LANES)
    forward_state: str = ""     # NEV_STATE_DIR the box's forwards were started with (`down` needs it)

    def to_json(self) -> dict:
        out = self.info.to_json() if self.info else {}
        out["code"] = self.code
        out["procs"] = {k: p.to_json() for k, p in self.procs.items()}
        out["lane_count"] = self.lane_count
        out["users"] = self.users
        out["complete"] = self.complete
        out["lanes_kind"] = self.lanes_kind
        out["forward_state"] = self.forward_state
        return out

    @classmethod
    def from_json(cls, data: dict) -> BoxState:
        info = BoxInfo.from_json(data) if "bridge" in data else None
        procs = {k: ProcRec(**v) for k, v in data.get("procs", {}).items()}
        return cls(info=info, procs=procs, lane_count=int(data.get("lane_count", 0)),
                   users=list(data.get("users", [])), complete=bool(data.get("complete", False)),
                   code=str(data.get("code", "")), lanes_kind=str(data.get("lanes_kind", "netns")),
                   forward_state=str(data.get("forward_state", "")))


def state_path(box_dir: Path) -> Path:
    return box_dir / "box.json"


def logs_dir(box_dir: Path) -> Path:
    return box_dir / "logs"


def read_state(box_dir: Path) -> BoxState | None:
    p = state_path(box_dir)
    if not p.exists():
        return None
    data = jsonfile.load(p, "box state")
    try:
        if not isinstance(data, dict):
            raise TypeError(f"an object, not {type(data).__name__}")
        return BoxState.from_json(data)
    except (TypeError, KeyError, ValueError, AttributeError) as e:
        why = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        raise NevError(f"{p}: box state is damaged ({why}); run `nev box down` to clean up, then `nev box up`") from None


def write_state(box_dir: Path, st: BoxState) -> None:
    jsonfile.write_atomic(state_path(box_dir), st.to_json())


# ---- the machine-wide registry ----------------------------------------------------------------


def registry_entries() -> dict[str, dict]:
    out: dict[str, dict] = {}
    d = REGISTRY / "boxes"
    if not d.is_dir():
        return out
    for p in sorted(d.glob("*.json")):
        try:
            out[p.stem] = jsonfile.load(p, "box registry entry")
        except ConfigError:
            continue
    return out


def registry_live(entry: dict) -> bool:
    """An entry counts while its box folder still has a box.json (else it is stale)."""
    return state_path(Path(entry.get("dir", "/nonexistent"))).exists()


def register(name: str, net: str, box_dir: Path, users: list[str]) -> None:
    jsonfile.write_atomic(REGISTRY / "boxes" / f"{name}.json",
                          {"name": name, "net": net, "dir": str(box_dir), "users": users})


def keys_file(name: str, account: str) -> Path:
    """Box `name`'s jump or admin account's key file (`account`: "jump" or "admin"), in a folder
    it can reach wherever the box folder lives."""
    return REGISTRY / account / name / "authorized_keys"


def team_keys_file(box_dir: Path) -> Path:
    """Public keys of more development boxes (a teammate's), one per line: every `up` authorizes
    them beside the box's own client key on the jump host, the lanes and the service hosts."""
    return box_dir / "ssh" / "team.pub"


def team_keys(box_dir: Path) -> list[str]:
    """The lines of `team_keys_file` that are OpenSSH public keys (others ignored)."""
    try:
        text = team_keys_file(box_dir).read_text()
    except FileNotFoundError:
        return []
    return [ln.strip() for ln in text.splitlines()
            if ln.strip().startswith(("ssh-", "ecdsa-", "sk-")) and len(ln.split()) >= 2]


def user_marker(user: str) -> Path:
    """Says a box made the shared `user`: the last box that lists it removes it."""
    return REGISTRY / "users" / f"{user}.created"


def unregister(name: str) -> None:
    try:
        (REGISTRY / "boxes" / f"{name}.json").unlink()
    except FileNotFoundError:
        pass


def conflicts(name: str, net: str, box_dir: Path, entries: dict[str, dict]) -> str | None:
    """Why this box may not come up next to the registered ones (None when it may)."""
    for other, e in entries.items():
        if not registry_live(e):
            continue
        if other == name and Path(e.get("dir", "")) != box_dir:
            return (f"box name {name!r} is already used by the box in {e.get('dir')}; "
                    "set NEV_BOX_NAME to another name (or bring that box down)")
        if other != name and e.get("net") == net:
            return (f"net {net}.0/24 is already used by box {other!r} ({e.get('dir')}); "
                    "set NEV_BOX_NET to another /24 such as 198.18.N")
    return None


def resolve(name: str | None, entries: dict[str, dict], default: str) -> dict | str:
    """The registry entry of the up box a reading command (`nev box env`, `status`, `shape`) means
    when NEV_BOX_DIR is unset (pure): box `name`, or with no name given, the `default` name's box,
    else the only box up; else why not, naming the boxes that are up (their folders) and how to
    pick one.

    | name given | boxes up            | result                                  |
    |------------|---------------------|-----------------------------------------|
    | yes        | that one among them | its entry                               |
    | yes        | others only         | "no box named X is up; up: a (dir) ..." |
    | no         | the default's among | the default's entry                     |
    | no         | exactly one         | its entry                               |
    | no         | several             | "several boxes are up: ...; set ..."    |
    | either     | none                | "no box is up on this machine ..."      |
    """
    live = {n: e for n, e in sorted(entries.items()) if registry_live(e)}
    where = REGISTRY / "boxes"
    if not live:
        return (f"no box is up on this machine (the registry {where} lists none); "
                "`nev box up` builds one")
    listed = ", ".join(f"{n} ({e.get('dir')})" for n, e in live.items())
    if name is not None:
        if name in live:
            return live[name]
        return (f"no box named {name} is up on this machine; the registry {where} lists: {listed}; "
                "set NEV_BOX_NAME to one of them (or NEV_BOX_DIR to its folder's parent)")
    if default in live:
        return live[default]
    if len(live) == 1:
        return next(iter(live.values()))
    return (f"several boxes are up on this machine: {listed} (registry {where}); "
            "set NEV_BOX_NAME to the one you mean")


def users_elsewhere(name: str, entries: dict[str, dict]) -> set[str]:
    out: set[str] = set()
    for other, e in entries.items():
        if other != name and registry_live(e):
            out.update(e.get("users", []))
    return out
