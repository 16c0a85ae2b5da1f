"""`nev rig throughput`: drive one alias through the gateway at each in-flight level.

Every request carries the same prompt and the same `max_tokens` and streams (server-sent events),
so each one gives its latency, its time to first token (the first chunk with content) and its
output tokens (the usage chunk; counted from the text when the gateway sends none). Per level:
output tokens/s and requests/s over the level's wall time, p50/p95 latency and time to first
token. The knee is the level after which throughput stops growing.

Standard library only (the gateway's one HTTP client, `bench.gateway_http`, and threads): it runs on
a lane that has nothing but Python and what `nev lane provision` installs, and from the dev box.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench import gateway, gwlimit
from bench.gateway_http import Endpoint, Unreachable, error_message, stream
from lanes.base import jsonfile, settings
from lanes.base.errors import NevError, UsageError
from lanes.base.mask import mask

PROMPT = ("Throughput sweep of the rig (a fixed prompt). Write a small Rust function that clamps a "
          "pixel length to a range, with a one-line doc comment.")
DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32)
MIN_GAIN = 0.25          # past the knee: doubling the in-flight level adds less than this share
MIN_FOR_P50 = 5          # fewer observations than this: no p50 (null), said so
MIN_FOR_P95 = 20         # fewer observations than this: no p95 (null), said so
SCHEMA = 1


@dataclass(frozen=True)
class Sample:
    ok: bool
    latency_s: float
    ttft_s: float | None = None
    tokens_out: int | None = None
    tokens_counted: bool = False   # True: from the text (no usage chunk), an estimate
    error: str | None = None
    gateway_waits: int = 0         # 429s of the gateway's own in-flight limit, waited out and asked again


def parse_levels(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4]; each a positive integer, increasing."""
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--inflight {text!r}: give positive integers separated by commas, e.g. 1,2,4,8") from None
    if not levels or any(n < 1 for n in levels) or levels != sorted(set(levels)):
        raise UsageError(f"--inflight {text!r}: give increasing positive integers, e.g. 1,2,4,8")
    return levels


def requests_for(level: int, requested: int | None) -> int:
    """Requests sent at a level: as asked, else enough for a p95 and for every slot to turn four
    times (with fewer, the first and last wave dominate the wall time)."""
    if requested is not None:
        return requested
    return max(MIN_FOR_P95, 4 * level)


def percentile(values: Sequence[float], q: float, min_n: int) -> float | None:
    """Nearest-rank percentile; None when there are fewer than `min_n` observations."""
    if len(values) < min_n or not values:
        return None
    ordered = sorted(values)
    k = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[k - 1]


@dataclass(frozen=True)
class Level:
    """One in-flight level's row: the rates over its wall time, the percentiles of its answers
    (None: too few), its errors by message."""

    inflight: int
    requests: int
    answered: int
    failed: int
    wall_s: float | None
    output_tokens: int
    tokens_counted_from_text: bool
    output_tok_s: float | None
    req_s: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    errors: dict[str, int]
    note: str | None
    # the alias's declared in-flight limit, enforced at the gateway, held these back
    # (bench/gwlimit.py)
    gateway_waits: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "inflight": self.inflight,
            "requests": self.requests,
            "answered": self.answered,
            "failed": self.failed,
            "wall_s": self.wall_s,
            "output_tokens": self.output_tokens,
            "tokens_counted_from_text": self.tokens_counted_from_text,
            "output_tok_s": self.output_tok_s,
            "req_s": self.req_s,
            "latency_p50_s": self.latency_p50_s,
            "latency_p95_s": self.latency_p95_s,
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p95_s": self.ttft_p95_s,
            "errors": dict(self.errors),
            "note": self.note,
            "gateway_waits": self.gateway_waits,
        }

    @classmethod
    def from_json(cls, value: object, f: jsonfile.Fields, where: str) -> Level:
        o = f.obj(value, where)
        num = (int, float)

        def opt(key: str) -> float | None:
            v: float | None = f.get(o, key, num, where, required=False)
            return v

        errors = f.get(o, "errors", dict, where, required=False, default={})
        for k, n in errors.items():
            if isinstance(n, bool) or not isinstance(n, int):
                raise f.fail(f"{where}.errors.{k}", "must be a whole number")
        return cls(f.get(o, "inflight", int, where), f.get(o, "requests", int, where),
                   f.get(o, "answered", int, where), f.get(o, "failed", int, where), opt("wall_s"),
                   f.get(o, "output_tokens", int, where, required=False, default=0),
                   f.get(o, "tokens_counted_from_text", bool, where, required=False, default=False),
                   opt("output_tok_s"), opt("req_s"), opt("latency_p50_s"), opt("latency_p95_s"),
                   opt("ttft_p50_s"), opt("ttft_p95_s"), {str(k): n for k, n in errors.items()},
                   f.get(o, "note", str, where, required=False),
                   f.get(o, "gateway_waits", int, where, required=False, default=0))


