"""The bridge's one error type (this package imports none of the others but the foundation's sandbox
and JSON reader; `bench` turns it into a NevError), and the foundation's JSON reader with its
refusals as that type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lanes.base import jsonfile
from lanes.base.errors import ConfigError


class BridgeError(Exception):
    """A known failure: `message` is one sentence naming what is wrong and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def load_json(path: Path, what: str, if_missing: str) -> Any:
    """`lanes.base.jsonfile.load` (nev's one JSON reader): its one-line refusal as BridgeError."""
    try:
        return jsonfile.load(path, what, if_missing)
    except ConfigError as e:
        raise BridgeError(e.message) from None


def load_json_lines(path: Path, what: str, if_missing: str) -> list[tuple[int, Any]]:
    """`lanes.base.jsonfile.load_lines`: (line number, value) of every line, or its one-line
    refusal as BridgeError."""
    try:
        return jsonfile.load_lines(path, what, if_missing)
    except ConfigError as e:
        raise BridgeError(e.message) from None
