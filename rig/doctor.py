"""`nev doctor`: the path a gate and a job take, walked in order with the user's own key and
settings, one check per line: the config and the files it names; the jump host (its name, its
port, its pinned key, the login); each lane through it (login, free disk, this nev installed and
current, the toolchain, the browsers, the sandbox); the forge through its forward; the gateway
with the key and each alias the folknet file declares; Dagu on its lane; the NAS where the lanes
file says; the inventory snapshot's age.

Each check is bounded (`LIMIT` seconds; a dead host costs that, not a hang) and says `ok` or
what is wrong and the next step. A check that needs one that failed says so instead of trying.
"""

from __future__ import annotations

import shlex
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lanes.base import settings, sshfail
from lanes.base.errors import NevError
from lanes.base.mask import mask

if TYPE_CHECKING:
    from bench.folknet import Folknet
    from lanes.base.ssh import Connection, Target
    from lanes.lanesfile import Lane

LIMIT = 8.0          # seconds one check may take
SSH_TIMEOUT = 4.0    # one SSH hop's connect timeout inside a check


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float = 0.0

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"

    def to_json(self) -> dict[str, object]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail,
                "seconds": round(self.seconds, 2)}


class Fail(Exception):
    """A check's failure: what is wrong, and the next step."""


def bounded(name: str, fn: Callable[[], str], limit: float = LIMIT) -> Check:
    """`fn()` as one check: its line when it returns, Fail's or NevError's when it raises, and
    `did not finish in N s` when it takes longer than `limit` (left running in a daemon thread)."""
    out: list[Check] = []
    t0 = time.monotonic()

    def run() -> None:
        try:
            out.append(Check(name, True, fn()))
        except (Fail, NevError) as e:
            out.append(Check(name, False, mask(" ".join(str(e).split()))))
        except Exception as e:  # noqa: BLE001 - one check's surprise is its line, not the run's end
            out.append(Check(name, False, f"{type(e).__name__}: {mask(str(e))}"))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    c = out[0] if out else Check(name, False, f"did not finish in {limit:.0f} s; the host or "
                                              "service does not answer")
    c.seconds = time.monotonic() - t0
    return c


