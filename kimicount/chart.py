"""`kv-cache --plot FILE.svg`: the cache-size chart as a standalone SVG file, written by hand.

Both axes are logarithmic (base 2), so each layout is a straight line and the ratio between two layouts
is a constant gap, the same at 512 tokens as at 128K. With --tp, dashed lines show what each GPU holds
of the layouts that split their heads (the latent is replicated: each GPU holds all of it); with
--budget, a grey line marks the memory per GPU. No plotting library: the file is a few lines of SVG that
any browser or editor opens, and nothing but SVG is written (a .png name is refused, not mislabelled).
Reads results, computes nothing but positions.
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
    """The chart as SVG text: total bytes against context length, one line per layout; per GPU (dashed)
    under tensor parallelism, and the budget per GPU as a horizontal line."""
    contexts = [tokens for tokens, _ in sweep]
    lines = list(zip(*(caches for _, caches in sweep)))  # one tuple of caches per layout
    per_gpu = [caches for caches in lines if caches[-1].bytes_per_gpu != caches[-1].total_bytes]
    every_size = [c.total_bytes for caches in lines for c in caches] + [
        c.bytes_per_gpu for caches in per_gpu for c in caches
    ]
    budget = report.budget
    ticks = _y_ticks(min(every_size + [budget or min(every_size)]), max(every_size + [budget or 0]))
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
    # one line per layout (its total), and one dashed per layout that splits across the GPUs (per GPU);
    # a replicated layout holds the same bytes on every GPU, and says so
    replicated = " on every GPU" if workload.tp > 1 else ""
    drawn = [
        (caches, [c.total_bytes for c in caches], False, "", "" if caches in per_gpu else replicated)
        for caches in lines
    ]
    drawn += [(caches, [c.bytes_per_gpu for c in caches], True, " per GPU", "") for caches in per_gpu]
    label_ys = _spread([y(sizes[-1]) for _, sizes, *_ in drawn], gap=15)
    for (caches, sizes, dashed, which, where), label_y in zip(drawn, label_ys):
        points = [(x(tokens), y(size)) for tokens, size in zip(contexts, sizes)]
        label = f"{caches[-1].layout.value}{which} {human_bytes(sizes[-1])}{where}"
        parts += _layout_line(caches[-1].layout, points, label, label_y, dashed)
    if budget is not None:
        parts += _budget_line(budget, y(budget), plot_w, workload.tp)
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
    tp = report.workload.tp
    split = f"; dashed: per GPU of {tp}" if tp > 1 else ""
    return f"Both axes log scale{gaps}{split}"


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


def _layout_line(
    layout: Layout, points: list[tuple[float, float]], label: str, label_y: float, dashed: bool
) -> list[str]:
    """One layout's polyline and points, and its label (name and largest size) at the right end."""
    colour = LAYOUT_COLOURS[layout]
    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    dash = ' stroke-dasharray="6 4"' if dashed else ""
    parts = [f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2.5"{dash}/>']
    parts += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"/>' for px, py in points]
    end_x = points[-1][0]
    parts.append(f'<text x="{end_x + 10:.1f}" y="{label_y + 4:.1f}" fill="{colour}">{escape(label)}</text>')
    return parts


def _budget_line(budget: int, at_y: float, plot_w: int, tp: int) -> list[str]:
    """The --budget: a grey horizontal line across the plot, labelled on the left inside the plot."""
    where = " per GPU" if tp > 1 else ""
    style = 'stroke="#555" stroke-width="1.5" stroke-dasharray="2 3"'
    label = f"budget {human_bytes(budget)}{where}"
    return [
        f'<line x1="{LEFT}" y1="{at_y:.1f}" x2="{LEFT + plot_w}" y2="{at_y:.1f}" {style}/>',
        f'<text x="{LEFT + 6}" y="{at_y - 5:.1f}" fill="#555">{escape(label)}</text>',
    ]


def check_svg_path(path: Path) -> None:
    """--plot writes SVG only: a name with another extension (chart.png) is refused rather than filled
    with SVG under a name that says otherwise."""
    if path.suffix.lower() != ".svg":
        raise UsageError(
            f"--plot {path}: the chart is written as SVG only; name a .svg file (any browser opens it)"
        )


def write_svg(path: Path, report: KvCacheReport, sweep: list[tuple[int, tuple[LayoutCache, ...]]]) -> None:
    """Write the chart to `path` (a .svg name), whole or not at all (kimicount.writing); an unwritable
    path is a usage error naming it."""
    from kimicount.writing import write_whole

    check_svg_path(path)
    write_whole(path, svg_chart(report, sweep).encode("utf-8"), "--plot")
