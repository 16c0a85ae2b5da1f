"""`nev rig services install | status | remove`: the inventory's own services on the lanes, kept
running by the lanes themselves.

What runs where (docs/inventory.md, "Services"):

| service | on | `nev ...` |
|---|---|---|
| `advertise` | every lane | `rig advertise --interface ADDR --name NAME --inventory FILE` |
| `collect` | the collector lane (`--collector`, 0) | `rig collect --interface ADDR --every 30` |
| `probe` | every lane | `rig probe --every NEV_PROBE_EVERY`, the lane's own gateway key |

So the snapshot a job's inventory check reads (`~/.local/share/nev/inventory.json` on the lane
it runs on: every lane probes its aliases; the collector lane also lists the hosts) is kept
fresh by the lane, not by a development box.

On a lane they run under one **supervisor**, `nev rig services run`, as the lane user: it starts
each service, restarts one that exits (1 s, doubling to 60 s between tries), and stops them all
on SIGTERM. A lane runs its supervisor at boot from the lane user's crontab (`@reboot ...
# nev-rig-services`): the lane user has no systemd units of its own (that would need root and
lingering), and the crontab is what Dagu's autostart uses too. One supervisor at a time: it
holds `~/.local/state/nev/services/supervisor.lock` while it runs.

`install` sends each lane its plan on SSH stdin (`nev rig services apply` reads it there): the
service list, the files they read (the lane's declared inventory, the declared aliases, the rig
file's seeds, the probe's key: mode 600, never in argv), writes them, puts the crontab line in,
and (re)starts the supervisor when anything changed or it is not running; idempotent. `status`
asks each lane (`nev rig services here --json`: the lane's own view: supervisor, each service's
PID, uptime, restarts, last exit). `remove` stops the supervisor and takes the line and the
files away. The lane runs its own nev (`nev lane install` first; a supervisor keeps the install
it started from until `install` restarts it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lanes.base import jsonfile, settings
from lanes.base.errors import ConfigError, NevError

if TYPE_CHECKING:
    from lanes.base.ssh import Connection, Result
    from lanes.lanesfile import Lane

TAG = "# nev-rig-services"
CONFIG = ".config/nev/services"  # under the lane user's home: the plan and its files
STATE = (
    ".local/state/nev/services"  # the supervisor's lock and record, each service's state and log
)
COLLECT_EVERY = 30
BACKOFF_MAX_S = 60.0
STOP_GRACE_S = 5.0
SERVICES = ("advertise", "collect", "probe")


# ---- the plan (built on the development box, applied on the lane) ---------------------------


@dataclass
class Service:
    name: str  # advertise | collect | probe
    args: list[str]  # after `nev`
    env: dict[str, str] = field(default_factory=dict)  # values may name files: `{config}/x`

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "args": self.args, "env": self.env}

    @classmethod
    def of(cls, value: object) -> Service | None:
        """A planned service as `apply` wrote it (services.json); None for one that is not."""
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        args, env = value.get("args"), value.get("env")
        if not isinstance(args, list):
            return None
        return cls(value["name"], [str(a) for a in args],
                   {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {})


@dataclass
class Plan:
    """What one lane runs, and the files it reads (name -> text; `secret` ones are mode 600)."""

    lane: str
    services: list[Service]
    files: dict[str, str] = field(default_factory=dict)
    secret: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)   # files the lane keeps as they are (its key)

    def to_json(self) -> dict[str, object]:
        return {
            "lane": self.lane,
            "services": [s.to_json() for s in self.services],
            "files": self.files,
            "secret": self.secret,
            "keep": self.keep,
        }

    @classmethod
    def from_json(cls, data: object, label: str = "the services plan") -> Plan:
        f = jsonfile.Fields(label)
        top = f.obj(data, "")
        svcs = []
        for i, s in enumerate(f.get(top, "services", list, "")):
            o = f.obj(s, f"services[{i}]")
            name = f.get(o, "name", str, f"services[{i}]")
            if name not in SERVICES:
                raise f.fail(
                    f"services[{i}].name", f"is {name!r}, not one of {', '.join(SERVICES)}"
                )
            svcs.append(
                Service(
                    name,
                    f.str_list(o, "args", f"services[{i}]"),
                    {str(k): str(v) for k, v in f.get(o, "env", dict, f"services[{i}]").items()},
                )
            )
        files = {str(k): str(v) for k, v in f.get(top, "files", dict, "").items()}
        keep = f.str_list(top, "keep", "")
        for name in [*files, *keep]:
            if "/" in name or name.startswith("."):
                raise f.fail(f"files.{name}", "must be a plain file name")
        return cls(f.get(top, "lane", str, ""), svcs, files, f.str_list(top, "secret", ""), keep)


def plan_from_text(text: str, label: str = "stdin") -> Plan:
    """The plan `install` sends (what `nev rig services apply` reads on stdin)."""
    return Plan.from_json(jsonfile.parse(text, label, "the services plan"), label)


def read_declared(folder: Path) -> dict[str, dict[str, object]]:
    """`--declared DIR`: each lane's declared inventory, `<lane name>.json`, by lane name (each a
    JSON object passed through to the lane as its `inventory.json`; its advertiser checks it)."""
    out: dict[str, dict[str, object]] = {}
    for p in sorted(folder.glob("*.json")):
        doc = jsonfile.load(p, "declared inventory")
        if not isinstance(doc, dict):
            raise ConfigError(f"{p}: a declared inventory is a JSON object; fix the file")
        out[p.stem] = doc
    return out


@dataclass(frozen=True)
class ServiceRow:
    """One service as its lane sees it (`nev rig services here --json`)."""

    service: str
    state: str                  # running | restarting | stopped
    pid: int | None = None
    up_s: float | None = None
    restarts: int = 0
    last_exit: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"service": self.service, "state": self.state, "pid": self.pid, "up_s": self.up_s,
                "restarts": self.restarts, "last_exit": self.last_exit}


@dataclass(frozen=True)
class Here:
    """A lane's own view of its services: the wire record of `nev rig services here --json`."""

    host: str | None = None
    supervisor: int | None = None
    autostart: bool = False
    services: list[ServiceRow] = field(default_factory=list)
    probe_key_sha256: str | None = None     # the digest of the probe's key, never the key

    def to_json(self) -> dict[str, object]:
        return {
            "host": self.host,
            "supervisor": self.supervisor,
            "autostart": self.autostart,
            "services": [s.to_json() for s in self.services],
            "probe_key_sha256": self.probe_key_sha256,
        }

    @classmethod
    def from_json(cls, data: object, label: str) -> Here:
        if not isinstance(data, dict) or not isinstance(data.get("services", []), list):
            raise ConfigError(f"{label}: the services status is not an object with a services list")
        f = jsonfile.Fields(label)
        rows = []
        for i, r in enumerate(f.get(data, "services", list, "", required=False, default=[])):
            w = f"services[{i}]"
            o = f.obj(r, w)
            rows.append(ServiceRow(f.get(o, "service", str, w), f.get(o, "state", str, w),
                                   f.get(o, "pid", int, w, required=False),
                                   f.get(o, "up_s", (int, float), w, required=False),
                                   f.get(o, "restarts", int, w, required=False, default=0),
                                   f.get(o, "last_exit", int, w, required=False)))
        return cls(
            f.get(data, "host", str, "", required=False),
            f.get(data, "supervisor", int, "", required=False),
            f.get(data, "autostart", bool, "", required=False, default=False),
            rows,
            f.get(data, "probe_key_sha256", str, "", required=False),
        )


