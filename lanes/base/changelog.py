"""The rig's change log, `<rig notes>/changelog.md` (mode 600): one entry per change, newest last,
and its reader (`entries`, `read`).

Its one writer: the snapshot and the restore, the serving verbs (`rig/`) and a person's landing
(`jobs/`) append here. An entry is a `## TIME WHAT` line and `- key: value` lines; every entry is
masked and made safe for a terminal (`termsafe.safe`) before writing, and never carries file
content or command output.
"""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import asdict, dataclass
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


@dataclass(frozen=True)
class Entry:
    time: str
    heading: str         # after the time: `snapshot LABEL`, `drain ROLE`, `log worked`
    who: str
    lines: list[str]     # the `- ` lines but who, in order, without the `- `

    @property
    def by_person(self) -> bool:
        return self.heading.split(" ", 1)[0] == "log"

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "by": "person" if self.by_person else "nev"}


def entries(text: str) -> list[Entry]:
    """The change log's entries in the order written (oldest first); text before the first
    heading is not an entry."""
    out: list[Entry] = []
    for block in ("\n" + text).split("\n## ")[1:]:
        head, *rest = block.split("\n")
        time, _, heading = head.partition(" ")
        who, lines = "?", []
        for ln in rest:
            if not ln.startswith("- "):
                continue
            if ln.startswith("- who: ") and who == "?":
                who = ln[len("- who: "):]
            else:
                lines.append(ln[2:])
        out.append(Entry(time=time, heading=heading, who=who, lines=lines))
    return out


def read(notes: Path) -> list[Entry]:
    p = notes / NAME
    return entries(p.read_text(errors="replace")) if p.exists() else []
