"""THE gateway client: OpenAI-compatible chat completions through the LiteLLM proxy.

- the gateway's URL is the one this process reaches (`url_from_settings`: the development box's
  NEV_MODEL_URL, or on a lane the lane's own `~/.lane-model-env`);
- the run's key is read from a file (`NEV_MODEL_KEY_FILE`), never from argv, and registered
  with the masker;
- per alias at most INFLIGHT calls at once, never more than `folknet.json` declares;
- `n` in one call where the alias supports it, fanned out into n calls otherwise;
- a token-bucket pacer per alias; a 429 freezes new calls of that alias for a cooldown and
  lowers its rate, and the call is tried again: a 429 never reaches the batch;
- 5xx and connection errors are retried with backoff, then the call fails with its reason;
- every call is metered (tokens in/out, latency, pacer wait, retries, statuses, GPU-seconds) into a
  `CallRecord`, and in-flight time is metered per alias (`InflightMeter`);
- with a budget (`bench.budget.Meter`), a call whose estimated cost would pass it is not sent
  (`BudgetStop`).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import gwlimit
from bench.budget import Meter, Reservation
from bench.gateway_http import Endpoint, Unreachable, error_message, post_json
from lanes import dotenv
from lanes.base import settings
from lanes.base.errors import ConfigError
from lanes.base.mask import mask, register_secret

#: seconds of freeze after a 429 when the answer names no Retry-After
COOLDOWN_S = 1.0
#: the pacer's rate is multiplied by this after a 429 (never below MIN_RATE)
LOWER_BY = 0.5
MIN_RATE = 0.2
#: after this many clean calls in a row the rate grows 5%, up to 1.5x its seed
GROW_EVERY = 8
#: 5xx / connection failures tried this many times in all before the call fails
TRIES_5XX = 4
BACKOFF_S = 0.5
#: a run of 429s longer than this fails the call (a pool that never recovers)
MAX_429_WAIT_S = 600.0


def read_key(path: Path | None, setting: str = "NEV_MODEL_KEY_FILE", needed_by: str = "") -> str:
    """The gateway key from its file (mode 600), registered as a secret. `setting` names the
    file's setting in every message (the batch key's, or the admin key's for drift), `needed_by`
    what needs it."""
    if path is None:
        raise ConfigError(f"no gateway key{' for ' + needed_by if needed_by else ''}: set {setting} to a file "
                          "holding the key (mode 600)")
    try:
        st = path.stat()
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not text"
        raise ConfigError(f"{setting} {path}: cannot read it ({why}); point it at the key file") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{setting} {path}: readable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                          f"chmod 600 it")
    if not key:
        raise ConfigError(f"{setting} {path}: empty; write the gateway key into it")
    register_secret(key)
    return key


def key_from_settings() -> str:
    return read_key(settings.get_path(settings.MODEL_KEY_FILE))


def endpoint_from_settings() -> Endpoint:
    """The gateway as every nev caller reads it: `url_from_settings` and the key from its mode-600
    file (NEV_MODEL_KEY_FILE)."""
    return Endpoint(url_from_settings(), key_from_settings())


#: the lane user's file with the gateway's address as the lane reaches it (NEV_LANE_MODEL_URL),
#: written by `nev lane provision`
LANE_MODEL_ENV = ".lane-model-env"


def lane_model_env(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / LANE_MODEL_ENV


def url_from_settings(environ: Mapping[str, str] | None = None) -> str:
    """The gateway's base URL as this process reaches it (no trailing `/`); ConfigError when unset.

    The development box reaches the gateway through its own port forward; a lane at a rig
    address. A batch or job step on a lane may carry the development box's NEV_MODEL_URL in its
    environment, so on a lane that is never read:

    | where | the URL |
    |---|---|
    | not on a lane | NEV_MODEL_URL |
    | on a lane (NEV_ON_LANE set) | `~/.lane-model-env`'s NEV_LANE_MODEL_URL, else NEV_LANE_MODEL_URL in the environment |

    (The lane agent, `lanes/agent/copy.py`, picks the URL for the `.env` it installs for a gate.)
    """
    env = os.environ if environ is None else environ
    if settings.get(settings.ON_LANE, env):
        path = lane_model_env(env)
        url = (dotenv.first(dotenv.read(path), *settings.LANE_MODEL_URL.names)
               or settings.get(settings.LANE_MODEL_URL, env))
        if not url:
            what = "has no NEV_LANE_MODEL_URL line" if path.exists() else "does not exist"
            raise ConfigError(f"no gateway URL on this lane: {path} {what} and NEV_LANE_MODEL_URL is not set; "
                              "run `nev lane provision` with NEV_LANE_MODEL_URL set (NEV_MODEL_URL is the "
                              "development box's and is not read on a lane)")
    else:
        url = settings.get(settings.MODEL_URL, env)
        if not url:
            raise ConfigError("no gateway URL: set NEV_MODEL_URL to the gateway as this box reaches it")
    return url.rstrip("/")


# ---- the pacer (pure: the clock is passed in) ----

@dataclass
class Pacer:
    """A token bucket: `rate` calls per second, up to `burst` at once; frozen until `frozen_until`."""

    rate: float
    burst: float
    # the bucket's state, not parameters: the rate it grows back towards, what is left in it, when
    # it last refilled, the clean calls since a 429, the 429s that lowered it
    seed_rate: float = field(init=False)
    tokens: float = field(init=False)
    last: float = field(init=False, default=0.0)
    frozen_until: float = field(init=False, default=0.0)
    clean: int = field(init=False, default=0)
    lowered: int = field(init=False, default=0)
    #: wall-clock seconds new calls were frozen by 429s (the cooldowns, overlaps counted once)
    frozen_s: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.seed_rate = self.rate
        self.tokens = self.burst

    def wait_time(self, now: float) -> float:
        """Seconds until a call may start (0: now). Refills the bucket up to `now`."""
        if now < self.frozen_until:
            return self.frozen_until - now
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            return 0.0
        return (1.0 - self.tokens) / self.rate

    def take(self, now: float) -> bool:
        if self.wait_time(now) > 0:
            return False
        self.tokens -= 1.0
        return True

    def on_429(self, now: float, retry_after: float | None) -> None:
        """Freeze new calls for the cooldown and lower the rate (once per freeze: the calls that
        were already in flight when the pool began refusing do not lower it again)."""
        already = now < self.frozen_until
        until = max(self.frozen_until, now + (retry_after if retry_after else COOLDOWN_S))
        self.frozen_s += until - max(self.frozen_until, now)
        self.frozen_until = until
        self.clean = 0
        if already:
            return
        self.rate = max(MIN_RATE, self.rate * LOWER_BY)
        self.tokens = min(self.tokens, 0.0)
        self.last = max(self.last, self.frozen_until)
        self.lowered += 1

    def on_ok(self) -> None:
        self.clean += 1
        if self.clean >= GROW_EVERY:
            self.clean = 0
            self.rate = min(self.seed_rate * 1.5, self.rate * 1.05)


# ---- in-flight metering ----

class InflightMeter:
    """How long an alias had 0..limit calls in flight: the share of the time spent at its limit."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self.lock = threading.Lock()
        self.n = 0
        self.max_seen = 0
        self.t0: float | None = None
        self.last = 0.0
        self.at_limit_s = 0.0
        self.busy_s = 0.0

    def _tick(self) -> float:
        now = self.clock()
        if self.t0 is None:
            self.t0 = self.last = now
        dt = now - self.last
        if self.n >= self.limit:
            self.at_limit_s += dt
        if self.n > 0:
            self.busy_s += dt
        self.last = now
        return now

    def enter(self) -> None:
        with self.lock:
            self._tick()
            self.n += 1
            self.max_seen = max(self.max_seen, self.n)

    def leave(self) -> None:
        with self.lock:
            self._tick()
            self.n -= 1

    def summary(self) -> dict[str, object]:
        """The meter as the round record keeps it (`inflight_meter`)."""
        with self.lock:
            span = (self.last - self.t0) if self.t0 is not None else 0.0
            return {"limit": self.limit, "max_seen": self.max_seen, "span_s": round(span, 3),
                    "at_limit_s": round(self.at_limit_s, 3),
                    "at_limit_share": round(self.at_limit_s / span, 4) if span > 0 else None}


