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
from pathlib import Path
from typing import Any

from bench.oracle import engines as eng
from bench.oracle.engines import EngineError
from bench.oracle.fleet import Fleet
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


def check_page(pages: Mapping[str, Mapping[str, Any]], tol: float) -> dict[str, Any]:
    """Per element: each engine's border box, the vote on it, and every check-layout
    expectation against every engine (pure)."""
    keys = sorted({k for p in pages.values() for k in p}, key=lambda k: (k[0] != "#", k))
    elements: dict[str, Any] = {}
    failures = []
    for key in keys:
        boxes = {n: (p[key]["rect"] if key in p else None) for n, p in pages.items()}
        answers = {n: (dict(zip(RECT, b, strict=True)) if b is not None else None) for n, b in boxes.items()}
        entry: dict[str, Any] = {"engines": boxes, "agreement": vote(answers, tol).agreement}
        expect: dict[str, str] = next((p[key]["expect"] for p in pages.values() if key in p), {})
        checks: dict[str, Any] = {}
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
            got = {n: (p[key][kind][idx] if key in p else None) for n, p in pages.items()}
            bad = sorted(n for n, g in got.items() if g is None or abs(float(g) - want) > t)
            checks[attr] = {"want": want, "got": got, "tolerance": t, "failed_in": bad}
        if checks:
            entry["checks"] = checks
            if any(c["failed_in"] for c in checks.values()):
                failures.append(key)
        if unchecked:
            entry["not_checked"] = unchecked
        elements[key] = entry
    return {"elements": elements, "expectation_failures": failures}


def render_pages(pages: Sequence[Path], engine_names: Sequence[str], tol: float) -> list[dict[str, Any]]:
    out = []
    with Fleet(engine_names) as fleet:
        versions = fleet.versions()
        for p in pages:
            measured = fleet.each(lambda n, e, p=p: e.render_page(p))  # type: ignore[misc]
            out.append({"page": str(p), "engines": versions, **check_page(measured, tol)})
    return out


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:g}"


def format_pages(results: Sequence[dict[str, Any]]) -> list[str]:
    lines = []
    for r in results:
        lines.append(f"{r['page']}")
        for key, e in r["elements"].items():
            boxes = "  ".join(f"{n} " + ("-" if v is None else "[" + ", ".join(_fmt(x) for x in v) + "]")
                              for n, v in e["engines"].items())
            lines.append(f"  {key} {e['agreement']}  {boxes}")
            for attr, c in e.get("checks", {}).items():
                got = ", ".join(f"{n} {_fmt(g)}" for n, g in c["got"].items())
                verdict = "ok" if not c["failed_in"] else "FAIL in " + ", ".join(c["failed_in"])
                lines.append(f"    {attr}={c['want']:g}: {verdict} ({got})")
            if e.get("not_checked"):
                lines.append(f"    not checked: {', '.join(e['not_checked'])}")
    return lines


def engines_report(names: Sequence[str] = eng.ENGINES) -> list[dict[str, Any]]:
    """Per engine: the installed version and whether it starts (all started at once, then stopped)."""

    def one(n: str) -> dict[str, Any]:
        row: dict[str, Any] = {"engine": n, "version": eng.probe_version(n), "starts": False}
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