class Doctor:
    """The checks, in the order a gate and a job need them; what later ones need is kept here."""

    def __init__(self) -> None:
        self.lanes: list[Lane] = []
        self.jump_ok = True
        self.lanes_ok: dict[int, Connection] = {}     # index -> open Connection
        self.folknet: Folknet | None = None

    # -- config and files ------------------------------------------------------------------
    def config(self) -> str:
        from lanes.base import config

        p = config.path()
        wrong = [x for s in settings.all_settings() if (x := settings.problem(s))]
        if wrong:
            raise Fail("; ".join(wrong) + "; fix it (`nev settings` says where each came from)")
        return f"{p}" if p.exists() else f"no config file at {p} (environment and defaults only)"

    def lanes_file(self) -> str:
        from lanes import lanesfile

        lf = lanesfile.configured()
        self.lanes = lf.lanes
        return f"{lf.path or 'NEV_LANE_SSH'}: {len(lf.lanes)} lane(s)"

    def known_hosts(self) -> str:
        from lanes.base.ssh import default_key_file, default_known_hosts

        problem = sshfail.local_problem(default_key_file(), default_known_hosts())
        if problem is not None:
            raise Fail(f"{problem[1]}; {problem[0].step}")
        key = default_key_file()
        return f"{default_known_hosts()}; key {key or 'the default ones of ~/.ssh'}"

    def folknet_file(self) -> str:
        from bench import folknet

        self.folknet = folknet.load(folknet.default_path())
        return f"{folknet.default_path()}: {len(self.folknet.aliases)} alias(es)"

    # -- the jump host -----------------------------------------------------------------------
    def _jump(self) -> Target | None:
        from lanes import lanesfile

        return lanesfile.default_jump()

    def _the_jump(self) -> Target:
        """The jump host, for its checks (run only when there is one)."""
        j = self._jump()
        if j is None:
            raise Fail("no jump host (NEV_LANE_JUMP, or `jump` in the lanes file)")
        return j

    def jump_resolves(self) -> str:
        j = self._the_jump()
        try:
            found = socket.getaddrinfo(j.host, j.port, type=socket.SOCK_STREAM)
            addrs = {str(a[4][0]) for a in found}
        except socket.gaierror as e:
            raise Fail(f"{j.host}: name does not resolve ({e.strerror}); "
                       f"{sshfail.Cause.RESOLVE.step}") from None
        return f"{j.host} is {', '.join(sorted(addrs))}"

    def jump_answers(self) -> str:
        j = self._the_jump()
        try:
            with socket.create_connection((j.host, j.port), timeout=SSH_TIMEOUT) as s:
                s.settimeout(SSH_TIMEOUT)
                banner = s.recv(64).decode(errors="replace").strip()
        except OSError as e:
            cause = sshfail.from_exception(e, j, at_jump=True)
            raise Fail(cause.line()) from None
        if not banner.startswith("SSH-"):
            raise Fail(f"{j.host}:{j.port} answers but not as sshd ({banner[:30]!r}); "
                       "check the port")
        return f"{j.host}:{j.port} ({banner})"

    def jump_pinned(self) -> str:
        import paramiko

        from lanes.base.ssh import default_known_hosts

        j = self._the_jump()
        keys = paramiko.HostKeys(str(default_known_hosts()))
        if keys.lookup(j.known_hosts_name) is None:
            raise Fail(f"no key pinned for {j.known_hosts_name} in {default_known_hosts()}; "
                       f"pin it with `nev rig trust {j}`")
        return f"{j.known_hosts_name} pinned in {default_known_hosts()}"

    def jump_login(self) -> str:
        from lanes.base import righost

        j = self._the_jump()
        try:
            righost.connection(j, timeout=SSH_TIMEOUT).connect().close()
        except NevError:
            self.jump_ok = False
            raise
        return f"{j} took the key"

    # -- the lanes -----------------------------------------------------------------------------
    def lane(self, lane: Lane) -> list[tuple[str, Callable[[], str]]]:
        """The checks of one lane: the login first, the rest on what its one run there said."""
        lc = LaneChecks(lane, self)
        return [(f"{lane.label}: {name}", fn) for name, fn in (
            ("login", lc.login), ("free disk", lc.disk),
            ("nev installed and current", lc.nev_current),
            ("toolchain", lc.tools("toolchain", "git python3 cargo rustc")),
            ("browsers", lc.browsers),
            ("sandbox", lc.tools("sandbox", "bwrap")), ("audio sink", lc.audio),
            ("NAS", lc.nas))]

    # -- the forge, the gateway, Dagu, the inventory ---------------------------------------------
    def forge(self) -> str:
        import tempfile

        from lanes import forge as forge_mod
        from lanes.base.gitrun import Repo

        f = forge_mod.from_settings()
        with tempfile.TemporaryDirectory() as d:
            f.git(Repo(Path(d)), "ls-remote", ["--heads"], timeout=LIMIT - 1)
        return f"{f.url} answers, the credential is accepted, the repository readable"

    def gateway(self) -> str:
        from bench import gateway, gateway_http

        ep = gateway.endpoint_from_settings()
        base = ep.url.rstrip("/")
        url = (base if base.endswith("/v1") else base + "/v1") + "/models"
        try:
            r = gateway_http._request("GET", url, None, ep.headers(), (SSH_TIMEOUT, SSH_TIMEOUT))
        except gateway_http.Unreachable as e:
            raise Fail(f"{ep.url} does not answer ({e}); is its forward up? "
                       "`nev rig forward up`") from None
        if r.status in (401, 403):
            raise Fail(f"{ep.url} refused the key (HTTP {r.status}); check the file "
                       "NEV_MODEL_KEY_FILE names (the key may be revoked)")
        if r.status != 200:
            raise Fail(f"{ep.url} answered HTTP {r.status}: {gateway_http.error_message(r.body)}")
        served = {str(m.get("id")) for m in (r.json().get("data") or []) if isinstance(m, dict)}
        declared = set(self.folknet.aliases) if self.folknet is not None else set()
        gone = sorted(a for a in declared if a not in served)
        if gone:
            raise Fail(f"the gateway does not list {', '.join(gone)} (declared in the folknet "
                       "file) for this key; `nev rig drift` compares the two")
        return f"{ep.url}: the key is accepted, {len(declared)} declared alias(es) listed"

    def dagu(self) -> str:
        from dagu import service

        with service.opened(None) as ld:
            st = ld.status()
        if not st.get("healthy"):
            state = "running, not healthy" if st.get("pid") else "not running"
            raise Fail(f"Dagu on lane {st.get('lane')} is {state}; `nev dagu start`")
        return f"Dagu healthy on lane {st.get('lane')} (port {st.get('port')})"

    def inventory(self) -> str:
        from rig.inventory import inventoryfile
        from rig.inventory import status as st

        data, source = st.load(None)
        s = st.summary(data, inventoryfile.now_utc(), source)
        age = s.get("snapshot_age_s")
        limit = settings.get_float(settings.INVENTORY_MAX_AGE)
        if age is None:
            raise Fail(f"{source} has no time; `nev rig collect`")
        if age > limit:
            raise Fail(f"{source} is {age:.0f} s old, over NEV_INVENTORY_MAX_AGE ({limit:g} s); "
                       "are the inventory services running? `nev rig services status`")
        return f"{source}: {age:.0f} s old"

    def close(self) -> None:
        for conn in self.lanes_ok.values():
            conn.close()


