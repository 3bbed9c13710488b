"""Formulas written once, in a small notation, and shown two ways: as text in the terminal and as
MathML in the explorer's HTML.

The notation: `x_{sub}` and `x^{sup}` (braces may be left out around one word), words of letters are
identifiers, digits numbers, any other character an operator. `k^C = ĉ^{KV} W_{UK}` reads
"k^C = ĉ^KV W_UK" in the terminal.
"""

from __future__ import annotations

import re
from html import escape

_TOKEN = re.compile(
    r"(?P<word>[^\W\d_]+|\d+)"
    r"(?:_(?P<sub>\{[^}]*\}|[^\W_]+))?"
    r"(?:\^(?P<sup>\{[^}]*\}|[^\W_]+))?"
    r"|(?P<space>\s+)"
    r"|(?P<op>.)"
)


def _inner(part: str) -> str:
    return part[1:-1] if part.startswith("{") else part


def as_text(formula: str) -> str:
    """The formula for a terminal: braces dropped.

    >>> as_text("k^C = ĉ^{KV} W_{UK}")
    'k^C = ĉ^KV W_UK'
    """
    return re.sub(r"([_^])\{([^}]*)\}", r"\1\2", formula)


def _mi(word: str) -> str:
    if word.isdigit():
        return f"<mn>{escape(word)}</mn>"
    variant = ' mathvariant="normal"' if len(word) > 1 else ""
    return f"<mi{variant}>{escape(word)}</mi>"


def _script(part: str) -> str:
    text = _inner(part)
    return _mi(text) if re.fullmatch(r"[^\W_]+", text) else f"<mrow>{as_mathml_row(text)}</mrow>"


def as_mathml_row(formula: str) -> str:
    """The MathML elements of the formula, without the <math> around them; every character escaped.

    >>> as_mathml_row("k^C = ĉ^{KV} W_{UK}")
    '<msup><mi>k</mi><mi>C</mi></msup><mo>=</mo><msup><mi>ĉ</mi><mi mathvariant="normal">KV</mi></msup><msub><mi>W</mi><mi mathvariant="normal">UK</mi></msub>'
    """
    out = []
    for match in _TOKEN.finditer(formula):
        if match["space"]:
            continue
        if match["op"]:
            out.append(f"<mo>{escape(match['op'])}</mo>")
            continue
        base, sub, sup = _mi(match["word"]), match["sub"], match["sup"]
        if sub and sup:
            out.append(f"<msubsup>{base}{_script(sub)}{_script(sup)}</msubsup>")
        elif sub:
            out.append(f"<msub>{base}{_script(sub)}</msub>")
        elif sup:
            out.append(f"<msup>{base}{_script(sup)}</msup>")
        else:
            out.append(base)
    return "".join(out)


def as_mathml(formula: str) -> str:
    """A whole <math> element (inline: it sits in the page's fields); its alttext is the terminal's text."""
    return f'<math alttext="{escape(as_text(formula))}"><mrow>{as_mathml_row(formula)}</mrow></math>'
