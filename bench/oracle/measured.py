"""A page's elements as an engine measured them (`nev oracle render`, the suites): the JSON
document PAGE_BODY returns (bench/oracle/engines.py), read once with checked reads into typed
records; past this edge, `render.check_page` sees attributes."""

from __future__ import annotations

import json
from dataclasses import dataclass

from bench.oracle.wire import EngineError


@dataclass(frozen=True)
class Measured:
    """One element of a page as PAGE_BODY measured it: its border box (x, y, width, height), its
    offset box, client and scroll sizes (None: not a number there), its check-layout attributes."""

    rect: tuple[float, float, float, float]
    offset: tuple[float | None, ...]
    client: tuple[float | None, ...]
    scroll: tuple[float | None, ...]
    expect: dict[str, str]

    @classmethod
    def from_json(cls, value: object, where: str) -> Measured:
        """A PAGE_BODY element read with checked reads; EngineError naming the field otherwise."""
        if not isinstance(value, dict):
            raise EngineError(f"{where}: not an object in the page's measurement")
        expect = value.get("expect")
        if not isinstance(expect, dict) or not all(isinstance(v, str) for v in expect.values()):
            raise EngineError(f"{where}.expect: not an object of strings in the page's measurement")
        x, y, w, h = (_or_refuse(v, where, "rect") for v in _nums(value, "rect", 4, where))
        return cls((x, y, w, h), _nums(value, "offset", 4, where), _nums(value, "client", 2, where),
                   _nums(value, "scroll", 2, where), {str(k): v for k, v in expect.items()})


def _nums(obj: dict[str, object], key: str, size: int, where: str) -> tuple[float | None, ...]:
    """`size` numbers (null: None) at `key`."""
    v = obj.get(key)
    out: list[float | None] = []
    for x in v if isinstance(v, list) and len(v) == size else ():
        if x is None or (isinstance(x, int | float) and not isinstance(x, bool)):
            out.append(x)          # as the engine answered (an int stays an int in the JSON)
    if len(out) != size:
        raise EngineError(f"{where}.{key}: not {size} numbers in the page's measurement")
    return tuple(out)


def _or_refuse(v: float | None, where: str, key: str) -> float:
    if v is None:
        raise EngineError(f"{where}.{key}: a null where the border box has a number")
    return v


def measured_page(text: str, engine: str) -> dict[str, Measured]:
    """PAGE_BODY's answer (a JSON document from the engine) as typed elements."""
    try:
        data = json.loads(text)
    except ValueError:
        raise EngineError(f"{engine}: the page's measurement is not JSON") from None
    if not isinstance(data, dict):
        raise EngineError(f"{engine}: the page's measurement is not an object")
    return {str(k): Measured.from_json(v, f"{engine}: {k}") for k, v in data.items()}
