"""The gateway's one HTTP client: URL, key, JSON POST/GET with timeouts, streamed events, one error."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import gateway_http
from bench.gateway_http import Endpoint, Unreachable


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                          "accept": self.headers.get("Accept"), "body": body})
        if body.get("model") == "broken":
            self._send(503, b'{"error": {"message": "pool  down\\n now"}}', {"Retry-After": "2"})
        elif body.get("stream"):
            events = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in (
                {"choices": [{"delta": {"content": "he"}}]}, {"choices": [{"delta": {"content": "llo"}}]}))
            self._send(200, events + b": a comment\n\ndata: [DONE]\n\n", {"Content-Type": "text/event-stream"})
        else:
            self._send(200, json.dumps({"choices": [{"message": {"content": "OK"}}]}).encode())

    def do_GET(self) -> None:  # noqa: N802
        self._send(204 if self.path == "/health" else 404, b"")

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_base_url_with_or_without_v1_reaches_the_completions_path():
    assert Endpoint("http://gw:4000/", "k").completions_url() == "http://gw:4000/v1/chat/completions"
    assert Endpoint("http://gw:4000/v1", "k").completions_url() == "http://gw:4000/v1/chat/completions"


def test_post_sends_the_key_and_json_and_a_proxy_in_the_environment_is_not_used(monkeypatch):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    with server() as url:
        r = gateway_http.post_json(Endpoint(url + "/v1", "sekrit"), {"model": "m"}, timeout=5)
        assert r.status == 200 and r.json()["choices"][0]["message"]["content"] == "OK"
        seen = _Handler.seen[-1]
        assert seen["path"] == "/v1/chat/completions" and seen["auth"] == "Bearer sekrit"
        assert gateway_http.post_json(Endpoint(url, None), {"model": "m"}, timeout=5).status == 200
        assert _Handler.seen[-1]["auth"] is None


def test_an_error_status_is_an_answer_with_its_message_and_headers():
    with server() as url:
        r = gateway_http.post_json(Endpoint(url, "k"), {"model": "broken"}, timeout=5)
    assert r.status == 503 and r.headers.get("Retry-After") == "2"
    assert gateway_http.error_message(r.body) == "pool  down\n now"
    assert gateway_http.error_message('{"error": "bad gateway"}') == "bad gateway"
    assert gateway_http.error_message("<html>502</html>") == "<html>502</html>"


def test_get_and_the_streamed_events_until_done():
    with server() as url:
        assert gateway_http.get(url + "/health", timeout=5).status == 204
        with gateway_http.stream(Endpoint(url, "k"), {"model": "m", "stream": True}, timeout=5) as s:
            assert s.status == 200
            texts = [json.loads(e)["choices"][0]["delta"]["content"] for e in s.events()]
            assert texts == ["he", "llo"] and s.done
        assert _Handler.seen[-1]["accept"] == "text/event-stream"


def test_no_connection_and_no_answer_raise_one_error_telling_them_apart():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Unreachable) as refused:
        gateway_http.post_json(Endpoint(f"http://127.0.0.1:{port}", "k"), {}, timeout=2)
    assert not refused.value.timed_out and "refused" in str(refused.value).lower()
    with socket.socket() as silent:  # accepts (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        with pytest.raises(Unreachable) as slow:
            gateway_http.post_json(Endpoint(f"http://127.0.0.1:{silent.getsockname()[1]}", "k"), {},
                                   timeout=(2, 0.5))
    assert slow.value.timed_out


def test_a_url_that_is_not_http_is_refused_naming_it():
    with pytest.raises(gateway_http.ConfigError, match="'gw:4000' is not an http"):
        gateway_http.post_json(Endpoint("gw:4000", "k"), {}, timeout=1)
