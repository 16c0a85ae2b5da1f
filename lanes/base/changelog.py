"""The rig's change log, `<rig notes>/changelog.md` (mode 600): one entry per change, newest last.

Its one writer: the snapshot and the restore, the serving verbs (`rig/`) and a person's landing
(`jobs/`) append here. An entry is a `## TIME WHAT` line and `- key: value` lines; every entry is
masked and made safe for a terminal (`termsafe.safe`) before writing, and never carries file
content or command output.
"""

from __future__ import annotations

import getpass
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from lanes.base.mask import known_secrets, mask
from lanes.base.termsafe import safe

NAME = "changelog.md"


def who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def append(notes: Path, entry: str) -> Path:
    p = notes / NAME
    notes.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
        # safe: no control character or escape sequence (a terminal that shows the file obeys them),
        # and a value that is not UTF-8 kept as its escaped bytes rather than refused mid-write
        os.write(fd, (safe(mask(entry, extra=known_secrets())) + "\n").encode())
    finally:
        os.close(fd)
    return p
