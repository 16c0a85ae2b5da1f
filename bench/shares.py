"""Who draws a batch's candidates: the model shares (`ALIAS:N:INFLIGHT`), checked against
folknet.json, and the defaults when none are given (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench import folknet as fk
from lanes.base.errors import UsageError

DEFAULT_N = 8
DEFAULT_ESCALATE_N = 4


@dataclass(frozen=True)
class Share:
    """One model's share of a batch: N candidates at INFLIGHT calls at once."""

    alias: str
    n: int
    inflight: int
    tier: str = "sampling"
    supports_n: bool = True
    #: what folknet.json declares; `inflight` is never above it
    declared_max: int = 0
    note: str | None = None


def parse_models(text: str) -> list[tuple[str, int, int | None]]:
    """`ALIAS:N:INFLIGHT,...` (INFLIGHT optional) -> [(alias, n, inflight)]."""
    out: list[tuple[str, int, int | None]] = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        bits = part.split(":")
        if len(bits) not in (2, 3) or not bits[0]:
            raise UsageError(f"--models entry `{part}` is not ALIAS:N[:INFLIGHT]; e.g. qwen3.8-27b-fast:32:8")
        try:
            n = int(bits[1])
            inflight = int(bits[2]) if len(bits) == 3 else None
        except ValueError:
            raise UsageError(f"--models entry `{part}`: N and INFLIGHT must be whole numbers (ALIAS:N:INFLIGHT)") from None
        if n < 1 or (inflight is not None and inflight < 1):
            raise UsageError(f"--models entry `{part}`: N and INFLIGHT must be at least 1")
        out.append((bits[0], n, inflight))
    if not out:
        raise UsageError("--models is empty; give ALIAS:N:INFLIGHT,...")
    return out


def resolve(entries: Sequence[tuple[str, int, int | None]], net: fk.Folknet) -> list[Share]:
    """Check each alias against folknet.json; cap INFLIGHT at what it declares."""
    shares = []
    for alias, n, inflight in entries:
        a = net.aliases.get(alias)
        if a is None:
            raise UsageError(f"model `{alias}` is not in {net.path}; use one of "
                             f"{', '.join(x.name for x in net.active())}")
        if a.is_retired():
            raise UsageError(f"model `{alias}` was retired on {a.retired} ({net.path}); pick an active alias")
        want = inflight if inflight is not None else a.max_inflight
        note = None
        if want > a.max_inflight:
            note = f"INFLIGHT {want} capped at {a.max_inflight} (folknet.json)"
        shares.append(Share(alias, n, min(want, a.max_inflight), a.tier, a.supports_n, a.max_inflight, note))
    return shares


def default_models(net: fk.Folknet) -> list[Share]:
    return [Share(a.name, DEFAULT_N, a.max_inflight, a.tier, a.supports_n, a.max_inflight)
            for a in net.active() if a.tier == "sampling"]


def default_escalation(net: fk.Folknet) -> Share | None:
    for a in net.active():
        if a.tier == "capacity":
            return Share(a.name, DEFAULT_ESCALATE_N, a.max_inflight, a.tier, a.supports_n, a.max_inflight)
    return None
