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


def test_the_wait_grows_with_each_busy_answer_and_stays_bounded():
    rng = random.Random(1)
    for busy in range(1, 12):
        top = min(gwlimit.MAX_WAIT_S, gwlimit.FIRST_WAIT_S * 2 ** (busy - 1))
        waits = [gwlimit.slot_wait(busy, rng) for _ in range(50)]
        assert all(top / 4 <= w <= top for w in waits)
    assert max(gwlimit.slot_wait(30, rng) for _ in range(50)) <= gwlimit.MAX_WAIT_S


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
        assert texts == ["fn f() {}"] and rec.rate_limited == 2 and rec.http == [429, 429, 200]
        assert st.pacer.rate == rate and st.pacer.frozen_until == 0.0 and st.pacer.lowered == 0
        assert len(slept) == 2 and all(0 < s <= gwlimit.MAX_WAIT_S for s in slept)
        slept.clear()
        texts, rec = g.call("a", [{"role": "user", "content": "x"}], 1, 2)
        assert texts and rec.http == [429, 200]
        assert st.pacer.lowered == 1 and st.pacer.rate < rate      # the pool's 429: frozen and lowered
    finally:
        srv.shutdown()