def parse_here(text: str, label: str) -> Here:
    """A lane's answer to `nev rig services here --json` (ConfigError in one line otherwise)."""
    return Here.from_json(jsonfile.parse(text, label, "services status"), label)


@dataclass(frozen=True)
class LaneServices:
    """One lane's row of `nev rig services status`: its view, or why it could not be read."""

    lane: str
    here: Here | None = None
    error: str | None = None
    cause: str | None = None        # the SSH hop that failed (lanes.base.sshfail), when one did

    def to_json(self) -> dict[str, object]:
        if self.here is None:
            cause = {"cause": self.cause} if self.cause else {}
            return {"lane": self.lane, "error": self.error, **cause}
        return {"lane": self.lane, **self.here.to_json()}


def lane_inventory(
    name: str, user: str, port: int, root: str, shared: str | None
) -> dict[str, object]:
    """A lane's declared inventory when none is given: its role, SSH and what it serves (the
    JSON the lane's advertiser reads)."""
    return {
        "name": name,
        "role": "lane",
        "ssh": {"user": user, "port": port},
        "serving": [
            {"unit": "sshd", "port": port, "user": user, "root": root, "shared": shared},
            {
                "unit": "dagu",
                "address": "127.0.0.1",
                "port": settings.get_int(settings.DAGU_PORT, {}),
            },
        ],
    }


