"""The stand-in pool streams (server-sent events, OpenAI chunk format) like a real server."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse

import pytest

from rig.box.pool import stream_events
from tests.helpers.standin_pool import control, counters, standin_pool

pytestmark = pytest.mark.parts  # starts a stand-in pool server here


def chat(url: str, body: dict) -> tuple[int, dict[str, str], bytes, float | None, float]:
    """POST; status, headers, body, seconds to the first `data:` line with content, total seconds."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    first = None
    raw = b""
    while True:
        line = r.readline()
        if not line:
            break
        if first is None and b'"content": "' in line and b'"content": ""' not in line:
            first = time.monotonic() - t0
        raw += line
    total = time.monotonic() - t0
    headers = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    return r.status, headers, raw, first, total


def events(raw: bytes) -> list:
    out = []
    for line in raw.splitlines():
        if line.startswith(b"data: "):
            data = line[6:]
            out.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return out


BODY = {"model": "stand-alias", "seed": 3, "n": 2, "messages": [{"role": "user", "content": "write clamp_px"}]}


def test_a_streamed_answer_carries_the_same_text_as_the_plain_one():
    with standin_pool() as url:
        _s, _h, plain_raw, _f, _t = chat(url, BODY)
        plain = json.loads(plain_raw)
        status, headers, raw, _first, _total = chat(url, {**BODY, "stream": True,
                                                          "stream_options": {"include_usage": True}})
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    assert "stand-in" in headers["x-stand-in"]
    evs = events(raw)
    assert evs[-1] == "[DONE]"
    texts = {0: "", 1: ""}
    finished = set()
    for e in evs[:-1]:
        assert e["object"] == "chat.completion.chunk"
        for ch in e["choices"]:
            texts[ch["index"]] += ch["delta"].get("content", "")
            if ch["finish_reason"] == "stop":
                finished.add(ch["index"])
    assert texts == {c["index"]: c["message"]["content"] for c in plain["choices"]}
    assert finished == {0, 1}
    usage = evs[-2]
    assert usage["choices"] == [] and usage["usage"] == plain["usage"]


def test_usage_is_sent_only_when_asked_for():
    out = {"id": "x", "created": 1, "model": "m", "system_fingerprint": "f",
           "choices": [{"index": 0, "message": {"content": "a" * 40}}], "usage": {"completion_tokens": 10}}
    without = stream_events(out, {"stream": True})
    assert all(e["choices"] for e in without)
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in without) == "a" * 40
    assert without[0]["choices"][0]["delta"]["role"] == "assistant"
    with_usage = stream_events(out, {"stream": True, "stream_options": {"include_usage": True}})
    assert with_usage[-1] == {**with_usage[0], "choices": [], "usage": {"completion_tokens": 10}}


def test_the_delay_is_the_time_to_first_token_and_the_rate_paces_the_rest():
    with standin_pool() as url:
        _s, _h, plain_raw, _f, _t = chat(url, {**BODY, "n": 1})
        tokens = json.loads(plain_raw)["usage"]["completion_tokens"]
        control(url, delay=0.4, tokens_per_s=tokens / 0.8)   # 0.8 s of decoding
        status, _h, _raw, first, total = chat(url, {**BODY, "n": 1, "stream": True})
        after = counters(url)
    assert status == 200
    assert first is not None and 0.35 <= first < 0.75, first
    assert 1.1 <= total < 2.2, total
    assert after["inflight"] == 0 and after["served"] == 2


def test_a_stream_holds_its_in_flight_slot_until_it_ends():
    import threading

    with standin_pool(max_inflight=1) as url:
        control(url, delay=0.5)
        results: list[float] = []

        def one() -> None:
            _s, _h, _r, _f, total = chat(url, {**BODY, "n": 1, "stream": True})
            results.append(total)

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        c = counters(url)
    assert c["max_inflight_seen"] == 1 and c["served"] == 2 and c["inflight"] == 0
    assert max(results) >= 0.95   # the second waited for the first


def test_faults_apply_to_streamed_requests_too():
    with standin_pool() as url:
        control(url, fail="503", fail_times=1)
        status, _h, raw, _f, _t = chat(url, {**BODY, "stream": True})
        status2, _h2, _raw2, _f2, _t2 = chat(url, {**BODY, "stream": True})
    assert status == 503 and b"unavailable" in raw
    assert status2 == 200