@dataclass
class Result:
    """A sweep: what `nev rig throughput` prints and saves as `<dir>/<alias>.json` (`nev rig
    capacity` and the batch planner read its peak and knee). `run` adds the request size, the
    time and the client's own use."""

    alias: str
    levels: list[Level]
    knee: int | None
    peak_output_tok_s: float | None
    peak_at: int
    verdict: str
    prompt_chars: int = len(PROMPT)
    max_tokens: int | None = None
    measured_at: str | None = None
    client: dict[str, float | None] = field(default_factory=dict)   # `own_use`

    @property
    def saturated(self) -> bool:
        return self.knee is not None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "schema": SCHEMA, "alias": self.alias, "prompt_chars": self.prompt_chars,
            "levels": [r.to_json() for r in self.levels], "knee": self.knee,
            "peak_output_tok_s": self.peak_output_tok_s, "peak_at": self.peak_at,
            "saturated": self.saturated, "verdict": self.verdict}
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        if self.measured_at is not None:
            out["measured_at"] = self.measured_at
        if self.client:
            out["client"] = dict(self.client)
        return out

    @classmethod
    def from_json(cls, data: object, label: str) -> Result:
        """A saved (or printed) sweep; ConfigError in one line naming `label` and the field."""
        f = jsonfile.Fields(label)
        top = f.obj(data, "(top level)")
        levels = [Level.from_json(r, f, f"levels[{i}]")
                  for i, r in enumerate(f.get(top, "levels", list, ""))]
        client = f.get(top, "client", dict, "", required=False, default={})
        for k, v in client.items():
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise f.fail(f"client.{k}", "must be a number")
        return cls(
            f.get(top, "alias", str, ""),
            levels,
            f.get(top, "knee", int, "", required=False),
            f.get(top, "peak_output_tok_s", (int, float), "", required=False),
            f.get(top, "peak_at", int, ""),
            f.get(top, "verdict", str, ""),
            f.get(top, "prompt_chars", int, "", required=False, default=len(PROMPT)),
            f.get(top, "max_tokens", int, "", required=False),
            f.get(top, "measured_at", str, "", required=False),
            dict(client),
        )


def summarize(level: int, samples: Sequence[Sample], wall_s: float) -> Level:
    """One level's row. Failed requests count in `failed`, never in the rates or percentiles."""
    ok = [s for s in samples if s.ok]
    lat = [s.latency_s for s in ok]
    ttft = [s.ttft_s for s in ok if s.ttft_s is not None]
    tokens = sum(s.tokens_out or 0 for s in ok)
    errors: dict[str, int] = {}
    for s in samples:
        if not s.ok:
            key = s.error or "failed"
            errors[key] = errors.get(key, 0) + 1
    notes = []
    if len(lat) < MIN_FOR_P95:
        notes.append(f"{len(lat)} answers: p95 needs {MIN_FOR_P95}")
    if len(lat) < MIN_FOR_P50:
        notes.append(f"p50 needs {MIN_FOR_P50}")

    def r(x: float | None, nd: int = 3) -> float | None:
        return None if x is None else round(x, nd)

    return Level(
        inflight=level,
        requests=len(samples),
        answered=len(ok),
        failed=len(samples) - len(ok),
        wall_s=r(wall_s),
        output_tokens=tokens,
        tokens_counted_from_text=any(s.tokens_counted for s in ok),
        output_tok_s=r(tokens / wall_s if wall_s > 0 else None, 1),
        req_s=r(len(ok) / wall_s if wall_s > 0 else None, 2),
        latency_p50_s=r(percentile(lat, 50, MIN_FOR_P50)),
        latency_p95_s=r(percentile(lat, 95, MIN_FOR_P95)),
        ttft_p50_s=r(percentile(ttft, 50, MIN_FOR_P50)),
        ttft_p95_s=r(percentile(ttft, 95, MIN_FOR_P95)),
        errors=errors,
        note="; ".join(notes) or None,
        gateway_waits=sum(s.gateway_waits for s in samples),
    )


