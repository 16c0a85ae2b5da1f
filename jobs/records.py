"""What the dev box remembers of its jobs: `NEV_STATE_DIR/job-results.json` (submissions, sends, outcomes).

Read and written under a lock (`job-results.json.lock`), atomically, so a tick and a
submission never drop each other's entries.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lanes import jsonfile, settings


def path(environ: Mapping[str, str] | None = None) -> Path:
    base = settings.path(settings.STATE_DIR, environ)
    return base / "job-results.json"


@contextmanager
def locked(environ: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """The records, held under the lock; written back (atomically) when the block ends without error."""
    p = path(environ)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(p) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = load(p)
        yield data
        jsonfile.write_atomic(p, data, mode=0o600)
    finally:
        os.close(fd)


def load(p: Path) -> dict[str, Any]:
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except json.JSONDecodeError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    data.setdefault("schema", 1)
    data.setdefault("jobs", {})
    return data
