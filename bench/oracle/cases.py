"""Case generators, one per corpus function: a seed gives the same case on every machine.

A case is the inputs the engine function sees plus a small self-contained HTML document
that lays those inputs out. `expected()` turns one engine's measurement of that
document into the function's expected fields (see docs/dump-format.md for the fields
and how each is read from the rects).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bench.oracle.engines import Measure
from lanes.base.errors import NevError

PAGE_STYLE = "html,body{margin:0;padding:0;overflow:hidden}"


# One case's input: each field a CSS length as written ("12px", "30%", "auto") or a whole number of
# px (`cb_width`, `content_width`); written to cases.jsonl as it is.
CaseInput = dict[str, str | int]


@dataclass(frozen=True)
class Case:
    id: str
    seed: int
    input: CaseInput
    html: str


class Generator:
    """Base: name, version (bump it whenever the cases or their reading change), function."""

    name = ""
    version = ""
    function = ""
    # which measured fields the vote compares, besides the expected fields
    voted_rects: tuple[str, ...] = ()

    def case(self, seed: int) -> Case:
        raise NotImplementedError

    def expected(self, case: Case, m: Measure) -> dict[str, float]:
        raise NotImplementedError

    def case_id(self, seed: int) -> str:
        return f"{self.function}-{seed:06d}"


def _len(rng: random.Random, *, auto: float, px: tuple[int, int], pct: tuple[int, int],
         pct_share: float = 0.35) -> str:
    r = rng.random()
    if r < auto:
        return "auto"
    if r < auto + (1 - auto) * pct_share:
        v = rng.randint(pct[0] * 10, pct[1] * 10) / 10
        return f"{v:g}%"
    return f"{rng.randint(px[0], px[1])}px"


def _nonneg(rng: random.Random, px: int, pct: int) -> str:
    if rng.random() < 0.3:
        return f"{rng.randint(0, pct * 10) / 10:g}%"
    return f"{rng.randint(0, px)}px"


def _element(rng: random.Random, *, width: tuple[float, tuple[int, int], tuple[int, int]],
             margin: tuple[tuple[int, int], tuple[int, int]], padding: tuple[int, int], border: int) -> dict[str, str]:
    """The element's horizontal box, drawn in this order: width (auto share, px range, % range),
    the margins (px range, % range; auto 30% of the time), the padding (px max, % max), the
    borders (px max)."""
    return {
        "width": _len(rng, auto=width[0], px=width[1], pct=width[2]),
        "margin_left": _len(rng, auto=0.3, px=margin[0], pct=margin[1]),
        "margin_right": _len(rng, auto=0.3, px=margin[0], pct=margin[1]),
        "padding_left": _nonneg(rng, *padding),
        "padding_right": _nonneg(rng, *padding),
        "border_left": f"{rng.randint(0, border)}px",
        "border_right": f"{rng.randint(0, border)}px",
    }


def _element_css(inp: CaseInput) -> str:
    """The element's style for its horizontal box (`_element`), 10px high."""
    return (f"width:{inp['width']};margin:0 {inp['margin_right']} 0 {inp['margin_left']};"
            f"padding:0 {inp['padding_right']} 0 {inp['padding_left']};"
            f"border-style:solid;border-width:0 {inp['border_right']} 0 {inp['border_left']};height:10px")


def _doc(body: str) -> str:
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{PAGE_STYLE}</style>'
            f"</head><body>{body}</body></html>")


class BlockWidth(Generator):
    """CSS 2.1 §10.3.3: block-level non-replaced elements in normal flow (ltr)."""

    name = "block_width"
    version = "1"
    function = "block_width"
    voted_rects = ("cb", "el", "w")

    def case(self, seed: int) -> Case:
        rng = random.Random(f"{self.name}:{self.version}:{seed}")
        inp: CaseInput = {
            "cb_width": rng.randint(40, 780),
            **_element(rng, width=(0.4, (0, 700), (0, 120)), margin=((-60, 200), (-10, 50)), padding=(40, 20),
                       border=10),
        }
        body = (f'<div id="cb" style="width:{inp["cb_width"]}px;height:20px">'
                f'<div id="el" style="{_element_css(inp)}"><div id="w" style="height:1px"></div></div></div>')
        return Case(self.case_id(seed), seed, inp, _doc(body))

    def expected(self, case: Case, m: Measure) -> dict[str, float]:
        cb, el, w = m["cb"], m["el"], m["w"]
        return {"width": w[2], "margin_left": el[0] - cb[0],
                "margin_right": (cb[0] + cb[2]) - (el[0] + el[2])}


