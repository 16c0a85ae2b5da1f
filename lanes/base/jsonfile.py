"""The one reader of the JSON and JSON Lines files nev reads (state and declarations), with errors
that name the file, the field and the problem; atomic writes of them."""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lanes.base.errors import ConfigError

# Bounds of every file read here: far above any file nev writes or declares, low enough that a
# junk file costs no memory or time worth naming.
MAX_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_FIX = "fix the file"


class _Bad(ValueError):
    """A value json.loads' hooks refuse (a number out of range, NaN); the reader's own line."""


def read_bytes(path: Path, what: str, if_missing: str, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of `path`, a regular file of at most `max_bytes`; ConfigError naming the file when it
    is missing (with `if_missing`: what to do), a folder, a FIFO or device, too big or unreadable.
    Opened without blocking, so a FIFO in its place never hangs the reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found; {if_missing}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"{path}: the {what} is a folder, not a file; remove the folder or point nev at the file")
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: the {what} is not a regular file (a FIFO, socket or device); replace it by the file")
        if st.st_size > max_bytes:
            raise ConfigError(f"{path}: the {what} is {st.st_size} bytes, more than the {max_bytes} it may hold; {_FIX}")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise ConfigError(f"{path}: the {what} grew past the {max_bytes} bytes it may hold; {_FIX}")
        return b"".join(chunks)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what}: {e.strerror}") from None
    finally:
        os.close(fd)


def decode(data: bytes, label: Path | str, what: str) -> str:
    """`data` as UTF-8 text; ConfigError naming `label` and the first bad byte's offset otherwise."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{label}: the {what} is not UTF-8 text (byte {e.start} is 0x{data[e.start]:02x}); "
                          f"{_FIX}") from None


def yaml_error(e: Exception, line_offset: int = 0) -> str:
    """A YAML parser's error (PyYAML's MarkedYAMLError) as `line L, column C: what`, the line
    counted in the file (`line_offset`: the lines before the text that was parsed)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    what = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
    if mark is None:
        return str(what)
    return f"line {mark.line + 1 + line_offset}, column {mark.column + 1}: {what}"


def read_text(path: Path, what: str, if_missing: str, max_bytes: int = MAX_BYTES) -> str:
    """The text of `path`, the `what` of its messages; ConfigError naming the file when it is missing
    (with `if_missing`: what to do), cannot be read, is no regular file, too big or not UTF-8."""
    return decode(read_bytes(path, what, if_missing, max_bytes), path, what)


