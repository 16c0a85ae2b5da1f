"""`nev oracle render` and `nev oracle engines`: any pages in every engine; what is installed.

Pages are checked in the manner of web-platform-tests' check-layout-th.js, on every element
carrying one of its attributes (with `data-tolerance`, default 0):
`data-expected-width` / `-height` (offsetWidth / offsetHeight), `data-offset-x` / `-y`
(offsetLeft / offsetTop), `data-expected-client-width` / `-height`,
`data-expected-scroll-width` / `-height`. Our own `data-expected-rect-x` / `-y` / `-width` /
`-height` compare the unrounded border box (getBoundingClientRect; default tolerance: the
oracle's). Other `data-expected-*` attributes are listed as not checked.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.oracle import engines as eng
from bench.oracle.engines import EngineError
from bench.oracle.fleet import Fleet
from bench.oracle.measured import Measured
from bench.oracle.vote import vote
from lanes.base.errors import NevError

# attribute -> (measured list, index, whether the oracle's tolerance is the default)
CHECKS: dict[str, tuple[str, int, bool]] = {
    "data-expected-width": ("offset", 2, False), "data-expected-height": ("offset", 3, False),
    "data-offset-x": ("offset", 0, False), "data-offset-y": ("offset", 1, False),
    "data-expected-client-width": ("client", 0, False), "data-expected-client-height": ("client", 1, False),
    "data-expected-scroll-width": ("scroll", 0, False), "data-expected-scroll-height": ("scroll", 1, False),
    "data-expected-rect-x": ("rect", 0, True), "data-expected-rect-y": ("rect", 1, True),
    "data-expected-rect-width": ("rect", 2, True), "data-expected-rect-height": ("rect", 3, True),
}
RECT = ("x", "y", "width", "height")


def collect_pages(args: Sequence[str]) -> list[Path]:
    pages: list[Path] = []
    for a in args:
        p = Path(a)
        if p.is_dir():
            pages += sorted(q for q in p.rglob("*") if q.suffix.lower() in (".html", ".htm", ".xhtml"))
        elif p.is_file():
            pages.append(p)
        else:
            raise NevError(f"{a}: no such page or folder; pass .html files or folders holding them", 2)
    if not pages:
        raise NevError(f"no .html pages in {', '.join(args)}", 2)
    return pages


def _num(raw: str, what: str, key: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise NevError(f"{what}={raw!r} on {key} is not a number; fix the page") from None


@dataclass(frozen=True)
class Check:
    """One check-layout expectation against every engine."""

    want: float
    got: dict[str, float | None]
    tolerance: float
    failed_in: list[str]

    def to_json(self) -> dict[str, object]:
        return {"want": self.want, "got": self.got, "tolerance": self.tolerance,
                "failed_in": self.failed_in}


@dataclass(frozen=True)
class Element:
    """One element of a page: each engine's border box (None: not in that engine's page), the
    vote on it, its checks and the expectations not checked."""

    engines: dict[str, tuple[float, ...] | None]
    agreement: str
    checks: dict[str, Check] = field(default_factory=dict)
    not_checked: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        boxes = {n: None if b is None else list(b) for n, b in self.engines.items()}
        out: dict[str, object] = {"engines": boxes, "agreement": self.agreement}
        if self.checks:
            out["checks"] = {a: c.to_json() for a, c in self.checks.items()}
        if self.not_checked:
            out["not_checked"] = self.not_checked
        return out


@dataclass(frozen=True)
class PageCheck:
    """A page checked in every engine (`check_page`); with its path and the engines' versions
    when rendered (`render_pages`: `nev oracle render`)."""

    elements: dict[str, Element]
    expectation_failures: list[str]
    page: str | None = None
    versions: dict[str, str] | None = None

    def to_json(self) -> dict[str, object]:
        head: dict[str, object] = {}
        if self.page is not None:
            head = {"page": self.page, "engines": self.versions}
        return {**head, "elements": {k: e.to_json() for k, e in self.elements.items()},
                "expectation_failures": self.expectation_failures}


def check_page(pages: Mapping[str, Mapping[str, Measured]], tol: float) -> PageCheck:
    """Per element: each engine's border box, the vote on it, and every check-layout
    expectation against every engine (pure)."""
    keys = sorted({k for p in pages.values() for k in p}, key=lambda k: (k[0] != "#", k))
    elements: dict[str, Element] = {}
    failures = []
    for key in keys:
        boxes: dict[str, tuple[float, ...] | None] = {n: (p[key].rect if key in p else None)
                                                      for n, p in pages.items()}
        answers = {n: (dict(zip(RECT, b, strict=True)) if b is not None else None) for n, b in boxes.items()}
        agreement = vote(answers, tol).agreement
        expect: dict[str, str] = next((p[key].expect for p in pages.values() if key in p), {})
        checks: dict[str, Check] = {}
        unchecked = []
        for attr, raw in sorted(expect.items()):
            if attr == "data-tolerance":
                continue
            if attr not in CHECKS:
                unchecked.append(attr)
                continue
            kind, idx, oracle_tol = CHECKS[attr]
            want = _num(raw, attr, key)
            t = _num(expect["data-tolerance"], "data-tolerance", key) if "data-tolerance" in expect \
                else (tol if oracle_tol else 0.0)
            got = {n: (getattr(p[key], kind)[idx] if key in p else None) for n, p in pages.items()}
            bad = sorted(n for n, g in got.items() if g is None or abs(float(g) - want) > t)
            checks[attr] = Check(want, got, t, bad)
        if any(c.failed_in for c in checks.values()):
            failures.append(key)
        elements[key] = Element(boxes, agreement, checks, unchecked)
    return PageCheck(elements, failures)


def render_pages(pages: Sequence[Path], engine_names: Sequence[str], tol: float) -> list[PageCheck]:
    out = []
    with Fleet(engine_names) as fleet:
        versions = fleet.versions()
        for p in pages:
            measured = fleet.each(lambda n, e, p=p: e.render_page(p))  # type: ignore[misc]
            checked = check_page(measured, tol)
            out.append(PageCheck(checked.elements, checked.expectation_failures, str(p), versions))
    return out


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def format_pages(results: Sequence[PageCheck]) -> list[str]:
    lines = []
    for r in results:
        lines.append(f"{r.page}")
        for key, e in r.elements.items():
            boxes = "  ".join(f"{n} " + ("-" if v is None else "[" + ", ".join(_fmt(x) for x in v) + "]")
                              for n, v in e.engines.items())
            lines.append(f"  {key} {e.agreement}  {boxes}")
            for attr, c in e.checks.items():
                got = ", ".join(f"{n} {_fmt(g)}" for n, g in c.got.items())
                verdict = "ok" if not c.failed_in else "FAIL in " + ", ".join(c.failed_in)
                lines.append(f"    {attr}={c.want:g}: {verdict} ({got})")
            if e.not_checked:
                lines.append(f"    not checked: {', '.join(e.not_checked)}")
    return lines


def engines_report(names: Sequence[str] = eng.ENGINES) -> list[dict[str, object]]:
    """Per engine: the installed version and whether it starts (all started at once, then stopped):
    a JSON document built to be printed (`nev oracle engines`)."""

    def one(n: str) -> dict[str, object]:
        row: dict[str, object] = {"engine": n, "version": eng.probe_version(n), "starts": False}
        if row["version"] is None:
            row["error"] = eng.absent([n])
            return row
        t0 = time.monotonic()
        try:
            with Fleet([n]) as f:
                row["running_version"] = f.versions()[n]
                row["starts"] = True
        except EngineError as e:
            row["error"] = e.message
        row["seconds"] = round(time.monotonic() - t0, 2)
        return row

    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        return list(pool.map(one, names))