# ---- calls ----

@dataclass
class CallRecord:
    """One call as metered: what was asked, what came back, what it cost."""

    alias: str
    n: int
    seed: int
    status: str = "ok"            # ok | failed
    http: list[int] = field(default_factory=list)   # every HTTP status seen (0: no connection)
    choices: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    pacer_wait_s: float = 0.0
    retries: int = 0
    rate_limited: int = 0         # 429s of a real rate limit (the pool, HAProxy, the gateway's rpm/tpm)
    gateway_waits: int = 0        # the gateway's "slots in use" 429s: waited out, not a rate limit (bench.gwlimit)
    gateway_wait_s: float = 0.0   # seconds this call waited for a gateway slot
    error: str | None = None
    gpu_s: float = 0.0            # estimated from the pool's measured throughput (bench.budget)
    served_model: str | None = None   # the answer's `model`: what gateway and pool say served it
    fingerprint: str | None = None    # the answer's `system_fingerprint` (serving revision)
    #: the draw's queue wait as this client sees it: from the call's first request sent to the first
    #: byte of the answer that served it (429 waits and retries included; the call is not streamed,
    #: so that byte comes with the whole answer); None until answered
    first_byte_s: float | None = None

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["latency_s"] = round(self.latency_s, 4)
        d["gpu_s"] = round(self.gpu_s, 4)
        d["pacer_wait_s"] = round(self.pacer_wait_s, 4)
        d["gateway_wait_s"] = round(self.gateway_wait_s, 4)
        d["first_byte_s"] = None if self.first_byte_s is None else round(self.first_byte_s, 4)
        return d


