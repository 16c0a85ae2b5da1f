"""The gateway's own limits as a caller meets them (pure).

The gateway enforces each alias's declared limits for every caller (bench/folknet.py
`gateway_limits`). LiteLLM 1.108 does not queue a call above an alias's in-flight limit: it
answers 429 at once ("Deployment has all max_parallel_requests slots in use"). That 429 says
"a slot is taken by another caller", not "the pool is overloaded": the gateway client
(`bench.gateway`) then waits a short, random time and asks again, without freezing or lowering
its pacer, and counts it apart from a rate limit (`CallRecord.gateway_waits`, not `rate_limited`).
Every caller backing off the same way is what shares the slots: the wait is short (at most
MAX_WAIT_S) and shorter still the longer a call has waited, so a caller kept waiting is not
starved by one whose call just finished and asks again at once.
"""

from __future__ import annotations

import random

SLOTS_BUSY = "max_parallel_requests slots in use"
FIRST_WAIT_S = 0.02     # the first back-off's upper bound; doubled after each busy answer
MAX_WAIT_S = 0.2        # the back-off's upper bound at most
AGE_S = 0.5             # past this long waiting, a call asks sooner the longer it has waited
MIN_WAIT_S = 0.02       # ... but its upper bound stays at least this


def slots_busy(code: int, body: bytes) -> bool:
    """Is this answer the gateway's own in-flight limit (not the pool's 429)?"""
    return code == 429 and SLOTS_BUSY.encode() in body


def slot_wait(busy: int, rng: random.Random | None = None, waited: float = 0.0) -> float:
    """Seconds to wait after the `busy`-th busy answer in a row (1, 2, ...), the call having waited
    `waited` seconds for a slot so far: jitter between a quarter of an upper bound and the bound,
    which starts at FIRST_WAIT_S and doubles up to MAX_WAIT_S; past AGE_S of waiting the bound
    shrinks as AGE_S / waited (down to MIN_WAIT_S), so a call that has waited long asks more often
    than one that just met the limit: a slot a finished call frees is more likely the old waiter's."""
    top = min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** max(0, busy - 1))
    if waited > AGE_S:
        top = max(MIN_WAIT_S, top * AGE_S / waited)
    return (rng or random).uniform(top / 4, top)
