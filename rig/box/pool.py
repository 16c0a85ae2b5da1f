"""The STAND-IN model pool: a small OpenAI-compatible server that replaces a GPU server.

It is the box's one stand-in (there is no GPU here). It answers `/v1/models`,
`/v1/chat/completions` and `/health`, with candidate function bodies drawn from a bank that is
DATA (a JSON file, `{"functions": {FN: {TIER: [{"kind": "right|wrong|broken", "code": ...}]}}}`),
chosen deterministically by the request's `seed` and content. It honours `n`, `stream`
(server-sent events in OpenAI's chunk format; the delay is the time to the first token), a delay, a
tokens-per-second rate and its in-flight limit (requests past it wait, as on a GPU server), and
can be told to answer 429 or 503 or to hang through `/control`:

    GET  /control            -> settings and counters
    POST /control {"delay": 0.5, "tokens_per_s": 200, "max_inflight": 4,
                   "fail": "429"|"503"|"hang"|null, "fail_times": 2, "bank": "/path.json"}
    POST /control/reset      -> defaults, counters to zero

Run: python -m rig.box.pool --addr A --port P --name gpu0 --bank FILE --model ALIAS=TIER ...
(stdlib only, so it starts in a few tens of milliseconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from lanes.base import jsonfile
from lanes.base.errors import ConfigError

STAND_IN = "stand-in model pool (no GPU)"
FAIL_MODES = (None, "429", "503", "hang")


class BankError(ValueError):
    def __init__(self, message: str) -> None:
        super().__init__(jsonfile.printable(message))    # one line, whatever keys the bank holds


def load_bank(path: Path) -> dict[str, dict[str, list[dict[str, str]]]]:
    """Read and check a bank file; every candidate has a kind and code."""
    try:
        data = jsonfile.load(path, "bank file")
    except ConfigError as e:
        raise BankError(e.message) from None
    fns = data.get("functions") if isinstance(data, dict) else None
    if not isinstance(fns, dict) or not fns:
        raise BankError(f"{path}: needs a non-empty object `functions`")
    for fn, tiers in fns.items():
        if not isinstance(tiers, dict) or not tiers:
            raise BankError(f"{path}: functions.{fn} must be an object of tiers")
        for tier, cands in tiers.items():
            if not isinstance(cands, list) or not cands:
                raise BankError(f"{path}: functions.{fn}.{tier} must be a non-empty list")
            for i, c in enumerate(cands):
                if not isinstance(c, dict) or c.get("kind") not in ("right", "wrong", "broken") \
                        or not isinstance(c.get("code"), str):
                    raise BankError(f"{path}: functions.{fn}.{tier}[{i}] needs kind right|wrong|broken and code")
    return fns


def prompt_text(body: dict) -> str:
    msgs = body.get("messages") or []
    parts = []
    for m in msgs:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts.extend(x.get("text", "") for x in c if isinstance(x, dict))
    return "\n".join(parts)


def pick_function(bank: dict, text: str) -> str:
    """The bank function the prompt names (longest name first); else `_default`, else the first."""
    for fn in sorted(bank, key=len, reverse=True):
        if re.search(r"\b" + re.escape(fn) + r"\b", text):
            return fn
    return "_default" if "_default" in bank else sorted(bank)[0]


def choose(bank: dict, body: dict, tiers: dict[str, str]) -> tuple[str, str, list[dict[str, str]]]:
    """Deterministic: the same seed, model and messages give the same n candidates."""
    text = prompt_text(body)
    fn = pick_function(bank, text)
    model = str(body.get("model", ""))
    tier = tiers.get(model) or tiers.get(model.split("/")[-1]) or ""
    if tier not in bank[fn]:
        tier = sorted(bank[fn])[0]
    cands = bank[fn][tier]
    n = int(body.get("n") or 1)
    seed = body.get("seed", 0)
    out = []
    for k in range(n):
        h = hashlib.sha256(f"{seed}|{model}|{fn}|{tier}|{text}|{k}".encode()).hexdigest()
        out.append(cands[int(h, 16) % len(cands)])
    return fn, tier, out


def completion(body: dict, picks: list[dict[str, str]], name: str) -> dict:
    text = prompt_text(body)
    contents = [f"```rust\n{c['code'].rstrip()}\n```" for c in picks]
    return {
        "id": f"chatcmpl-standin-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "system_fingerprint": f"stand-in-{name}",
        "choices": [{"index": i, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": c}} for i, c in enumerate(contents)],
        "usage": {"prompt_tokens": max(1, len(text) // 4),
                  "completion_tokens": sum(max(1, len(c) // 4) for c in contents),
                  "total_tokens": max(1, len(text) // 4) + sum(max(1, len(c) // 4) for c in contents)},
    }


def stream_events(out: dict, body: dict, piece_chars: int = 16) -> list[dict]:
    """A completion as OpenAI `chat.completion.chunk` events: per choice, the role with the first
    piece of content, then the rest in pieces of `piece_chars`, then its finish_reason; a last
    event with `usage` (and no choices) when `stream_options.include_usage` is set."""
    base = {"id": out["id"], "object": "chat.completion.chunk", "created": out["created"],
            "model": out["model"], "system_fingerprint": out["system_fingerprint"]}
    events: list[dict] = []
    for ch in out["choices"]:
        text = ch["message"]["content"]
        pieces = [text[i:i + piece_chars] for i in range(0, len(text), piece_chars)] or [""]
        for k, piece in enumerate(pieces):
            delta = {"role": "assistant", "content": piece} if k == 0 else {"content": piece}
            events.append({**base, "choices": [{"index": ch["index"], "delta": delta, "finish_reason": None}]})
        events.append({**base, "choices": [{"index": ch["index"], "delta": {}, "finish_reason": "stop"}]})
    opts = body.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage"):
        events.append({**base, "choices": [], "usage": out["usage"]})
    return events


class Pool:
    """Settings and counters, shared by the handler threads."""

    def __init__(self, name: str, bank_path: Path, tiers: dict[str, str], max_inflight: int,
                 journal: Path | None = None) -> None:
        self.name = name
        self.journal_path = journal
        self.tiers = tiers
        self.default_inflight = max_inflight
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.default_bank_path = bank_path
        self.default_bank = load_bank(bank_path)
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.bank, self.bank_path = self.default_bank, self.default_bank_path
            self.delay = 0.0
            self.tokens_per_s = 0.0
            self.max_inflight = self.default_inflight
            self.fail: str | None = None
            self.fail_times: int | None = None
            self.inflight = 0
            self.max_seen = 0
            self.served = 0
            self.probed = 0      # readiness probes (max_tokens 1: the lanes' `nev rig probe`), apart
            self.requests = 0
            self.failed: dict[str, int] = {}
            self.cond.notify_all()

    def snapshot(self) -> dict[str, object]:
        """The pool's state: a JSON document built to be served (/control)."""
        with self.lock:
            return {"stand_in": STAND_IN, "name": self.name, "delay": self.delay,
                    "tokens_per_s": self.tokens_per_s, "max_inflight": self.max_inflight, "fail": self.fail,
                    "fail_times": self.fail_times, "bank": str(self.bank_path), "models": self.tiers,
                    "inflight": self.inflight, "max_inflight_seen": self.max_seen, "served": self.served,
                    "probed": self.probed, "requests": self.requests, "failed": dict(self.failed)}

    def update(self, req: dict) -> None:
        bank = load_bank(Path(req["bank"])) if req.get("bank") else None
        fail = req.get("fail", self.fail)
        if fail is not None:
            fail = str(fail)
        if fail not in FAIL_MODES:
            raise ValueError(f"fail must be one of 429, 503, hang or null, not {fail!r}")
        with self.lock:
            if bank is not None:
                self.bank, self.bank_path = bank, Path(req["bank"])
            self.delay = float(req.get("delay", self.delay))
            self.tokens_per_s = float(req.get("tokens_per_s", self.tokens_per_s))
            self.max_inflight = max(1, int(req.get("max_inflight", self.max_inflight)))
            self.fail = fail
            self.fail_times = req.get("fail_times", None if "fail" in req else self.fail_times)
            self.cond.notify_all()

    def journal(self, event: str, call: str) -> None:
        """One line per call arriving (`in`) and answered (`out`), with the wall-clock time: the
        count at the stand-in that outlives the process (a stopped replica's counters are gone)."""
        if self.journal_path is None:
            return
        with self.lock, open(self.journal_path, "a") as f:
            f.write(f"{time.time():.6f} {event} {call}\n")

    def take_fail(self, probe: bool = False) -> str | None:
        with self.lock:
            if not probe:
                self.requests += 1
            # a readiness probe meets a lasting failure, never one of a counted few (those are
            # the batch's to meet: the lanes probe in the background)
            if self.fail is None or (probe and self.fail_times is not None):
                return None
            mode = self.fail
            if self.fail_times is not None:
                self.fail_times -= 1
                if self.fail_times <= 0:
                    self.fail, self.fail_times = None, None
            self.failed[mode] = self.failed.get(mode, 0) + 1
            return mode

    def admit(self) -> tuple[float, float]:
        """Wait for a place under the in-flight limit and take it (as a GPU server queues);
        the delay and tokens per second to serve it with."""
        with self.cond:
            while self.inflight >= self.max_inflight:
                self.cond.wait()
            self.inflight += 1
            self.max_seen = max(self.max_seen, self.inflight)
            return self.delay, self.tokens_per_s

    def release(self, probe: bool = False) -> None:
        """One in-flight request is done (a readiness probe is counted apart from the served)."""
        with self.cond:
            self.inflight -= 1
            if probe:
                self.probed += 1
            else:
                self.served += 1
            self.cond.notify_all()

    def still_hanging(self) -> bool:
        with self.lock:
            return self.fail == "hang"


