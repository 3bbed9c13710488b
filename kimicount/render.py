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
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple, TypeVar

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType
from rich.markup import escape
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from kimicount.reading import printable


def make_console(stderr: bool = False) -> Console:
    """A console for the CLI. Piped output gets a wide page instead of rich's 80 columns, so the tables
    do not wrap in files and READMEs (COLUMNS still wins)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else 240
    return Console(file=stream, width=width, highlight=False)


def show(
    console: Console, *renderables: RenderableType, width: int | None = None, soft_wrap: bool = False
) -> None:
    """Print (`width` columns at most, if given; with `soft_wrap`, lines as they are, never broken), with
    what a terminal would act on escaped (_Escaped); off a terminal, without the padding rich leaves at
    the end of table lines."""
    escaped = [_Escaped(renderable) for renderable in renderables]
    if console.is_terminal:
        console.print(*escaped, width=width, soft_wrap=soft_wrap)
        return
    with console.capture() as captured:
        console.print(*escaped, width=width, soft_wrap=soft_wrap)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


class _Escaped:
    """A renderable as rich renders it, each piece of its text with the characters a terminal would act
    on written as their escapes (kimicount.reading.printable: an ESC in a folder's name shows as \\x1b),
    line breaks kept; the styles rich itself writes are untouched."""

    def __init__(self, renderable: RenderableType):
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self.renderable, options):
            if segment.control or segment.text.isprintable():
                yield segment
            else:
                yield Segment(printable(segment.text, keep="\n"), segment.style)


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


def flops_text(flops: float | Fraction) -> str:
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
    continuation: Sequence[str] | None = None,
) -> tuple[Table, list[Column]]:
    """A table of `rows` that fits `console.width` without cutting a number, and the columns it left out.

    As wide as its contents when that fits (the usual case off a terminal: 240 columns). Otherwise the
    layout that takes the fewest lines, of those that fit: which columns to leave out (highest `drop`
    first), how wide the number columns' headers are (they wrap, never the numbers), and the rest to the
    wrapping text, which breaks between words and, in a word too long for its line, only after a `.`, `/`
    or `,` between the parts of a name (never inside a number). Ties keep more columns. Each layout takes
    fewer lines the wider the console, so a wider console never prints more lines than a narrower one.
    Where none fits even so (a table of many number columns at 60 or 80 columns), the rows are
    stacked instead (`_stacked`): no number is cut and no row loses its label, whatever the width.
    `continuation` (per row) fills the first column's extra lines, e.g. with a tree's guides.
    `header=False` gives a grid."""
    rows = [list(row) for row in rows]
    cells = [[row[i] for row in rows] for i in range(len(columns))]
    headers = [column.header if header else "" for column in columns]
    natural = [max(_width(h), *(_width(c) for c in col)) for h, col in zip(headers, cells)]
    narrowest = []
    for column, head, col, width in zip(columns, headers, cells, natural):
        if column.number:
            narrowest.append(max(_longest_word(head), *(_width(c) for c in col)))
        elif column.wraps:  # words longer than WORD_FOLD (tensor names) break at dots, not given the width
            words = min(WORD_FOLD, max(_longest_word(c) for c in col))
            narrowest.append(max(column.min_width, _longest_word(head), words))
        else:
            narrowest.append(width)

    if _total(natural) <= console.width:
        layout = _Layout(list(range(len(columns))), None)
    else:
        layout = _fewest_lines(console.width, columns, headers, cells, natural, narrowest, continuation)
        if layout.overflows:  # no layout fits: each row becomes a block of lines instead
            return _stacked(console.width, columns, headers, rows, styles, continuation), []
    kept, widths, under, _ = layout
    if header:
        table = Table(box=None, pad_edge=False, header_style="bold", show_header=True)
    else:
        table = Table.grid(padding=(0, GAP))
    shown_columns = [i for i in kept if i != under]
    if under is not None:  # its header under the first column's, where its text is
        headers = _under_headers(headers, kept[0], under)
    for i in shown_columns:
        column = columns[i]
        table.add_column(
            headers[i],
            justify="right" if column.number else "left",
            no_wrap=not column.wraps and not (column.number and widths is not None),
            overflow="fold" if column.wraps else "ellipsis",
            width=None if widths is None else widths[i],
        )
    for n, row in enumerate(rows):
        wrapped = {i: _wrapped(row[i], widths[i]) for i in kept if columns[i].wraps} if widths else {}
        guide = continuation[n] if continuation is not None else ""
        first = Text.from_markup(row[kept[0]])
        if kept[0] in wrapped:  # a wrapping first column breaks as the others do (after a name's dots)
            first = Text("\n").join(wrapped[kept[0]])
        if under is not None and row[under]:
            indent = Text(guide + " " * GAP)
            lines = _wrapped(row[under], widths[kept[0]] - indent.cell_len)  # type: ignore[index]  # set with `under`
            first = Text("\n").join([first, *(indent + line for line in lines)])
        height = max(
            [len(lines) for i, lines in wrapped.items() if i != under] + [_lines(row[i]) for i in kept]
        )
        height = max(height, len(first.split("\n", allow_blank=True)))
        shown: list[RenderableType] = []
        for i in shown_columns:
            if i == kept[0]:
                extra = height - len(first.split("\n", allow_blank=True))
                shown.append(Text("\n").join([first, *[Text(guide)] * extra]) if extra > 0 else first)
            elif i in wrapped:
                shown.append(Text("\n").join(wrapped[i]))
            else:
                shown.append(row[i])
        table.add_row(*shown, style=styles[n] if styles else None)
    return table, [columns[i] for i in range(len(columns)) if i not in kept]


class _Layout(NamedTuple):
    """Which columns a table keeps, their widths (None: as wide as their contents), the wrapping
    column whose text goes on indented lines under each row's first cell instead of a column (None:
    none), and whether even this layout is wider than the console (then the rows are stacked)."""

    kept: list[int]
    widths: list[int] | None
    under: int | None = None
    overflows: bool = False


def _stacked(
    width: int,
    columns: Sequence[Column],
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    styles: Sequence[str | None] | None,
    continuation: Sequence[str] | None,
) -> Table:
    """The rows of a table too wide for `width` in any layout, each as a block: its first cell (the
    row's label) on a line of its own, then one line per other cell, its header beside it, indented
    under the label (a tree's guides continued). Every column is kept; numbers stay whole and
    right-aligned, one under the other, text wraps (`_wrapped`), and an empty cell takes no line."""
    labels = [" ".join(_plain(h).split()) for h in headers]
    label_width = min(max((cell_len(text) for text in labels[1:]), default=0), width // 2)
    numbers = max((_width(row[i]) for row in rows for i, c in enumerate(columns) if c.number), default=0)
    grid = Table.grid(padding=0)
    grid.add_column(no_wrap=True, overflow="fold")
    for n, row in enumerate(rows):
        guide = continuation[n] if continuation is not None else ""
        style = styles[n] if styles else None
        lines = list(_wrapped(row[0], width))
        indent = guide + " " * GAP
        room = max(width - cell_len(indent), 1)
        for i in range(1, len(columns)):
            if not _plain(row[i]).strip():
                continue
            label_lines = (
                [line.plain for line in _wrapped(escape(labels[i]), label_width)] if labels[i] else []
            )
            head = (
                label_lines[-1] + " " * (label_width - cell_len(label_lines[-1]) + GAP) if label_lines else ""
            )
            for line in label_lines[:-1]:  # a header longer than the labels' column: its first lines alone
                lines.append(Text(indent + line))
            value_room = max(room - cell_len(head), 1)
            if columns[i].number and "\n" not in row[i] and _width(row[i]) <= value_room:
                text = Text.from_markup(row[i])
                pad = min(numbers, value_room) - text.cell_len
                pieces = [Text(" " * max(pad, 0)) + text]
            else:
                pieces = list(_wrapped(row[i], value_room))
            for k, piece in enumerate(pieces):
                lead = head if k == 0 else " " * cell_len(head)
                lines.append(Text(indent + lead) + piece)
        for block_line in lines:
            grid.add_row(block_line, style=style)
    return grid


def _plain(markup: str) -> str:
    return Text.from_markup(markup).plain


def _total(widths: Iterable[int]) -> int:
    widths = list(widths)
    return sum(widths) + GAP * (len(widths) - 1)


def _fewest_lines(
    width: int,
    columns: Sequence[Column],
    headers: Sequence[str],
    cells: Sequence[Sequence[str]],
    natural: Sequence[int],
    narrowest: Sequence[int],
    continuation: Sequence[str] | None,
) -> _Layout:
    """The layout of fewest lines, of those that fit a table too wide for `width`. A layout is a set of
    columns (leaving out the highest `drop` first); a width for all number columns (their narrowest,
    their headers on two lines, or whole); and either the wrapping columns sharing what is left, the
    narrowest widened first, or the one wrapping column on indented lines under each row, with the room
    left to the first column. Each layout's line count falls as `width` grows and the set of layouts
    that fit only grows, so the fewest falls too. The line naming the columns left out counts too.
    Ties: more columns, then the wrapping text in columns."""
    sets = [list(range(len(columns)))]
    while max(columns[i].drop for i in sets[-1]) > 0:
        highest = max(columns[i].drop for i in sets[-1])
        sets.append([i for i in sets[-1] if columns[i].drop != highest])
    header_widths = (
        list(narrowest),
        [_two_lines(h, n) if c.number else n for c, h, n in zip(columns, headers, narrowest)],
        [max(w, n) if c.number else n for c, w, n in zip(columns, natural, narrowest)],
    )
    best: tuple[tuple[int, int, int, int, int], _Layout] | None = None

    def consider(key: tuple[int, int, int, int, int], layout: _Layout) -> None:
        nonlocal best
        if best is None or key < best[0]:
            best = (key, layout)

    for rank, kept in enumerate(sets):
        wrapping = [i for i in kept if columns[i].wraps]
        left_out = [column for i, column in enumerate(columns) if i not in kept]
        note = len(_wrapped(escape(left_out_note(width, left_out)), width)) if left_out else 0
        for level, chosen in enumerate(header_widths):
            widths = list(chosen)
            room = width - _total(widths[i] for i in kept)
            if room >= 0 or (level == 0 and rank == len(sets) - 1):  # the last: narrower than designed for
                while room > 0:  # one column at a time to the narrowest wrapping column that wants more
                    wanting = [i for i in wrapping if widths[i] < natural[i]]
                    if not wanting:
                        break
                    widths[min(wanting, key=lambda i: widths[i])] += 1
                    room -= 1
                overflows = int(room < 0)  # a layout that does not fit only when none does
                if overflows and not columns[kept[0]].number:  # then cut the first column's text, no number
                    widths[kept[0]] = max(1, widths[kept[0]] + room)
                lines = note + _table_lines(columns, headers, cells, kept, widths)
                consider((overflows, lines, rank, 0, -level), _Layout(kept, widths))
            if len(wrapping) == 1 and wrapping[0] != kept[0]:
                under = wrapping[0]
                widths = list(chosen)
                room = width - _total(widths[i] for i in kept if i != under)
                if room >= 0:
                    widths[kept[0]] += room
                    lines = note + _under_lines(columns, headers, cells, kept, widths, under, continuation)
                    consider((0, lines, rank, 1, -level), _Layout(kept, widths, under))
    assert best is not None
    key, layout = best
    return layout._replace(overflows=bool(key[0]))


def _under_headers(headers: Sequence[str], first: int, under: int) -> list[str]:
    """The headers with column `under`'s moved under the first column's, indented as its text is."""
    moved = list(headers)
    if headers[under]:
        moved[first] = f"{headers[first]}\n{' ' * GAP}{headers[under]}"
    return moved


def _under_lines(
    columns: Sequence[Column],
    headers: Sequence[str],
    cells: Sequence[Sequence[str]],
    kept: Sequence[int],
    widths: Sequence[int],
    under: int,
    continuation: Sequence[str] | None,
) -> int:
    """The lines of a layout that puts column `under`'s text on lines under each row's first cell."""
    shown = [i for i in kept if i != under]
    total = _table_lines(columns, _under_headers(headers, kept[0], under), cells, shown, widths)
    for n, text in enumerate(cells[under]):
        if text:
            guide = continuation[n] if continuation is not None else ""
            total += len(_wrapped(text, widths[kept[0]] - cell_len(guide) - GAP))
    return total


def _table_lines(
    columns: Sequence[Column],
    headers: Sequence[str],
    cells: Sequence[Sequence[str]],
    kept: Sequence[int],
    widths: Sequence[int],
) -> int:
    """The lines the table takes with these columns at these widths: its header and every row."""

    def height(i: int, text: str) -> int:
        if columns[i].wraps or (columns[i].number and text is headers[i]):
            return len(_wrapped(text, widths[i]))
        return _lines(text)

    head = max(height(i, headers[i]) for i in kept) if any(headers) else 0
    rows = range(len(cells[0])) if cells else range(0)
    return head + sum(max(height(i, cells[i][n]) for i in kept) for n in rows)


def _lines(text: str) -> int:
    return text.count("\n") + 1


_WORD = re.compile(r"\s*\S+\s*")

#: The marks after which a word too long for its line may break, when they join two parts of a name.
_JOINS = ".,/"


def _parts(word: str) -> list[str]:
    """A word cut after each `.`, `,` or `/` that joins two parts of a name (model.layers.0.mlp,
    org/name), but not inside a number (1.03, 7,168) or a range (0..60).

    >>> _parts("model.layers.0.self_attn.q_a_proj.weight")
    ['model.', 'layers.', '0.', 'self_attn.', 'q_a_proj.', 'weight']
    >>> _parts("1,026,408.5"), _parts("layers.{0..60}.mlp"), _parts("a.")
    (['1,026,408.5'], ['layers.', '{0..60}.', 'mlp'], ['a.'])
    """
    parts, start = [], 0
    for k in range(1, len(word) - 1):
        before, mark, after = word[k - 1], word[k], word[k + 1]
        if (
            mark in _JOINS
            and before not in _JOINS
            and after not in _JOINS
            and not (before.isdigit() and after.isdigit())
        ):
            parts.append(word[start : k + 1])
            start = k + 1
    return [*parts, word[start:]]


@lru_cache(maxsize=4096)
def _wrapped(markup: str, width: int) -> tuple[Text, ...]:
    """`markup` as lines of at most `width` cells: explicit line breaks kept; words packed greedily as
    rich does; a word longer than the width starts its own line, broken after name parts (`_parts`), and
    only a part longer than the whole width is cut."""
    text = Text.from_markup(markup)
    width = max(width, 1)
    lines: list[Text] = []
    for paragraph in text.split("\n", allow_blank=True):
        plain = paragraph.plain
        offsets: list[int] = []  # where each line after the first starts
        position = 0  # cells on the current line
        for match in _WORD.finditer(plain):
            word, start = match.group(), match.start()
            length = cell_len(word.rstrip())
            if position + length <= width:
                position += cell_len(word)
                continue
            if length <= width:
                if start:
                    offsets.append(start)
                position = cell_len(word)
                continue
            if start and position:  # a long word starts its own line
                offsets.append(start)
            position = 0
            cursor = start
            for part in _parts(word.rstrip()):
                if position and position + len(part) > width:
                    offsets.append(cursor)
                    position = 0
                while len(part) > width:  # a part longer than the whole line: cut, the last resort
                    cursor, part = cursor + width, part[width:]
                    offsets.append(cursor)
                position += len(part)
                cursor += len(part)
            position += cell_len(word) - length
        for piece in paragraph.divide(offsets) if offsets else [paragraph]:
            piece.rstrip()  # in place: the space a line broke at
            lines.append(piece)
    return tuple(lines)


def show_fitted(console: Console, table: Table, left_out: Sequence[Column]) -> None:
    """Print a fitted table, then a line naming the columns it left out and where else to see them."""
    show(console, table)
    if left_out:
        show(console, f"[dim]{left_out_note(console.width, left_out)}[/]")


def left_out_note(width: int, left_out: Sequence[Column]) -> str:
    """The line under a table that names the columns it left out, and where else to see them."""
    names = ", ".join(column.header + (f" ({column.hint})" if column.hint else "") for column in left_out)
    return f"Left out at {width} columns: {names}; a wider terminal shows them."


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
