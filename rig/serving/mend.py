"""The tick's mending: an alias the probe holds down because its pool's HAProxy or a serving unit
is not running gets it started again, through the same start an operator uses.

`decide` (pure) turns what was found for one down alias into verdicts, one per thing looked at:

    found (in this order)                           verdict
    no serving role of the rig file serves it       named: not the rig file's to start
    the proxy role's host does not answer (SSH)     named: the host, and why
    HAProxy not running (`status` fails, or its     mend: the proxy role's `start`
      runtime API does not answer), `start` declared
    ... no `start` declared                         named: declare `start` and `status`
    a replica drained or stopped in HAProxy         named: an operator's; `nev rig start` is theirs
    a replica's unit `status` fails                 mend: `nev rig start ROLE/REPLICA`'s steps
    a replica's host does not answer (SSH)          named
    HAProxy and every unit run                      named: the cause is elsewhere (model, gateway)
    a target started NEV_MEND_PER_HOUR times in     named, not tried (0: never mend, only name)
      the last hour already

Each mend is one change-log entry (`## TIME mend TARGET`: who, why, each step, the result) and
one `mended` webhook event; each alias left down with something named is one `not_mended`
condition (sent once, recovered when the alias is ready again). The tick runs this first
(`jobs.tick.PARTS`), so the jobs it resends this tick find the alias ready.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lanes.base import jsonfile, notify, settings
from lanes.base.errors import NevError
from lanes.base.inventory_record import RowJson
from lanes.base.mask import mask
from lanes.base.ui import info
from rig.rigfile import RigFile, Role
from rig.serving.declared import Replica, ServingRole

HOUR_S = 3600.0
START_WAIT_S = 30.0  # seconds a started HAProxy has to answer its runtime API
PROBE_TRIES = 3


@dataclass(frozen=True)
class Proxy:
    """A proxy role's HAProxy as found: running True/False, or None when its host did not answer."""

    role: str
    running: bool | None
    why: str = ""
    can_start: bool = False
    states: dict[str, str] = field(
        default_factory=dict
    )  # BACKEND/SERVER -> ready|drained|stopped|down


@dataclass(frozen=True)
class Unit:
    """A replica's unit as its `status` found it: running True/False, None when its host did not
    answer."""

    ref: str
    running: bool | None
    why: str = ""


@dataclass(frozen=True)
class Verdict:
    alias: str
    target: str  # `proxy ROLE` or ROLE/REPLICA, or the alias itself
    mend: bool
    why: str

    def line(self) -> str:
        return f"{self.alias}: {'mend' if self.mend else 'not mended'}: {self.target}: {self.why}"


def decide(
    alias: str,
    roles: list[ServingRole],
    proxies: Mapping[str, Proxy],
    units: Mapping[str, Unit],
    recent: Mapping[str, int],
    limit: int,
) -> list[Verdict]:
    """The verdicts for one down alias (the module's table)."""
    if not roles:
        return [
            Verdict(
                alias,
                alias,
                False,
                "no serving role of the rig file serves it; nothing of nev's to start",
            )
        ]
    out: list[Verdict] = []
    for ro in roles:
        p = proxies[ro.proxy]
        target = f"proxy {ro.proxy}"
        if p.running is None:
            out.append(Verdict(alias, target, False, f"its host did not answer ({p.why})"))
            continue
        if not p.running:
            if p.can_start:
                out.append(Verdict(alias, target, True, f"HAProxy is not running ({p.why})"))
            else:
                out.append(
                    Verdict(
                        alias,
                        target,
                        False,
                        f"HAProxy is not running ({p.why}), and role "
                        f"{ro.proxy} declares no `start` and `status`",
                    )
                )
            continue
        for r in ro.replicas.values():
            state = p.states.get(f"{ro.backend}/{r.server}", "unknown")
            if state in ("drained", "stopped"):
                out.append(
                    Verdict(
                        alias,
                        r.ref,
                        False,
                        f"{state} in HAProxy: an operator's; "
                        f"`nev rig start {r.ref}` is a person's call",
                    )
                )
                continue
            u = units.get(r.ref)
            if u is None or u.running:
                continue
            if u.running is None:
                out.append(Verdict(alias, r.ref, False, f"its host did not answer ({u.why})"))
            else:
                out.append(Verdict(alias, r.ref, True, f"its unit is not running ({u.why})"))
    if not out:
        out.append(
            Verdict(
                alias,
                alias,
                False,
                "HAProxy and every unit serving it run; the cause is "
                "elsewhere (the model, the gateway): not nev's to mend",
            )
        )
    bounded = []
    for v in out:
        if v.mend and recent.get(v.target, 0) >= limit:
            v = Verdict(
                v.alias,
                v.target,
                False,
                f"{v.why}; started {recent.get(v.target, 0)} time(s) in the last hour already "
                f"(NEV_MEND_PER_HOUR={limit}): left to a person",
            )
        bounded.append(v)
    return bounded


