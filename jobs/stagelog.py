"""A stage's output, masked as it is written to the stage's log on the lane.

A stage runs with the job's secrets in its environment (the gateway key a writer or a batch
uses, a forge token): what it prints goes through a pipe to `MaskedLog`, which writes whole
lines to the log with every secret the stage was given replaced (`lanes.base.mask.mask`, as
the archived copy and everything nev prints). The log on the lane never holds one, not only
its archived copy on the share.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from typing import IO, BinaryIO

from lanes.base.mask import NOT_SECRET_NAMES, is_secret_name, mask

CHUNK = 65536
LONGEST_LINE = 1 << 20   # a line longer than this (no newline yet) is written as it stands


def stage_secrets(env: Mapping[str, str], files: Iterable[str | None] = ()) -> list[str]:
    """The values to mask in a stage's output: its secret-named variables and the contents of
    `files` (the key and token files the stage can read)."""
    out = [v for k, v in env.items() if v and is_secret_name(k) and k.upper() not in NOT_SECRET_NAMES]
    for p in files:
        if not p:
            continue
        try:
            with open(os.path.expanduser(p), encoding="utf-8") as f:
                v = f.read().strip()
        except OSError:
            continue
        if v:
            out.append(v)
    return out


class MaskedLog:
    """Pumps a pipe into `log`, whole lines at a time, masked (`start`, then `finish`)."""

    def __init__(self, log: BinaryIO, secrets: Iterable[str]) -> None:
        self.log = log
        self.secrets = [s for s in secrets if s and len(s) >= 4]
        self.pending = b""
        self.thread: threading.Thread | None = None
        self.stream: IO[bytes] | None = None

    def _write(self, data: bytes) -> None:
        self.log.write(mask(data.decode("utf-8", "surrogateescape"), self.secrets).encode("utf-8", "surrogateescape"))
        self.log.flush()

    def feed(self, data: bytes) -> None:
        head, sep, tail = (self.pending + data).rpartition(b"\n")
        if sep:
            self._write(head + sep)
        self.pending = tail
        if len(self.pending) > LONGEST_LINE:
            self._write(self.pending)
            self.pending = b""

    def _pump(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, CHUNK)
            except OSError:
                data = b""
            if not data:
                break
            try:
                self.feed(data)
            except (OSError, ValueError):      # the log closed under a process the stage left
                break

    def start(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.thread = threading.Thread(target=self._pump, args=(stream.fileno(),), daemon=True)
        self.thread.start()

    def finish(self, timeout: float = 5.0) -> None:
        """After the stage ended: its output drained (a process it left holding the pipe is given
        `timeout` seconds), the last partial line written and the pipe closed."""
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():
                return         # still pumping what a left-over process writes: it owns the pipe
        if self.stream is not None:
            self.stream.close()
        if self.pending:
            self._write(self.pending)
            self.pending = b""
