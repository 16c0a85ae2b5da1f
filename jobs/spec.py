"""A track's spec: `specs/<name>.md` on main, whose YAML front matter lists `touches:` globs.

    ---
    touches:
      - crates/layout/src/float/**
      - tests/float_*.rs
    ---
    # Floats ...

The spec's sha is the git blob id of that file on main: what a reviewer approved, pinned
by content. Specs live under the protected `specs/`, so a track can never change its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lanes.base import yamlfile
from lanes.base.errors import NevError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
RESERVED = {"approve"}


def check_name(name: str) -> str:
    """A spec name is one path segment (it names a file, a branch, a tag part and a lane copy)."""
    if not NAME_RE.match(name) or name.endswith(".lock") or ".." in name or name in RESERVED:
        raise NevError(f"spec name {name!r} is not valid: use letters, digits, '.', '_' or '-' "
                       "(one path segment, not 'approve'); nothing was done")
    return name


def spec_path(name: str) -> str:
    return f"specs/{name}.md"


@dataclass(frozen=True)
class Spec:
    name: str
    sha: str
    touches: list[str]


def parse(name: str, sha: str, text: str) -> Spec:
    """Read the front matter of a spec; one clear line for each way it can be wrong."""
    where = f"main:{spec_path(name)}"
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise NevError(f"{where} has no front matter; start it with a '---' block holding touches:")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        raise NevError(f"{where}: the front matter is not closed; end it with a '---' line") from None
    # a first empty line stands for the opening `---`: YAML's line numbers are the file's
    meta = yamlfile.load("\n" + "\n".join(lines[1:end]), where, "front matter") or {}
    if not isinstance(meta, dict):
        raise NevError(f"{where}: the front matter must be a mapping with touches:; fix it")
    if "touches" not in meta:
        raise NevError(f"{where}: the front matter has no touches:; list the globs the track may change")
    touches = meta.get("touches") or []
    if isinstance(touches, str):
        touches = [touches]
    if not isinstance(touches, list) or not all(isinstance(t, str) for t in touches):
        raise NevError(f"{where}: touches: must be a list of globs; fix the spec")
    return Spec(name=name, sha=sha, touches=[t.strip() for t in touches])
