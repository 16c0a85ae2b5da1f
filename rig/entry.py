"""What every way into nev shares (the command tree, `rig/commands.py`, and the plain gate of
`rig/cli.py`): SIGTERM raised as `Terminated` so cleanups run, and a known error turned into one
line and its documented exit code (docs/exit-codes.md)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from lanes.base.mask import mask


class Terminated(BaseException):
    """SIGTERM, turned into an exception so cleanups run; exit 143."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def guarded(call: Callable[[], int]) -> int:
    """`call()`'s exit code; a NevError, an interrupt, SIGTERM or a closed stdout as one line and
    its code. The code's status line goes to NEV_STATUS_FILE when it is set."""
    code: int = Exit.FAILED
    try:
        code = _guarded(call)
        return code
    finally:
        _write_status(code)


def _write_status(code: int) -> None:
    """`command N` or `own N NAME` into NEV_STATUS_FILE (docs/exit-codes.md), by rename."""
    import os

    from lanes.base import settings
    from lanes.base.exitcodes import status_line

    try:
        path = settings.get_path(settings.STATUS_FILE)
    except NevError:        # a malformed config file: said already, as the run's one line
        return
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(status_line(code), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        print(f"nev: cannot write the status file {path} (NEV_STATUS_FILE): {e.strerror}",
              file=sys.stderr)


def _guarded(call: Callable[[], int]) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return call()
    except NevError as e:
        print(f"nev: {mask(' '.join(e.message.splitlines()))}", file=sys.stderr)   # one line, whatever it holds
        return e.exit_code
    except KeyboardInterrupt:
        print("nev: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except Terminated:
        print("nev: terminated", file=sys.stderr)
        return Exit.TERMINATED
    except BrokenPipeError:
        return Exit.FAILED
