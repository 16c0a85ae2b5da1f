"""Phase timings of a batch (draw, compile, score) and how many of the lane's CPUs each phase
kept busy, sampled from `/proc/stat` at the phase's start and end."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class CpuTimes:
    busy: int
    total: int


def parse_stat(text: str) -> CpuTimes:
    """The aggregate `cpu` line: busy = all but idle and iowait (jiffies)."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            idle = v[3] + (v[4] if len(v) > 4 else 0)
            total = sum(v[:8])
            return CpuTimes(total - idle, total)
    raise ValueError("no aggregate cpu line in /proc/stat")


def read_cpu(path: Path = PROC_STAT) -> CpuTimes | None:
    try:
        return parse_stat(path.read_text())
    except (OSError, ValueError):
        return None


def busy_cpus(before: CpuTimes | None, after: CpuTimes | None, ncpu: int) -> float | None:
    """CPUs kept busy on average between two samples (None when unknown)."""
    if before is None or after is None or after.total <= before.total:
        return None
    return round(ncpu * (after.busy - before.busy) / (after.total - before.total), 2)


def own_cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (rustc, the probe)."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class Phase(TypedDict):
    """One phase of a round: its seconds and the CPUs it kept busy on average (None: unknown)."""

    s: float
    cpus_busy: float | None


@dataclass
class Phases:
    ncpu: int = field(default_factory=lambda: os.cpu_count() or 1)
    phases: dict[str, Phase] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        b, t0 = read_cpu(), time.monotonic()
        try:
            yield
        finally:
            wall = time.monotonic() - t0
            prev: Phase = self.phases.get(name, {"s": 0.0, "cpus_busy": None})
            cpus = busy_cpus(b, read_cpu(), self.ncpu)
            if prev["s"] and prev["cpus_busy"] is not None and cpus is not None:
                cpus = round((prev["cpus_busy"] * prev["s"] + cpus * wall) / (prev["s"] + wall), 2)
            self.phases[name] = {"s": round(prev["s"] + wall, 3), "cpus_busy": cpus}

    def to_json(self) -> dict[str, object]:
        return {"cpus": self.ncpu, **self.phases}
