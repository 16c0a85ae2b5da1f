"""The machinery under every message of the agent's wire (`lanes/agent/messages.py` holds the
messages): the requests by their `op` (`request_of`, `read_request`), `Message`, a dataclass that goes to and from a frame's JSON with each field checked
against its annotation, `Request` (a REQUEST frame's message, led by its `op`), and the checks
themselves: an annotation's text parsed once per class (`from __future__ import annotations`, so
the lane's python3 needs no newer typing than the rest of the agent). Stdlib only.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from enum import Enum
from typing import ClassVar, NamedTuple, TypeVar

from lanes.agent.wire import Kind, Op, ProtocolError, Wire, frame

M = TypeVar("M", bound="Message")
_CHECKS: dict[type, list[tuple[str, _Type, bool, object]]] = {}


class Message:
    """A dataclass on the wire. `WHAT` names it in an error ("the 'hello' request")."""

    WHAT: ClassVar[str] = "message"

    # One repr and one == for all (`@dataclass(repr=False, eq=False)`, not frozen): the methods a
    # dataclass writes for each class cost the agent's every start more than the rest of it.
    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._values())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and type(other) is type(self) \
            and self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]

    def _values(self) -> list[tuple[str, object]]:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return [(f.name, getattr(self, f.name)) for f in fields]

    def to_wire(self) -> dict[str, object]:
        return {k: _plain(v) for k, v in self._values()}

    @classmethod
    def from_wire(cls: type[M], obj: object) -> M:
        """`obj` (a decoded JSON object) as this message; ProtocolError naming what is wrong."""
        if not isinstance(obj, dict):
            raise ProtocolError(f"{cls.WHAT} is a JSON object, not {_kind_of(obj)}")
        checks = _checks(cls)
        known = {name for name, _, _, _ in checks}
        if issubclass(cls, Request):
            if obj.get("op") != cls.OP.value:
                raise ProtocolError(f"{cls.WHAT} has the op {obj.get('op')!r}")
            known.add("op")
        extra = sorted(str(k) for k in obj if k not in known)
        if extra:
            raise ProtocolError(f"{cls.WHAT} has an unknown field {extra[0]!r}")
        args = {}
        for name, typ, required, _ in checks:
            if name not in obj:
                if required:
                    raise ProtocolError(f"{cls.WHAT} has no {name!r}")
                continue
            try:
                args[name] = _take(typ, obj[name])
            except _Bad as e:
                raise ProtocolError(f"{cls.WHAT}'s {name!r}{e.where}{e.tail}") from None
        return cls(**args)

    @classmethod
    def decode(cls: type[M], data: bytes) -> M:
        """A frame's JSON as this message."""
        return cls.from_wire(_json(data, cls.WHAT))


class Request(Message):
    """A REQUEST frame's JSON: its `op` first, then its fields."""

    OP: ClassVar[Op]

    def to_wire(self) -> dict[str, object]:
        return {"op": self.OP.value, **super().to_wire()}

    def frame(self) -> bytes:
        return frame(Kind.REQUEST, json.dumps(self.to_wire()).encode())


def _request(cls: type[Request]) -> type[Request]:
    cls.WHAT = f"the {cls.OP.value!r} request"
    REQUESTS[cls.OP] = cls
    return cls


REQUESTS: dict[Op, type[Request]] = {}


def request_of(obj: object) -> Request:
    """A request frame's JSON as the request of its `op`; ProtocolError for an unknown one."""
    op = obj.get("op") if isinstance(obj, dict) else None
    try:
        cls = REQUESTS[Op(op)]
    except (ValueError, KeyError):
        raise ProtocolError(f"unknown request {op!r}") from None
    return cls.from_wire(obj)


def read_request(wire: Wire) -> Request:
    """The next frame, a REQUEST, as the request of its `op`."""
    obj = _json(wire.read_request(), "a request")
    if not isinstance(obj, dict):
        raise ProtocolError("a request is a JSON object")
    return request_of(obj)


def _json(data: bytes, what: str) -> object:
    """A frame's data as JSON (every frame read on either end is read here)."""
    try:
        return json.loads(data)
    except ValueError:
        raise ProtocolError(f"{what} is not JSON") from None
    except RecursionError:
        raise ProtocolError(f"{what} is nested too deeply") from None


class _Bad(Exception):
    """A value not of its field's type: `tail` ends the one line (" is an int, not a str")."""

    def __init__(self, tail: str, where: str = "") -> None:
        super().__init__(tail)
        self.tail, self.where = tail, where


def _names(cls: type) -> set[str]:
    return {name for name, _, _, _ in _checks(cls)}


def _checks(cls: type) -> list[tuple[str, _Type, bool, object]]:
    """Per field: its name, its parsed type, whether the wire must carry it, its default."""
    got = _CHECKS.get(cls)
    if got is None:
        ns = vars(sys.modules[cls.__module__])
        missing = dataclasses.MISSING
        got = [(f.name, _Parser(str(f.type), ns).parse(),
                f.default is missing and f.default_factory is missing, f.default)
               for f in dataclasses.fields(cls)]
        _CHECKS[cls] = got
    return got


