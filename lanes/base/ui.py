"""Output for people and scripts: progress on a terminal, plain lines elsewhere, JSON on demand."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lanes.base.mask import mask


def is_tty() -> bool:
    return sys.stderr.isatty()


def info(msg: str) -> None:
    """A progress or status line on stderr (stdout stays for results)."""
    print(mask(msg), file=sys.stderr, flush=True)


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


@contextmanager
def step(label: str) -> Iterator[None]:
    """One line per step with its elapsed time: `label ... done (1.2 s)`."""
    t0 = time.monotonic()
    info(f"{label} ...")
    try:
        yield
    except BaseException:
        info(f"{label}: failed after {time.monotonic() - t0:.1f} s")
        raise
    info(f"{label}: done ({time.monotonic() - t0:.1f} s)")


class Counter:
    """Progress over N items: a rich bar on a terminal, a line every few seconds otherwise."""

    def __init__(self, label: str, total: int | None, every: float = 5.0) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.t0 = time.monotonic()
        self.last = 0.0
        self.every = every
        self._bar: Any = None
        if is_tty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            from lanes.base.termsafe import raw, safe

            # nev's own bar, on the raw stream (its escapes are nev's); the label through `safe`
            self.label = safe(label)
            self._bar = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), transient=False,
                                 console=Console(file=raw(sys.stderr)))
            self._bar.start()
            self._task = self._bar.add_task(label, total=total)

    def advance(self, n: int = 1, note: str = "") -> None:
        self.done += n
        if self._bar is not None:
            from rich.markup import escape

            from lanes.base.termsafe import safe

            text = escape(f"{self.label} {safe(note)}".strip())
            self._bar.update(self._task, advance=n, description=text)
            return
        now = time.monotonic()
        if now - self.last >= self.every or (self.total is not None and self.done >= self.total):
            self.last = now
            of = f"/{self.total}" if self.total is not None else ""
            info(f"{self.label}: {self.done}{of} ({now - self.t0:.1f} s) {note}".rstrip())

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