class LaneChecks:
    """One lane's checks, on what one shell run there printed (`_lane_script`)."""

    def __init__(self, lane: Lane, doctor: Doctor) -> None:
        self.lane, self.doctor = lane, doctor
        self.facts: dict[str, str] = {}

    def login(self) -> str:
        conn = self.lane.connect(SSH_TIMEOUT)
        res = conn.run(_lane_script(self.lane), timeout=LIMIT - 2)
        for ln in res.out.splitlines():
            k, _, v = ln.partition("=")
            self.facts[k] = v
        self.doctor.lanes_ok[self.lane.index] = conn
        return f"{self.lane.ssh} as {self.facts.get('user', '?')}"

    def need(self) -> dict[str, str]:
        if self.lane.index not in self.doctor.lanes_ok:
            raise Fail("not checked: the lane's login failed (above)")
        return self.facts

    def disk(self) -> str:
        f, root = self.need(), self.lane.root
        if not f.get("free_kb"):
            raise Fail(f"{root} does not exist on the lane; `nev lane provision`")
        free = float(f["free_kb"]) / (1 << 20)
        want = settings.get_float(settings.LANE_MIN_FREE_GB)
        if free < want:
            raise Fail(f"{free:.1f} GiB free under {root}, under NEV_LANE_MIN_FREE_GB "
                       f"({want:g}); `nev lane sweep --lane {self.lane.index}`")
        return f"{free:.1f} GiB free under {root}"

    def nev_current(self) -> str:
        from lanes.selfinstall import source_key

        there = self.need().get("nev_current", "").rsplit("/", 1)[-1]
        fix = f"`nev lane install --lane {self.lane.index}`"
        if not there:
            raise Fail(f"nev is not installed there; {fix}")
        here = source_key()
        if there != here:
            raise Fail(f"the lane runs nev {there}, this box {here}; {fix}")
        return f"nev {here}"

    def tools(self, what: str, words: str) -> Callable[[], str]:
        def check() -> str:
            f = self.need()
            missing = [w for w in words.split() if not f.get(f"has_{w}")]
            if missing:
                raise Fail(f"not found on the lane: {', '.join(missing)}; "
                           f"`nev lane provision --lane {self.lane.index}` ({what})")
            return ", ".join(f.get(f"has_{w}", "") for w in words.split())
        return check

    def browsers(self) -> str:
        f = self.need()
        found = [f.get(f"browser_{i}") for i in range(3)]
        if not all(found):
            names = settings.value(settings.JOB_BROWSERS).split(",")
            lost = [n for n, x in zip(names, found, strict=False) if not x]
            raise Fail(f"not found on the lane: {', '.join(lost)} (NEV_JOB_BROWSERS); "
                       f"`nev lane provision --lane {self.lane.index}`")
        return ", ".join(str(x) for x in found)

    def audio(self) -> str:
        from lanes import audio

        sink = self.need().get("audio_sink", "")
        if sink != audio.SINK:
            got = f"the default sink is {sink}" if sink else "no PulseAudio daemon answers"
            raise Fail(f"{got} at {audio.SOCKET}, not the null sink {audio.SINK} a realtime "
                       f"AudioContext needs; `nev lane provision --lane {self.lane.index}`")
        return f"PulseAudio at {audio.SOCKET}, default sink {sink}"

    def nas(self) -> str:
        state, where = self.need().get("nas"), self.lane.shared_dir
        if state != "rw":
            raise Fail(f"{where} is {state or 'missing'} on the lane (the lanes file's "
                       "nas/shared, NEV_LANE_SHARED); mount the share there")
        return f"{where} mounted, writable"


