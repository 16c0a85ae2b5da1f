"""`nev settings`: every setting, its value and where it came from; the files nev reads, checked."""

from __future__ import annotations

import os
from pathlib import Path

from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.mask import MASK, mask


def describe() -> list[dict[str, str | None]]:
    rows: list[dict[str, str | None]] = []
    for s in settings.all_settings():
        if os.environ.get(s.name):
            source = s.name
        elif os.environ.get(s.legacy):
            source = s.legacy + " (legacy)"
        else:
            source = "default" if s.default is not None else "unset"
        value = settings.get(s)
        if s.secret and value:
            value = MASK
        elif value:
            value = mask(value)    # a credential inside a URL (NEV_FORGE_URL=http://user:token@...)
        rows.append({"name": s.name, "value": value, "source": source, "help": s.help})
    return rows


def check_files() -> list[dict[str, str]]:
    """Load every settings file that exists; report ok or the one-line problem."""
    from bench import folknet
    from jobs import tracks
    from lanes import lanesfile
    from rig import rigfile

    checks: list[tuple[str, Path, object]] = [
        ("lanes", lanesfile.lanes_file_path(), lanesfile.load),
        ("folknet", folknet.default_path(), folknet.load),
        ("rig", rigfile.default_path(), rigfile.load),
        ("tracks", Path("tracks.json"), tracks.load),
    ]
    out = []
    for name, path, loader in checks:
        if not path.exists():
            out.append({"file": str(path), "what": name, "status": "absent"})
            continue
        try:
            loader(path)  # type: ignore[operator]
            out.append({"file": str(path), "what": name, "status": "ok"})
        except NevError as e:
            out.append({"file": str(path), "what": name, "status": "error", "error": mask(e.message)})
    return out