def plan_for(
    name: str,
    addr: str,
    inventory: dict[str, object],
    collector: bool,
    *,
    folknet_text: str | None = None,
    seeds: list[str] | None = None,
    probe_key: str | None = None,
    keep_key: bool = False,
    probes: bool = False,
    probe_every: int = 300,
    model_url: str | None = None,
    expect: int | None = None,
    collect_every: int = COLLECT_EVERY,
) -> Plan:
    """One lane's plan (pure). The collector also collects and probes: it needs the declared
    aliases, the gateway as the lane reaches it and a key of its own (`keep_key`: the one the lane
    already holds, which the gateway still knows)."""
    port = settings.get_int(settings.INVENTORY_PORT, {})
    files = {"inventory.json": json.dumps(inventory, indent=2) + "\n"}
    svcs = [
        Service(
            "advertise",
            [
                "rig",
                "advertise",
                "--interface",
                addr,
                "--port",
                str(port),
                "--name",
                name,
                "--inventory",
                "{config}/inventory.json",
            ],
        )
    ]
    secret: list[str] = []
    keep: list[str] = []
    if collector or probes:
        if folknet_text is None or (probe_key is None and not keep_key) or not model_url:
            raise ConfigError(
                "the collector lane probes the aliases: it needs the declared aliases "
                "(NEV_FOLKNET_FILE), the gateway as lanes reach it (NEV_LANE_MODEL_URL) "
                "and a gateway key (minted through NEV_GATEWAY_KEYS_FILE, or --probe-key-file)"
            )
        files["folknet.json"] = folknet_text
        files["rig.json"] = json.dumps({"seeds": seeds or []}) + "\n"
        if keep_key:
            keep.append("probe.key")
        else:
            assert probe_key is not None
            files["probe.key"] = probe_key + "\n"
            secret.append("probe.key")
        common = {"NEV_FOLKNET_FILE": "{config}/folknet.json", "NEV_RIG_FILE": "{config}/rig.json"}
        collect = [
            "rig",
            "collect",
            "--interface",
            addr,
            "--every",
            str(collect_every),
            "--timeout",
            "3",
        ]
        if expect:
            collect += ["--expect", str(expect)]
        if collector:
            svcs.append(Service("collect", collect, dict(common)))
        svcs.append(
            Service(
                "probe",
                ["rig", "probe", "--every", str(probe_every)],
                {**common, "NEV_MODEL_URL": model_url, "NEV_MODEL_KEY_FILE": "{config}/probe.key"},
            )
        )
    return Plan(name, svcs, files, secret, keep)


# ---- from the development box ----------------------------------------------------------------


@dataclass
class LaneOutcome:
    lane: str
    lines: list[str]
    ok: bool = True


def _lane_nev(conn: Connection, argv: list[str], stdin: bytes | None = None,
              timeout: float = 120) -> Result:
    """`~/.local/bin/nev ARGV` on the lane (the lane's own nev, put there by `nev lane install`)."""
    cmd = (
        "test -x ~/.local/bin/nev || "
        "{ echo 'no nev on this lane: run `nev lane install`' >&2; exit 4; }; "
        "exec ~/.local/bin/nev " + " ".join(argv)
    )
    return conn.run(["sh", "-c", cmd], stdin=stdin, timeout=timeout)


