"""Hand-written references of the two corpus functions, straight from CSS 2.1 (ltr).

They check the oracle's reading of the rects, and stand in for the example engine's Rust
reference (crates_bridge) until that runs over a corpus here. Used values are not
rounded to any engine's layout grid: compare with the corpus tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

# A case's input and a case row are JSON objects as cases.jsonl holds them (bench.oracle.cases:
# CSS lengths as strings, whole px as numbers), read here by key.


def _num(v: object) -> float:
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    raise ValueError(f"not a number: {v!r}")


def _len(v: object, cb: float) -> float | None:
    if not isinstance(v, str):
        raise ValueError(f"not a CSS length: {v!r}")
    if v == "auto":
        return None
    if v.endswith("%"):
        return cb * float(v[:-1]) / 100
    if v.endswith("px"):
        return float(v[:-2])
    raise ValueError(f"not a CSS length: {v!r}")


def block_width(inp: Mapping[str, object]) -> dict[str, float]:
    """§10.3.3 Block-level, non-replaced elements in normal flow."""
    cb = _num(inp["cb_width"])
    w, ml, mr = (_len(inp[k], cb) for k in ("width", "margin_left", "margin_right"))
    pbb = sum(_len(inp[k], cb) or 0.0 for k in ("padding_left", "padding_right", "border_left", "border_right"))
    if w is not None and pbb + w + (ml or 0.0) + (mr or 0.0) > cb:
        ml, mr = ml or 0.0, mr or 0.0  # auto margins are treated as zero
    if w is None:
        ml, mr = ml or 0.0, mr or 0.0
        w = max(0.0, cb - ml - mr - pbb)  # a used width is never negative
        mr = cb - ml - pbb - w
    elif ml is None and mr is None:
        ml = mr = (cb - pbb - w) / 2
    elif ml is None:
        assert mr is not None
        ml = cb - pbb - w - mr
    else:  # margin-right auto, or over-constrained: margin-right absorbs (ltr)
        mr = cb - pbb - w - ml
    return {"width": w, "margin_left": ml, "margin_right": mr}


def abspos_width(inp: Mapping[str, object]) -> dict[str, float]:
    """§10.3.7 Absolutely positioned, non-replaced elements (static left 0)."""
    cb = _num(inp["cb_width"])
    left, right, w, ml, mr = (_len(inp[k], cb) for k in ("left", "right", "width", "margin_left", "margin_right"))
    pbb = sum(_len(inp[k], cb) or 0.0 for k in ("padding_left", "padding_right", "border_left", "border_right"))
    shrink = _num(inp["content_width"])  # preferred and minimum width both equal the child's
    if left is None and w is None and right is None:
        ml, mr = ml or 0.0, mr or 0.0
        left, w = 0.0, shrink
    elif left is not None and w is not None and right is not None:
        room = cb - left - right - w - pbb
        if ml is None and mr is None:
            if room / 2 < 0:
                ml, mr = 0.0, room
            else:
                ml = mr = room / 2
        elif ml is None:
            assert mr is not None
            ml = room - mr
        elif mr is None:
            mr = room - ml
        # else over-constrained: 'right' is ignored
    else:
        ml, mr = ml or 0.0, mr or 0.0
        if left is None and w is None:
            w = shrink
            assert right is not None
            left = cb - right - ml - mr - pbb - w
        elif left is None and right is None:
            left = 0.0
        elif w is None and right is None:
            w = shrink
        elif left is None:
            assert w is not None and right is not None
            left = cb - right - ml - mr - pbb - w
        elif w is None:
            assert right is not None
            w = max(0.0, cb - left - right - ml - mr - pbb)
    assert left is not None and w is not None and ml is not None and mr is not None
    return {"left": left, "width": w, "margin_left": ml, "margin_right": mr}


REFERENCES: dict[str, Callable[[Mapping[str, object]], dict[str, float]]] = {
    "block_width": block_width, "abspos_width": abspos_width}


def failures(function: str, cases: list[dict[str, object]], tol: float) -> list[dict[str, object]]:
    """The agreed cases the reference does not match within `tol`, with both answers (rows as
    built to be printed)."""
    ref = REFERENCES[function]
    out: list[dict[str, object]] = []
    for c in cases:
        inp, exp = c["input"], c["expected"]
        if not isinstance(inp, dict) or not isinstance(exp, dict):
            raise ValueError(f"case {c.get('id')}: input and expected must be objects")
        got = ref(inp)
        if any(abs(got[k] - _num(exp[k])) > tol for k in exp):
            out.append({"id": c["id"], "input": c["input"], "expected": c["expected"], "reference": got})
    return out
