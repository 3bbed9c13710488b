"""Tables that get better with width: over every width from 60 to 240 columns, a wider terminal never
prints more lines than a narrower one, and no number or name part is split across lines.

The tokens an output may hold are read from the same view printed at 1,000 columns (where nothing
wraps): a narrower print may leave columns out, never make a token that is not there."""

from __future__ import annotations

import io
import re
from collections import Counter

import pytest
from rich.console import Console

from kimicount.anatomy import build_anatomy
from kimicount.options import Detail
from kimicount.render import Column, fitted, show_fitted
from kimicount.render_params import render_params
from kimicount.spec import bundled_spec

from .helpers import invoke

#: A number (7,168; 1,026,408,232,448; 0.95) or a word of a name (q_a_proj, weight, layers).
TOKEN = re.compile(r"\d[\d,.]*\d|\d|[A-Za-z_][A-Za-z_0-9]*")

WIDTHS = range(60, 241)


def _print(anatomy, width: int, detail: Detail | None) -> str:
    """`kimicount params [--detail D]` at `width` columns (its default depth, 3)."""
    page = io.StringIO()
    render_params(Console(width=width, color_system=None, file=page), anatomy, max_depth=3, detail=detail)
    return page.getvalue()


def _tokens(text: str) -> Counter:
    # the note naming the columns left out is the only text a narrow print adds
    text = re.sub(
        r"Left\s+out\s+at\s+\d+\s+columns:.*?a\s+wider\s+terminal\s+shows\s+them\.", "", text, flags=re.DOTALL
    )
    return Counter(TOKEN.findall(text))


@pytest.fixture(scope="module")
def kimi_k2():
    return build_anatomy(bundled_spec())


@pytest.mark.parametrize("detail", [None, *Detail], ids=lambda d: d.value if d else "default")
def test_wider_never_takes_more_lines_nor_splits_a_token(kimi_k2, detail):
    whole = _tokens(_print(kimi_k2, 1000, detail))
    previous = None
    for width in WIDTHS:
        text = _print(kimi_k2, width, detail)
        lines = text.count("\n")
        if previous is not None:
            assert lines <= previous[1], (
                f"{width} columns: {lines} lines, {previous[0]} columns: {previous[1]}"
            )
        previous = (width, lines)
        made = _tokens(text) - whole
        assert not made, f"{width} columns: tokens split or made: {sorted(made)[:8]}"
        assert max(len(line) for line in text.splitlines()) <= width


def test_the_issue_figures():
    # issue 20: --detail shapes took 184 lines at 120 columns against 133 at 80 (the shapes column
    # shrank to 8 characters); --detail tensors broke q_a_proj.weight as `q_a_proj.weig` / `ht`.
    shapes = {w: invoke("params", "--detail", "shapes", env={"COLUMNS": str(w)}).stdout for w in (80, 120)}
    assert shapes[120].count("\n") <= shapes[80].count("\n")
    for width in (60, 80, 100, 120):
        out = invoke("params", "--detail", "tensors", env={"COLUMNS": str(width)}).stdout
        assert "q_a_proj.weig\n" not in out and not re.search(r"\bht\b", out)


def test_a_long_name_breaks_after_a_dot_and_a_number_never():
    console = Console(width=30, color_system=None, file=io.StringIO())
    rows = [("x", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight 1,026,408,232,448 + 7,168")]
    show_fitted(console, *fitted(console, (Column("A"), Column("Text", wraps=True)), rows))
    assert console.file.getvalue().splitlines() == [
        "A  Text",
        "x  model.layers.0.self_attn.",
        "   kv_a_proj_with_mqa.weight",
        "   1,026,408,232,448 + 7,168",
    ]


def test_text_under_its_row_when_no_column_has_room():
    # 60 columns cannot hold the tree, the parameters and a calculation side by side: the calculation
    # goes on indented lines under each row, the tree's guides continued, its header under Component.
    out = invoke("params", "--detail", "calculation", env={"COLUMNS": "60"}).stdout.splitlines()
    assert out[2:9] == [
        "Component",
        "  Calculation                                     Parameters",
        "Kimi-K2-Instruct                           1,026,408,232,448",
        "  1,174,405,120 + 1,024,059,415,040 +",
        "  7,168 + 1,174,405,120",
        "├── Token embedding                            1,174,405,120",
        "│     163,840 × 7,168",
    ]
