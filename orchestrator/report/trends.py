"""A metric's trend on one cell as a small inline SVG: the kernel pages' speed
section, drawn without JavaScript, fonts or files; its series gathered from the
stored values of the kernel grids' runs (trend_series), one per cell and metric.

Each stored value in the unit of the newest is a point (values in another unit, before
the job's `unit:` was edited, are left out and counted in a note), in result order (x) against its value (y, the
axis labelled with the lowest and highest value and the unit); a point that
made its cell perf-regression is red and larger; the dashed line is the median
the newest value was judged against. Every point carries a <title> (a tooltip
without scripts) and data-run / data-value. Text from the database (names,
units) is escaped; numbers are formatted here. The size is fixed, whatever the
number of points, so a page of many cells stays small.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from html import escape
from typing import Any, NamedTuple

from markupsafe import Markup

from orchestrator.metrics import number
from orchestrator.terminal import printable_on_page

WIDTH, HEIGHT = 320, 96
LEFT, RIGHT, TOP, BOTTOM = 64, 10, 10, 22  # margins: the y labels left, the run labels below
POINT, REGRESSED_POINT = 2.5, 4.5


class Point(NamedTuple):
    """One stored value (a tuple: a big farm's kernel pages draw 10^4-10^5 of them)."""

    run_id: int
    result_id: int
    value: float
    regressed: bool
    baseline: float | None  # the median this value was judged against


@dataclass(frozen=True)
class Series:
    """One cell's values of one metric, oldest first."""

    metric: str
    cell: str  # "variant @ node [card]"
    unit: str
    better: str
    points: tuple[Point, ...]
    # the earlier values not drawn, in units other than the newest's, by unit: one axis in one unit
    # (100 GFLOP/s beside 0.1 TFLOP/s, the job's `unit:` edited, read as a cliff: red-team 77)
    other_units: tuple[tuple[str, int], ...] = ()

    @property
    def latest(self) -> Point:
        return self.points[-1]


def _e(text: object) -> str:
    return escape(printable_on_page(str(text)), quote=True)


def _scale(values: list[float]) -> tuple[float, float, float]:
    """(lowest, highest, divisor): values divided by `divisor` span a finite range."""
    divisor = max(abs(v) for v in values)
    divisor = divisor if divisor > 1e300 else 1.0  # 1e308 - (-1e308) would be inf
    low, high = min(values) / divisor, max(values) / divisor
    if high == low:
        pad = abs(high) * 0.1 or 1.0
        low, high = low - pad, high + pad
    return low, high, divisor


def svg(series: Series) -> Markup:
    """The series as an SVG element. Numbers are formatted here (digits, '.', 'e',
    '+', '-': nothing to escape); the names and the unit are escaped once each."""
    values = [p.value for p in series.points]
    low, high, divisor = _scale(values)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bottom = TOP + plot_h
    n = len(values)
    xs = [LEFT + (i * plot_w / (n - 1) if n > 1 else plot_w / 2) for i in range(n)]
    ys = [TOP + (high - v / divisor) / (high - low) * plot_h for v in values]
    unit, metric, cell = _e(series.unit), _e(series.metric), _e(series.cell)
    first, last = series.points[0], series.points[-1]
    direction = "higher" if series.better == "higher" else "lower"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="trend" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" font-size="10" font-family="sans-serif" '
        f'data-metric="{metric}" data-cell="{cell}" data-points="{n}">'
        f"<title>{metric} of {cell} in {unit}: {n} values, run {int(first.run_id)} to run {int(last.run_id)}; "
        f"{direction} is better</title>"
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#999"/>'
        f'<line x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" stroke="#999"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{number(high * divisor)}</text>'
        f'<text x="{LEFT - 4}" y="{bottom}" text-anchor="end">{number(low * divisor)}</text>'
        f'<text x="{LEFT - 4}" y="{TOP + plot_h / 2 + 4:.1f}" text-anchor="end" class="unit">{unit}</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 6}">run {int(first.run_id)}</text>'
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 6}" text-anchor="end">run {int(last.run_id)}</text>'
    ]
    median = last.baseline
    if median is not None and math.isfinite(median) and low <= median / divisor <= high:
        at = TOP + (high - median / divisor) / (high - low) * plot_h
        out.append(
            f'<line class="median" x1="{LEFT}" y1="{at:.1f}" x2="{WIDTH - RIGHT}" y2="{at:.1f}" '
            f'stroke="#888" stroke-dasharray="3 2"><title>median {number(median)} {unit} the newest value '
            "was judged against</title></line>"
        )
    at_points = [(f"{x:.1f}", f"{y:.1f}") for x, y in zip(xs, ys, strict=True)]  # formatted once, used twice
    if n > 1:
        line = " ".join(f"{x},{y}" for x, y in at_points)
        out.append(f'<polyline points="{line}" fill="none" stroke="#557"/>')
    for p, (x, y) in zip(series.points, at_points, strict=True):
        shown = f"{p.value:.4g}"  # metrics.number, inline: 10^4-10^5 points
        run = int(p.run_id)
        said = f"run {run} (result {int(p.result_id)}): {shown} {unit}"
        if p.regressed:
            against = f" against the median {number(p.baseline)}" if p.baseline is not None else ""
            out.append(
                f'<circle class="point regressed" cx="{x}" cy="{y}" r="{REGRESSED_POINT}" fill="#c00" '
                f'data-run="{run}" data-value="{shown}"><title>{said}, perf-regression{against}</title>'
                "</circle>"
            )
        else:
            out.append(
                f'<circle class="point" cx="{x}" cy="{y}" r="{POINT}" fill="#335" '
                f'data-run="{run}" data-value="{shown}"><title>{said}</title></circle>'
            )
    out.append("</svg>")
    return Markup("".join(out))


def trend_series(rows: list[Any], several: set[str]) -> dict[str, dict[str, list[Series]]]:
    """kernel -> metric -> one Series per cell, by cell label; `rows` are Store.TREND's.
    Unpacked as tuples and sorted per cell: a big farm's window holds 10^5 values."""
    points: dict[tuple, list[tuple]] = defaultdict(list)
    for result_id, run_id, kernel, variant, node, device, name, value, unit, better, baseline, regressed in rows:
        cell = (kernel, name, variant, node, device)
        points[cell].append((result_id, run_id, value, unit, better, baseline, regressed))
    found: dict[str, dict[str, list[Series]]] = defaultdict(lambda: defaultdict(list))
    for (kernel, name, variant, node, device), values in points.items():
        values.sort()
        label = f"{variant} @ {node}" + (f" [{device}]" if node in several and device else "")
        unit, better = values[-1][3], values[-1][4]  # the newest result's
        shown = tuple(
            Point(run, res, value, bool(bad), base) for res, run, value, u, _b, base, bad in values if u == unit
        )
        others: dict[str, int] = defaultdict(int)
        for value in values:
            if value[3] != unit:
                others[value[3]] += 1
        found[kernel][name].append(Series(name, label, unit, better, shown, tuple(sorted(others.items()))))
    return {
        kernel: {name: sorted(series, key=lambda s: s.cell) for name, series in sorted(by_name.items())}
        for kernel, by_name in found.items()
    }
