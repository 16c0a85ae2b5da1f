"""The `nev` entry point (`nev = rig.cli:run`, `python -m rig.cli`): as little as possible before
the command tree (`rig/commands.py`, click) loads.

`nev lane run|on` goes straight to the gate, without click, when its one parser
(`lanes.gateargs`, stdlib only, the click command's parser too) reads a gate: the first lane's
SSH client is started first — from the argv an earlier gate recorded (`lanes.quick`) before
anything else of nev is imported — so it connects through the jump host while the rest of the
gate is imported and the worktree read (`lanes.ahead`). `nev job step` (each step of the job
workflow on a lane) goes straight to its own argparse (`jobs/lane_main.py`). Every other command
line, help and a gate's usage error included, is the command tree's. `cli`, `main` and the
tables of `rig.commands` are its own.

Run from one of a lane's versioned installs (`~/.local/share/nev/installs/<key>`), `run` first
holds that install for the whole run and pins the run's children to it (`_hold_install`).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lanes.gateargs import GateArgs


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["lane"] and args[1:2] in (["run"], ["on"]):
        from lanes import gateargs

        try:
            g = gateargs.parse(args[1], args[2:])
        except (gateargs.Usage, gateargs.Help):
            pass                       # the command tree says it, in click's words
        else:
            from lanes import quick

            quick.start(g)             # the recorded client, before the rest of nev loads
            from lanes import ahead

            ahead.start(g)
            return _gate(g)
    if args[:2] == ["job", "step"]:
        return _job_step(args[2:])
    from lanes.base import termsafe
    from rig import commands

    termsafe.install()  # all the command tree prints: safe for a terminal (lanes/base/termsafe.py)
    return commands.main(args)


def _job_step(args: list[str]) -> int:
    """`nev job step ...` (hidden; every step of the job workflow on a lane runs it): its own
    argparse, so the command tree is not loaded for it."""
    from jobs import lane_main
    from rig.entry import guarded

    return guarded(lambda: lane_main.main(args))


def _gate(g: GateArgs) -> int:
    """`nev lane run|on` as `lanes/cli.py` runs them, with the same logging and error lines."""
    import logging

    from lanes import gateargs
    from rig.entry import guarded

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stderr)
    _GATED.append(True)
    return guarded(lambda: gateargs.run(g))


def run() -> None:
    _hold_install()
    code = main()
    if _GATED:
        _quick_exit(code)
    sys.exit(code)


_HELD: list[int] = []       # the in-use lock's descriptor, open for the whole run (`_hold_install`)


def _hold_install() -> None:
    """A nev run from one of a lane's versioned installs (`lanes/selfinstall.py`) stays on it:

    - it holds a shared flock on the install's `.in-use` for its whole run, so the sweep, which
      takes that lock exclusively before removing an install, never removes it under this run;
    - it exports NEV_INSTALL (the install's folder) and puts the install's `entry/` (its `nev`
      alone) first on PATH, so every child that calls `nev` (a job's stages, an in-place gate, a
      writer) runs this install too, whatever `current` says by then;
    - a nev started under NEV_INSTALL from another install (a stage that called
      `~/.local/bin/nev` by its path after the link flipped) hands over to NEV_INSTALL's own nev.

    Elsewhere (a development box, `python -m rig.cli` from a checkout) nothing happens."""
    import os

    if sys.prefix == sys.base_prefix or not __file__.startswith(sys.prefix + os.sep):
        return          # not installed in a venv (a checkout's nev): nothing to hold, nothing loaded
    import fcntl

    from lanes.agent import layout

    me = os.path.realpath(sys.prefix)
    try:
        fd = os.open(os.path.join(me, layout.IN_USE), os.O_RDONLY)
    except OSError:
        return          # not an install of a lane's (no in-use file): nothing to hold
    from lanes.base import settings

    pinned = settings.get(settings.INSTALL)
    if pinned and os.path.realpath(pinned) != me:
        there = os.path.join(pinned, "bin", "nev")
        if os.path.isfile(os.path.join(pinned, layout.IN_USE)) and os.access(there, os.X_OK):
            os.close(fd)
            os.execv(there, [there, *sys.argv[1:]])
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        print(f"nev: the install {me} is being removed by a sweep; run nev again", file=sys.stderr)
        sys.exit(1)
    _HELD.append(fd)
    os.environ[settings.INSTALL.name] = me
    entry = os.path.join(me, layout.INSTALL_ENTRY)
    rest = [d for d in os.environ.get("PATH", "").split(":") if d and d != entry]
    os.environ["PATH"] = ":".join([entry, *rest])


_GATED: list[bool] = []     # a plain gate ran (`_gate`): `run` ends the process without teardown


def _quick_exit(code: int) -> None:
    """End after a plain gate without the interpreter's teardown of every module (~15 ms of a
    warm gate): the exit handlers run (SSH clients nobody took are stopped, logging flushed) and
    the standard streams are flushed first. The gate leaves no thread of its own running."""
    import atexit
    import os

    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def __getattr__(name: str) -> Any:
    """`rig.cli.cli` and the rest of the command tree, loaded when asked for (not for the import
    system's own questions, such as whether this module is a package)."""
    if name.startswith("__"):
        raise AttributeError(name)
    from rig import commands

    try:
        return getattr(commands, name)
    except AttributeError:
        raise AttributeError(f"module 'rig.cli' has no attribute {name!r}") from None


if __name__ == "__main__":
    run()
