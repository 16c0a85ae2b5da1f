"""Distributed mode (placeholder while single mode lands)."""

from __future__ import annotations

from dagu.service import LaneDagu, UpReport


def start_worker_if_configured(ld: LaneDagu) -> bool:
    return False


def stop_worker(ld: LaneDagu) -> bool:
    return False


def up(lane_index: int | None) -> UpReport:
    raise NotImplementedError