class CallFailed(Exception):
    def __init__(self, record: CallRecord) -> None:
        super().__init__(record.error or "call failed")
        self.record = record


@dataclass
class AliasState:
    name: str
    inflight: int
    supports_n: bool
    pacer: Pacer
    sem: threading.BoundedSemaphore
    meter: InflightMeter
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: wall-clock seconds at least one call of the alias waited for a gateway slot (overlaps once)
    slot_wait_s: float = 0.0
    slot_waiting: int = 0
    slot_wait_since: float = 0.0
    last_busy: float | None = None    # when a call of the alias last met a slot-busy answer

    def slot_wait(self, clock: Callable[[], float], sleep: Callable[[float], None], seconds: float) -> None:
        """Sleep `seconds` waiting for a gateway slot, counted in `slot_wait_s`."""
        with self.lock:
            if self.slot_waiting == 0:
                self.slot_wait_since = clock()
            self.slot_waiting += 1
        try:
            sleep(seconds)
        finally:
            with self.lock:
                self.slot_waiting -= 1
                if self.slot_waiting == 0:
                    self.slot_wait_s += max(0.0, clock() - self.slot_wait_since)


def _retry_after(headers: Mapping[str, str] | http.client.HTTPMessage | None) -> float | None:
    try:
        v = headers.get("Retry-After") if headers is not None else None
        return min(30.0, float(v)) if v else None
    except (TypeError, ValueError):
        return None


def _reason(code: int, raw: bytes) -> str:
    return mask(f"HTTP {code}: {' '.join(error_message(raw).split())[:300]}")


