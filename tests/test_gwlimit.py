"""The gateway's in-flight limit as the gateway client meets it (bench/gwlimit.py): its 429 is told
from a pool's, and the client waits and asks again without freezing or lowering its pacer.
Against a local HTTP server answering as LiteLLM 1.108.7 does above max_parallel_requests."""

from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench import gwlimit
from bench.gateway import Gateway

BUSY = (b'{"error":{"message":"litellm.RateLimitError: Deployment has all max_parallel_requests slots in use. '
        b'Deployment model_group=a, id=x already has max_parallel_requests=4 requests in flight.","code":"429"}}')
POOL_429 = b'{"error":{"message":"pool overloaded","code":"429"}}'


def test_only_the_gateways_own_limit_is_told_apart():
    assert gwlimit.slots_busy(429, BUSY)
    assert not gwlimit.slots_busy(429, POOL_429)
    assert not gwlimit.slots_busy(500, BUSY)


def test_the_longer_a_call_has_waited_the_sooner_it_asks_and_a_new_call_yields_while_slots_are_contended():
    rng = random.Random(1)
    fresh = [gwlimit.slot_wait(0.0, rng) for _ in range(200)]
    aged = [gwlimit.slot_wait(4 * gwlimit.AGE_S, rng) for _ in range(200)]
    oldest = [gwlimit.slot_wait(1000.0, rng) for _ in range(200)]
    assert all(gwlimit.MAX_WAIT_S / 2 <= w <= gwlimit.MAX_WAIT_S for w in fresh)
    assert max(aged) < min(fresh)
    assert all(gwlimit.MIN_WAIT_S / 2 <= w <= gwlimit.MIN_WAIT_S for w in oldest)
    # no contention seen (never, or long ago): a new call goes at once; else it yields a little
    assert gwlimit.yield_wait(None, rng) == 0.0 and gwlimit.yield_wait(gwlimit.CONTENTION_S + 1, rng) == 0.0
    ys = [gwlimit.yield_wait(0.1, rng) for _ in range(200)]
    assert all(0 <= y <= gwlimit.YIELD_S for y in ys) and max(ys) > 0


def serve(answers: list[tuple[int, bytes]]):
    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            code, body = answers.pop(0)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


OK = json.dumps({"choices": [{"message": {"content": "fn f() {}"}}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 5}}).encode()


def test_a_busy_gateway_is_asked_again_with_the_pacer_untouched_and_a_pool_429_still_freezes_it():
    srv = serve([(429, BUSY), (429, BUSY), (200, OK), (429, POOL_429), (200, OK)])
    slept: list[float] = []
    try:
        g = Gateway(f"http://127.0.0.1:{srv.server_address[1]}", "k", sleep=slept.append)
        st = g.add_alias("a", 4, 4)
        rate = st.pacer.rate
        texts, rec = g.call("a", [{"role": "user", "content": "x"}], 1, 1)
        assert texts == ["fn f() {}"] and rec.http == [429, 429, 200]
        assert rec.gateway_waits == 2 and rec.rate_limited == 0 and rec.retries == 0   # not a rate limit
        assert st.pacer.rate == rate and st.pacer.frozen_until == 0.0 and st.pacer.lowered == 0
        assert len(slept) == 2 and all(0 < s <= gwlimit.MAX_WAIT_S for s in slept)
        slept.clear()
        texts, rec = g.call("a", [{"role": "user", "content": "x"}], 1, 2)
        assert texts and rec.http == [429, 200] and rec.rate_limited == 1 and rec.gateway_waits == 0
        assert st.pacer.lowered == 1 and st.pacer.rate < rate      # the pool's 429: frozen and lowered
    finally:
        srv.shutdown()


