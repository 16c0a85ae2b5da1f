"""The operator's one notification path: the rig file's webhook, a JSON POST per event.

Sending never blocks its caller for long nor fails it: a POST has NEV_NOTIFY_TIMEOUT seconds,
and one that fails is said on one line and kept in the outbox (NEV_STATE_DIR/notify/outbox.json)
for the next send or the next tick (`flush`). The URL is a secret: it is never printed; lines
name the webhook by its scheme and host only, and every line is masked with the URL registered.

- `event(kind, subject, detail, ident)`: a one-off (a landing, a job failed for good): one
  POST, `state: event`, and counted (`counts`, for `nev rig metrics`).
- `down(kind, subject, detail, since)`: a condition holds (an alias not ready, a disk short, a
  forward down, ticks failing): one POST per incident, `state: down`; later calls send nothing.
- `up(kind, subject)`: the condition is gone: one `state: recovered` when its `down` was sent.
- `ticking()` around each tick: `flush`, then `tick_done(failed, why)`: `down(tick_failed)` at
  the second failed tick running, `up` at the next good one.

The payload (docs/notify.md): `{"nev": 1, "kind", "state", "at", "rig", "subject", "detail",
"key"}`; `key` is the same for a message and its retries, and a recovery's key is its down's key
plus `/recovered`.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from lanes.base import jsonfile, schema, settings
from lanes.base.errors import ConfigError
from lanes.base.mask import mask, register_secret
from lanes.base.notice import Notice
from lanes.base.ui import info

OUTBOX_MAX = 200  # messages kept for a receiver that is down; the oldest go first
TICK_FAILS = 2  # failed ticks in a row before the webhook hears
KEYS = schema.keys("rig", "notify")     # the rig file's schema (docs/rig.schema.json)


class Kind(StrEnum):
    LANDED = "landed"
    JOB_FAILED = "job_failed"
    TICK_FAILED = "tick_failed"
    ALIAS_DOWN = "alias_down"
    DISK_SHORT = "disk_short"
    FORWARD_DOWN = "forward_down"
    MENDED = "mended"  # the tick started a dead HAProxy or serving unit (rig/serving/mend.py)
    NOT_MENDED = "not_mended"    # an alias down with something the tick will not mend, named


@dataclass(frozen=True)
class Webhook:
    """The rig file's `notify`: the URL inline (`webhook`) or in a file (`webhook_file`, mode 600,
    relative to the rig file), and the rig's name in the payload (default: this host's name)."""

    rig: str
    inline: str | None = None
    file: Path | None = None
    #: the body's form: nev's payload, or what Discord's or Slack's incoming webhooks take
    format: str = "nev"

    def __repr__(self) -> str:  # never the URL, even in a traceback
        return f"Webhook(rig={self.rig!r}, file={self.file}, format={self.format!r})"

    def url(self) -> str:
        """The URL (registered as a secret); ConfigError naming the file, never the URL."""
        if self.inline is not None:
            register_secret(self.inline)
            return self.inline
        assert self.file is not None
        raw = jsonfile.read_bytes(
            self.file, "webhook file", "write the webhook's URL in it (mode 600)"
        )
        url = raw.decode("utf-8", "replace").strip()
        register_secret(url)
        if not _is_url(url):
            raise ConfigError(
                f"{self.file}: the webhook file holds no http(s) URL; write one in it"
            )
        return url


def _is_url(url: str) -> bool:
    p = urllib.parse.urlsplit(url)
    return p.scheme in ("http", "https") and bool(p.hostname) and url.isprintable()


def label(url: str) -> str:
    """How lines name a webhook: scheme and host only (its path or query may hold the token)."""
    p = urllib.parse.urlsplit(url)
    return f"{p.scheme}://{p.hostname or '?'}" + (f":{p.port}" if p.port else "")


def parse(f: jsonfile.Fields, top: dict, rig_file: Path) -> Webhook | None:
    """The rig file's `notify` object (rig/rigfile.py reads the rest), or None when absent."""
    raw = f.get(top, "notify", dict, "", required=False)
    if raw is None:
        return None
    o = f.known(raw, KEYS, "notify")
    inline = f.get(o, "webhook", str, "notify", required=False)
    file = f.get(o, "webhook_file", str, "notify", required=False)
    if (inline is None) == (file is None):
        raise f.fail("notify", "needs one of webhook (the URL) or webhook_file (a file holding it)")
    if inline is not None:
        register_secret(inline)
        if not _is_url(inline):
            raise f.fail(
                "notify.webhook",
                "is not an http(s) URL (its value is not shown: it may hold a token)",
            )
    rig = f.get(o, "rig", str, "notify", required=False) or socket.gethostname()
    from lanes.base import chatformat  # here: every gate imports this module (its disk check)

    fmt = f.get(o, "format", str, "notify", required=False) or "nev"
    if fmt not in chatformat.FORMATS:
        raise f.fail("notify.format",
                     f"is {fmt[:20]!r}; use one of {', '.join(chatformat.FORMATS)}")
    path = None
    if file is not None:
        q = Path(file).expanduser()
        path = q if q.is_absolute() else rig_file.parent / q
    return Webhook(rig=rig, inline=inline, file=path, format=fmt)


