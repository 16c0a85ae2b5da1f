"""`nev oracle render` and `nev oracle engines`: any pages in every engine; what is installed.

A page may state the geometry it expects on an element with an id, in the manner of
web-platform-tests' check-layout: `data-expected-width`, `data-expected-height`,
`data-expected-x`, `data-expected-y` (border box, CSS px, relative to the viewport),
with an optional `data-tolerance` (default: the oracle's tolerance).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from bench.oracle import engines as eng
from bench.oracle.engines import EngineError
from bench.oracle.fleet import Fleet
from bench.oracle.vote import vote
from lanes.errors import NevError

FIELDS = {"x": 0, "y": 1, "width": 2, "height": 3}


class _Expectations(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, dict[str, float]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v for k, v in attrs if v is not None}
        if "id" not in a:
            return
        exp = {}
        for f in FIELDS:
            raw = a.get(f"data-expected-{f}")
            if raw is not None:
                try:
                    exp[f] = float(raw)
                except ValueError:
                    raise NevError(f"data-expected-{f}={raw!r} on #{a['id']} is not a number") from None
        if "data-tolerance" in a and exp:
            exp["tolerance"] = float(a["data-tolerance"])
        if exp:
            self.found[a["id"]] = exp


def expectations(html: str) -> dict[str, dict[str, float]]:
    p = _Expectations()
    p.feed(html)
    return p.found


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


def check_page(html: str, rects: dict[str, dict[str, list[float]]], tol: float) -> dict[str, Any]:
    """The vote per element over x, y, width, height, and each engine against data-expected-* (pure)."""
    ids = sorted({i for m in rects.values() for i in m})
    elements: dict[str, Any] = {}
    failures = []
    exp_all = expectations(html)
    for i in ids:
        answers = {n: ({f: m[i][k] for f, k in FIELDS.items()} if i in m else None) for n, m in rects.items()}
        v = vote(answers, tol)
        entry: dict[str, Any] = {"engines": {n: (m[i][:4] if i in m else None) for n, m in rects.items()},
                                 "agreement": v.agreement}
        exp = exp_all.get(i)
        if exp:
            t = exp.get("tolerance", tol)
            bad: dict[str, dict[str, Any]] = {}
            for n, a in answers.items():
                for f, want in exp.items():
                    if f == "tolerance":
                        continue
                    got = None if a is None else a[f]
                    if got is None or abs(got - want) > t:
                        bad.setdefault(n, {})[f] = {"want": want, "got": got}
            entry["expected"] = {k: v2 for k, v2 in exp.items() if k != "tolerance"}
            entry["expected_ok"] = not bad
            if bad:
                entry["expected_fail"] = bad
                failures.append(i)
        elements[i] = entry
    return {"elements": elements, "expectation_failures": failures}


def render_pages(pages: Sequence[Path], engine_names: Sequence[str], tol: float) -> list[dict[str, Any]]:
    out = []
    with Fleet(engine_names) as fleet:
        versions = fleet.versions()
        for p in pages:
            rects = fleet.each(lambda n, e, p=p: e.render_file(p))  # type: ignore[misc]
            res = check_page(p.read_text(errors="replace"), rects, tol)
            out.append({"page": str(p), "engines": versions, **res})
    return out


def format_pages(results: Sequence[dict[str, Any]]) -> list[str]:
    lines = []
    for r in results:
        lines.append(f"{r['page']}")
        for i, e in r["elements"].items():
            rects = "  ".join(f"{n} " + ("-" if v is None else "[" + ", ".join(f"{x:g}" for x in v) + "]")
                              for n, v in e["engines"].items())
            mark = ""
            if "expected" in e:
                want = ", ".join(f"{k}={v:g}" for k, v in e["expected"].items())
                mark = f"  expected {want}: " + ("ok" if e["expected_ok"] else
                                                 "FAIL in " + ", ".join(e["expected_fail"]))
            lines.append(f"  #{i} {e['agreement']}  {rects}{mark}")
    return lines


def engines_report(names: Sequence[str] = eng.ENGINES) -> list[dict[str, Any]]:
    """Per engine: the installed version and whether it starts (all started at once, then stopped)."""

    def one(n: str) -> dict[str, Any]:
        row: dict[str, Any] = {"engine": n, "version": eng.probe_version(n), "starts": False}
        if row["version"] is None:
            row["error"] = "not installed"
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