class FakeTime:
    """A clock that moves only when the client sleeps (every wait is counted, nothing else)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _round_of(answers: list[tuple[int, bytes]]):
    from bench import batch
    from bench import plan as plan_mod
    from bench.shares import Share

    srv = serve(answers)
    ft = FakeTime()
    try:
        g = Gateway(f"http://127.0.0.1:{srv.server_address[1]}", "k", clock=ft.clock, sleep=ft.sleep)
        g.add_alias("a", 1, 1)
        share = Share("a", 1, 1, declared_max=1)
        res = batch.draw_share(g, share, [{"role": "user", "content": "x"}], "s", 1)
    finally:
        srv.shutdown()
    p = plan_mod.AliasPlan("a", 1, 1, 1, 1, plan_mod.Bound.ASKED, plan_mod.Bound.ASKED, "asked 1 at 1")
    return batch.model_round(res, [], {}, batch.constraints_of(p, res, 0.0))


def test_a_round_that_waited_for_gateway_slots_is_bound_by_the_gateway_limit_not_a_cooldown(tmp_path):
    m = _round_of([(429, BUSY)] * 3 + [(200, OK)])
    assert (m.gateway_waits, m.rate_limited, m.retries) == (3, 0, 0)
    secs = m.constraints["seconds"]
    assert m.constraints["bound"] == "gateway_limit" and secs["gateway_limit"] > 0 and "cooldown" not in secs
    from bench import plan as plan_mod
    assert plan_mod.cooldowns({"models": {"a": m.to_json()}}) == {}       # the next round is not cooled down
    # a real rate limit (the pool's 429) is still a cooldown
    c = _round_of([(429, POOL_429), (200, OK)])
    assert (c.gateway_waits, c.rate_limited) == (0, 1) and c.constraints["bound"] == "cooldown"
    # and the ledger keeps both apart: `nev ledger --json` shows them
    from bench import ledger
    from tests.test_batch import _nev, _record

    rec = _record()
    rec["models"] = {"a": m.to_json(), "b": c.to_json()}
    ledger.append(tmp_path / "ledger" / "wtg.jsonl", ledger.line_for(rec))
    r = _nev("ledger", "--worktree", "wtg", "--json", env={"NEV_LANE_SHARED": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[0])["models"]
    assert (got["a"]["gateway_waits"], got["a"]["rate_limited"], got["a"]["constraints"]["bound"]) == \
        (3, 0, "gateway_limit")
    assert (got["b"]["gateway_waits"], got["b"]["rate_limited"], got["b"]["constraints"]["bound"]) == \
        (0, 1, "cooldown")


def test_a_draws_queue_wait_runs_from_its_first_request_to_the_answer_that_served_it():
    """`first_byte_s` (rig/queues.py's draw wait): the gateway's slot waits between the first
    request and the answer count; a call that never got an answer has none."""
    srv = serve([(429, BUSY), (429, BUSY), (200, OK), (400, b'{"error": "bad"}')])
    ft = FakeTime()
    try:
        g = Gateway(f"http://127.0.0.1:{srv.server_address[1]}", "k", clock=ft.clock, sleep=ft.sleep)
        g.add_alias("a", 1, 1)
        _texts, rec = g.call("a", [{"role": "user", "content": "x"}], 1, 1)
        assert rec.http == [429, 429, 200] and rec.gateway_wait_s > 0
        # the clock moves only while the client waits: for slots, and for its pacer between tries
        # (the first request went at once, with the pacer's bucket full)
        waited = rec.gateway_wait_s + rec.pacer_wait_s
        assert rec.first_byte_s is not None and abs(rec.first_byte_s - waited) < 1e-9
        assert rec.to_json()["first_byte_s"] > 0
        from bench.gateway import CallFailed
        try:
            g.call("a", [{"role": "user", "content": "x"}], 1, 2)
        except CallFailed as e:
            assert e.record.first_byte_s is None and e.record.to_json()["first_byte_s"] is None
        else:
            raise AssertionError("a 400 must fail the call")
    finally:
        srv.shutdown()