class AbsposWidth(Generator):
    """CSS 2.1 §10.3.7: absolutely positioned non-replaced elements, horizontal (ltr)."""

    name = "abspos_width"
    version = "2"
    function = "abspos_width"
    voted_rects = ("cb", "el", "c", "w")

    def case(self, seed: int) -> Case:
        rng = random.Random(f"{self.name}:{self.version}:{seed}")
        inp: CaseInput = {
            "cb_width": rng.randint(40, 780),
            "left": _len(rng, auto=0.45, px=(-40, 300), pct=(-10, 60)),
            "right": _len(rng, auto=0.45, px=(-40, 300), pct=(-10, 60)),
            **_element(rng, width=(0.45, (0, 600), (0, 110)), margin=((-40, 120), (-10, 30)), padding=(30, 15),
                       border=8),
            "content_width": rng.randint(0, 500),
        }
        el = f"position:absolute;top:0;left:{inp['left']};right:{inp['right']};" + _element_css(inp)
        body = (f'<div id="cb" style="position:relative;width:{inp["cb_width"]}px;height:20px">'
                f'<div id="el" style="{el}"><div id="c" style="width:{inp["content_width"]}px;height:1px">'
                f'</div><div id="w" style="height:1px"></div></div></div>')
        return Case(self.case_id(seed), seed, inp, _doc(body))

    def expected(self, case: Case, m: Measure) -> dict[str, float]:
        cb, el, w = m["cb"], m["el"], m["w"]
        # Rects give left + margin-left and right + margin-right. A margin that is not auto
        # keeps its specified value in §10.3.7, so the engine's resolved margin is used as is;
        # an auto margin is what remains beside the resolved inset. (Engines report the
        # specified inset even when 'right' is ignored, and disagree on resolved auto margins.)
        left, right = el[6], el[7]
        if left is None or right is None:
            raise KeyError("left/right")
        ml = el[0] - cb[0] - left if case.input["margin_left"] == "auto" else el[4]
        mr = (cb[0] + cb[2]) - (el[0] + el[2]) - right if case.input["margin_right"] == "auto" else el[5]
        return {"left": el[0] - cb[0] - ml, "width": w[2], "margin_left": ml, "margin_right": mr}


GENERATORS: dict[str, Callable[[], Generator]] = {"block_width": BlockWidth, "abspos_width": AbsposWidth}


def generator_for(corpus: str, extra: dict[str, Callable[[], Generator]] | None = None) -> Generator:
    """The generator of a corpus: its name is the function, optionally followed by `-suffix`."""
    table = {**GENERATORS, **(extra or {})}
    for name, make in table.items():
        if corpus == name or corpus.startswith(name + "-"):
            return make()
    raise NevError(f"corpus {corpus!r} names no generator; use one of {', '.join(sorted(table))} "
                   "(optionally followed by -SUFFIX)", 2)


@dataclass(frozen=True)
class Shard:
    """Worker `index` of `count` building one corpus (`--shard i/n`)."""

    index: int
    count: int

    @classmethod
    def parse(cls, spec: str | None) -> Shard:
        """`--shard i/n`; the whole corpus when none is given."""
        if spec is None:
            return WHOLE
        try:
            i, n = (int(x) for x in spec.split("/"))
        except ValueError:
            raise NevError(f"--shard {spec!r} is not i/n; write for example 0/2", 2) from None
        if n < 1 or not 0 <= i < n:
            raise NevError(f"--shard {spec!r}: need 0 <= i < n; write for example 1/2", 2)
        return cls(i, n)

    def seeds(self, start: int, count: int) -> Iterator[int]:
        """This worker's seeds of [start, start+count): i, i+n, i+2n, ... (no queue needed)."""
        first = start + ((self.index - start) % self.count)
        return iter(range(first, start + count, self.count))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


WHOLE = Shard(0, 1)
