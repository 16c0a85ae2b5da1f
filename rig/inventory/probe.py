"""Readiness probes: one real, capped completion per alias through the gateway.

A pool's HAProxy and the gateway's `/v1/models` report liveness, not readiness:
only a completion that returns proves the alias answers. Each round probes every
declared, not retired alias at once (one thread each, one deadline for all), so a
hanging pool costs the round at most the probe timeout and never delays the
others. Where an alias declares a backend `health` URL, it must answer 2xx too.

Status changes with hysteresis: a ready alias turns failing only after N failed
rounds in a row, a failing one turns ready only after M answered rounds in a row
(NEV_PROBE_FAILS, NEV_PROBE_OKS; defaults 2 and 2). An alias with no history yet
(`unknown`) takes the first outcome at once: there is nothing to smooth.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bench import gateway_http
from bench.folknet import Alias, Folknet
from bench.gateway_http import Endpoint, Unreachable
from lanes.base import settings
from lanes.base.errors import ConfigError
from lanes.base.inventory_record import AliasState, Snapshot
from lanes.base.mask import mask
from lanes.base.ui import info
from rig.inventory import inventoryfile as snapshot
from rig.inventory import status as inv_status

READY = "ready"
FAILING = "failing"
UNKNOWN = "unknown"
RETIRED = "retired"

PROMPT = "Reply with the single word OK."


@dataclass(frozen=True)
class Outcome:
    """One probe of one alias."""

    ok: bool
    latency_s: float | None
    error: str | None = None


@dataclass(frozen=True)
class Policy:
    fails: int = 2
    oks: int = 2

    @classmethod
    def from_settings(cls) -> Policy:
        fails, oks = settings.get_int(settings.PROBE_FAILS), settings.get_int(settings.PROBE_OKS)
        if fails < 1 or oks < 1:
            raise ConfigError(f"NEV_PROBE_FAILS={fails} and NEV_PROBE_OKS={oks} must both be at least 1")
        return cls(fails=fails, oks=oks)


def advance(state: AliasState, out: Outcome, at: dt.datetime, policy: Policy) -> AliasState:
    """The alias's next state after one probe outcome (pure; returns a new record)."""
    s = replace(state, keys=list(state.keys), extra=dict(state.extra))
    status = s.status or UNKNOWN
    when = snapshot.iso(at)
    s.last_probe = when
    s.latency_s = None if out.latency_s is None else round(out.latency_s, 3)
    if out.ok:
        s.oks, s.fails = s.oks + 1, 0
        s.last_answer, s.last_answer_latency_s = when, s.latency_s
    else:
        s.fails, s.oks = s.fails + 1, 0
        s.last_error = out.error or "failed"
    new = status
    if status in (UNKNOWN, RETIRED):
        new = READY if out.ok else FAILING
    elif status == READY and s.fails >= policy.fails:
        new = FAILING
    elif status == FAILING and s.oks >= policy.oks:
        new = READY
    if new != status or not s.since:
        s.since = when
    s.status = new
    return s


# -- the I/O edge ----------------------------------------------------------

def _short(text: str, n: int = 200) -> str:
    one = " ".join(text.split())
    return mask(one[:n] + ("..." if len(one) > n else ""))


def probe_one(gw: Endpoint, alias: Alias, timeout: float) -> Outcome:
    """One capped completion (max_tokens 1) and the backend health URL if declared."""
    t0 = time.monotonic()
    try:
        r = gateway_http.post_json(gw, {"model": alias.name, "max_tokens": 1, "temperature": 0,
                                        "messages": [{"role": "user", "content": PROMPT}]},
                                   timeout=(min(5.0, timeout), timeout))
    except Unreachable as e:
        if e.timed_out:
            return Outcome(False, None, f"no answer within {timeout:g} s")
        return Outcome(False, None, _short(f"gateway unreachable: {e}"))
    latency = time.monotonic() - t0
    if r.status != 200:
        return Outcome(False, latency, f"HTTP {r.status}: {_short(gateway_http.error_message(r.body))}")
    try:
        body = r.json()
        choices = body.get("choices") if isinstance(body, dict) else None
    except ValueError:
        choices = None
    if not choices:
        return Outcome(False, latency, f"HTTP 200 without a completion: {_short(r.text())}")
    if alias.health:
        left = max(0.5, timeout - latency)
        try:
            h = gateway_http.get(alias.health, timeout=(min(5.0, left), left))
        except Unreachable as e:
            return Outcome(False, latency, _short(f"backend health {alias.health} unreachable: {e}"))
        if not 200 <= h.status < 300:
            return Outcome(False, latency, f"backend health {alias.health}: HTTP {h.status}")
    return Outcome(True, latency)


def probe_round(gw: Endpoint, aliases: list[Alias], timeout: float) -> dict[str, Outcome]:
    """Probe every alias at once; an alias still waiting at the deadline has failed."""
    results: dict[str, Outcome] = {}
    lock = threading.Lock()

    def run(a: Alias) -> None:
        try:
            out = probe_one(gw, a, timeout)
        except Exception as e:  # a probe must never take the round down with it
            out = Outcome(False, None, _short(f"probe error: {e}"))
        with lock:
            results[a.name] = out

    threads = [threading.Thread(target=run, args=(a,), daemon=True, name=f"probe-{a.name}")
               for a in aliases]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout + 1.0
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return {a.name: results.get(a.name, Outcome(False, None, f"no answer within {timeout:g} s"))
                for a in aliases}


def run_round(path: Path, declared: Folknet, gw: Endpoint, timeout: float, policy: Policy,
              now: dt.datetime | None = None) -> Snapshot:
    """One probe round, folded into the snapshot (written even when every probe failed)."""
    today = (now or snapshot.now_utc()).date()
    targets = [a for a in declared.aliases.values() if not a.is_retired(today)]
    outcomes = probe_round(gw, targets, timeout)
    at = now or snapshot.now_utc()

    def change(snap: Snapshot) -> None:
        snapshot.merge_declared(snap, declared, at.date())
        for name, out in outcomes.items():
            snap.aliases[name] = advance(snap.aliases.get(name) or AliasState(), out, at, policy)
        snap.probed_at = snapshot.iso(at)

    return snapshot.update(path, change, at)


def run(path: Path, declared: Folknet, gw: Endpoint, timeout: float, policy: Policy,
        every: float | None, rounds: int | None,
        on_round: Callable[[int, dict[str, object]], None] | None = None) -> int:
    """Probe once, or every `every` seconds (for `rounds` rounds, or until stopped); `on_round`
    is given each round's number and the aliases' states after it, as the snapshot holds them
    (`nev rig probe --json`)."""
    n = 0
    while True:
        t0 = time.monotonic()
        snap = run_round(path, declared, gw, timeout, policy)
        n += 1
        states = snap.aliases
        summary = ", ".join(f"{k} {v.status}" for k, v in sorted(states.items()))
        info(f"probe round {n} ({time.monotonic() - t0:.1f} s): {summary}")
        inv_status.notify_aliases(snap, snapshot.now_utc())
        if on_round is not None:
            on_round(n, {k: v.to_json() for k, v in states.items()})
        if every is None or (rounds is not None and n >= rounds):
            return 0
        time.sleep(max(0.0, every - (time.monotonic() - t0)))
