"""A gate started ahead: `nev lane run|on` in its plain form is parsed here, without click, and
the SSH client to its first lane is started before the rest of nev is imported, so the
connection through the jump host is made while the worktree is read. The gate's first session
to that lane takes that client (`lanes.base.openssh.OpenSsh.open_session`); one nobody took is
stopped when nev exits.

The plain form: `run [--lane N] [--pull DIR]... WORKTREE COMMAND...` and `on` with `--lane-only`
as well; `--opt=value` spelled either way. Anything else (help, `--`, an unknown option, no
command, a WORKTREE that is a file) is left to the command line proper (`lanes/cli.py`), which
says what is wrong; no lane settings are read on a lane (NEV_ON_LANE).
"""

from __future__ import annotations

from dataclasses import dataclass

from lanes import lanesfile, payload
from lanes.base import settings
from lanes.base.errors import NevError


@dataclass(frozen=True)
class GateArgs:
    lane_index: int | None
    lane_only: bool
    pull: tuple[str, ...]
    worktree: str
    command: tuple[str, ...]


def _option(args: list[str], i: int) -> tuple[str, str | None, int]:
    """(name, value, next index) of the option at `i`: `--name value` or `--name=value`."""
    a = args[i]
    if "=" in a:
        name, _, value = a.partition("=")
        return name, value, i + 1
    if a in ("--lane", "--pull"):
        return a, (args[i + 1] if i + 1 < len(args) else None), i + 2
    return a, None, i + 1


def parse(sub: str, args: list[str]) -> GateArgs | None:
    """The arguments after `lane run|on` (`sub`) in their plain form, else None."""
    index: int | None = None
    lane_only, pull, i = False, [], 0
    while i < len(args) and args[i].startswith("-"):
        name, value, i = _option(args, i)
        if name == "--lane" and value is not None and value.isdigit():
            index = int(value)
        elif name == "--pull" and value:
            pull.append(value)
        elif name == "--lane-only" and sub == "on" and value is None:
            lane_only = True
        else:
            return None
    if i + 1 >= len(args):
        return None                                  # no worktree, or no command after it
    from pathlib import Path

    if Path(args[i]).is_file():
        return None
    return GateArgs(index, lane_only, tuple(pull), args[i], tuple(args[i + 1:]))


def start(g: GateArgs) -> bool:
    """Start the channel the gate `g` will open first; True when one started."""
    if settings.get(settings.ON_LANE):
        return False
    try:
        lf = lanesfile.configured(require=False)
        lanes = lanesfile.pick(lf, g.lane_index) if lf.lanes else []
        if not lanes:
            return False
        lanes[0].openssh().start_ahead(payload.lane_command(payload.lane_agent().hash))
    except (NevError, OSError):
        return False
    return True
