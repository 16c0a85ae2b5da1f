"""The JSON Schemas of the files a user writes (the lanes file, the rig file, the folknet file):
`lanes/base/schemas/*.schema.json`, published as docs/*.schema.json for editors to validate
with. nev's readers take the keys each object may hold from here (`keys`), so the schema and
the reader cannot drift: a key the schema does not name is refused by both."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "schemas"
NAMES = ("lanes", "rig", "folknet")


@cache
def load(name: str) -> dict[str, Any]:
    """The schema `name` (one of NAMES), as shipped with nev."""
    # a JSON Schema document, walked by key (`keys`): nev ships it, no user writes it
    doc: dict[str, Any] = json.loads((HERE / f"{name}.schema.json").read_text(encoding="utf-8"))
    return doc


def keys(name: str, *path: str) -> tuple[str, ...]:
    """The keys the object at `path` may hold: `keys("rig", "roles", "files")` walks properties
    `roles` (a map: its values), then `files` (an array: its object items)."""
    node = _object(load(name))
    for step in path:
        node = _object(node["properties"][step])
    return tuple(node["properties"])


def _object(node: dict[str, Any]) -> dict[str, Any]:
    """The object schema behind an array's items, a map's values or a oneOf's object branch."""
    while "properties" not in node:
        if "items" in node:
            node = node["items"]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        elif "oneOf" in node:
            node = next(n for n in node["oneOf"] if n.get("type") == "object")
        else:
            raise KeyError("no object schema here")
    return node
