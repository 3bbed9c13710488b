"""What every view shares: consoles, number formats, prose and tables that fit the terminal without
cutting a number. The views themselves are one module per command: render_params.py, render_kv_cache.py,
render_verify.py, render_measure.py, render_plan.py (plan and its speed floor) and render_flow.py
(flops). They read results and compute nothing.

Numbers are right-justified with thousands separators; each function takes the Console to draw on,
so tests pin width and colour (`Console(width=…, color_system=None)`) and compare text.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text


def make_console(stderr: bool = False) -> Console:
    """A console for the CLI. Piped output gets a wide page instead of rich's 80 columns, so the tables
    do not wrap in files and READMEs (COLUMNS still wins)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else 240
    return Console(file=stream, width=width, highlight=False)


def show(console: Console, *renderables: RenderableType, width: int | None = None) -> None:
    """Print (`width` columns at most, if given); off a terminal, without the padding rich leaves at the
    end of table lines."""
    if console.is_terminal:
        console.print(*renderables, width=width)
        return
    with console.capture() as captured:
        console.print(*renderables, width=width)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


#: Prose wraps at this width (or the terminal's, if narrower), at spaces: numbers are never cut.
PROSE_WIDTH = 100


def say(console: Console, text: str = "") -> None:
    """Print a paragraph wrapped at PROSE_WIDTH columns (or the console's, if narrower)."""
    show(console, text, width=min(console.width, PROSE_WIDTH))


def human(count: float, unit: str = "") -> str:
    """Short decimal form for counts: 1.03 T, 32.9 B, 7.17 K.

    >>> human(1_026_408_232_448), human(32_861_500_928), human(7168), human(12)
    ('1.03 T', '32.9 B', '7.17 K', '12')
    """
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(count) >= scale:
            return f"{count / scale:.3g} {suffix}{unit}"
    return f"{count:g}{(' ' + unit) if unit else ''}"


#: Binary units, each 1024 times the one before.
BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")


def human_bytes(count: int) -> str:
    """Binary units, three significant digits (four from 1,000 to 1,023 of a unit): 305 GiB, 8.58 GiB.
    In integer arithmetic, rounding half to even: a size too big for a float still prints.

    >>> human_bytes(327_491_256_320), human_bytes(9_210_691_584), human_bytes(40_960), human_bytes(656)
    ('305 GiB', '8.58 GiB', '40 KiB', '656 B')
    >>> human_bytes(1000 * 2**30), human_bytes(3 * 2**50), human_bytes(2**35 - 2**24), human_bytes(0)
    ('1000 GiB', '3 PiB', '32 GiB', '0 B')
    >>> human_bytes(2**30 * 9997 // 10), human_bytes(2**40 - 1)  # 999.7 GiB, and 1 B short of 1 TiB
    ('1000 GiB', '1024 GiB')
    >>> human_bytes(2**1100) == f"{2**1020} YiB"  # over 10^308: no float holds it
    True
    """
    power = 0
    while power + 1 < len(BINARY_UNITS) and count >= 1024 ** (power + 1):
        power += 1
    value = Fraction(count, 1024**power)
    decimals = max(0, 3 - len(str(math.floor(value))))  # as many as make three significant digits
    whole, fraction = divmod(round(value * 10**decimals), 10**decimals)
    text = f"{whole}.{fraction:0{decimals}d}".rstrip("0").rstrip(".") if decimals else str(whole)
    return f"{text} {BINARY_UNITS[power]}"


def plural(number: int, noun: str) -> str:
    """A number and its noun, plural unless the number is 1.

    >>> plural(1, "sequence"), plural(4096, "token")
    ('1 sequence', '4,096 tokens')
    """
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def flops_text(flops: float) -> str:
    """Three significant digits with an SI prefix: '63.4 GFLOP', '168 MFLOP'.

    >>> flops_text(63_372_132_352), flops_text(167_772_160), flops_text(1.5e15)
    ('63.4 GFLOP', '168 MFLOP', '1.5 PFLOP')
    """
    flops = float(flops)
    for scale, prefix in ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k")):
        if flops >= scale:
            return f"{flops / scale:.3g} {prefix}FLOP"
    return f"{flops:.3g} FLOP"


def times(ratio: float) -> str:
    """A ratio with one decimal: Kimi K2's naive cache is 35.6× the latent.

    >>> times(2_498_560 / 70_272), times(656 / 1152)
    ('35.6×', '0.6×')
    """
    return f"{ratio:.1f}×"


# --- tables that fit the terminal ------------------------------------------------------------------

#: Spaces between two columns, in every table.
GAP = 2

#: Wrapping text keeps words up to this long whole (the longest count, 1,024,059,415,040, has 17
#: characters); longer words, such as tensor names, may be folded.
WORD_FOLD = 24


@dataclass(frozen=True)
class Column:
    """A column of a table that fits its console (`fitted`). A number is never wrapped, folded or cut;
    text that `wraps` may take several lines, down to `min_width` (else its longest word); any other
    column keeps its width. When the table is too wide, the columns with the highest `drop` are left out
    first, all those with the same value together; columns with drop 0 are always shown. `hint` says
    where else to see a column that was left out."""

    header: str
    number: bool = False
    wraps: bool = False
    drop: int = 0
    min_width: int = 0
    hint: str = ""