def _lane_script(lane: Lane) -> str:
    """One shell run on the lane that prints what the lane checks read, as key=value lines."""
    names = settings.value(settings.JOB_BROWSERS).split(",")
    root, nas = shlex.quote(lane.root), shlex.quote(lane.shared_dir)
    from lanes import audio
    from lanes.agent import layout

    lines = [
        'echo "user=$(id -un)"',
        f'echo "{audio.DOCTOR_FACT}"',
        f"echo free_kb=$(df -Pk {root} 2>/dev/null | awk 'NR==2 {{print $4}}')",
        f'echo "nev_current=$(readlink "$HOME/{layout.NEV_CURRENT}" 2>/dev/null)"',
        f'if [ -d {nas} ] && [ -w {nas} ]; then echo nas=rw; '
        f'elif [ -d {nas} ]; then echo nas=read-only; fi',
    ]
    for w in ("git", "python3", "cargo", "rustc", "bwrap"):
        lines.append(f'p=$(command -v {w} || ls $HOME/.cargo/bin/{w} 2>/dev/null) && '
                     f'echo "has_{w}=$p"')
    for i, alts in enumerate(names[:3]):
        probe = " || ".join(f"command -v {shlex.quote(a)}" for a in alts.split("|"))
        lines.append(f'p=$({probe}) && echo "browser_{i}=$p"')
    return "; ".join(lines) + "; true"


def run(say: Callable[[Check], None]) -> list[Check]:
    """Every check, in order; `say` hears each as it ends."""
    d = Doctor()
    out: list[Check] = []

    def do(name: str, fn: Callable[[], str]) -> Check:
        c = bounded(name, fn)
        out.append(c)
        say(c)
        return c

    try:
        do("config", d.config)
        do("pins and key", d.known_hosts)
        files_ok = do("lanes file", d.lanes_file).ok
        do("folknet file", d.folknet_file)
        try:
            flat = d._jump() is None
        except NevError:
            flat = False    # the lanes file does not read: said above, and by the checks below
        if flat:
            c = Check("jump host", True, "none declared: the lanes are reached directly")
            out.append(c)
            say(c)
        else:
            for name, fn in (("jump host: name resolves", d.jump_resolves),
                             ("jump host: port answers", d.jump_answers),
                             ("jump host: key pinned", d.jump_pinned),
                             ("jump host: login", d.jump_login)):
                if not do(name, fn).ok:
                    d.jump_ok = False
                    break
        for lane in d.lanes if files_ok else []:
            for name, fn in d.lane(lane):
                if not d.jump_ok:
                    do(name, _skipped("the jump host failed (above)"))
                    break
                do(name, fn)
        do("forge (through its forward)", d.forge)
        do("gateway: key and aliases", d.gateway)
        do("Dagu", d.dagu if d.jump_ok else _skipped("the jump host failed (above)"))
        do("inventory snapshot", d.inventory)
    finally:
        d.close()
    return out


def _skipped(why: str) -> Callable[[], str]:
    def check() -> str:
        raise Fail(f"not checked: {why}")
    return check
