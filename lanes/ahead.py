"""A gate's channel started ahead: `nev lane run|on` starts the SSH client to its lane before the
rest of nev is imported, so the connection through the jump host is made while the command line
is parsed and the worktree read. The gate's first session to that lane takes it
(`lanes.base.ssh.OpenSsh.open_session`); one nobody took is stopped when nev exits.

Only the plain case is guessed here: `[--lane N] [--lane-only] [--pull DIR]... WORKTREE ...`, the
lane from the lanes in effect, no NEV_ON_LANE. Anything else (help, an unknown option, a bad lanes
file) starts nothing; the command itself then says what is wrong.
"""

from __future__ import annotations

from lanes import lanesfile, payload
from lanes.base import settings
from lanes.base.errors import NevError


def lane_index(args: list[str]) -> tuple[bool, int | None]:
    """(plain, --lane N) of the arguments after `lane run|on`; plain is False when an option
    other than --lane, --lane-only and --pull comes before the worktree (or there is none)."""
    i, index = 0, None
    while i < len(args):
        a = args[i]
        if a in ("--lane", "--pull") and i + 1 < len(args):
            if a == "--lane":
                if not args[i + 1].isdigit():
                    return False, None
                index = int(args[i + 1])
            i += 2
        elif a.startswith(("--lane=", "--pull=")):
            if a.startswith("--lane="):
                if not a[7:].isdigit():
                    return False, None
                index = int(a[7:])
            i += 1
        elif a == "--lane-only":
            i += 1
        elif a.startswith("-"):
            return False, None
        else:
            return i + 1 < len(args), index     # a worktree, and a command after it
    return False, None


def start(args: list[str]) -> bool:
    """Start the channel of the gate `args` (after `lane run|on`) will open first; True when one started."""
    plain, index = lane_index(args)
    if not plain or settings.get(settings.ON_LANE):
        return False
    try:
        lf = lanesfile.configured(require=False)
        lanes = lanesfile.pick(lf, index) if lf.lanes else []
        if not lanes:
            return False
        lanes[0].openssh().start_ahead(payload.lane_command(payload.lane_agent().hash))
    except (NevError, OSError):
        return False
    return True
