"""The gateway's own limits as a caller meets them (pure).

The gateway enforces each alias's declared limits for every caller (bench/folknet.py
`gateway_limits`). LiteLLM 1.108 does not queue a call above an alias's in-flight limit: it
answers 429 at once ("Deployment has all max_parallel_requests slots in use"). That 429 says
"a slot is taken by another caller", not "the pool is overloaded": the gateway client
(`bench.gateway`) then waits a short, random, growing time and asks again, without freezing or
lowering its pacer; every caller backing off the same way is what shares the slots fairly.
"""

from __future__ import annotations

import random

SLOTS_BUSY = "max_parallel_requests slots in use"
FIRST_WAIT_S = 0.05     # the first back-off's upper bound; doubled after each busy answer
MAX_WAIT_S = 0.8        # the back-off's upper bound at most


def slots_busy(code: int, body: bytes) -> bool:
    """Is this answer the gateway's own in-flight limit (not the pool's 429)?"""
    return code == 429 and SLOTS_BUSY.encode() in body


def slot_wait(busy: int, rng: random.Random | None = None) -> float:
    """Seconds to wait after the `busy`-th busy answer in a row (1, 2, ...): full jitter up to
    FIRST_WAIT_S * 2**(busy-1), at most MAX_WAIT_S."""
    top = min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** max(0, busy - 1))
    return (rng or random).uniform(top / 4, top)
