"""`nev rig drain|stop|start|restart ROLE[/REPLICA]`: a serving unit out of HAProxy first, then stopped.

    verb     steps (one line each; a pair is one replica, so both halves go together)
    drain    keeps-a-ready-replica check, set drain, wait (in flight 0 or grace), stop, set maint
    stop     keeps-a-ready-replica check, set maint, stop (in-flight calls are cut and counted)
    start    start, wait for its status, set ready, one real completion per alias through the gateway
    restart  drain's steps, then start's

Server states change through HAProxy's runtime API (no config edit, no reload). Every action
(not a dry run) appends one entry to the rig notes' change log: who, what, when, each step, the
result. A failure names its step and exits 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from lanes.base.errors import NevError
from lanes.base.mask import mask
from rig.rigfile import RigFile
from rig.serving.declared import Replica, ServingRole
from rig.serving.haproxy import Admin, Server
from rig.snapshot import changelog
from rig.snapshot.hosts import Hosts

VERBS = ("drain", "stop", "start", "restart")
DEFAULT_GRACE = 60.0   # the seed's limit: a replica's stop gives in-flight replies 60 s
POLL = 0.2


class ActionFailed(NevError):
    pass


def plan(verb: str, role: ServingRole, replicas: list[Replica], grace: float) -> list[str]:
    """The steps of an action, as printed (`--dry-run` prints only these)."""
    names = ", ".join(r.ref for r in replicas)
    servers = ", ".join(f"{role.backend}/{r.server}" for r in replicas)
    down = [f"check that {', '.join(role.aliases)} keep a ready replica without {names}"]
    if verb in ("drain", "restart"):
        down += [f"set {servers} to drain (runtime API)",
                 f"wait until {servers} have no call in flight (grace {grace:g} s)"]
    else:
        down += [f"set {servers} to maint (runtime API)"]
    down += [f"stop {r.ref} on {r.host}: {r.command('stop')}" for r in replicas]
    if verb in ("drain", "restart"):
        down += [f"set {servers} to maint (runtime API)"]
    up = [f"start {r.ref} on {r.host}: {r.command('start')}" for r in replicas]
    up += [f"wait for {names} to report healthy (up to {role.start_timeout:g} s)",
           f"set {servers} to ready (runtime API)",
           f"one completion of {', '.join(role.aliases)} through the gateway"]
    return {"drain": down, "stop": down, "start": up, "restart": down + up}[verb]


def orphaned(serving: dict[str, ServingRole], servers: list[Server], targets: list[Replica],
             roles: list[ServingRole]) -> list[str]:
    """The targets' aliases that would be left with no ready replica once the targets are out.

    | alias's replicas (HAProxy)     | targets    | orphaned |
    | r0 ready, r1 ready             | r0         | no       |
    | r0 ready, r1 drained/stopped   | r0         | yes      |
    | r0 ready (another role serves) | r0         | no       |
    """
    state = {(s.backend, s.name): s for s in servers}
    out = {(ro.backend, r.server) for ro in roles for r in targets if r.role == ro.name}
    lost = []
    for alias in dict.fromkeys(a for ro in roles for a in ro.aliases):
        ready = [(ro.backend, r.server) for ro in serving.values() if alias in ro.aliases
                 for r in ro.replicas.values()
                 if (ro.backend, r.server) not in out and (s := state.get((ro.backend, r.server))) and s.ready]
        if not ready:
            lost.append(alias)
    return lost


@dataclass
class Action:
    """One run of a verb on one role's replicas; the lines said, for the change log."""

    verb: str
    spec: str
    rig: RigFile
    role: ServingRole
    replicas: list[Replica]
    say: Callable[[str], None]
    grace: float = DEFAULT_GRACE
    force: bool = False
    probe: Callable[[str], str | None] | None = None   # alias -> None when it answered, else why not
    lines: list[str] = field(default_factory=list)
    cut: int = 0

    def step(self, name: str, fn: Callable[[], str | None]) -> None:
        try:
            detail = fn()
        except NevError as e:
            raise ActionFailed(f"{self.verb} {self.spec} failed at {name}: {mask(e.message)}") from None
        line = f"{self.verb} {self.spec}: {name}" + (f": {detail}" if detail else "")
        self.lines.append(line)
        self.say(line)

    def run(self, hosts: Hosts, admin: Admin) -> None:
        it = iter(plan(self.verb, self.role, self.replicas, self.grace))
        if self.verb != "start":
            self._down(hosts, admin, it)
        if self.verb in ("start", "restart"):
            self._up(hosts, admin, it)

    def _down(self, hosts: Hosts, admin: Admin, it: Iterator[str]) -> None:
        self.step(next(it), lambda: self._check(admin))
        drain = self.verb in ("drain", "restart")
        self.step(next(it), lambda: self._set(admin, "drain" if drain else "maint"))
        if drain:
            self.step(next(it), lambda: self._wait_idle(admin))
        for r in self.replicas:
            self.step(next(it), partial(self._unit, hosts, admin, r, "stop"))
        if drain:
            self.step(next(it), lambda: self._set(admin, "maint"))

    def _up(self, hosts: Hosts, admin: Admin, it: Iterator[str]) -> None:
        for r in self.replicas:
            self.step(next(it), partial(self._unit, hosts, admin, r, "start"))
        self.step(next(it), lambda: self._healthy(hosts))
        self.step(next(it), lambda: self._set(admin, "ready"))
        self.step(next(it), self._probe)

    def _check(self, admin: Admin) -> str:
        lost = orphaned(self.rig.serving, admin.servers(), self.replicas, [self.role])
        if not lost:
            return "yes"
        if self.force:
            return f"no: {', '.join(lost)} will have no ready replica (--force)"
        raise NevError(f"refused: {', '.join(lost)} would have no ready replica left; start another replica "
                       f"first, or pass --force to {self.verb} anyway")

    def _set(self, admin: Admin, state: str) -> None:
        for r in self.replicas:
            admin.set_state(self.role.backend, r.server, state)

    def _in_flight(self, admin: Admin) -> int:
        servers = {(s.backend, s.name): s for s in admin.servers()}
        return sum(s.in_flight for r in self.replicas if (s := servers.get((self.role.backend, r.server))))

    def _wait_idle(self, admin: Admin) -> str:
        t0 = time.monotonic()
        while True:
            n = self._in_flight(admin)
            waited = time.monotonic() - t0
            if n == 0:
                return f"no call in flight after {waited:.1f} s"
            if waited >= self.grace:
                self.cut = n
                return f"grace of {self.grace:g} s over with {n} call(s) in flight: stopping cuts them"
            time.sleep(POLL)

    def _unit(self, hosts: Hosts, admin: Admin, r: Replica, which: str) -> str:
        cut = self._in_flight(admin) if which == "stop" else 0
        res = hosts.get(r.host).run(r.command(which), timeout=self.role.start_timeout + 30)
        if res.exit_status != 0:
            raise NevError(f"`{r.command(which)}` on {r.host} exited {res.exit_status}: {res.last_err()}")
        if which == "stop":
            self.cut = cut
            return f"stopped; {cut} call(s) cut" if cut else "stopped; no call cut"
        return "started"

    def _healthy(self, hosts: Hosts) -> str:
        t0 = time.monotonic()
        deadline = t0 + self.role.start_timeout
        for r in self.replicas:
            while True:
                res = hosts.get(r.host).run(r.command("status"), timeout=60)
                if res.exit_status == 0:
                    break
                if time.monotonic() >= deadline:
                    raise NevError(f"{r.ref}: `{r.command('status')}` still failing after "
                                   f"{self.role.start_timeout:g} s (exit {res.exit_status})")
                time.sleep(0.5)
        return f"healthy after {time.monotonic() - t0:.1f} s"

    def _probe(self) -> str:
        if self.probe is None:
            raise NevError("no gateway to probe: set NEV_MODEL_URL and NEV_MODEL_KEY_FILE")
        bad = [f"{a}: {why}" for a in self.role.aliases if (why := self.probe(a))]
        if bad:
            raise NevError("; ".join(bad))
        return "answered"


