"""Inline-SVG chart primitives and the page style shared by the HTML pages Kairos writes
(``kairos report`` in :mod:`planner.report.page`, the payoff experiment in
:mod:`planner.lab.payoff`)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

WIDTH = 960
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt_num(v: float) -> str:
    """A compact number: 1.2k, 3.4M, 950."""
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.3g}{suffix}"
    if a == 0:
        return "0"
    return f"{v:.3g}"


def _fmt_time(ts: float, span: float) -> str:
    dt = datetime.fromtimestamp(ts, UTC)
    if span <= 2 * 86400:
        return dt.strftime("%H:%M")
    return dt.strftime("%m-%d %H:%M") if span <= 10 * 86400 else dt.strftime("%Y-%m-%d")


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


_TIME_STEPS = (
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
    86400, 2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400,
)


def _time_ticks(lo: float, hi: float, n: int = 7) -> list[float]:
    if hi <= lo:
        return [lo]
    step = next((s for s in _TIME_STEPS if (hi - lo) / s <= n), _TIME_STEPS[-1])
    first = math.ceil(lo / step) * step
    return [float(t) for t in np.arange(first, hi + 1e-9, step)]


@dataclass
class Frame:
    """A plot area: data ranges mapped onto pixel ranges."""

    x0: float
    x1: float
    y0: float
    y1: float
    left: float = 64
    right: float = 16
    top: float = 34
    bottom: float = 34
    width: float = WIDTH
    height: float = 300

    def x(self, v: float) -> float:
        span = self.x1 - self.x0 or 1.0
        return self.left + (v - self.x0) / span * (self.width - self.left - self.right)

    def y(self, v: float) -> float:
        span = self.y1 - self.y0 or 1.0
        return self.height - self.bottom - (v - self.y0) / span * (
            self.height - self.top - self.bottom
        )

    @property
    def plot_bottom(self) -> float:
        return self.height - self.bottom


def points(frame: Frame, xs: Sequence[float], ys: Sequence[float]) -> str:
    return " ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in zip(xs, ys, strict=True))


def svg_open(name: str, frame: Frame, label: str, points: int) -> str:
    return (
        f'<svg class="chart" data-chart="{esc(name)}" data-points="{points}" '
        f'viewBox="0 0 {frame.width:.0f} {frame.height:.0f}" role="img" '
        f'aria-label="{esc(label)}" xmlns="http://www.w3.org/2000/svg">'
    )


def _tick(line_class: str, line: tuple[str, str, str, str], label_at: tuple[str, str],
          anchor: str, label: str) -> str:
    """One tick: its line ``(x1, x2, y1, y2)`` and its label at ``(x, y)``.

    Coordinates come formatted: the grid lines keep the frame's own numbers unrounded.
    """
    x1, x2, y1, y2 = line
    x, y = label_at
    return (
        f'<line class="{line_class}" x1="{x1}" x2="{x2}" y1="{y1}" y2="{y2}"/>'
        f'<text class="tick" x="{x}" y="{y}" text-anchor="{anchor}">{esc(label)}</text>'
    )


def axes(frame: Frame, *, time_axis: bool, y_label: str, y_fmt: Any = fmt_num) -> str:
    out = []
    for v in nice_ticks(frame.y0, frame.y1):
        y = f"{frame.y(v):.1f}"
        grid = (f"{frame.left}", f"{frame.width - frame.right}", y, y)
        out.append(_tick("grid", grid, (f"{frame.left - 6}", f"{frame.y(v) + 4:.1f}"), "end",
                         y_fmt(v)))
    if time_axis:
        span = frame.x1 - frame.x0
        for t in _time_ticks(frame.x0, frame.x1):
            x = f"{frame.x(t):.1f}"
            mark = (x, x, f"{frame.plot_bottom}", f"{frame.plot_bottom + 4}")
            out.append(_tick("tickmark", mark, (x, f"{frame.plot_bottom + 17}"), "middle",
                             _fmt_time(t, span)))
    out.append(
        f'<line class="axis" x1="{frame.left}" x2="{frame.width - frame.right}" '
        f'y1="{frame.plot_bottom}" y2="{frame.plot_bottom}"/>'
        f'<text class="axis-label" x="{frame.left - 50}" y="{frame.top - 14}">'
        f"{esc(y_label)}</text>"
    )
    return "".join(out)


def legend(frame: Frame, items: Sequence[tuple[str, str, str]]) -> str:
    """Legend along the top right: (kind, colour, label); kind = line | dash | box | solid."""
    out = []
    x = frame.width - frame.right
    y = frame.top - 18
    for kind, colour, label in reversed(items):
        w = 7.0 * len(label) + 8
        x -= w
        out.append(f'<text class="legend" x="{x:.1f}" y="{y + 4:.1f}">{esc(label)}</text>')
        x -= 22
        if kind in ("box", "solid"):
            opacity = "0.55" if kind == "box" else "1"
            out.append(
                f'<rect x="{x:.1f}" y="{y - 5:.1f}" width="16" height="10" rx="2" '
                f'fill="{colour}" fill-opacity="{opacity}"/>'
            )
        else:
            dash = ' stroke-dasharray="5 3"' if kind == "dash" else ""
            out.append(
                f'<line x1="{x:.1f}" x2="{x + 16:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="{colour}" stroke-width="2.5"{dash}/>'
            )
        x -= 14
    return "".join(out)


# One style sheet for every page so they look alike: it also holds the report's cards,
# tables and status badges, which the payoff page simply does not use.
CSS = f"""
:root {{ color-scheme: light; }}
body {{ font-family: {FONT}; margin: 0; background: #F4F6F8; color: #1D2733; }}
header {{ background: #1F3A5F; color: #fff; padding: 22px 40px 18px; }}
header h1 {{ margin: 0 0 4px; font-size: 24px; font-weight: 600; }}
header p {{ margin: 0; opacity: .8; font-size: 13px; }}
main {{ max-width: 1040px; margin: 0 auto; padding: 18px 24px 40px; }}
section {{ background: #fff; border-radius: 8px; padding: 16px 22px 18px; margin: 16px 0;
  box-shadow: 0 1px 3px rgba(16,24,40,.08); }}
h2 {{ font-size: 17px; margin: 0 0 4px; font-weight: 600; }}
p.lead {{ margin: 0 0 10px; color: #5B6776; font-size: 13px; }}
.cards {{ display: grid; grid-template-columns: repeat(4, 1fr); gap: 12px; margin-top: 6px; }}
.card {{ background: #fff; border-radius: 8px; padding: 12px 16px;
  box-shadow: 0 1px 3px rgba(16,24,40,.08); }}
.card .k {{ font-size: 12px; color: #5B6776; text-transform: uppercase; letter-spacing: .04em; }}
.card .v {{ font-size: 20px; font-weight: 600; margin-top: 2px; }}
.card .s {{ font-size: 12px; color: #5B6776; }}
svg.chart {{ width: 100%; height: auto; display: block; }}
svg .grid {{ stroke: #E3E7EC; stroke-width: 1; }}
svg .axis {{ stroke: #9AA5B1; stroke-width: 1; }}
svg .tickmark {{ stroke: #9AA5B1; }}
svg .now {{ stroke: #5B6776; stroke-width: 1; stroke-dasharray: 1 3; }}
svg text {{ font-family: {FONT}; }}
svg .tick {{ font-size: 11px; fill: #5B6776; }}
svg .axis-label {{ font-size: 12px; fill: #3E4C5B; font-weight: 600; }}
svg .legend {{ font-size: 12px; fill: #3E4C5B; }}
svg .steplabel {{ font-size: 11px; fill: #fff; font-weight: 600; }}
svg .value {{ font-size: 11px; fill: #1D2733; }}
svg .barlabel {{ font-size: 11px; fill: #fff; font-weight: 600; }}
svg .rowlabel {{ font-size: 12px; fill: #1D2733; font-weight: 600; }}
table.data {{ border-collapse: collapse; width: 100%; font-size: 12.5px; }}
table.data th {{ text-align: left; color: #5B6776; font-weight: 600;
  border-bottom: 2px solid #E3E7EC; padding: 6px 8px; }}
table.data td {{ border-bottom: 1px solid #EEF1F4; padding: 6px 8px; vertical-align: top; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
.status {{ display: inline-block; border-radius: 10px; padding: 1px 8px; font-size: 11px;
  font-weight: 600; background: #E3E7EC; color: #3E4C5B; }}
.status.applied {{ background: #D9F2E6; color: #0B6B3A; }}
.status.failed, .status.not-applied {{ background: #FBE0D6; color: #9A2F0B; }}
.status.planned {{ background: #E4EDF8; color: #1F4E8C; }}
.status.superseded {{ background: #ECE6F3; color: #5B3E84; }}
.status.interrupted {{ background: #FDF0D5; color: #8A5A00; }}
.note {{ color: #5B6776; font-size: 12px; margin-top: 3px; }}
td.muted {{ color: #7A8694; font-style: italic; }}
.err {{ color: #9A2F0B; font-size: 12px; margin-top: 3px; }}
.nodata {{ color: #7A8694; font-style: italic; background: #F7F8FA; border: 1px dashed #D5DBE1;
  border-radius: 6px; padding: 14px; margin: 6px 0; }}
h3 {{ font-size: 14px; margin: 14px 0 4px; }}
h3 .s {{ font-weight: 400; color: #5B6776; font-size: 12px; margin-left: 6px; }}
footer {{ color: #7A8694; font-size: 12px; padding: 0 4px; }}
footer code {{ font-size: 11.5px; }}
"""
