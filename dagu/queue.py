"""The global queue: how many enqueued runs Dagu runs at once.

Dagu 1.30.2 reads `queues.config[].maxConcurrency` only when its scheduler starts,
so a change is written to config.yaml and Dagu is stopped and started again.
A workflow's own `maxActiveRuns` is ignored for this; only enqueued runs pass
through the queue (`nev dagu run` enqueues workflows with a top-level `queue:`).
"""

from __future__ import annotations

from dagu.service import LaneDagu
from lanes.base.errors import UsageError

MAX_QUEUE = 64


def check_max(n: int) -> int:
    if not 1 <= n <= MAX_QUEUE:
        raise UsageError(f"--max {n}: give a number of runs from 1 to {MAX_QUEUE}")
    return n


def set_queue_max(ld: LaneDagu, n: int) -> bool:
    """Write the global queue's size; restart Dagu when it runs. True when the size changed."""
    check_max(n)
    changed = ld.write_config(queue_max=n)
    if changed and ld.pid() is not None:
        ld.restart()
    return changed
