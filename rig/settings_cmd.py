"""`nev settings`: every setting, its value and where it came from; the files nev reads, checked."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.mask import MASK, mask


def describe() -> list[dict[str, str | None]]:
    rows: list[dict[str, str | None]] = []
    for s in settings.all_settings():
        source = settings.source(s)
        value = settings.get(s)
        if value and s in (*settings.FILES, *settings.NEV_RELATIVE):
            value = str(settings.get_path(s))       # as nev reads it: never from the folder here
        if s.secret and value:
            value = MASK
        elif value:
            value = mask(value)    # a credential inside a URL (NEV_FORGE_URL=http://user:token@...)
        row = {"name": s.name, "value": value, "source": source, "help": s.help}
        wrong = settings.problem(s)
        if wrong:
            row["problem"] = mask(wrong) if not s.secret else f"{s.name}: not a valid value"
        rows.append(row)
    return rows


def one_value(name: str) -> str:
    """`nev settings --get NAME`: the value as nev reads it (a path setting resolved); NevError
    when NAME is no setting, a secret, or has no value."""
    known = {s.name: s for s in settings.all_settings()}
    full = "NEV_" + name.upper().removeprefix("NEV_")     # `forge_url` as NEV_FORGE_URL
    s = known.get(name) or known.get(full)
    if s is None:
        raise NevError(f"{name} is not a setting; `nev settings` lists them")
    if s.secret:
        raise NevError(f"{s.name} is a secret: never printed; read it from its file "
                       f"({s.name}_FILE)")
    value = settings.get(s)
    if value is None:
        raise NevError(f"{s.name} is not set (nor in the config file) and has no default")
    if s in (*settings.FILES, *settings.NEV_RELATIVE):
        return str(settings.get_path(s))
    return mask(value)      # a credential inside a URL never leaves (it has no place there)


VALUE_WIDTH = 40


def matches(row: dict[str, str | None], pattern: str | None) -> bool:
    """PATTERN (case-insensitive): a glob on the name when it holds * ? or [ (NEV_LANE_*), else a
    part of the name or of the help."""
    if not pattern:
        return True
    p = pattern.lower()
    if any(c in p for c in "*?["):
        return fnmatch.fnmatchcase(str(row["name"]).lower(), p)
    return p in str(row["name"]).lower() or p in str(row["help"] or "").lower()


def clip(value: str, width: int = VALUE_WIDTH) -> str:
    """A value that fits its column: a long one ends in `...` (`--json` has it whole)."""
    return value if len(value) <= width else value[: width - 3] + "..."


def table(rows: list[dict[str, str | None]]) -> list[str]:
    """The settings as columns under a header; long values clipped so the columns stay aligned."""
    shown = [(str(r["name"]), clip(r["value"] if r["value"] is not None else "-"), str(r["source"]))
             for r in rows]
    head = ("setting", "value", "source")
    w = [max([len(head[i]), *(len(x[i]) for x in shown)]) for i in range(2)]
    return [f"{a:<{w[0]}}  {b:<{w[1]}}  {c}".rstrip() for a, b, c in [head, *shown]]


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
    ]
    if Path.cwd().resolve() != settings.NEV_ROOT:   # nev's own tracks.json is not the engine's
        checks.append(("tracks", Path("tracks.json").resolve(), tracks.load))
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
