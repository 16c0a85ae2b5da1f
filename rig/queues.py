"""Queue waits: how long jobs and draws waited, p50, p95 and max over a window (`nev rig metrics`,
the dashboard's queues section). A queue with no sample in the window has null figures, never 0.

- job: from its submission (the Dagu run enqueued by `nev job submit`: the record's
  `submitted_at`) to its first stage started on the lane (the result's `Nev-Job-First-Stage`
  trailer, which the poll keeps as the record's `first_stage_at`);
- draw, per alias: from a call's request sent to the first byte of its answer, as nev's own
  gateway client measures it (`bench.gateway`: each answered call's `first_byte_s`, in the round
  record and the ledger line).

The draw figure is the client's, not the gateway's: the dev box reads the ledger on the share;
the gateway's own callbacks keep nothing this box can read. A batch's calls are not streamed, so
the first byte comes with the whole answer: the wait holds the gateway's slot waits and 429s, the
HAProxy queue and the pool's generation, as the batch lived them. A job's sample counts in the
window when its first stage started within it, a draw's when its batch ended within it. A job
whose record has no first stage (not polled since it ran, no stage ran, or a stage of an earlier
submission) has no sample.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.records import JobRecord

from lanes.base.isotime import parse as parse_time

QUANTILES = (0.5, 0.95)


@dataclass(frozen=True)
class Figures:
    """One queue's waits in the window: count and sum (seconds), p50, p95, max (None: no sample)."""

    count: int
    sum_s: float
    p50_s: float | None
    p95_s: float | None
    max_s: float | None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class QueueSummary:
    """The queues' figures over a window: the jobs' and, per alias, the draws' (the dashboard's
    section, the metrics' source; `to_json` is the section as /data.json serves it)."""

    window_s: float
    since: str
    jobs: Figures
    draws: dict[str, Figures] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"window_s": self.window_s, "since": self.since, "jobs": self.jobs.to_json(),
                "draws": {a: f.to_json() for a, f in self.draws.items()}}


def quantile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank quantile of sorted samples (one of them, never an interpolation)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def figures(samples: Iterable[float]) -> Figures:
    """p50, p95 and max of the samples (pure); None for each when there is none."""
    s = sorted(samples)
    if not s:
        return Figures(0, 0.0, None, None, None)
    return Figures(
        len(s),
        round(sum(s), 3),
        round(quantile(s, 0.5), 3),
        round(quantile(s, 0.95), 3),
        round(s[-1], 3),
    )


def job_waits(records: Iterable[JobRecord], since: dt.datetime) -> list[float]:
    """Each job's wait, submitted to first stage started, whose first stage started at or after
    `since` (pure; the records of `job-results.json`). A first stage before the submission was an
    earlier submission's: no sample."""
    out = []
    for r in records:
        sent, first = parse_time(r.submitted_at), parse_time(r.first_stage_at)
        if sent is not None and first is not None and first >= since and first >= sent:
            out.append((first - sent).total_seconds())
    return out


def draw_waits(lines: Iterable[Mapping[str, object]], since: dt.datetime) -> dict[str, list[float]]:
    """Per alias, the first-byte waits of the answered calls of the ledger lines whose batch
    ended at or after `since` (pure; lines as `bench.ledger.parse_line` checked them: JSON
    objects, read here with checked reads)."""
    out: dict[str, list[float]] = {}
    for ln in lines:
        end = parse_time(ln.get("end") or ln.get("start"))
        if end is None or end < since:
            continue
        models = ln.get("models")
        for alias, m in (models.items() if isinstance(models, dict) else ()):
            got = m.get("first_byte_s") if isinstance(m, dict) else None
            waits = [float(v) for v in got or []] if isinstance(got, list) else []
            if waits:
                out.setdefault(alias, []).extend(waits)
    return out


def summary(
    records: Iterable[JobRecord],
    lines: Iterable[Mapping[str, object]],
    window_s: float,
    now: dt.datetime,
) -> QueueSummary:
    """The queues' figures over the window ending `now` (pure)."""
    since = now - dt.timedelta(seconds=window_s)
    draws = draw_waits(lines, since)
    return QueueSummary(
        window_s,
        since.isoformat(timespec="seconds"),
        figures(job_waits(records, since)),
        {a: figures(w) for a, w in sorted(draws.items())},
    )


# -- the edge: reading the records and the ledgers ---------------------------------------------


def ledger_lines(folder: Path) -> list[dict[str, object]]:
    """Every readable line of every ledger in the share's ledger folder (none: no folder)."""
    from bench.ledger import read_lenient

    if not folder.is_dir():
        return []
    out: list[dict[str, object]] = []
    for f in sorted(folder.glob("*.jsonl")):
        out += [ln.to_json() for ln in read_lenient(f)[0]]
    return out


def gather(
    environ: Mapping[str, str] | None = None, now: dt.datetime | None = None
) -> QueueSummary:
    """The queues as this box sees them: its job records (NEV_STATE_DIR) and the share's ledgers,
    over NEV_QUEUE_WINDOW seconds."""
    from bench import ledger
    from jobs import records
    from lanes.base import settings
    from lanes.base.errors import ConfigError

    window = settings.get_float(settings.QUEUE_WINDOW, environ)
    if window <= 0:
        raise ConfigError(f"NEV_QUEUE_WINDOW={window:g} must be a number of seconds above 0")
    recs = list(records.read(environ).jobs.values())
    return summary(recs, ledger_lines(ledger.ledger_dir()), window, now or dt.datetime.now(dt.UTC))
