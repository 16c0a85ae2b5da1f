"""The engines' protocol answers (Chromium's DevTools through Playwright, Firefox's WebDriver
BiDi, WebKit's WebDriver) are JSON documents received: read here with checked walks, so that an
answer of another shape is one EngineError naming the engine and the path, never a KeyError.
Also the one protocol message nev builds itself, a pointer click."""

from __future__ import annotations

from lanes.base.errors import NevError


class EngineError(NevError):
    """An engine failed to start or to answer; names the engine and what to check."""


def at(doc: object, *path: str | int, who: str) -> object:
    """The value at `path` (object keys, list indexes) in an answer; EngineError when it is not
    there."""
    cur = doc
    for i, step in enumerate(path):
        if isinstance(step, str) and isinstance(cur, dict) and step in cur:
            cur = cur[step]
        elif isinstance(step, int) and isinstance(cur, list) and -len(cur) <= step < len(cur):
            cur = cur[step]
        else:
            where = ".".join(str(p) for p in path[:i + 1])
            raise EngineError(f"{who}: its answer has no {where} (the engine spoke another protocol "
                              "version?); check the engine's version with `nev oracle engines`")
    return cur


def opt(doc: object, key: str) -> object:
    """`doc[key]` when `doc` is an object holding it, else None (a field read only to be shown)."""
    return doc.get(key) if isinstance(doc, dict) else None


def pointer_click(x: int, y: int) -> dict[str, object]:
    """A W3C pointer action sequence (WebDriver classic and BiDi alike): move, press, release."""
    return {"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
            "actions": [{"type": "pointerMove", "x": x, "y": y, "origin": "viewport"},
                        {"type": "pointerDown", "button": 0}, {"type": "pointerUp", "button": 0}]}
