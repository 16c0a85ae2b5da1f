"""Times as nev writes them (ISO 8601, UTC, a trailing `Z` allowed): read back, and an age said
the way every view says it."""

from __future__ import annotations

import datetime as dt


def parse(value: object) -> dt.datetime | None:
    """An ISO 8601 time as an aware datetime (one without a zone is UTC); None when `value` is not
    a time."""
    if not isinstance(value, str) or not value:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def age(seconds: float | None) -> str:
    """`45 s`, `12 min`, `3 h 5 min`, `4 d`; `-` for none."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h {(s % 3600) // 60} min"
    return f"{s // 86400} d"
