"""An exclusive flock that says when it has to wait for another holder."""

from __future__ import annotations

import fcntl
from collections.abc import Callable


def lock(fd: int, say: Callable[[str], None] | None, waiting: str) -> None:
    """Take an exclusive flock on `fd`; when another holds it, `say(waiting)` first, then wait."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if say is not None:
            say(waiting)
        fcntl.flock(fd, fcntl.LOCK_EX)
