"""A gate command's output: to the development box as it comes and, masked, to the gate log on the share.

The share is readable by the whole subnet, so the log never holds a secret the run knows of
(the `.env`'s secret-named values, the forge token) nor a URL's credentials.
"""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Callable
from typing import Any

from lanes import dotenv
from lanes.agent.wire import CHUNK, Kind, Wire

_SECRET_NAME = re.compile(r"(?i)KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL")

# The masking of output, as source: the agent runs it (`Masker`), and so does a writer's wrapper,
# the python3 program the agent leaves running beside a detached harness (`lanes.agent.writer`).
MASK_SOURCE = r"""
import re
URL_CRED = re.compile(rb"([a-zA-Z][a-zA-Z0-9+.-]{0,31}://)[^/\s:@]+(?::[^/\s@]*)?@")


def secret_bytes(secrets):
    return sorted({s.encode() for s in secrets if s and len(s) >= 4}, key=len, reverse=True)


def mask_bytes(data, secrets):
    for s in secrets:
        data = data.replace(s, b"***")
    return URL_CRED.sub(rb"\1***@", data)
"""
_mask_ns: dict[str, Any] = {}  # the namespace the masking program is run in (exec)
exec(compile(MASK_SOURCE, "lanes.agent.output.MASK_SOURCE", "exec"), _mask_ns)  # noqa: S102 - our own source, one definition
secret_bytes: Callable[[list[str]], list[bytes]] = _mask_ns["secret_bytes"]
mask_bytes: Callable[[bytes, list[bytes]], bytes] = _mask_ns["mask_bytes"]


class Masker:
    def __init__(self, secrets: list[str]) -> None:
        self.secrets = secret_bytes(secrets)

    def __call__(self, data: bytes) -> bytes:
        return mask_bytes(data, self.secrets)


def env_secrets(path: str) -> list[str]:
    """Values of secret-named variables in a .env file, to mask them in the gate log."""
    return secret_values(dotenv.read(path))


def secret_values(env: dict[str, str]) -> list[str]:
    """The values of the secret-named variables of `env`."""
    return [v for k, v in env.items() if v and _SECRET_NAME.search(k)]


def open_log(path: str | None, say: Callable[[str], None]) -> io.BufferedWriter | None:
    """The gate log opened for appending; None (and one line said) when it cannot be written."""
    if not path:
        return None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "ab")
    except OSError as e:
        say(f"cannot write the gate log {path}: {e}")
        return None


class Tee:
    """Pumps the command's stdout and stderr to the wire, whole lines of both to the log, masked."""

    def __init__(self, wire: Wire, log: io.BufferedWriter | None, masker: Masker) -> None:
        self.wire = wire
        self.log = log
        self.masker = masker
        self.lock = threading.Lock()
        self.pending = {Kind.STDOUT: b"", Kind.STDERR: b""}
        self.threads: list[threading.Thread] = []

    def start(self, stdout: io.BufferedReader, stderr: io.BufferedReader) -> None:
        self.threads = [threading.Thread(target=self._pump, args=(stdout, Kind.STDOUT), daemon=True),
                        threading.Thread(target=self._pump, args=(stderr, Kind.STDERR), daemon=True)]
        for t in self.threads:
            t.start()

    def _pump(self, stream: io.BufferedReader, kind: Kind) -> None:
        fd = stream.fileno()
        while True:
            data = os.read(fd, CHUNK)
            if not data:
                break
            self.wire.send(kind, data)
            if self.log is not None:
                with self.lock:
                    head, sep, tail = (self.pending[kind] + data).rpartition(b"\n")
                    if sep:
                        self.log.write(self.masker(head + sep))
                        self.log.flush()
                    self.pending[kind] = tail

    def finish(self) -> None:
        """After the command ended: the pumps drained, the last partial lines logged, the log closed."""
        for t in self.threads:
            t.join(timeout=2)
        if self.log is not None:
            for rest in self.pending.values():
                if rest:
                    self.log.write(self.masker(rest))
            self.log.close()