class Gateway:
    """Calls to one OpenAI-compatible base URL with one key (`None`: no Authorization header,
    for straight-to-the-pool measurements)."""

    def __init__(self, url: str, key: str | None, timeout_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.endpoint = Endpoint(url.rstrip("/"), key)
        self.timeout_s = timeout_s
        self.clock = clock
        self.sleep = sleep
        self.aliases: dict[str, AliasState] = {}
        #: the run's spend and budget; None: calls are metered without GPU-seconds or a budget
        self.meter: Meter | None = None

    def add_alias(self, name: str, inflight: int, declared_max: int, supports_n: bool = True,
                  rate: float | None = None) -> AliasState:
        """Register an alias at min(inflight, declared_max) calls at once."""
        cap = max(1, min(inflight, declared_max))
        r = rate or float(max(4, 4 * cap))
        st = AliasState(name, cap, supports_n, Pacer(rate=r, burst=float(cap)),
                        threading.BoundedSemaphore(cap), InflightMeter(cap, self.clock))
        self.aliases[name] = st
        return st

    def _admit(self, st: AliasState) -> float:
        """Wait for the pacer; returns the seconds waited."""
        waited = 0.0
        while True:
            with st.lock:
                now = self.clock()
                w = st.pacer.wait_time(now)
                if w <= 0 and st.pacer.take(now):
                    return waited
            w = max(0.005, min(w, 1.0))
            self.sleep(w)
            waited += w

    def _post(self, body: dict[str, object]) -> tuple[int, bytes, http.client.HTTPMessage | None]:
        """(status, body, headers) of one call; status 0 with the reason when nothing answered."""
        try:
            r = post_json(self.endpoint, body, self.timeout_s)
        except Unreachable as e:
            return 0, str(e).encode(), None
        return r.status, r.body, r.headers

    def call(self, alias: str, messages: list[dict[str, str]], n: int, seed: int,
             max_tokens: int | None = None) -> tuple[list[str], CallRecord]:
        """One completion call with `n` choices (the alias must support n, or n == 1).
        Raises CallFailed (with its record) after 5xx/connection retries run out."""
        st = self.aliases[alias]
        rec = CallRecord(alias=alias, n=n, seed=seed)
        body: dict[str, object] = {"model": alias, "messages": messages, "n": n, "seed": seed}
        if max_tokens:
            body["max_tokens"] = max_tokens
        tries_5xx = 0
        first_429: float | None = None
        first_sent: float | None = None
        st.sem.acquire()
        held: Reservation | None = None
        try:
            if self.meter is not None:   # BudgetStop: the call is not sent
                held = self.meter.admit(alias, n, sum(len(m.get("content") or "") for m in messages), max_tokens)
            last = st.last_busy
            polite = gwlimit.yield_wait(None if last is None else self.clock() - last)
            if polite > 0:                      # slots are contended: the freed one is a waiter's
                st.slot_wait(self.clock, self.sleep, polite)
                rec.gateway_wait_s += polite
            while True:
                rec.pacer_wait_s += self._admit(st)
                t0 = self.clock()
                first_sent = t0 if first_sent is None else first_sent
                st.meter.enter()
                try:
                    code, raw, headers = self._post(body)
                finally:
                    st.meter.leave()
                answered = self.clock()
                rec.latency_s += answered - t0
                rec.http.append(code)
                if code == 200:
                    rec.first_byte_s = answered - first_sent
                    try:
                        data = json.loads(raw)
                        texts = [c["message"]["content"] or "" for c in data["choices"]]
                    except (ValueError, KeyError, TypeError) as e:
                        rec.status, rec.error = "failed", f"{alias}: the answer is not a chat completion ({e})"
                        raise CallFailed(rec) from None
                    usage = data.get("usage") or {}
                    rec.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    rec.completion_tokens = int(usage.get("completion_tokens") or 0)
                    details = usage.get("prompt_tokens_details") or {}
                    rec.cached_tokens = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
                    rec.choices = len(texts)
                    served, fp = data.get("model"), data.get("system_fingerprint")
                    rec.served_model = served if isinstance(served, str) and served else None
                    rec.fingerprint = fp if isinstance(fp, str) and fp else None
                    if held is not None and self.meter is not None:
                        rec.gpu_s = self.meter.settle(held, n, rec.prompt_tokens, rec.completion_tokens)
                        held = None
                    with st.lock:
                        st.pacer.on_ok()
                    return texts, rec
                if code == 429:
                    now = self.clock()
                    first_429 = first_429 if first_429 is not None else now
                    if gwlimit.slots_busy(code, raw) and now - first_429 <= MAX_429_WAIT_S:
                        rec.gateway_waits += 1  # the gateway's in-flight limit: another caller holds the slots
                        w0 = self.clock()
                        with st.lock:
                            st.last_busy = w0
                        st.slot_wait(self.clock, self.sleep, gwlimit.slot_wait(w0 - first_429))
                        rec.gateway_wait_s += self.clock() - w0
                        continue
                    rec.rate_limited += 1
                    rec.retries += 1
                    with st.lock:
                        st.pacer.on_429(now, _retry_after(headers))
                    if now - first_429 > MAX_429_WAIT_S:
                        rec.status = "failed"
                        rec.error = f"{alias}: rate limited (429) for over {MAX_429_WAIT_S:.0f} s"
                        raise CallFailed(rec)
                    continue
                if code == 0 or code >= 500:
                    tries_5xx += 1
                    why = (f"no connection to the gateway at {mask(self.endpoint.url)} "
                           f"({mask(raw.decode(errors='replace'))[:200]})"
                           if code == 0 else _reason(code, raw))
                    if tries_5xx >= TRIES_5XX:
                        rec.status, rec.error = "failed", f"{alias}: {why} (tried {tries_5xx} times)"
                        raise CallFailed(rec)
                    rec.retries += 1
                    self.sleep(BACKOFF_S * 2 ** (tries_5xx - 1))
                    continue
                rec.status, rec.error = "failed", f"{alias}: {_reason(code, raw)}"
                raise CallFailed(rec)
        finally:
            if held is not None and self.meter is not None:
                self.meter.settle(held, n, None, None)
            st.sem.release()


def split_draws(total: int, inflight: int, supports_n: bool, max_n: int = 16) -> list[int]:
    """How `total` candidates become calls: the n of each call. With n support, as few calls as
    fill the in-flight slots (each at most `max_n`); without, one call per candidate."""
    if total <= 0:
        return []
    if not supports_n:
        return [1] * total
    calls = max(min(inflight, total), math.ceil(total / max_n))
    base, extra = divmod(total, calls)
    return [base + (1 if i < extra else 0) for i in range(calls)]

