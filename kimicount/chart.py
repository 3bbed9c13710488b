"""`kv-cache --plot FILE`: the cache-size chart as a standalone SVG file, written by hand.

Both axes are logarithmic (base 2), so each layout is a straight line and the ratio between two layouts
is a constant gap, the same at 512 tokens as at 128K. No plotting library: the file is a few lines of
SVG that any browser or editor opens. Reads results, computes nothing but positions.
"""

from __future__ import annotations

import math
from html import escape
from itertools import pairwise
from pathlib import Path

from kimicount.errors import UsageError
from kimicount.kvcache import KvCacheReport, Layout, LayoutCache
from kimicount.render import human_bytes, times
from kimicount.render_kv_cache import LAYOUT_COLOURS

WIDTH, HEIGHT = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 80, 190, 50, 60  # margins around the plot area, in pixels


def _y_ticks(low: int, high: int) -> range:
    """Exponents of the y gridlines: every power of 2 from floor(log2 low) to ceil(log2 high), thinned
    to at most 10 lines by taking every 2nd, 5th or 10th."""
    first = math.floor(math.log2(low))
    last = max(math.ceil(math.log2(high)), first + 1)  # one size alone still gets an axis
    step = next(s for s in (1, 2, 5, 10, 20) if (last - first) // s <= 10)
    first -= first % step
    return range(first, last + step, step)


def svg_chart(report: KvCacheReport, sweep: list[tuple[int, tuple[LayoutCache, ...]]]) -> str:
    """The chart as SVG text: total bytes against context length, one line per layout."""
    contexts = [tokens for tokens, _ in sweep]
    ticks = _y_ticks(
        min(c.total_bytes for _, caches in sweep for c in caches),
        max(c.total_bytes for _, caches in sweep for c in caches),
    )
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    x_lo, x_span = math.log2(contexts[0]), max(math.log2(contexts[-1] / contexts[0]), 1)
    y_lo, y_span = ticks[0], ticks[-1] - ticks[0]

    def x(tokens: int) -> float:
        return LEFT + plot_w * (math.log2(tokens) - x_lo) / x_span

    def y(size: int) -> float:
        return TOP + plot_h * (1 - (math.log2(size) - y_lo) / y_span)

    spec, workload = report.spec, report.workload
    title = f"KV cache of {spec.name}, {report.dtype}, batch {workload.batch}, {report.layers} layers" + (
        f", pages of {workload.block_size}" if workload.block_size > 1 else ""
    )
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">'
        ),
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{escape(title)}</text>',
        f'<text x="{LEFT}" y="40" fill="#555">{escape(_subtitle(report))}</text>',
    ]
    for exponent in ticks:
        top = y(2**exponent)
        parts.append(f'<line x1="{LEFT}" y1="{top:.1f}" x2="{LEFT + plot_w}" y2="{top:.1f}" stroke="#ddd"/>')
        label = human_bytes(2**exponent)  # exact: a power of two is a whole number of some binary unit
        parts.append(f'<text x="{LEFT - 6}" y="{top + 4:.1f}" text-anchor="end">{label}</text>')
    for tokens in contexts:
        left = x(tokens)
        parts.append(f'<line x1="{left:.1f}" y1="{TOP}" x2="{left:.1f}" y2="{TOP + plot_h}" stroke="#ddd"/>')
        parts.append(f'<text x="{left:.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{tokens:,}</text>')
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 16}" text-anchor="middle">tokens per sequence</text>'
    )
    lines = list(zip(*(caches for _, caches in sweep)))  # one tuple of caches per layout
    label_ys = _spread([y(caches[-1].total_bytes) for caches in lines], gap=15)
    for caches, label_y in zip(lines, label_ys):
        points = [(x(tokens), y(cache.total_bytes)) for tokens, cache in zip(contexts, caches)]
        parts += _layout_line(caches[-1], points, label_y)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _subtitle(report: KvCacheReport) -> str:
    """The scale, and the gaps between the lines in words: 'naive 35.6×, flash 42.7× the latent'."""
    ratios = [
        f"{cache.layout.value} {times(report.ratio_to_latent(cache))}"
        for cache in report.caches
        if cache.layout is not Layout.latent
    ]
    gaps = f": {', '.join(ratios)} the latent at every length" if ratios else ""
    return f"Both axes log scale{gaps}"


def _spread(ys: list[float], gap: float) -> list[float]:
    """Label heights moved apart until each is `gap` pixels from the next (naive and flash end close).

    >>> _spread([100.0, 104.0, 300.0], gap=15)
    [100.0, 115.0, 300.0]
    """
    order = sorted(range(len(ys)), key=ys.__getitem__)
    placed = list(ys)
    for previous, current in pairwise(order):
        placed[current] = max(placed[current], placed[previous] + gap)
    return placed


def _layout_line(last: LayoutCache, points: list[tuple[float, float]], label_y: float) -> list[str]:
    """One layout's polyline and points, and its name and largest size at the right end."""
    colour = LAYOUT_COLOURS[last.layout]
    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    parts = [f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2.5"/>']
    parts += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"/>' for px, py in points]
    label = f"{last.layout.value} {human_bytes(last.total_bytes)}"
    end_x = points[-1][0]
    parts.append(f'<text x="{end_x + 10:.1f}" y="{label_y + 4:.1f}" fill="{colour}">{escape(label)}</text>')
    return parts


def write_svg(path: Path, report: KvCacheReport, sweep: list[tuple[int, tuple[LayoutCache, ...]]]) -> None:
    """Write the chart to `path`; an unwritable path is a usage error naming it."""
    try:
        path.write_text(svg_chart(report, sweep), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--plot {path}: cannot write: {error.strerror or error}") from error
