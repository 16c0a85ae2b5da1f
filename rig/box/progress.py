"""What a step of `nev box up` is doing, said as it goes.

Each step's line is said as it starts (`Build.run`). Within a long one, the step says its own
phases (`Progress.phase`: "lane0: its files and keys", "nev's wheelhouse: pip wheel ...",
"lane1: installing nev ...") as it enters them, and work done by a script elsewhere reports
through a watch (`Progress.watching`): a function polled every POLL_S that reads where the script
is (the lanes' image build, from its log: `lanes.create_lxc.image_progress`); a new phase is said as
it appears, its detail (packages set up so far) rides on the heartbeat. When nothing was said for
HEARTBEAT_S, one line says the step is still going, naming its phase: a cold build takes minutes
and a terminal that says nothing looks hung.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

HEARTBEAT_S = 15.0     # a long step says it is alive this often when it has nothing new to say
POLL_S = 1.0           # how often a watch is read

Watch = Callable[[], "tuple[str, str] | None"]     # (phase, detail), None when nothing is known


class Progress:
    def __init__(self, say: Callable[[str], None], t0: float, every: float | None = None,
                 poll: float | None = None) -> None:
        self.say, self.t0 = say, t0
        self.every = HEARTBEAT_S if every is None else every
        self.poll = POLL_S if poll is None else poll
        self.label = ""
        self.now = self.detail = ""
        self.last = t0
        self.watch: Watch | None = None
        self._lock = threading.Lock()

    def _say(self, text: str) -> None:
        self.say(f"{self.label}: {text} ({time.monotonic() - self.t0:.0f} s)")
        self.last = time.monotonic()

    def phase(self, text: str) -> None:
        """The step's own phase, said now."""
        with self._lock:
            self.now, self.detail = text, ""
            self._say(text)

    @contextmanager
    def watching(self, watch: Watch) -> Iterator[None]:
        """While the block runs, `watch` says the phase of work a script does elsewhere."""
        self.watch = watch
        try:
            yield
        finally:
            self.watch = None

    def tick(self) -> None:
        """One poll: a new phase from the watch is said; else, after HEARTBEAT_S of silence,
        the heartbeat."""
        watch = self.watch
        got = None
        if watch is not None:
            try:
                got = watch()
            except OSError:
                got = None
        with self._lock:
            if got:
                phase, self.detail = got
                if phase != self.now:
                    self.now = phase
                    self._say(", ".join(x for x in (phase, self.detail) if x))
                    return
            if time.monotonic() - self.last >= self.every:
                what = ", ".join(x for x in (self.now, self.detail) if x)
                self._say(f"{what}: still going" if what else "still going")

    @contextmanager
    def step(self, label: str) -> Iterator[Progress]:
        """One step: its label on every line, polled while the block runs."""
        self.label, self.now, self.detail, self.last = label, "", "", time.monotonic()
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(min(self.poll, self.every)):
                self.tick()

        t = threading.Thread(target=beat, daemon=True)
        t.start()
        try:
            yield self
        finally:
            stop.set()
            t.join()


class Said(list[str]):
    """A list of what changed that says each item as it is added (a host's line when that host
    is done, not all of them at the end)."""

    def __init__(self, say: Callable[[str], None], prefix: str, items: list[str]) -> None:
        super().__init__(items)
        self.say, self.prefix = say, prefix

    def append(self, item: str) -> None:
        self.say(self.prefix + item)
        super().append(item)

    def extend(self, items: Iterable[str]) -> None:
        for item in items:
            self.append(item)

    def __iadd__(self, items: Iterable[str]) -> Said:  # type: ignore[override,misc]
        self.extend(items)
        return self
