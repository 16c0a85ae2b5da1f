"""The change log's entries: snapshot, restore and what a person logs (`nev rig log`), and its
reader (the log itself, its writer and its `who` and `now`: `lanes/base/changelog.py`, which a
person's landing in `jobs/` appends to as well).

It is the record the seed's "Rig change log" keeps by hand: the label, who, what changed, worked
or not. It never carries file content or command output, and every line is masked before writing.
An entry is a `## TIME WHAT` heading and its `- field: value` lines; `entries` reads them back.
"""

from __future__ import annotations

from lanes.base.changelog import NAME, Entry, append, entries, now, read, who
from rig.snapshot.store import Manifest

__all__ = ["NAME", "Entry", "append", "changed_files", "entries", "now", "person_entry", "read",
           "restore_entry", "snapshot_entry", "who"]


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


def person_entry(message: str, worked: bool, role: str | None = None,
                 snapshot: str | None = None) -> str:
    """What a person changed by hand (`nev rig log`): one line of text, worked or failed."""
    lines = [f"## {now()} log {'worked' if worked else 'failed'}", f"- who: {who()}",
             f"- what: {one_line(message)}"]
    if role:
        lines.append(f"- role: {one_line(role)}")
    if snapshot:
        lines.append(f"- snapshot: {one_line(snapshot)}")
    return "\n".join(lines) + "\n"


def one_line(text: str) -> str:
    """Whitespace runs (newlines too) as one space: a value never starts a heading of its own."""
    return " ".join(text.split())