def _finite(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise _Bad(f"the number {s[:40]}{'...' if len(s) > 40 else ''} is out of range")
    return v


def _bounded(s: str) -> int:
    if len(s.lstrip("-")) > 19 or abs(v := int(s)) >= 1 << 63:
        raise _Bad(f"the number {s[:40]}{'...' if len(s) > 40 else ''} is out of range")
    return v


def _constant(s: str) -> Any:
    raise _Bad(f"{s} is not a number JSON allows")


def shape_problem(data: Any, text: str = "", max_depth: int = MAX_DEPTH) -> str | None:
    """What makes parsed data unusable although it parsed (None: nothing): nesting deeper than
    `max_depth` (every reader recurses over it), a lone surrogate escape in a string or key
    (printing it would fail). `text`, when given, is the source: no surrogate escape, no string walk."""
    strings = not text or _SURROGATE_ESCAPE.search(text) is not None
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            if depth > max_depth:
                return f"is nested deeper than {max_depth} levels"
            for k, x in v.items():
                if strings and not _encodable(str(k)):
                    return "holds a key that is not text (a lone surrogate escape)"
                stack.append((x, depth + 1))
        elif isinstance(v, list):
            if depth > max_depth:
                return f"is nested deeper than {max_depth} levels"
            stack.extend((x, depth + 1) for x in v)
        elif strings and isinstance(v, str) and not _encodable(v):
            return "holds a string that is not text (a lone surrogate escape)"
    return None


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse(text: str, label: Path | str, what: str = "settings file", max_depth: int = MAX_DEPTH) -> Any:
    """JSON `text` read from `label` (a file, or `main:tracks.json`); ConfigError naming `label` for
    anything that is not plain JSON a reader can walk: bad syntax (line and column), nesting deeper
    than `max_depth`, numbers out of range (integers past 2**63, floats past a double) or NaN, lone surrogates."""
    try:
        data = json.loads(text, parse_float=_finite, parse_int=_bounded, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{label}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}; {_FIX}") from None
    except _Bad as e:
        raise ConfigError(f"{label}: {e}; {_FIX}") from None
    except RecursionError:
        raise ConfigError(f"{label}: the {what} is nested deeper than {max_depth} levels; {_FIX}") from None
    problem = shape_problem(data, text, max_depth)
    if problem:
        raise ConfigError(f"{label}: the {what} {problem}; {_FIX}")
    return data


_RAISE: Any = object()


def load(path: Path, what: str = "settings file", if_missing: str = "create it (see the *.example.json beside it)",
         missing: Any = _RAISE, max_bytes: int = MAX_BYTES) -> Any:
    """The one reader of a JSON file nev reads (state and declarations): its data, or ConfigError
    with one line naming the file for every way it can be wrong (missing, a folder, a FIFO, too
    big, not UTF-8, not JSON, too deep, numbers out of range). `missing`, when given, is returned
    for a file that does not exist (a folder in its place is still an error)."""
    if missing is not _RAISE and not os.path.lexists(path):
        return missing
    return parse(read_text(path, what, if_missing, max_bytes), path, what)


def parse_lines(text: str, label: Path | str, what: str) -> list[tuple[int, Any]]:
    """JSON Lines `text`: (line number, value) of every line that is not blank; a bad line is
    ConfigError naming `label` and the line."""
    out = []
    for n, raw in enumerate(text.split("\n"), 1):
        if raw.strip():
            out.append((n, parse(raw, f"{label}: line {n}", what)))
    return out


def load_lines(path: Path, what: str, if_missing: str = "", missing: Any = _RAISE,
               max_bytes: int = MAX_BYTES) -> list[tuple[int, Any]]:
    """The one reader of a JSON Lines file (ledgers, event logs): `parse_lines` of its text, with
    `load`'s refusals."""
    if missing is not _RAISE and not os.path.lexists(path):
        return list(missing)
    return parse_lines(read_text(path, what, if_missing, max_bytes), path, what)


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `path` so that readers never see a half-written file; created with `mode`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def map_strings(data: Any, fn: Callable[[str], Any]) -> Any:
    """The same JSON-shaped data with `fn` applied to every string value inside (keys kept)."""
    if isinstance(data, dict):
        return {k: map_strings(v, fn) for k, v in data.items()}
    if isinstance(data, list):
        return [map_strings(v, fn) for v in data]
    return fn(data) if isinstance(data, str) else data


def write_atomic(path: Path, data: Any, mode: int = 0o644) -> None:
    """Write JSON to `path` so that readers never see a half-written file."""
    write_bytes_atomic(path, (json.dumps(data, indent=2, sort_keys=False) + "\n").encode("utf-8"), mode)


def printable(text: str) -> str:
    """`text` on one line: a control character (a key holding a newline) written as its escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class Fields:
    """Field access for one file: every failure names the file and the dotted field path."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)

    def fail(self, field: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: field {printable(field)} {printable(problem)}; fix the file")

    def known(self, obj: dict, keys: Iterable[str], field: str) -> dict:
        """`obj` when it holds no key but `keys`; else the first unknown key named, with the close
        known one (a typo such as `landCheck` is refused, not ignored)."""
        allowed = list(keys)
        for k in obj:
            if k not in allowed:
                import difflib  # only for a refusal: the gate's start imports no more than it needs

                near = difflib.get_close_matches(str(k), allowed, 1, 0.6)
                hint = f"did you mean {near[0]}?" if near else f"known: {', '.join(allowed)}"
                raise self.fail(f"{field}.{k}" if field else str(k), f"is not a known key ({hint})")
        return obj

    def obj(self, value: Any, field: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be an object, not {_kind(value)}")
        return value

    def get(self, obj: dict, key: str, kind: type | tuple[type, ...], field: str,
            required: bool = True, default: Any = None) -> Any:
        name = f"{field}.{key}" if field else key
        if key not in obj or obj[key] is None:
            if required:
                raise self.fail(name, "is missing")
            return default
        v = obj[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if bool in kinds or not isinstance(v, bool):
            if isinstance(v, kinds):
                return v
        raise self.fail(name, f"must be {_kindname(kinds)}, not {_kind(v)}")

    def str_list(self, obj: dict, key: str, field: str, required: bool = False) -> list[str]:
        name = f"{field}.{key}" if field else key
        v = self.get(obj, key, list, field, required=required, default=[])
        for i, item in enumerate(v):
            if not isinstance(item, str):
                raise self.fail(f"{name}[{i}]", f"must be a string, not {_kind(item)}")
        return list(v)


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            int: "a number", float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _kindname(kinds: tuple[type, ...]) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true or false",
             int: "a whole number", float: "a number"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
