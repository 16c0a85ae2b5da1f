"""`.env`-style files (`NAME=value` lines), read one way everywhere.

A checkout's `.env`, the lane's `~/.lane-model-env` and the lane's answer to the submit probe
all go through `parse`. Stdlib only and self-contained: it travels with the lane agent
(`lanes/agentpack.py`).
"""

from __future__ import annotations

import os
import re

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse(text: str) -> dict[str, str]:
    """NAME -> value of every `NAME=value` line (pure).

    | line | value |
    |---|---|
    | blank, `# ...`, or no valid NAME before `=` | skipped |
    | `export NAME=v` | as `NAME=v` |
    | `NAME="v"` / `NAME='v'` (then maybe ` # note`) | `v`, verbatim (no escapes, no `$` expansion) |
    | `NAME=v # note` | `v` (a ` #` after an unquoted value starts a comment) |
    | `NAME=  v  ` | `v` |

    A later line of the same NAME wins, as when a shell sources the file.
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("export ") or s.startswith("export\t"):
            s = s[7:].lstrip()
        name, sep, value = s.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name):
            continue
        value = value.strip()
        end = value.find(value[0], 1) if value and value[0] in "'\"" else -1
        if end > 0:
            value = value[1:end]
        else:
            cut = value.find(" #")
            if cut >= 0:
                value = value[:cut].rstrip()
        out[name] = value
    return out


MAX_BYTES = 1 << 20   # a `.env` is NAME=value lines: one larger than this is no `.env`


def read(path: str | os.PathLike[str]) -> dict[str, str]:
    """`parse` of the file at `path`; {} when it is missing, unreadable, not a regular file (a
    FIFO would block, a device never end) or larger than MAX_BYTES."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return {}
        data = os.read(fd, MAX_BYTES + 1)
    except OSError:
        return {}
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        return {}
    return parse(data.decode("utf-8", errors="replace"))


def first(values: dict[str, str], *names: str) -> str | None:
    """The value of the first of `names` that is set and not empty."""
    for n in names:
        v = values.get(n)
        if v:
            return v
    return None