# -- the mends' record (for the bound) -----------------------------------------------------------


def history_path(environ: Mapping[str, str] | None) -> Path:
    return settings.path(settings.STATE_DIR, environ) / "mend.json"


def recent(path: Path, now: float) -> dict[str, int]:
    """Per target, the mends of the last hour."""
    data = notify.read_state(path)
    return {
        k: sum(1 for t in v if isinstance(t, (int, float)) and now - t < HOUR_S)
        for k, v in data.items()
        if isinstance(v, list)
    }


COVERED = "covered"  # mend.json's alias -> when a mend brought it back (its completion answered)


def record(path: Path, target: str, now: float, covered: Sequence[str] = ()) -> None:
    """One mend of `target` at `now` (the bound's count); `covered`: the aliases its check saw
    answer again, so the ticks before the probe's next round leave them be."""
    data = notify.read_state(path)
    times: dict[str, list[float]] = {
        k: [t for t in v if isinstance(t, (int, float)) and now - t < HOUR_S]
        for k, v in data.items()
        if isinstance(v, list)
    }
    if target:
        times.setdefault(target, []).append(now)
    back = data.get(COVERED)
    # mend.json: target -> the times of its mends, and the covered aliases -> when
    kept: dict[str, object] = {**times, COVERED: {**(back if isinstance(back, dict) else {}),
                                                  **dict.fromkeys(covered, now)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    jsonfile.write_atomic(path, kept, 0o600)


def mended_since(path: Path, alias: str, probed_at: float | None) -> float | None:
    """When a mend brought `alias` back after the probe's last round (None: none since)."""
    back = notify.read_state(path).get(COVERED)
    t = back.get(alias) if isinstance(back, dict) else None
    if not isinstance(t, (int, float)) or (probed_at is not None and t <= probed_at):
        return None
    return float(t)


# -- what runs (over SSH) ------------------------------------------------------------------------


def _proxy(hosts: Any, role: Role) -> Proxy:
    from rig.serving.haproxy import Admin, AdminError

    host = role.hosts[0]
    can = bool(role.start and (role.status or role.admin))
    try:
        conn = hosts.get(host)
        if role.status:
            res = conn.run(role.status, timeout=30)
            if res.exit_status != 0:
                return Proxy(
                    role.name, False, f"`{role.status}` on {host} exited {res.exit_status}", can
                )
        if not role.admin:
            return Proxy(role.name, True, can_start=can)
        try:
            servers = Admin(conn, role.admin, host).servers()
        except AdminError as e:
            return Proxy(role.name, False, f"its runtime API did not answer: {e.message}", can)
    except NevError as e:
        return Proxy(role.name, None, e.message)
    return Proxy(
        role.name, True, can_start=can, states={f"{s.backend}/{s.name}": s.state for s in servers}
    )


def _unit(hosts: Any, r: Replica) -> Unit:
    try:
        res = hosts.get(r.host).run(r.command("status"), timeout=60)
    except NevError as e:
        return Unit(r.ref, None, e.message)
    if res.exit_status == 0:
        return Unit(r.ref, True)
    return Unit(r.ref, False, f"`{r.command('status')}` on {r.host} exited {res.exit_status}")


def down_aliases(
    environ: Mapping[str, str] | None,
) -> tuple[list[RowJson], list[str], float | None]:
    """The snapshot's aliases the probe holds failing, the ready ones, and when the probe last
    looked (`nev rig status`'s reader)."""
    from bench.readiness import parse_time
    from rig.inventory import status as st

    snap, _ = st.load(None)
    rows = st.rows(snap, dt.datetime.now(dt.UTC))
    probed = parse_time(snap.probed_at)
    return (
        [r for r in rows if r["status"] == "failing"],
        [r["alias"] for r in rows if r["status"] == "ready"],
        probed.timestamp() if probed else None,
    )


# -- mending -------------------------------------------------------------------------------------


@dataclass
class Mend:
    """One mend's lines, for the change log and the webhook."""

    verdict: Verdict
    lines: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)
        info(f"tick: mend: {line}")


def _probe_until(probe: Callable[[str], str | None] | None, aliases: list[str]) -> str:
    if probe is None:
        return "no gateway configured here (NEV_MODEL_URL): the probe will tell"
    bad: list[str] = []
    for i in range(PROBE_TRIES):
        bad = [f"{a}: {why}" for a in aliases if (why := probe(a))]
        if not bad:
            return f"one completion of {', '.join(aliases)} through the gateway: answered"
        time.sleep(1.0 + i)
    raise NevError("; ".join(bad))


def _start_proxy(
    hosts: Any, role: Role, aliases: list[str], probe: Callable[[str], str | None] | None, m: Mend
) -> None:
    host = role.hosts[0]
    assert role.start
    res = hosts.get(host).run(role.start, timeout=120)
    if res.exit_status != 0:
        raise NevError(f"`{role.start}` on {host} exited {res.exit_status}: {res.last_err()}")
    m.say(f"{m.verdict.target}: `{role.start}` on {host}: started")
    deadline = time.monotonic() + START_WAIT_S
    while True:
        p = _proxy(hosts, role)
        if p.running:
            break
        if time.monotonic() > deadline:
            raise NevError(
                f"HAProxy still not running {START_WAIT_S:g} s after its start ({p.why})"
            )
        time.sleep(0.5)
    m.say(f"{m.verdict.target}: running again")
    m.say(f"{m.verdict.target}: {_probe_until(probe, aliases)}")


def _start_replica(
    rig: RigFile,
    hosts: Any,
    role: ServingRole,
    r: Replica,
    probe: Callable[[str], str | None] | None,
    m: Mend,
) -> None:
    from rig.serving.actions import Action
    from rig.serving.haproxy import Admin

    proxy = rig.roles[role.proxy]
    assert proxy.admin
    a = Action(
        "start", r.ref, rig, role, [r], lambda ln: m.say(ln), probe=probe or (lambda alias: None)
    )
    if probe is None:
        m.say(f"{r.ref}: no gateway configured here (NEV_MODEL_URL): its completion is the probe's")
    a.run(hosts, Admin(hosts.get(proxy.hosts[0]), proxy.admin, proxy.hosts[0]))


def entry(m: Mend, result: str) -> str:
    from rig.snapshot import changelog

    out = [
        f"## {changelog.now()} mend {m.verdict.target.replace(' ', ':')}",
        f"- who: the tick ({changelog.who()})",
        f"- why: {m.verdict.alias} failing; {m.verdict.why}",
    ]
    out += [f"- {ln}" for ln in m.lines]
    out.append(f"- result: {result}")
    return "\n".join(out) + "\n"


def _gateway_probe() -> Callable[[str], str | None] | None:
    from rig.serving.actions import gateway_probe

    try:
        return gateway_probe(30.0)
    except NevError:
        return None


def mend(
    rig: RigFile,
    notes: Path,
    down: list[RowJson],
    environ: Mapping[str, str] | None,
    now: float | None = None,
    probed_at: float | None = None,
) -> int:
    """Look at each down alias, mend what `decide` says, name the rest; 1 when a mend failed."""
    from rig.snapshot import changelog
    from rig.snapshot.hosts import Hosts

    limit = settings.get_int(settings.MEND_PER_HOUR, environ)
    hist = history_path(environ)
    t = time.time() if now is None else now
    failed = 0
    with Hosts(rig) as hosts:
        proxies: dict[str, Proxy] = {}
        units: dict[str, Unit] = {}
        probe: list[Callable[[str], str | None] | None] = []
        covered: set[str] = (
            set()
        )  # aliases a mend this tick already brought back (its probe said so)
        for row in down:
            alias = row["alias"]
            if alias in covered:
                continue
            back = mended_since(hist, alias, probed_at)
            if back is not None:
                info(
                    f"tick: mend: {alias}: started again at {notify.now_iso(back)}, after the "
                    "probe's last round: its next round says whether it holds"
                )
                continue
            roles = [ro for ro in rig.serving.values() if alias in ro.aliases]
            for ro in roles:
                if ro.proxy not in proxies:
                    proxies[ro.proxy] = _proxy(hosts, rig.roles[ro.proxy])
                if proxies[ro.proxy].running:
                    for r in ro.replicas.values():
                        if r.ref not in units:
                            units[r.ref] = _unit(hosts, r)
            verdicts = decide(alias, roles, proxies, units, recent(hist, t), limit)
            named = [v for v in verdicts if not v.mend]
            for v in named:
                info(f"tick: mend: {v.line()}")
            if named:
                notify.down(
                    notify.Kind.NOT_MENDED,
                    alias,
                    "; ".join(f"{v.target}: {v.why}" for v in named),
                    environ=environ,
                )
            for v in (v for v in verdicts if v.mend):
                if not probe:
                    probe.append(_gateway_probe())
                m = Mend(v)
                info(f"tick: mend: {v.line()}")
                record(hist, v.target, t)
                try:
                    if v.target.startswith("proxy "):
                        role = rig.roles[v.target.split(" ", 1)[1]]
                        served = sorted(
                            {
                                a
                                for ro in rig.serving.values()
                                if ro.proxy == role.name
                                for a in ro.aliases
                            }
                        )
                        _start_proxy(hosts, role, served, probe[0], m)
                        proxies[role.name] = _proxy(hosts, role)
                        covered.update(served)
                        record(hist, "", t, served)
                    else:
                        ro_name, _, rep = v.target.partition("/")
                        ro = rig.serving[ro_name]
                        _start_replica(rig, hosts, ro, ro.replicas[rep], probe[0], m)
                        units[v.target] = Unit(v.target, True)
                        covered.update(ro.aliases)
                        record(hist, "", t, ro.aliases)
                except NevError as e:
                    failed += 1
                    why = mask(e.message)
                    info(f"tick: mend: {v.target}: failed: {why}")
                    changelog.append(notes, entry(m, f"FAILED: {why}"))
                    notify.event(
                        notify.Kind.MENDED,
                        v.target,
                        f"{alias}: {v.why}; start FAILED: {why}",
                        str(int(t)),
                        environ,
                    )
                    continue
                changelog.append(notes, entry(m, "done"))
                last = m.lines[-1] if m.lines else "done"
                notify.event(
                    notify.Kind.MENDED,
                    v.target,
                    f"{alias} was failing: {v.why}; started again: {last}",
                    str(int(t)),
                    environ,
                )
    return 1 if failed else 0


def tick_part(env: dict[str, str]) -> int:
    """The tick's part (`jobs.tick.PARTS`): with a rig file that declares serving roles and a
    snapshot the probe keeps, mend the down aliases; never raises (a line says why not)."""
    from rig import rigfile
    from rig.snapshot.context import notes_dir

    path = rigfile.default_path()
    if not path.exists():
        return 0
    try:
        rig = rigfile.load(path)
        if not rig.serving:
            return 0
        down, ready, probed_at = down_aliases(env)
        for alias in ready:
            notify.up(notify.Kind.NOT_MENDED, alias, "ready again", environ=env)
        if not down:
            return 0
        return mend(rig, notes_dir(), down, env, probed_at=probed_at)
    except NevError as e:
        info(f"tick: mend: skipped: {e.message}")
        return 0
    except OSError as e:  # a state or notes folder that cannot be written: the tick goes on
        info(f"tick: mend: skipped: {mask(str(e))}")
        return 1
