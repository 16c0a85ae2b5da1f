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
    """Start the channel the gate `g` will open first (taking the one `lanes.quick` started from
    its record when it is the same) and record its argv for the next gate; True when one started."""
    from lanes import quick

    if settings.get(settings.ON_LANE):
        return False
    try:
        lf = lanesfile.configured(require=False)
        lanes = lanesfile.pick(lf, g.lane_index) if lf.lanes else []
        if not lanes:
            quick.stop_all()
            return False
        ssh = lanes[0].openssh()
        command = payload.lane_command(payload.lane_agent().hash)
        argv = ssh.argv(command)
        ssh.start_ahead(command, quick.take(argv))    # the same client, when quick started it
    except (NevError, OSError):
        quick.stop_all()
        return False
    quick.record("" if g.lane_index is None else str(g.lane_index), argv, _argv_sources(lf))
    return True


def _argv_sources(lf: lanesfile.LanesFile) -> list[str]:
    """The files a gate's argv is made from: the lanes file, the lane agent's modules (its hash)
    and the modules that build the argv."""
    import sys

    files = [str(lf.path)] if lf.path else []
    files += [str(payload.source_path(m)) for m in payload.LANE_MODULES]
    for name in ("lanes.quick", "lanes.ahead", "lanes.payload", "lanes.lanesfile", "lanes.base.openssh",
                 "lanes.base.ssh", "lanes.base.settings"):
        f = getattr(sys.modules.get(name), "__file__", None)
        if f:
            files.append(f)
    return files