def _width(text: str) -> int:
    """Terminal cells of the widest line of `text` (rich markup allowed)."""
    return max((line.cell_len for line in Text.from_markup(text).split("\n")), default=0)


def _longest_word(text: str) -> int:
    return max((len(word) for word in Text.from_markup(text).plain.split()), default=0)


def _two_lines(header: str, narrowest: int) -> int:
    """The width at which `header` wraps onto two lines at most (never below `narrowest`).

    >>> _two_lines("× latent per GPU", 4), _two_lines("Per token per layer", 9)
    (8, 9)
    """
    words = header.split()
    splits = [max(len(" ".join(words[:i])), len(" ".join(words[i:]))) for i in range(1, len(words))]
    return max(narrowest, min(splits, default=len(header)))


def fitted(
    console: Console,
    columns: Sequence[Column],
    rows: Iterable[Sequence[str]],
    *,
    styles: Sequence[str | None] | None = None,
    header: bool = True,
) -> tuple[Table, list[Column]]:
    """A table of `rows` that fits `console.width` without cutting a number, and the columns it left out.

    As wide as its contents when that fits (the usual case off a terminal: 240 columns). Otherwise the
    number columns' headers wrap (never the numbers), wrapping text narrows to its minimum, and columns
    are left out, highest `drop` first, until the rest fits. `header=False` gives a grid."""
    rows = [list(row) for row in rows]
    cells = [[row[i] for row in rows] for i in range(len(columns))]
    headers = [column.header if header else "" for column in columns]
    natural = [max(_width(h), *(_width(c) for c in col)) for h, col in zip(headers, cells)]
    narrowest = []
    for column, head, col, width in zip(columns, headers, cells, natural):
        if column.number:
            narrowest.append(max(_longest_word(head), *(_width(c) for c in col)))
        elif column.wraps:  # words longer than WORD_FOLD (tensor names) are folded, not given the width
            words = min(WORD_FOLD, max(_longest_word(c) for c in col))
            narrowest.append(max(column.min_width, _longest_word(head), words))
        else:
            narrowest.append(width)

    def total(widths: Iterable[int]) -> int:
        widths = list(widths)
        return sum(widths) + GAP * (len(widths) - 1)

    kept = list(range(len(columns)))
    squeezed = total(natural) > console.width
    if squeezed:
        while total(narrowest[i] for i in kept) > console.width:
            highest = max(columns[i].drop for i in kept)
            if highest == 0:
                break  # narrower than any table here is designed for: rich cuts what it must
            kept = [i for i in kept if columns[i].drop != highest]
        squeezed = total(natural[i] for i in kept) > console.width
    widths = list(narrowest)
    if squeezed:  # the room left widens number columns whose headers wrap: to two lines, then to one
        room = console.width - total(narrowest[i] for i in kept)
        for wanted in ([_two_lines(headers[i], narrowest[i]) for i in range(len(columns))], natural):
            for i in sorted(kept, key=lambda i: wanted[i] - widths[i]):
                if columns[i].number and 0 < wanted[i] - widths[i] <= room:
                    room -= wanted[i] - widths[i]
                    widths[i] = wanted[i]
    if header:
        table = Table(box=None, pad_edge=False, header_style="bold", show_header=True)
    else:
        table = Table.grid(padding=(0, GAP))
    for i in kept:
        column = columns[i]
        table.add_column(
            headers[i],
            justify="right" if column.number else "left",
            no_wrap=not column.wraps and not (column.number and squeezed),
            overflow="fold" if column.wraps else "ellipsis",
            width=widths[i] if column.number and squeezed else None,
        )
    for n, row in enumerate(rows):
        table.add_row(*(row[i] for i in kept), style=styles[n] if styles else None)
    return table, [columns[i] for i in range(len(columns)) if i not in kept]


def show_fitted(console: Console, table: Table, left_out: Sequence[Column]) -> None:
    """Print a fitted table, then a line naming the columns it left out and where else to see them."""
    show(console, table)
    if left_out:
        names = ", ".join(column.header + (f" ({column.hint})" if column.hint else "") for column in left_out)
        show(console, f"[dim]Left out at {console.width} columns: {names}; a wider terminal shows them.[/]")


# --- runs of identical layers ----------------------------------------------------------------------

Same = TypeVar("Same")


def layer_runs(layers: Iterable[tuple[int, str, Same]]) -> list[tuple[str, Same]]:
    """(index, kind, figures) per layer -> one row per run of consecutive layers of the same kind with
    the same figures: '0 dense', '1–60 moe (each)'.

    >>> layer_runs([(0, "dense", 5), (1, "moe", 7), (2, "moe", 7), (3, "moe", 8)])
    [('0 dense', 5), ('1–2 moe (each)', 7), ('3 moe', 8)]
    """
    runs: list[list] = []  # [first, last, kind, figures]
    for index, kind, figures in layers:
        if runs and runs[-1][1] == index - 1 and runs[-1][2:] == [kind, figures]:
            runs[-1][1] = index
        else:
            runs.append([index, index, kind, figures])
    return [
        (f"{first} {kind}" if first == last else f"{first}–{last} {kind} (each)", figures)
        for first, last, kind, figures in runs
    ]
