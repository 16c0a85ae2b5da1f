"""The gateway's own limits as a caller meets them (pure).

The gateway enforces each alias's declared limits for every caller (bench/folknet.py
`gateway_limits`). LiteLLM 1.108 does not queue a call above an alias's in-flight limit: it
answers 429 at once ("Deployment has all max_parallel_requests slots in use"). That 429 says
"a slot is taken by another caller", not "the pool is overloaded": the gateway client
(`bench.gateway`) then waits a short, random time and asks again, without freezing or lowering
its pacer, and counts it apart from a rate limit (`CallRecord.gateway_waits`, not `rate_limited`).
Every caller backing off the same way is what shares the slots: the wait is short and shorter the
longer a call has waited, and while slots are contended a new call yields briefly before its
first try, so a caller kept waiting is not starved by one whose call just finished.
"""

from __future__ import annotations

import random

SLOTS_BUSY = "max_parallel_requests slots in use"
MAX_WAIT_S = 0.2        # the back-off's upper bound for a call that has just met the limit
AGE_S = 0.2             # ... halved once the call has waited this long, a third at twice, ...
MIN_WAIT_S = 0.02       # ... but never below this
CONTENTION_S = 1.0      # a slot-busy answer this recent: another caller is waiting for slots
YIELD_S = 0.1           # then a new call first waits up to this long (the freed slot is a waiter's)


def slots_busy(code: int, body: bytes) -> bool:
    """Is this answer the gateway's own in-flight limit (not the pool's 429)?"""
    return code == 429 and SLOTS_BUSY.encode() in body


def slot_wait(waited: float, rng: random.Random | None = None) -> float:
    """Seconds to wait after a busy answer, the call having waited `waited` seconds for a slot so
    far: jitter between half an upper bound and the bound, MAX_WAIT_S / (1 + waited / AGE_S), at
    least MIN_WAIT_S. The longer a call has waited, the more often it asks: the slot a finished
    call frees most likely goes to the oldest waiter, not to a call that just met the limit."""
    top = max(MIN_WAIT_S, MAX_WAIT_S / (1.0 + max(0.0, waited) / AGE_S))
    return (rng or random).uniform(top / 2, top)


def yield_wait(since_busy: float | None, rng: random.Random | None = None) -> float:
    """Seconds a new call waits before its first try: while slots were found busy in the last
    CONTENTION_S (`since_busy` seconds ago; None: never), a random time up to YIELD_S, so a caller
    whose call just finished does not take the freed slot from one that has been waiting; 0 else."""
    if since_busy is None or since_busy > CONTENTION_S:
        return 0.0
    return (rng or random).uniform(0.0, YIELD_S)
