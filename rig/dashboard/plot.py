"""Server-side SVG plots (no script, no CDN): one line per model over time, a value in [0, 1]."""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Iterable

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def _fmt_time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%m-%d %H:%M")


def series(
    points: Iterable[tuple[str, float | None, float | None]],
) -> dict[str, list[tuple[float, float]]]:
    """Per model, the (time, value) pairs that have both, in time order (pure): from each point's
    (model, time, value)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for model, t, v in points:
        if t is not None and v is not None:
            out.setdefault(model, []).append((float(t), float(v)))
    return {m: sorted(v) for m, v in sorted(out.items())}


def svg(title: str, by_model: dict[str, list[tuple[float, float]]], width: int = 520, height: int = 220) -> str:
    """A line plot with a y axis from 0 to 100 % and a time axis; a legend per model."""
    left, right, top, bottom = 44, 12, 26, 40
    pw, ph = width - left - right, height - top - bottom
    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" aria-label="{esc(title)}">',
             f'<text x="{left}" y="16" font-size="13" font-weight="bold">{esc(title)}</text>',
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#999"/>']
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        gy = top + ph * (1 - frac)
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{gy:.1f}" y2="{gy:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 4}" y="{gy + 4:.1f}" font-size="10" text-anchor="end">{int(frac * 100)}%</text>')
    times = [t for pts in by_model.values() for t, _ in pts]
    if not times:
        parts.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" font-size="12" text-anchor="middle">'
                     'no batches yet</text></svg>')
        return "".join(parts)
    t0, t1 = min(times), max(times)
    span = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return left + (pw * (t - t0) / span if t1 > t0 else pw / 2)

    def y(v: float) -> float:
        return top + ph * (1 - max(0.0, min(1.0, v)))

    parts.append(f'<text x="{left}" y="{height - 22}" font-size="10">{_fmt_time(t0)}</text>')
    if t1 > t0:
        parts.append(f'<text x="{left + pw}" y="{height - 22}" font-size="10" text-anchor="end">{_fmt_time(t1)} UTC</text>')
    for i, (model, pts) in enumerate(by_model.items()):
        color = PALETTE[i % len(PALETTE)]
        if len(pts) > 1:
            d = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{d}"/>')
        for t, v in pts:
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{color}">'
                         f'<title>{esc(model)} {_fmt_time(t)}: {v * 100:.0f}%</title></circle>')
        lx = left + (i % 3) * (pw // 3)
        ly = height - 6 - 12 * (i // 3) if i >= 3 else height - 6
        parts.append(f'<rect x="{lx}" y="{ly - 8}" width="10" height="3" fill="{color}"/>'
                     f'<text x="{lx + 14}" y="{ly}" font-size="10" class="legend">{esc(model)}</text>')
    parts.append("</svg>")
    return "".join(parts)
