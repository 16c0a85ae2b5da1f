"""Reading JSON settings files with errors that name the file, the field and the problem."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lanes.base.errors import ConfigError


def read_text(path: Path, what: str, if_missing: str) -> str:
    """The text of `path`, the `what` of its messages; ConfigError naming the file when it is missing
    (with `if_missing`: what to do) or cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found; {if_missing}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what}: {e.strerror}") from None


def load(path: Path, what: str = "settings file") -> Any:
    text = read_text(path, what, "create it (see the *.example.json beside it)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}; fix the file") from None


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


class Fields:
    """Field access for one file: every failure names the file and the dotted field path."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)

    def fail(self, field: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: field {field} {problem}; fix the file")

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