def knee(rows: Sequence[Level], min_gain: float = MIN_GAIN) -> int | None:
    """The first level past which throughput stops growing: the next level adds less than
    `min_gain` of its output tokens/s per doubling of the in-flight level (log2 of the ratio).
    None when throughput still grows at the last level (not saturated: try higher levels).

    At exactly the pool's limit the pool idles while each answer travels back and the next
    request comes, so one level past it still gains that round-trip share; the threshold is
    above it for service times several times the gateway's own latency."""
    for a, b in zip(rows, rows[1:], strict=False):
        ta, tb = a.output_tok_s, b.output_tok_s
        if ta is None or tb is None or ta <= 0:
            continue
        if tb < ta * (1 + min_gain * math.log2(b.inflight / a.inflight)):
            return a.inflight
    return None


# -- the I/O edge ----------------------------------------------------------

def one_request(target: Endpoint, alias: str, max_tokens: int, timeout: float, prompt: str = PROMPT) -> Sample:
    """One streamed completion: latency to the last byte, time to the first content chunk, tokens.
    Past the alias's in-flight limit the gateway answers 429 at once: the request waits and asks
    again as a batch does (`bench/gwlimit.py`); its latency counts from the first ask."""
    t0 = time.monotonic()
    busy = 0
    while True:
        s = _one(target, alias, max_tokens, timeout, prompt, t0)
        if s is not _BUSY:
            return replace(s, gateway_waits=busy) if busy else s
        busy += 1
        time.sleep(gwlimit.slot_wait(busy))


_BUSY = Sample(False, 0.0, error="gateway slots busy")


def _one(target: Endpoint, alias: str, max_tokens: int, timeout: float, prompt: str, t0: float) -> Sample:
    body = {"model": alias, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": max_tokens, "temperature": 0, "seed": 1,
            "messages": [{"role": "user", "content": prompt}]}
    try:
        with stream(target, body, timeout) as answer:
            if answer.status == 429:
                raw = answer.body()
                if gwlimit.slots_busy(429, raw):
                    return _BUSY
                why = " ".join(error_message(raw).split())[:200]
                return Sample(False, time.monotonic() - t0, error=mask(f"HTTP 429: {why}"))
            if answer.status != 200:
                why = " ".join(error_message(answer.body()).split())[:200]
                return Sample(False, time.monotonic() - t0, error=mask(f"HTTP {answer.status}: {why}"))
            ttft: float | None = None
            usage: int | None = None
            chars = 0
            for data in answer.events():
                try:
                    event = json.loads(data)
                except ValueError:
                    continue
                for ch in event.get("choices") or []:
                    content = (ch.get("delta") or {}).get("content")
                    if content:
                        chars += len(content)
                        if ttft is None:
                            ttft = time.monotonic() - t0
                u = event.get("usage")
                if isinstance(u, dict) and isinstance(u.get("completion_tokens"), int):
                    usage = u["completion_tokens"]
            latency = time.monotonic() - t0
            if not answer.done and ttft is None:
                return Sample(False, latency, error="the stream ended without an answer")
    except Unreachable as e:
        return Sample(False, time.monotonic() - t0, error=mask(f"gateway unreachable: {e}"))
    if usage is None:
        return Sample(True, latency, ttft, max(1, chars // 4) if chars else 0, tokens_counted=True)
    return Sample(True, latency, ttft, usage)


Request = Callable[[], Sample]


def run_level(send: Request, level: int, n: int) -> tuple[list[Sample], float]:
    """`n` requests with `level` in flight at once; the samples and the wall time."""
    samples: list[Sample] = []
    lock = threading.Lock()
    left = [n]

    def worker() -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            s = send()
            with lock:
                samples.append(s)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(level, n))]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples, time.monotonic() - t0


