"""What the probe said of a round's candidates, and what of it the next round carries: the
verdict of each unique candidate, the cases failed most often, the best failing versions, and
pass@k (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench import prompt
from crates_bridge.candidates import Verdict


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021); None when k > n."""
    if k > n or n <= 0:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at(n: int, c: int, ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    return {f"pass@{k}": round(v, 4) for k in ks if (v := pass_at_k(n, c, k)) is not None}


@dataclass
class Judged:
    """A unique candidate's verdict (shared by its duplicates)."""

    hash: str
    source: str
    status: str
    cases_passed: int
    cases_run: int
    error: str | None
    diffs: tuple[tuple[str, dict[str, tuple[float | None, float | None]]], ...]
    failed_ids: tuple[str, ...]


def judge(v: Verdict, source: str, h: str) -> Judged:
    failed = [c for c in v.cases if not c.passed]
    diffs = tuple((c.id, dict(c.diff)) for c in sorted(failed, key=lambda c: c.id) if c.diff)
    return Judged(h, source, v.status, v.cases_passed, v.cases_run, v.error or v.run_error, diffs,
                  tuple(sorted(c.id for c in failed)))


def failing_cases(judged: Sequence[Judged], corpus: dict[str, dict], limit: int = prompt.MAX_CASES
                  ) -> list[prompt.FailingCase]:
    """The cases the compiled candidates fail most often (bounded), with the best failing try's diff."""
    compiled = [j for j in judged if j.cases_run]
    count: dict[str, int] = {}
    for j in compiled:
        for cid in j.failed_ids:
            count[cid] = count.get(cid, 0) + 1
    order = sorted(count, key=lambda cid: (-count[cid], cid))[:limit]
    best = sorted(compiled, key=lambda j: -j.cases_passed)
    out = []
    for cid in order:
        diff: dict[str, tuple[float | None, float | None]] = {}
        for j in best:
            d = dict(j.diffs).get(cid)
            if d:
                diff = d
                break
        case = corpus.get(cid, {})
        out.append(prompt.FailingCase(cid, case.get("input", {}), case.get("expected", {}), diff, count[cid]))
    return out


def best_versions(judged: Sequence[Judged], limit: int = prompt.MAX_VERSIONS) -> list[prompt.FailingVersion]:
    failing = [j for j in judged if j.cases_run and j.status == "failed"]
    failing.sort(key=lambda j: (-j.cases_passed, j.hash))
    return [prompt.FailingVersion(j.source, j.cases_passed, j.cases_run, j.diffs) for j in failing[:limit]]
