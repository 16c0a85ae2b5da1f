"""The vote: compare the engines' answers with an explicit tolerance (pure functions).

Gecko lays out on a 1/60 px grid, Blink and WebKit on 1/64 px: two answers agree when
every number differs by at most the tolerance (1/30 px, the measured floor).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_TOLERANCE = 1 / 30

# An engine's answer: flat name -> number (expected fields and the voted rect numbers).
Answer = Mapping[str, float]


def close(a: Answer, b: Answer, tol: float) -> bool:
    if a.keys() != b.keys():
        return False
    return all(abs(float(a[k]) - float(b[k])) <= tol for k in a)


@dataclass(frozen=True)
class Verdict:
    agreement: str  # "3/3", "2/3:<dissenter>", "none" (or "n/n" with fewer engines)
    agreed: bool  # all engines agree: the case is ground truth
    value: dict[str, float] | None  # the agreed value (per-field median) when agreed


def vote(answers: Mapping[str, Answer | None], tol: float) -> Verdict:
    """All engines within `tol` of each other: agreed; exactly one outsider: 2/3 naming it."""
    names = sorted(answers)
    n = len(names)
    missing = [e for e in names if answers[e] is None]
    if n == 0 or missing:
        return Verdict("none", False, None)
    ans = {e: answers[e] for e in names}
    ok = {(a, b): close(ans[a], ans[b], tol)  # type: ignore[arg-type]
          for i, a in enumerate(names) for b in names[i + 1:]}
    if all(ok.values()):
        first = ans[names[0]]
        assert first is not None
        value = {k: float(statistics.median(float(ans[e][k]) for e in names)) for k in first}  # type: ignore[index]
        return Verdict(f"{n}/{n}", True, value)
    if n == 3:
        agreeing = [pair for pair, good in ok.items() if good]
        if len(agreeing) == 1:
            dissenter = next(e for e in names if e not in agreeing[0])
            return Verdict(f"2/3:{dissenter}", False, None)
    return Verdict("none", False, None)


def flatten(expected: Mapping[str, float], rects: Mapping[str, Sequence[float]],
            voted: Sequence[str]) -> dict[str, float]:
    """One engine's answer as flat numbers: the expected fields plus x, y, w, h of each voted element."""
    out = {f"expected.{k}": float(v) for k, v in expected.items()}
    for el in voted:
        r = rects.get(el)
        if r is None:
            out[f"{el}.missing"] = float("nan")
            continue
        for name, v in zip(("x", "y", "w", "h"), r[:4], strict=True):
            out[f"{el}.{name}"] = float(v)
    return out


def tally(agreements: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in agreements:
        out[a] = out.get(a, 0) + 1
    return dict(sorted(out.items()))