def sweep(send: Request, alias: str, levels: Sequence[int], requests: int | None,
          on_level: Callable[[Level], None] = lambda _r: None) -> Result:
    """Check the alias answers once, then every level in turn; the result with its knee."""
    first = send()
    if not first.ok:
        raise NevError(f"throughput: {alias} did not answer through the gateway ({first.error}); "
                       f"check `nev rig status` and the key's alias list; nothing measured")
    rows = []
    for level in levels:
        samples, wall = run_level(send, level, requests_for(level, requests))
        row = summarize(level, samples, wall)
        rows.append(row)
        on_level(row)
    k = knee(rows)
    best = max(rows, key=lambda r: r.output_tok_s or 0.0)
    return Result(alias, rows, k, best.output_tok_s, best.inflight, verdict(rows, k))


def verdict(rows: Sequence[Level], k: int | None) -> str:
    if not rows:
        return "no level measured"
    if k is None:
        return (f"throughput still grows at {rows[-1].inflight} in flight "
                f"({rows[-1].output_tok_s} output tok/s): not saturated, try higher levels")
    row = next(r for r in rows if r.inflight == k)
    return f"throughput stops growing at {k} in flight ({row.output_tok_s} output tok/s)"


def render(result: Result) -> str:
    def f(x: float | None, nd: int = 2) -> str:
        return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))

    head = (f"{'in flight':>9} {'answered':>8} {'failed':>6} {'out tok/s':>10} {'req/s':>7} "
            f"{'p50 s':>7} {'p95 s':>7} {'ttft p50':>8} {'ttft p95':>8}")
    out = [f"throughput of {result.alias} (same prompt each request, streamed)", head]
    for r in result.levels:
        out.append(f"{r.inflight:>9} {r.answered:>8} {r.failed:>6} {f(r.output_tok_s, 1):>10} "
                   f"{f(r.req_s):>7} {f(r.latency_p50_s):>7} {f(r.latency_p95_s):>7} "
                   f"{f(r.ttft_p50_s):>8} {f(r.ttft_p95_s):>8}")
        for e, n in sorted(r.errors.items()):
            out.append(f"{'':>9} {n} failed: {e}")
    notes = sorted({r.note for r in result.levels if r.note})
    if notes:
        out.append("- marks a percentile with too few answers (" + "; ".join(notes) + ")")
    held = [str(r.inflight) for r in result.levels if r.gateway_waits]
    if held:
        out.append(f"the gateway's in-flight limit for the alias held requests back at {', '.join(held)} in flight "
                   "(they waited and asked again): past it, raise max_inflight to measure the pool")
    if any(r.tokens_counted_from_text for r in result.levels):
        out.append("output tokens counted from the text (chars/4): the gateway sent no usage")
    out.append(result.verdict)
    c = result.client
    if c.get("cpu_s") is not None:
        rss = "-" if c.get("peak_rss_mib") is None else f"{c['peak_rss_mib']} MiB"
        out.append(f"this client: {c['cpu_s']} s of CPU, peak RSS {rss}")
    return "\n".join(out)


def results_dir() -> Path:
    return settings.path(settings.THROUGHPUT_DIR)


def save(result: Result, directory: Path | None = None) -> Path:
    """Write the result as `<dir>/<alias>.json` (what `nev rig capacity` reads)."""
    d = directory or results_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{result.alias.replace('/', '_')}.json"
    jsonfile.write_atomic(path, result.to_json())
    return path


def own_use() -> dict[str, float | None]:
    """This process's CPU seconds (getrusage) and peak RSS (VmHWM, else getrusage; each its own
    counter, never summed with anything else; null where the platform gives none)."""
    try:
        import resource
    except ImportError:
        return {"cpu_s": None, "peak_rss_mib": None}
    ru = resource.getrusage(resource.RUSAGE_SELF)
    kib = _own_peak_kib() or ru.ru_maxrss
    return {"cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
            "peak_rss_mib": round(kib / 1024, 1) if kib else None}


def _own_peak_kib() -> int | None:
    """This program's own peak RSS (VmHWM). getrusage's ru_maxrss is carried across exec on Linux,
    so a client started by a large process (a test runner) would report its parent's size."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def run(alias: str, levels: Sequence[int], requests: int | None, max_tokens: int, timeout: float,
        on_level: Callable[[Level], None] = lambda _r: None) -> Result:
    target = gateway.endpoint_from_settings()
    result = sweep(lambda: one_request(target, alias, max_tokens, timeout), alias, levels, requests, on_level)
    result.max_tokens = max_tokens
    result.measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result.client = own_use()
    return result