def configured(environ: Mapping[str, str] | None = None) -> Webhook | None:
    """The webhook of the rig file NEV_RIG_FILE names; None when there is no rig file or no
    `notify` in it. A rig file that does not read is ConfigError (the caller keeps the message)."""
    path = settings.path(settings.RIG_FILE, environ)
    if not path.exists():
        return None
    data = jsonfile.load(path, "rig file")
    f = jsonfile.Fields(path)
    return parse(f, f.obj(data, "(top level)"), path)


# -- the state folder --------------------------------------------------------------------------


def folder(environ: Mapping[str, str] | None = None) -> Path:
    return settings.path(settings.STATE_DIR, environ) / "notify"


def read_state(path: Path) -> dict[str, Any]:
    """One of the notify folder's files: a bad one is said and started over (never fatal)."""
    try:
        data = jsonfile.load(path, "notify state", missing={})
    except ConfigError as e:
        info(f"notify: {e.message}; starting it over")
        return {}
    return data if isinstance(data, dict) else {}


@contextmanager
def _locked(environ: Mapping[str, str] | None) -> Iterator[Path]:
    d = folder(environ)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(d / "notify.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield d
    finally:
        os.close(fd)


def counts(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Events counted since the state folder began (`nev rig metrics`): kind -> count."""
    data = read_state(folder(environ) / "counts.json")
    return {
        k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }


def _count(kind: str, environ: Mapping[str, str] | None) -> None:
    with _locked(environ) as d:
        c = counts(environ)
        c[kind] = c.get(kind, 0) + 1
        jsonfile.write_atomic(d / "counts.json", c, 0o600)


# -- sending -----------------------------------------------------------------------------------


def now_iso(t: float | None = None) -> str:
    import datetime as dt  # here, not at the top: every gate imports this module (its disk check)

    return dt.datetime.fromtimestamp(time.time() if t is None else t, dt.UTC).isoformat(
        timespec="seconds"
    )


def payload(
    kind: str, state: str, rig: str, subject: str, detail: str, key: str, at: float | None = None
) -> Notice:
    return Notice(kind, state, now_iso(at), rig, subject, mask(detail), key)


_QUIET_S = 60.0                        # after a receiver failed, this process waits so long
_failed: dict[str, tuple[float, str]] = {}   # url -> (monotonic time it failed, why)


def post(url: str, body: dict[str, object], timeout: float) -> str | None:
    """One POST: None when the receiver took it (2xx), else why not (masked, without the URL).
    A receiver that failed in this process the last _QUIET_S seconds is not asked again (so a
    tick with many events waits at most one timeout for a receiver that is down)."""
    last = _failed.get(url)
    if last is not None and time.monotonic() - last[0] < _QUIET_S:
        return last[1]
    why = _post(url, body, timeout)
    if why is None:
        _failed.pop(url, None)
    else:
        _failed[url] = (time.monotonic(), why)
    return why


def _post(url: str, body: dict[str, object], timeout: float) -> str | None:
    # urllib.request loads ssl, email and http: only a POST pays for them, not every gate
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "nev-notify"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - http(s) only
            r.read(4096)
            return None
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        return mask(f"{type(why).__name__}: {why}", extra=(url,))


def _outbox(d: Path) -> list[Notice]:
    items = read_state(d / "outbox.json").get("pending")
    read = (Notice.from_json(m) for m in (items if isinstance(items, list) else []))
    return [m for m in read if m is not None]


def _write_outbox(d: Path, box: list[Notice]) -> None:
    jsonfile.write_atomic(d / "outbox.json", {"pending": [m.to_json() for m in box]}, 0o600)


def _keep(environ: Mapping[str, str] | None, msgs: list[Notice], why: str) -> None:
    with _locked(environ) as d:
        box = _outbox(d) + msgs
        dropped = max(0, len(box) - OUTBOX_MAX)
        _write_outbox(d, box[dropped:])
    what = ", ".join(f"{m.kind} {m.subject}" for m in msgs)
    info(
        f"notify: {what}: not delivered ({why}); kept in {d / 'outbox.json'} for the next tick"
        + (f" ({dropped} oldest dropped)" if dropped else "")
    )


def flush(environ: Mapping[str, str] | None = None, say: bool = False) -> int:
    """Send what the outbox holds, oldest first, stopping at the first failure (the receiver is
    still down); the number left. Another process flushing at the time: nothing done. `say`:
    a failure is a line too (the tick's retry; a send says its own)."""
    d = folder(environ)
    if not (d / "outbox.json").exists():
        return 0
    hook = _hook(environ)
    if hook is None:
        return len(_outbox(d))
    url, why, fmt = hook
    fd = os.open(d / "flush.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return -1
        with _locked(environ):
            box = _outbox(d)
        if not box:
            return 0
        sent: set[str] = set()
        for m in box:
            timeout = settings.get_float(settings.NOTIFY_TIMEOUT, environ)
            err = post(url, _body(fmt, m), timeout) if url else why
            if err is not None:
                if say:
                    info(f"notify: the outbox's {len(box) - len(sent)} message(s) not delivered "
                         f"to {label(url) if url else 'the webhook'} ({err}); the next tick tries "
                         "again")
                break
            sent.add(m.key)
        with _locked(environ):
            left = [m for m in _outbox(d) if m.key not in sent]
            _write_outbox(d, left)
        if sent:
            info(f"notify: {len(sent)} message(s) from the outbox delivered")
        return len(left)
    finally:
        os.close(fd)


def _hook(environ: Mapping[str, str] | None) -> tuple[str, str, str] | None:
    """(url, "", format) of the configured webhook; ("", why, "nev") when it is configured but
    does not read; None when none is configured."""
    try:
        hook = configured(environ)
        if hook is None:
            return None
        return hook.url(), "", hook.format
    except ConfigError as e:
        return "", mask(e.message), "nev"


def _rig(environ: Mapping[str, str] | None) -> str:
    try:
        hook = configured(environ)
    except ConfigError:
        hook = None
    return hook.rig if hook is not None else socket.gethostname()


def send(msg: Notice, environ: Mapping[str, str] | None = None) -> bool:
    """Deliver one message after the outbox's (kept in the outbox when that fails): True when
    delivered. Nothing configured: nothing sent, nothing kept."""
    hook = _hook(environ)
    if hook is None:
        return False
    url, why, fmt = hook
    left = flush(environ) if url else 0
    if url and left > 0:
        why = "the receiver did not take the outbox's earlier messages"
    elif url:
        timeout = settings.get_float(settings.NOTIFY_TIMEOUT, environ)
        why = post(url, _body(fmt, msg), timeout) or ""
    if not why:
        return True
    _keep(environ, [msg], why)
    return False


def _body(fmt: str, msg: Notice) -> dict[str, object]:
    """The body a webhook of format `fmt` is sent (`lanes.base.chatformat`, loaded only to send)."""
    from lanes.base import chatformat

    return chatformat.render(fmt, msg)


def _safe(fn: Any) -> Any:
    """A notification never fails its caller: an unexpected error is one line."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the caller's work matters more than the message
            info(f"notify: {fn.__name__} failed: {type(e).__name__}: {mask(str(e))}")
            return None

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


@_safe
def event(
    kind: Kind, subject: str, detail: str, ident: str, environ: Mapping[str, str] | None = None,
    announcement: dict[str, object] | None = None,
) -> None:
    """A one-off event (counted), sent once: `ident` makes its key (a commit, a run). A landing's
    `announcement` (title, text, fields: `bench.announce`) rides in the payload; a chat format
    shows it."""
    _count(kind, environ)
    msg = payload(kind, "event", _rig(environ), subject, detail, f"{kind}/{subject}/{ident}")
    send(replace(msg, announcement=announcement), environ)


def _condition_key(kind: str, subject: str) -> str:
    return f"{kind}/{subject}"


@_safe
def down(
    kind: Kind,
    subject: str,
    detail: str,
    since: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """The condition holds (the caller has applied its threshold): the first call of an incident
    sends; the rest do nothing until `up`."""
    if _hook(environ) is None:
        return  # no webhook: no incident kept (one configured later hears of what holds then)
    ck = _condition_key(kind, subject)
    with _locked(environ) as d:
        conds = read_state(d / "conditions.json")
        if isinstance(conds.get(ck), dict):
            return
        at = time.time() if since is None else since
        key = f"{ck}/{now_iso(at)}"
        conds[ck] = {"since": now_iso(at), "key": key}
        jsonfile.write_atomic(d / "conditions.json", conds, 0o600)
    send(payload(kind, "down", _rig(environ), subject, detail, key), environ)


@_safe
def up(
    kind: Kind, subject: str, detail: str = "", environ: Mapping[str, str] | None = None
) -> None:
    """The condition is gone: `recovered` sent for an incident whose `down` was sent."""
    path = folder(environ) / "conditions.json"
    if not path.exists():
        return
    ck = _condition_key(kind, subject)
    with _locked(environ) as d:
        conds = read_state(path)
        was = conds.pop(ck, None)
        if not isinstance(was, dict):
            return
        jsonfile.write_atomic(d / "conditions.json", conds, 0o600)
    key = f"{was.get('key') or ck}/recovered"
    send(
        payload(
            kind,
            "recovered",
            _rig(environ),
            subject,
            detail or f"since {was.get('since')}: recovered",
            key,
        ),
        environ,
    )


@_safe
def tick_done(failed: bool, why: str = "", environ: Mapping[str, str] | None = None) -> None:
    """A tick's end: the second failed tick running sends `tick_failed` (once), the next good
    tick its recovery."""
    with _locked(environ) as d:
        st = read_state(d / "tick.json")
        n = st.get("failed_running")
        n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0
        n = n + 1 if failed else 0
        jsonfile.write_atomic(d / "tick.json", {"failed_running": n}, 0o600)
    if failed:
        _count(Kind.TICK_FAILED, environ)
    if n >= TICK_FAILS:
        down(
            Kind.TICK_FAILED, "tick", f"{n} ticks failed running; the last: {why}", environ=environ
        )
    elif not failed:
        up(Kind.TICK_FAILED, "tick", "a tick succeeded again", environ=environ)


@contextmanager
def ticking(environ: Mapping[str, str] | None = None) -> Iterator[None]:
    """Around one tick (jobs/tick.py): the outbox delivered first; a tick that raised failed,
    one that returned did not."""
    _safe(flush)(environ, say=True)
    try:
        yield
    except Exception as e:
        tick_done(True, mask(str(e)) or type(e).__name__, environ)
        raise
    tick_done(False, environ=environ)
