"""Whether a lane is busy: a process named in LANE_BUSY_COMMANDS (default cargo|rustc|node) runs.

One test for the NAS and sweep code: `busy_processes` decides over `ps` lines (pure), `lane_busy`
asks a lane over SSH.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from lanes.base import settings
from lanes.base.errors import ConfigError
from lanes.base.ssh import Connection

PS_COMMAND = "ps -eo pid=,comm="


def pattern(environ: Mapping[str, str] | None = None) -> str:
    """NEV_LANE_BUSY_COMMANDS, or the seed's LANE_BUSY_COMMANDS, or cargo|rustc|node."""
    env = os.environ if environ is None else environ
    raw = (settings.given(settings.LANE_BUSY_COMMANDS, env) or env.get("LANE_BUSY_COMMANDS")
           or settings.value(settings.LANE_BUSY_COMMANDS, env))
    names = [n.strip() for n in raw.split("|") if n.strip()]
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_.+-]+", n)]
    if not names or bad:
        raise ConfigError(f"LANE_BUSY_COMMANDS={raw!r}: give process names separated by '|' "
                          "(for example cargo|rustc|node)")
    return "|".join(names)


def busy_processes(ps_output: str, busy: str) -> list[tuple[int, str]]:
    """The (pid, name) lines of `ps -eo pid=,comm=` whose name is one of `busy`."""
    names = set(busy.split("|"))
    out = []
    for line in ps_output.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].isdigit() and parts[1].strip() in names:
            out.append((int(parts[0]), parts[1].strip()))
    return out


def lane_busy(conn: Connection, busy: str | None = None) -> list[tuple[int, str]]:
    res = conn.run(PS_COMMAND, check=True)
    return busy_processes(res.out, busy or pattern())