class _Type(NamedTuple):
    """A parsed annotation: `kind` is "name" (of `cls`), "none", "union", "list", "dict" (of its
    values), "tuple" (of `of`, or of `of[0]` repeated when `of[1]` is "more", the `...`)."""

    kind: str
    of: tuple[_Type, ...] = ()
    cls: type | None = None


class _Parser:
    """`str`, `int | None`, `list[X]`, `tuple[X, ...]`, `tuple[X, Y]`, `dict[str, X]`, a class."""

    def __init__(self, text: str, ns: dict[str, object]) -> None:
        for sign in "[],|":
            text = text.replace(sign, f" {sign} ")
        self.toks = text.split()
        self.ns = ns
        self.i = 0

    def parse(self) -> _Type:
        t = self.union()
        if self.i != len(self.toks):
            raise TypeError(f"cannot read the annotation {' '.join(self.toks)!r}")
        return t

    def eat(self, tok: str) -> bool:
        if self.i < len(self.toks) and self.toks[self.i] == tok:
            self.i += 1
            return True
        return False

    def union(self) -> _Type:
        alts = [self.one()]
        while self.eat("|"):
            alts.append(self.one())
        return alts[0] if len(alts) == 1 else _Type("union", tuple(alts))

    def one(self) -> _Type:
        name = self.toks[self.i]
        self.i += 1
        if name == "None":
            return _Type("none")
        if not self.eat("["):
            cls = {"str": str, "int": int, "float": float, "bool": bool}.get(name) or self.ns[name]
            assert isinstance(cls, type), name
            return _Type("name", cls=cls)
        args = [self.union()]
        while self.eat(","):
            args.append(_Type("more") if self.eat("...") else self.union())
        if not self.eat("]") or name not in ("list", "dict", "tuple"):
            raise TypeError(f"cannot read the annotation {' '.join(self.toks)!r}")
        return _Type(name, tuple(args[-1:] if name != "tuple" else args))


def _kind_of(v: object) -> str:
    if v is None:
        return "null"
    return {bool: "a bool", int: "an int", float: "a float", str: "a str", list: "a list",
            dict: "an object"}.get(type(v), type(v).__name__)


def _want(t: _Type) -> str:
    if t.kind == "name":
        if t.cls is not None and issubclass(t.cls, Enum):
            return "one of " + ", ".join(repr(m.value) for m in t.cls)
        if t.cls is not None and issubclass(t.cls, Message):
            return t.cls.WHAT
        names = {str: "a str", int: "an int", float: "a number", bool: "a bool"}
        return names.get(t.cls or object, str(t.cls))
    if t.kind == "none":
        return "null"
    if t.kind == "union":
        return " or ".join(_want(a) for a in t.of)
    if t.kind == "list":
        return f"a list of {_want(t.of[0])}"
    if t.kind == "dict":
        return f"an object of {_want(t.of[0])}"
    return "a list"


def _take(t: _Type, v: object) -> object:
    """`v` as type `t` (a float may come as an int, a tuple as a list); _Bad when it is not."""
    if t.kind == "none":
        if v is None:
            return None
    elif t.kind == "union":
        inner = None
        for a in t.of:
            try:
                return _take(a, v)
            except _Bad as e:
                inner = e if e.tail.startswith(":") else inner   # a message's own complaint
        if inner is not None:
            raise inner
    elif t.kind == "list" and isinstance(v, list):
        return [_take_at(t.of[0], x, i) for i, x in enumerate(v)]
    elif t.kind == "tuple" and isinstance(v, (list, tuple)):
        if len(t.of) == 2 and t.of[1].kind == "more":
            return tuple(_take_at(t.of[0], x, i) for i, x in enumerate(v))
        if len(v) == len(t.of):
            return tuple(_take_at(t.of[i], x, i) for i, x in enumerate(v))
    elif t.kind == "dict" and isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {k: _take_at(t.of[0], x, k) for k, x in v.items()}
    elif t.kind == "name" and t.cls is not None:
        return _take_class(t.cls, v)
    raise _Bad(f" is {_kind_of(v)}, not {_want(t)}")


def _take_class(cls: type, v: object) -> object:
    if cls is float and type(v) in (int, float):
        return float(v)  # type: ignore[arg-type]
    if cls in (str, int, bool) and type(v) is cls:
        return v
    if issubclass(cls, Enum):
        try:
            return cls(v)
        except ValueError:
            pass
    if issubclass(cls, Message) and isinstance(v, dict):
        try:
            return cls.from_wire(v)
        except ProtocolError as e:
            raise _Bad(": " + e.what) from None
    raise _Bad(f" is {_kind_of(v)}, not {_want(_Type('name', cls=cls))}")


def _take_at(t: _Type, v: object, at: object) -> object:
    try:
        return _take(t, v)
    except _Bad as e:
        raise _Bad(e.tail, f"[{at!r}]{e.where}") from None


def _plain(v: object) -> object:
    if isinstance(v, Message):
        return v.to_wire()
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v
