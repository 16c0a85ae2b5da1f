"""The one HTTP client for the LiteLLM gateway: the readiness probe, the throughput sweep and the
batch's calls all go through it (and the probe's backend health GET).

An `Endpoint` is the gateway's base URL and key (`bench.gateway.endpoint_from_settings` reads
them as every nev caller does). `post_json` and `get` return the status, body and headers of one
request with a connect and a read timeout; `stream` posts a request for server-sent events and
yields each event's data as it arrives. A connection that fails or times out raises `Unreachable`
(one error type; `timed_out` tells the two apart); an HTTP error status is an answer, not an error.

Standard library only (http.client): the throughput sweep runs on a lane with nothing but Python.
Rig traffic never goes through a proxy named in the environment (http.client reads none).
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lanes.base.errors import ConfigError, NevError

COMPLETIONS = "/v1/chat/completions"


class Unreachable(NevError):
    """No answer: the connection failed, or no byte came within the timeout (`timed_out`)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass(frozen=True)
class Endpoint:
    """The gateway as this process reaches it: base URL (a trailing `/v1` is allowed) and key
    (None: no Authorization header, for straight-to-the-pool measurements)."""

    url: str
    key: str | None

    def completions_url(self) -> str:
        base = self.url.rstrip("/")
        return (base[:-3] if base.endswith("/v1") else base) + COMPLETIONS

    def headers(self, **more: str) -> dict[str, str]:
        out = {"Content-Type": "application/json", **more}
        if self.key:
            out["Authorization"] = f"Bearer {self.key}"
        return out


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    headers: http.client.HTTPMessage

    def json(self) -> Any:
        """The body as JSON (any JSON value: the caller checks its shape); ValueError when it is
        not."""
        return json.loads(self.body)

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


Timeout = float | tuple[float, float]


def _timeouts(timeout: Timeout) -> tuple[float, float]:
    return timeout if isinstance(timeout, tuple) else (timeout, timeout)


def _connect(url: str, timeout: Timeout, named: str | None = None) -> tuple[http.client.HTTPConnection, str]:
    """A connection to `url`'s host (connected within the connect timeout, reading with the read
    timeout) and the path to request. A URL that is not http(s) is refused naming `named` (what
    the user gave), else the URL."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ConfigError(f"{named or url!r} is not an http(s) URL; give the gateway's base URL, http://host:port")
    connect_s, read_s = _timeouts(timeout)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(u.hostname, u.port, timeout=connect_s)
    try:
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(read_s)
    except OSError as e:
        conn.close()
        raise _unreachable(e) from None
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    return conn, path


def _unreachable(e: BaseException) -> Unreachable:
    return Unreachable(str(e) or type(e).__name__, timed_out=isinstance(e, TimeoutError))


def _request(method: str, url: str, body: bytes | None, headers: Mapping[str, str], timeout: Timeout,
             named: str | None = None) -> Response:
    conn, path = _connect(url, timeout, named)
    try:
        conn.request(method, path, body=body, headers=dict(headers))
        resp = conn.getresponse()
        return Response(resp.status, resp.read(), resp.headers)
    except (OSError, http.client.HTTPException) as e:
        raise _unreachable(e) from None
    finally:
        conn.close()


def post_json(ep: Endpoint, body: Mapping[str, object], timeout: Timeout) -> Response:
    """POST `body` as JSON to the chat completions URL with the endpoint's key."""
    return _request("POST", ep.completions_url(), json.dumps(body).encode(), ep.headers(), timeout, ep.url)


def get_api(ep: Endpoint, path: str, timeout: Timeout) -> Response:
    """GET one of the gateway's own routes (`/v1/models`, `/model/info`) with the endpoint's key."""
    return _request("GET", ep.url.rstrip("/") + path, None, ep.headers(), timeout, ep.url)


def get(url: str, timeout: Timeout) -> Response:
    """GET `url` (no key: a backend's health URL)."""
    return _request("GET", url, None, {}, timeout)


class Stream:
    """An answer of server-sent events: `status`; `events()` yields each `data:` payload until
    `[DONE]` (then `done` is set) or the end of the answer; `body()` reads an error answer whole."""

    def __init__(self, resp: http.client.HTTPResponse) -> None:
        self.status = resp.status
        self.done = False
        self._resp = resp

    def body(self) -> bytes:
        return self._resp.read()

    def events(self) -> Iterator[bytes]:
        try:
            while True:
                line = self._resp.readline()
                if not line:
                    return
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    self.done = True
                    return
                yield data
        except (OSError, http.client.HTTPException) as e:
            raise _unreachable(e) from None


@contextmanager
def stream(ep: Endpoint, body: Mapping[str, object], timeout: Timeout) -> Iterator[Stream]:
    """POST `body` (which asks for `"stream": true`) to the chat completions URL; the answer as a
    `Stream`, its connection closed when the block ends."""
    conn, path = _connect(ep.completions_url(), timeout, ep.url)
    try:
        try:
            conn.request("POST", path, body=json.dumps(body).encode(),
                         headers=ep.headers(Accept="text/event-stream"))
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            raise _unreachable(e) from None
        yield Stream(resp)
    finally:
        conn.close()


def error_message(body: bytes | str) -> str:
    """The message of an OpenAI-style error body (`{"error": {"message": ...}}` or `{"error": "..."}`),
    else the body as it is."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        return text
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    if isinstance(err, str):
        return err
    return text