def entry(a: Action, result: str) -> str:
    lines = [f"## {changelog.now()} {a.verb} {a.spec}", f"- who: {changelog.who()}",
             f"- replicas: {', '.join(r.ref for r in a.replicas)} ({a.role.backend})"]
    lines += [f"- {ln}" for ln in a.lines]
    lines.append(f"- result: {result}")
    return "\n".join(lines) + "\n"


def execute(a: Action, notes: Path) -> int:
    """Run the action; its change-log entry is written whatever happens."""
    proxy = a.rig.roles.get(a.role.proxy)
    if proxy is None or not proxy.admin:
        raise NevError(f"role {a.role.proxy} in {a.rig.path} declares no `admin` command for HAProxy's runtime API "
                       "(e.g. \"admin\": \"socat stdio /run/haproxy/admin.sock\")")
    try:
        with Hosts(a.rig) as hosts:
            admin = Admin(hosts.get(proxy.hosts[0]), proxy.admin, proxy.hosts[0])
            a.run(hosts, admin)
    except NevError as e:
        changelog.append(notes, entry(a, f"FAILED: {e.message}"))
        raise
    changelog.append(notes, entry(a, "done" + (f"; {a.cut} call(s) cut" if a.cut else "")))
    return 0


def gateway_probe(timeout: float) -> Callable[[str], str | None]:
    """`nev rig probe`'s readiness check of one alias: a real capped completion through the gateway."""
    from bench import folknet, gateway
    from bench.folknet import Alias
    from rig.inventory.probe import probe_one

    ep = gateway.endpoint_from_settings()
    path = folknet.default_path()
    declared = folknet.load(path).aliases if path.exists() else {}

    def probe(alias: str) -> str | None:
        a = declared.get(alias) or Alias(name=alias, pool="", max_inflight=1, provider="")
        out = probe_one(ep, a, timeout)
        return None if out.ok else (out.error or "failed")

    return probe


def run_verb(verb: str, spec: str, rig: RigFile, notes: Path, say: Callable[[str], None], *, grace: float,
             force: bool, dry_run: bool, probe_timeout: float) -> int:
    from rig.serving.declared import resolve

    role, replicas = resolve(rig.serving, spec, verb)
    if dry_run:
        for s in plan(verb, role, replicas, grace):
            say(f"{verb} {spec}: would {s}")
        return 0
    probe = gateway_probe(probe_timeout) if verb in ("start", "restart") else None
    return execute(Action(verb, spec, rig, role, replicas, say, grace=grace, force=force, probe=probe), notes)
