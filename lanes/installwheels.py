"""The lanes' wheelhouse made from a client install: nev's own installed files, and those of every
distribution it needs, packed back into wheels.

A client install (`pipx install`, `uv tool install`, a virtualenv: no checkout of nev's sources)
has no sources to build wheels from, and its dev box may have no package index either. What it
has is the installed distributions themselves: pip and uv install a wheel by copying its files
into site-packages unchanged, keep its metadata in `NAME-VERSION.dist-info`, and list every file
in RECORD. So each wheel is made again from those files: the files RECORD names under
site-packages (not the `__pycache__` the installer compiled, not the installer's own INSTALLER,
REQUESTED, direct_url.json), with a RECORD of their hashes as they are, under the name and tags
the dist-info's WHEEL gives. What an installer put outside site-packages (the console scripts it
generated from entry_points.txt, a wheel's `.data` headers) is left out: a lane's install makes
its own `bin/nev`.

The distributions are nev's and its requirements', transitively (their markers evaluated for
this interpreter; an extra only when asked for), and pip's when this environment has it (the
lane's install falls back to it when the lane's python3 has no ensurepip). The key is a digest of
nev's installed files and of each other distribution's RECORD, so a changed install is a new key.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from lanes.base.errors import NevError

INSTALLER_MADE = frozenset({"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"})


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _marker_class() -> type | None:
    """An evaluator of requirement markers: packaging's, else pip's copy of it; None when this
    environment has neither (a uv tool environment has no pip)."""
    try:
        from packaging import markers
    except ImportError:
        try:
            from pip._vendor.packaging import markers  # type: ignore[no-redef]
        except ImportError:
            return None
    return markers.Marker


def _marker_true(marker: str, extras: set[str]) -> bool:
    """Whether a requirement's marker holds here, for the extras asked of its distribution."""
    cls = _marker_class()
    if cls is not None:
        m = cls(marker)
        return any(m.evaluate({"extra": e}) for e in (extras or {""}))
    # no evaluator: an extra's requirement only for that extra; any other marker is taken as
    # true for what is installed (`_closure` skips what is not)
    wanted = re.findall(r"""extra\s*==\s*['"]([^'"]+)['"]""", marker)
    return not wanted or any(_norm(w) in extras for w in wanted)


def _closure(root: str = "nev") -> list[metadata.Distribution]:
    """nev's distribution and every one it needs here, each once, in a stable order."""
    seen: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, set[str], bool]] = [(root, set(), True)]
    while todo:
        name, extras, must = todo.pop()
        if (_norm(name), frozenset(extras)) in done:
            continue
        done.add((_norm(name), frozenset(extras)))
        dist = _dist(name)
        if dist is None:
            if must:
                raise NevError(f"nev's requirement {name} is not installed beside it; reinstall "
                               "nev (pipx install, uv tool install) and run again")
            continue
        seen[_norm(dist.metadata["Name"])] = dist
        for req in dist.requires or []:
            spec, _, marker = req.partition(";")
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", spec)
            if not m:
                continue
            if marker.strip() and not _marker_true(marker.strip(), {_norm(e) for e in extras}):
                continue
            sub = {_norm(e) for e in (m.group(2) or "").split(",") if e.strip()}
            # a requirement without a marker must be there; one with a marker that holds is taken
            # when installed (the heuristic above can say yes to one this platform never needs)
            todo.append((m.group(1), sub, not marker.strip()))
    return [seen[k] for k in sorted(seen)]


def distributions() -> list[metadata.Distribution]:
    """What the lanes' wheelhouse holds: nev's closure, and pip when it is installed here."""
    out = _closure()
    pip = _dist("pip")
    if pip is not None and all(_norm(d.metadata["Name"]) != "pip" for d in out):
        out.append(pip)
    return out


def _info_dir(dist: metadata.Distribution) -> Path:
    path = getattr(dist, "_path", None)
    if path is None or not Path(path).name.endswith(".dist-info"):
        raise NevError(f"{dist.metadata['Name']} is not installed from a wheel (no .dist-info); "
                       "reinstall nev (pipx install, uv tool install) and run again")
    return Path(path)


def files(dist: metadata.Distribution) -> Iterator[tuple[str, Path]]:
    """(the name in the wheel, the file on disk) of every file of the distribution's wheel."""
    for name, path, _recorded in _rows(dist):
        yield name, path


def _rows(dist: metadata.Distribution) -> Iterator[tuple[str, Path, str]]:
    """`files`, each with the hash its RECORD row gives."""
    info = _info_dir(dist)
    site = info.parent
    record = (info / "RECORD").read_text(encoding="utf-8")
    for row in csv.reader(record.splitlines()):
        if not row or row[0].startswith("../") or row[0].startswith("/"):
            continue
        name = row[0]
        parts = name.split("/")
        if "__pycache__" in parts or (parts[0] == info.name and parts[-1] in INSTALLER_MADE):
            continue
        path = site / name
        if not path.is_file():
            raise NevError(f"{path} is in {dist.metadata['Name']}'s RECORD but not installed; "
                           "reinstall nev (pipx install, uv tool install) and run again")
        yield name, path, row[1] if len(row) > 1 else ""


def key() -> str:
    """A digest of what the wheelhouse would hold: nev's files as they are, the others' as their
    RECORDs give them (only the files packed: a console script's hash names its virtualenv)."""
    h = hashlib.sha256()
    for dist in distributions():
        h.update(_info_dir(dist).name.encode() + b"\0")
        nev = _norm(dist.metadata["Name"]) == "nev"
        for name, path, recorded in _rows(dist):
            h.update(name.encode() + b"\0" + (path.read_bytes() if nev else recorded.encode())
                     + b"\0")
    return h.hexdigest()[:16]


def _tags(wheel_text: str) -> str:
    """The wheel file name's tags from WHEEL's Tag lines (several: each part dotted)."""
    tags = [ln.split(":", 1)[1].strip() for ln in wheel_text.splitlines()
            if ln.startswith("Tag:")]
    if not tags:
        return "py3-none-any"
    parts: list[list[str]] = [[], [], []]
    for t in tags:
        for i, p in enumerate(t.split("-", 2)):
            if p not in parts[i]:
                parts[i].append(p)
    return "-".join(".".join(p) for p in parts)


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def rebuild(dist: metadata.Distribution, into: Path) -> Path:
    """One distribution's wheel, from its installed files, written into `into`."""
    info = _info_dir(dist)
    wheel_text = (info / "WHEEL").read_text(encoding="utf-8")
    build = [ln.split(":", 1)[1].strip() for ln in wheel_text.splitlines()
             if ln.startswith("Build:")]
    stem = info.name.removesuffix(".dist-info")        # NAME-VERSION, as the wheel had it
    out = into / f"{stem}{'-' + build[0] if build else ''}-{_tags(wheel_text)}.whl"
    rows = []
    tmp = out.with_suffix(".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, path in files(dist):
            data = path.read_bytes()
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = (path.stat().st_mode & 0o777 | 0o100000) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data, compresslevel=1)
            rows.append((name, _digest(data), str(len(data))))
        record = f"{info.name}/RECORD"
        rows.append((record, "", ""))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        text = buf.getvalue()
        zf.writestr(zipfile.ZipInfo(record, date_time=(1980, 1, 1, 0, 0, 0)), text)
    tmp.rename(out)
    return out


def build(house: Path) -> list[Path]:
    """The wheelhouse of this client install: one wheel per distribution (`distributions`)."""
    house.mkdir(parents=True, exist_ok=True)
    return [rebuild(d, house) for d in distributions()]
