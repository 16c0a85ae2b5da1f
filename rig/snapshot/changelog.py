"""The change log in the rig notes: every snapshot and restore, newest last (mode 600).

It is the record the seed's "Rig change log" keeps by hand: the label, who, what changed.
It never carries file content or command output, and every line is masked before writing.
"""

from __future__ import annotations

import getpass
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from lanes.base.mask import known_secrets, mask
from rig.snapshot.store import Manifest

NAME = "changelog.md"


def who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def changed_files(old: Manifest | None, new: Manifest) -> list[str]:
    """`role host:path` for every file whose content, owner or mode differs from `old`."""
    out = []
    for role, hosts in new.roles.items():
        for host, s in hosts.items():
            before = old.roles.get(role, {}).get(host) if old else None
            for f in s.files:
                prev = before.file(f.path) if before else None
                if prev is None or not prev.same_as(f):
                    out.append(f"{role} {host}:{f.path}")
    return out


def snapshot_entry(m: Manifest, previous: Manifest | None, same_as: str | None) -> str:
    roles = ", ".join(f"{r} ({len(h)} host{'s' if len(h) != 1 else ''})" for r, h in m.roles.items())
    lines = [f"## {m.time} snapshot {m.label}", f"- who: {m.who}", f"- roles: {roles}",
             f"- files: {m.file_count()}"]
    if same_as:
        lines.append(f"- same content as {same_as} (storage shared)")
    elif previous is not None:
        ch = changed_files(previous, m)
        lines.append(f"- changed since {previous.label}: " + ("; ".join(ch) if ch else "owners/outputs only"))
    return "\n".join(lines) + "\n"


def restore_entry(label: str, roles: list[str], outcome: list[str]) -> str:
    lines = [f"## {now()} restore {label} [{', '.join(roles)}]", f"- who: {who()}"]
    lines += [f"- {o}" for o in outcome]
    return "\n".join(lines) + "\n"


def append(notes: Path, entry: str) -> Path:
    p = notes / NAME
    notes.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (mask(entry, extra=known_secrets()) + "\n").encode())
    finally:
        os.close(fd)
    return p

