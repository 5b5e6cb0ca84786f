"""The geometry of the console's SVG charts: numbers and labels only, drawn by the templates.

Nothing here writes markup, so every label goes through the templates' autoescaping.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from the_loop.decisions.layout import Recorded
from the_loop.hooks.engine.points import POINTS

WIDTH = 900  # the time axis's drawing width (pixels, after the row labels)
LEFT = 150  # room for the point names
ROW = 20
BANDS = 6  # phase band colours cycle through this many classes


@dataclass
class Axis:
    """A work item's points on a time axis: one row per point, phases as bands."""

    width: int
    height: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    bands: list[dict[str, Any]] = field(default_factory=list)
    marks: list[dict[str, Any]] = field(default_factory=list)
    ticks: list[dict[str, Any]] = field(default_factory=list)


def phase_of(rec: Recorded) -> str:
    ctx = rec.context
    return str(ctx.get("phase") or ctx.get("from_phase") or "")


def _positions(times: list[float]) -> list[float]:
    """x for each time, in firing order: proportional to time, yet never two marks closer
    than a few pixels, so the order stays readable when points fire in the same second."""
    if not times:
        return []
    lo, hi = times[0], times[-1]
    span = (hi - lo) or 1.0
    gap = min(6.0, WIDTH / max(len(times), 1))
    xs: list[float] = []
    for t in times:
        x = (t - lo) / span * WIDTH
        xs.append(max(x, xs[-1] + gap) if xs else x)
    scale = WIDTH / xs[-1] if xs[-1] > WIDTH else 1.0
    return [round(x * scale, 1) for x in xs]


def axis(points: list[Recorded], refused: set[int]) -> Axis:
    """The geometry of a timeline page's chart."""
    out = Axis(width=LEFT + WIDTH + 20, height=ROW * len(POINTS) + 40)
    out.rows = [{"name": name, "y": ROW * i + 14} for i, name in enumerate(POINTS)]
    xs = _positions([p.at for p in points])
    row_of = {name: i for i, name in enumerate(POINTS)}
    start = 0
    colours: dict[str, int] = {}
    for i in range(1, len(points) + 1):
        if i == len(points) or phase_of(points[i]) != phase_of(points[start]):
            phase = phase_of(points[start])
            x0 = xs[start]
            x1 = xs[i] if i < len(points) else WIDTH
            colour = colours.setdefault(phase, len(colours) % BANDS)
            out.bands.append({"phase": phase or "(no phase)", "x": LEFT + x0,
                              "width": max(x1 - x0, 2.0), "cls": f"band{colour}"})
            start = i
    for rec, x in zip(points, xs, strict=True):
        out.marks.append({"id": rec.id, "x": LEFT + x,
                          "y": ROW * row_of.get(rec.point, 0) + 10,
                          "point": rec.point, "refused": rec.id in refused,
                          "time": clock(rec.at)})
    if points:
        for k in range(5):
            t = points[0].at + (points[-1].at - points[0].at) * k / 4
            out.ticks.append({"x": LEFT + WIDTH * k / 4, "label": clock(t),
                              "cls": "start" if k == 0 else "end" if k == 4 else "middle"})
    return out


def bars(counts: list[int], *, width: int = 240, height: int = 32) -> dict[str, Any]:
    """A small bar chart of counts per time bucket."""
    top = max(counts) if counts else 0
    step = width / max(len(counts), 1)
    rects = []
    for i, n in enumerate(counts):
        h = 0.0 if not top else max(height * n / top, 1.0 if n else 0.0)
        rects.append({"x": round(i * step, 1), "y": round(height - h, 1),
                      "width": round(max(step - 1, 1), 1), "height": round(h, 1), "n": n})
    return {"width": width, "height": height, "rects": rects, "top": top}


def clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"
