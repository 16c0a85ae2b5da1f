"""How `nev box demo` runs its commands: each one's stderr stamped with the seconds since it
started (the per-step profile), and calls run beside the caller's own work."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from lanes.base.errors import NevError


class StepFailed(NevError):
    pass


class Stamped(str):
    """A command's stderr, each line led by `[+S.S s]`, the seconds since it started; and its time."""

    seconds: float = 0.0


def run_stamped(argv: list[str], cwd: Path, env: dict[str, str], timeout: float,
                on_line: Callable[[str], None] | None = None) -> tuple[subprocess.CompletedProcess[str], Stamped]:
    """`subprocess.run(argv, capture_output=True, text=True, timeout=timeout)`, and the stderr
    with each line's time since the start (read as it comes); `on_line` gets each stderr line as
    it comes (a long command's progress shown while it runs)."""
    t = time.monotonic()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    err: list[tuple[float, str]] = []

    def read_out() -> None:
        assert p.stdout is not None
        out.append(p.stdout.read())

    def read_err() -> None:
        assert p.stderr is not None
        for line in p.stderr:
            err.append((time.monotonic() - t, line))
            if on_line is not None:
                on_line(line.rstrip("\n"))

    readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
    for r in readers:
        r.start()
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise
    finally:
        for r in readers:
            r.join()
    stamped = Stamped("".join(f"[+{at:5.1f} s] {line.rstrip(chr(10))}\n" for at, line in err))
    stamped.seconds = time.monotonic() - t
    return subprocess.CompletedProcess(argv, p.returncode, "".join(out), "".join(line for _, line in err)), stamped


class Beside:
    """A call run in a thread beside the caller's own work; `result()` waits for it and returns
    its value or raises its error."""

    def __init__(self, fn: Callable[[], subprocess.CompletedProcess[str]]) -> None:
        self._fn = fn
        self._value: subprocess.CompletedProcess[str] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as e:  # handed to the caller by result()
            self._error = e

    def result(self) -> subprocess.CompletedProcess[str]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value
