"""A set of running engines for one build: started together, rendered in parallel, always stopped."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from bench.oracle import engines as eng
from bench.oracle.engines import Engine, EngineError, Measure

T = TypeVar("T")


class Fleet:
    """One long-lived process per engine; use as a context manager so every browser is stopped."""

    def __init__(self, names: Sequence[str], make: Callable[[str], Engine] = eng.make) -> None:
        self.names = list(names)
        self._make = make
        self.engines: dict[str, Engine] = {}
        self.busy: dict[str, float] = {n: 0.0 for n in self.names}
        self.rendered: dict[str, int] = {n: 0 for n in self.names}
        # One thread per engine, for its whole life: Playwright's sync API is bound to the
        # thread that started it.
        self._threads = {n: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"engine-{n}")
                         for n in self.names}

    def __enter__(self) -> Fleet:
        try:
            self.start()
        except BaseException:
            self.stop(graceful=False)
            raise
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop(graceful=exc_type is None)

    def start(self) -> None:
        for n in self.names:
            self.engines[n] = self._make(n)
        errors = {}
        futures = {n: self._threads[n].submit(self.engines[n].start) for n in self.names}
        for n, f in futures.items():
            try:
                f.result()
            except Exception as e:  # noqa: BLE001 - reported per engine below
                errors[n] = e
        if errors:
            detail = "; ".join(f"{n}: {e}" for n, e in errors.items())
            raise EngineError(f"could not start {', '.join(errors)} ({detail}); "
                              "check `nev oracle engines`")

    def versions(self) -> dict[str, str]:
        return {n: e.version for n, e in self.engines.items()}

    def each(self, fn: Callable[[str, Engine], T]) -> dict[str, T]:
        """Run fn on every engine at once (one thread per engine process)."""
        futures = {n: self._threads[n].submit(fn, n, e) for n, e in self.engines.items()}
        return {n: f.result() for n, f in futures.items()}

    def render(self, docs: Sequence[str]) -> dict[str, list[Measure]]:
        def one(n: str, e: Engine) -> list[Measure]:
            t0 = time.monotonic()
            out = e.render(docs)
            self.busy[n] += time.monotonic() - t0
            self.rendered[n] += len(docs)
            if len(out) != len(docs):
                raise EngineError(f"{n} answered {len(out)} measurements for {len(docs)} documents")
            return out
        return self.each(one)

    def render_fresh(self, docs: Sequence[str]) -> dict[str, list[Measure]]:
        """Each document as its own top-level page, one navigation each (the unbatched way)."""
        return self.each(lambda n, e: [e.render_fresh(d) for d in docs])

    def mark(self) -> tuple[dict[str, int], dict[str, float]]:
        """Where the counts stand now, for `rates(since=...)` of one build among several."""
        return dict(self.rendered), dict(self.busy)

    def rates(self, since: tuple[dict[str, int], dict[str, float]] | None = None) -> dict[str, float]:
        """Cases per busy second of each engine, over its whole life or since a `mark()`."""
        done0, busy0 = since or ({}, {})
        out = {}
        for n in self.names:
            busy = self.busy[n] - busy0.get(n, 0.0)
            out[n] = (self.rendered[n] - done0.get(n, 0)) / busy if busy > 0 else 0.0
        return out

    def pids(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for n, e in self.engines.items():
            out[n] = e.pids()
        return out

    def stop(self, graceful: bool = True) -> None:
        """Graceful: each engine closes its session on its own thread (10 s at most), then its
        process groups are killed. Not graceful (an error, SIGTERM): kill the groups first, then
        let each engine thread close its client side (Playwright's driver) for 3 s at most."""
        if not graceful:
            for e in self.engines.values():
                e.kill()
        for n, e in self.engines.items():
            try:
                self._threads[n].submit(e.stop).result(timeout=10 if graceful else 3)
            except BaseException:  # noqa: BLE001 - killing below is what matters
                pass
            e.kill()
        self.engines.clear()
        for t in self._threads.values():
            t.shutdown(wait=False, cancel_futures=True)


class LazyFleet:
    """The engines of several builds: started the first time one of them has to render, stopped
    on exit when started here. Wrapping a running fleet (`running`) leaves it running."""

    def __init__(self, names: Sequence[str], make: Callable[[str], Engine] = eng.make,
                 running: Fleet | None = None) -> None:
        self.names = list(names)
        self._make = make
        self.fleet = running
        self._own = running is None
        self.starts = 0

    def __enter__(self) -> LazyFleet:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._own and self.fleet is not None:
            self.fleet.__exit__(exc_type, *exc)
            self.fleet = None

    def get(self) -> Fleet:
        if self.fleet is None:
            self.fleet = Fleet(self.names, self._make).__enter__()
            self.starts += 1
        return self.fleet


def fleet_info(f: Fleet) -> dict[str, object]:
    """The fleet's versions and rates: a JSON document built to be printed."""
    return {"versions": f.versions(), "rates": f.rates()}