def probe_key(
    lane_name: str,
    models: list[str],
    key_file: Path | None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The collector's own gateway key: `key_file`'s, else one minted for it in the gateway's keys
    file (entry `service:probe-<lane>`, the declared aliases only; a new install replaces it)."""
    if key_file is not None:
        from bench import gateway

        return gateway.read_key(key_file, "--probe-key-file", "the collector's probe")
    from jobs import jobkeys

    return jobkeys.mint_service(f"probe-{lane_name}", models, environ)


def install(
    lanes: list[Lane],
    collector: int,
    *,
    inventories: Mapping[str, dict[str, object]] | None = None,
    key_file: Path | None = None,
    expect: int | None = None,
    environ: Mapping[str, str] | None = None,
    dry_run: bool = False,
    only: int | None = None,
) -> list[LaneOutcome]:
    """Each lane's plan applied on it (`lanes`: lanesfile.Lane; `only`: just that lane). The
    collector lane (its index) also collects and probes."""
    from bench import folknet
    from rig import rigfile

    env = os.environ if environ is None else environ
    chosen = [ln for ln in lanes if ln.index == collector]
    if not chosen:
        raise ConfigError(
            f"--collector {collector}: no such lane among "
            f"{', '.join(str(ln.index) for ln in lanes)}"
        )
    decl_path = folknet.default_path()
    declared = folknet.load(decl_path)  # the one reader of it; then its text as it is
    folknet_text = decl_path.read_text()
    rig_path = rigfile.default_path()
    seeds = rigfile.load(rig_path).seeds if rig_path.exists() else []
    model_url = settings.get(settings.LANE_MODEL_URL, env)
    if not model_url:
        raise ConfigError(
            "NEV_LANE_MODEL_URL is not set: set it to the gateway's address as the lanes "
            "reach it (the collector's probe calls it)"
        )
    every = settings.get_int(settings.PROBE_EVERY, env)
    out = []
    for lane in lanes:
        if only is not None and lane.index != only:
            continue
        name = lane.name or f"lane{lane.index}"
        t = lane.target
        inv = (inventories or {}).get(name) or lane_inventory(
            name, t.user, t.port, lane.root, lane.shared
        )
        is_collector = lane.index == collector
        if dry_run:
            plan = plan_for(name, t.host, inv, is_collector, folknet_text=folknet_text,
                            seeds=seeds, probe_key="(minted at install)", probes=True,
                            probe_every=every, model_url=model_url, expect=expect)
            out.append(LaneOutcome(lane.label,
                                   [f"would run: {', '.join(s.name for s in plan.services)}"]))
            continue
        with lane.connect() as conn:
            # every lane probes (a job's inventory check reads the snapshot of the lane it runs
            # on); the collector also collects the hosts
            key, keep = None, False
            if key_file is None and _lane_key_known(conn, name, env):
                keep = True          # the lane's key is the one the gateway holds: kept
            else:
                key = probe_key(name, sorted(a.name for a in declared.active()), key_file, env)
            plan = plan_for(name, t.host, inv, is_collector, folknet_text=folknet_text,
                            seeds=seeds, probe_key=key, keep_key=keep, probes=True,
                            probe_every=every, model_url=model_url, expect=expect)
            res = _lane_nev(conn, ["rig", "services", "apply"], json.dumps(plan.to_json()).encode())
        lines = (
            res.out.strip().splitlines() if res.exit_status == 0 else [f"failed: {res.last_err()}"]
        )
        out.append(LaneOutcome(lane.label, lines, res.exit_status == 0))
    return out


def _lane_key_known(conn: Connection, lane_name: str, env: Mapping[str, str]) -> bool:
    """The lane holds a probe key and the gateway's keys file has that key for it."""
    from jobs import jobkeys

    res = _lane_nev(conn, ["rig", "services", "here", "--json"], timeout=60)
    if res.exit_status != 0:
        return False
    try:
        lane_sha = parse_here(res.out, "the lane's services").probe_key_sha256
    except ConfigError:
        return False
    return bool(lane_sha) and lane_sha == jobkeys.service_digest(f"probe-{lane_name}", env)


def remove(lanes: list[Lane], dry_run: bool = False) -> list[LaneOutcome]:
    out = []
    for lane in lanes:
        if dry_run:
            out.append(
                LaneOutcome(
                    lane.label, ["would stop the supervisor, remove the @reboot line and the files"]
                )
            )
            continue
        with lane.connect() as conn:
            res = _lane_nev(conn, ["rig", "services", "apply", "--remove"])
        lines = (
            res.out.strip().splitlines() if res.exit_status == 0 else [f"failed: {res.last_err()}"]
        )
        out.append(LaneOutcome(lane.label, lines, res.exit_status == 0))
    return out


def status(lanes: list[Lane]) -> list[LaneServices]:
    """Each lane's own view (`nev rig services here --json`), or why it could not be read."""
    rows = []
    for lane in lanes:
        try:
            with lane.connect() as conn:
                res = _lane_nev(conn, ["rig", "services", "here", "--json"], timeout=60)
        except NevError as e:
            failure = getattr(e, "failure", None)     # an SSH hop that failed (lanes.base.sshfail)
            rows.append(LaneServices(lane.label, error=str(e),
                                     cause=failure.cause.value if failure is not None else None))
            continue
        if res.exit_status != 0:
            rows.append(LaneServices(lane.label, error=res.last_err()))
            continue
        try:
            rows.append(LaneServices(lane.label, parse_here(res.out, f"{lane.label}'s services")))
        except ConfigError as e:
            rows.append(LaneServices(lane.label, error=str(e)))
    return rows


def render(rows: list[LaneServices]) -> str:
    lines = [
        f"{'lane':<16} {'service':<10} {'state':<11} {'pid':>7} {'up':>8} "
        f"{'restarts':>8}  last exit"
    ]
    for r in rows:
        if r.here is None:
            lines.append(f"{r.lane:<16} unavailable: {r.error}")
            continue
        sup = r.here.supervisor
        auto = "on" if r.here.autostart else "off"
        if not r.here.services:
            lines.append(
                f"{r.lane:<16} (no services; supervisor "
                f"{'pid ' + str(sup) if sup else 'not running'}, "
                f"autostart {auto})"
            )
        for s in r.here.services:
            up = f"{s.up_s:.0f} s" if s.up_s is not None else "-"
            lines.append(
                f"{r.lane:<16} {s.service:<10} {s.state:<11} {s.pid or '-':>7} "
                f"{up:>8} {s.restarts:>8}  "
                f"{s.last_exit if s.last_exit is not None else '-'}"
            )
    return "\n".join(lines)


def healthy(rows: list[LaneServices]) -> bool:
    return all(
        r.here is not None
        and bool(r.here.supervisor)
        and r.here.autostart
        and all(s.state == "running" for s in r.here.services)
        for r in rows
    )