class Handler(BaseHTTPRequestHandler):
    """The pool's routes; `make_handler` binds it to one `Pool`."""

    protocol_version = "HTTP/1.1"
    server_version = "nev-stand-in-pool/1"
    pool: Pool

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None

    def send_json(self, code: int, data: object, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("X-Stand-In", f"{self.pool.name}: {STAND_IN}")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def refuse(self, code: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        """An error answer in OpenAI's shape."""
        self.send_json(code, {"error": {"message": message, "type": kind}}, headers)

    def body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b"{}"
        data = json.loads(raw or b"{}")
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        return data

    def do_GET(self) -> None:
        pool = self.pool
        if self.path == "/health":
            if pool.fail == "503":
                self.send_json(503, {"status": "unavailable", "stand_in": STAND_IN})
            else:
                self.send_json(200, {"status": "ok", "stand_in": STAND_IN})
        elif self.path in ("/v1/models", "/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": f"stand-in {pool.name}"}
                for m in pool.tiers]})
        elif self.path == "/control":
            self.send_json(200, pool.snapshot())
        else:
            self.refuse(404, f"no route {self.path}", "not_found")

    def do_POST(self) -> None:
        try:
            body = self.body()
        except ValueError as e:
            self.refuse(400, f"bad JSON: {e}", "invalid_request_error")
            return
        if self.path == "/control/reset":
            self.pool.reset()
            self.send_json(200, self.pool.snapshot())
        elif self.path == "/control":
            try:
                self.pool.update(body)
            except (ValueError, TypeError, KeyError, OSError) as e:
                self.refuse(400, str(e), "invalid_request_error")
                return
            self.send_json(200, self.pool.snapshot())
        elif self.path in ("/v1/chat/completions", "/chat/completions"):
            self.chat(body)
        else:
            self.refuse(404, f"no route {self.path}", "not_found")

    def chat(self, body: dict) -> None:
        if _is_probe(body):                 # the lanes' readiness probes stay out of the journal
            self.answer(body, probe=True)
            return
        call = uuid.uuid4().hex[:12]
        self.pool.journal("in", call)
        self.answer(body)
        self.pool.journal("out", call)

    def answer(self, body: dict, probe: bool = False) -> None:
        if self.failed_on_demand(probe):
            return
        try:
            picks = self.picks(body)
        except (ValueError, TypeError) as e:
            self.refuse(400, str(e), "invalid_request_error")
            return
        out = completion(body, picks, self.pool.name)
        delay, tps = self.pool.admit()
        if body.get("stream"):
            self.stream(body, out, delay, tps)
            return
        try:
            wait = delay + (out["usage"]["completion_tokens"] / tps if tps > 0 else 0.0)
            if wait > 0:
                time.sleep(wait)
        finally:
            # Done before the answer leaves: the next request may arrive the moment it does.
            self.pool.release(probe)
        self.send_json(200, out)

    def failed_on_demand(self, probe: bool = False) -> bool:
        """The failure `/control` asked for: 429 or 503 answered (True), or a hang held until
        it is lifted (then the request is served)."""
        mode = self.pool.take_fail(probe)
        if mode == "429":
            self.refuse(429, "stand-in pool: rate limited (on demand)", "rate_limit_error", {"Retry-After": "1"})
        elif mode == "503":
            self.refuse(503, "stand-in pool: unavailable (on demand)", "service_unavailable")
        elif mode == "hang":
            deadline = time.monotonic() + 3600
            while self.pool.still_hanging() and time.monotonic() < deadline:
                time.sleep(0.05)
        return mode in ("429", "503")

    def picks(self, body: dict) -> list[dict[str, str]]:
        n = int(body.get("n") or 1)
        if not 1 <= n <= 128:
            raise ValueError("n must be 1..128")
        with self.pool.lock:
            bank, tiers = self.pool.bank, self.pool.tiers
        return choose(bank, body, tiers)[2]

    def stream(self, body: dict, out: dict, delay: float, tps: float) -> None:
        """Server-sent events in OpenAI's chunk format: the first piece after `delay`
        (time to first token), the rest paced at `tokens_per_s`, usage last when
        `stream_options.include_usage` asks for it, then `data: [DONE]`."""
        released = False
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("X-Stand-In", f"{self.pool.name}: {STAND_IN}")
            self.end_headers()
            if delay > 0:
                time.sleep(delay)
            for event in stream_events(out, body):
                if event.get("choices") and tps > 0:
                    tokens = sum(len(c["delta"].get("content") or "") for c in event["choices"]) / 4
                    time.sleep(tokens / tps)
                elif not event.get("choices"):
                    # The usage chunk comes after the last token: the answer is done.
                    self.pool.release()
                    released = True
                self.write_chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
            if not released:
                self.pool.release()
                released = True
            self.write_chunk(b"data: [DONE]\n\n")
            self.write_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if not released:
                self.pool.release()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _is_probe(body: dict) -> bool:
    """A readiness probe (`nev rig probe`: one completion, max_tokens 1, not streamed)."""
    return body.get("max_tokens") == 1 and not body.get("stream") and int(body.get("n") or 1) == 1


def make_handler(pool: Pool) -> type[Handler]:
    return type("Handler", (Handler,), {"pool": pool})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=f"nev box {STAND_IN}")
    ap.add_argument("--addr", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--bank", required=True, type=Path)
    ap.add_argument("--model", action="append", default=[], help="ALIAS=TIER (repeatable)")
    ap.add_argument("--max-inflight", type=int, default=8)
    ap.add_argument("--journal", type=Path, help="Append a line per call arriving and answered.")
    a = ap.parse_args(argv)
    tiers = dict(m.split("=", 1) for m in a.model)
    pool = Pool(a.name, a.bank, tiers, a.max_inflight, a.journal)
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 256
    srv = ThreadingHTTPServer((a.addr, a.port), make_handler(pool))
    print(f"{STAND_IN} {a.name} on {a.addr}:{a.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
