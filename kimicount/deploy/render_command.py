r"""Commands printed to be pasted into a shell (`try:` lines, the local plan's `Run:` line): every word
shell-quoted (shlex.quote), so that a model path holding `$(…)`, quotes or spaces runs nothing and stays
one word, and a word holding what a terminal would act on (an ESC in a folder's name) in bash's ANSI-C
quotes, `$'…'` with its escapes written out, so that the terminal is shown no control character and the
line still pastes as that word; one logical line, broken between options with ` \` continuations when it
is wider than the terminal, an option kept with its value; printed without wrapping (a layout would cut
`-fa` from `on`), through kimicount.render.show like every other line.
"""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text


def shell_quote(word: str) -> str:
    r"""A word as a shell reads it back: shlex.quote's, or, for a word a terminal would act on, bash's
    ANSI-C quoting (`$'…'`, bash's manual, "ANSI-C Quoting"; POSIX.1-2024 sh has it too) with \xHH for a
    control character or an undecodable byte (a lone surrogate of os.fsdecode), \uHHHH and \UHHHHHHHH
    for the others.

    >>> print(shell_quote("my model.gguf"), shell_quote("v3\x1b[31m"), shell_quote("it's\u202e"))
    'my model.gguf' $'v3\x1b[31m' $'it\'s\u202e'
    """
    if word.isprintable():
        return shlex.quote(word)
    out = []
    for c in word:
        code = ord(c)
        if c in "\\'":
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        elif 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's surrogateescape: the byte code − 0xDC00
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "$'" + "".join(out) + "'"


def units(words: Sequence[str]) -> list[str]:
    """The quoted words, each option with the value that follows it.

    >>> units(["llama-server", "-m", "my model.gguf", "-fa", "on", "--no-mmap"])
    ['llama-server', "-m 'my model.gguf'", '-fa on', '--no-mmap']
    """
    grouped: list[str] = []
    last_option = False
    for word in words:
        quoted = shell_quote(word)
        if last_option and not word.startswith("-"):
            grouped[-1] += " " + quoted
            last_option = False
        else:
            grouped.append(quoted)
            last_option = word.startswith("-")
    return grouped


def command_lines(
    words: Sequence[str], width: int, lead: str = "", indent: str = "    ", comment: str | None = None
) -> list[str]:
    r"""`lead` and the command (and `  # comment`) on one line when it fits `width`; otherwise broken
    between its units with ` \`, each further line starting with `indent`, the comment last. A unit wider
    than the width stays whole (the terminal may fold it; a copy is still one word).

    >>> command_lines(["llama-server", "-m", "$(touch x).gguf", "-c", "4096"], 80, lead="  ")
    ["  llama-server -m '$(touch x).gguf' -c 4096"]
    >>> for line in command_lines(["kimicount", "plan", "--config", "a b", "--gpus", "16xH800"], 30, "try: ",
    ...                           comment="why"):
    ...     print(line)
    try: kimicount plan \
        --config 'a b' \
        --gpus 16xH800  # why
    """
    note = "" if comment is None else f"  # {comment}"
    parts = units(words)
    whole = lead + " ".join(parts)
    if len(whole + note) <= width:
        return [whole + note]
    lines, current, fresh = [], lead, True
    for unit in parts:
        if not fresh and len(current) + 1 + len(unit) + 2 > width:
            lines.append(current + " \\")
            current, fresh = indent, True
        current += unit if fresh else " " + unit
        fresh = False
    if comment is None:
        return [*lines, current]
    if len(current + note) <= width:
        return [*lines, current + note]
    # a comment wider than the terminal: comment lines of their own, each `# `, so that none wraps
    notes = textwrap.wrap(comment, max(width - len(indent) - 2, 20), break_long_words=False)
    return [*lines, current, *(f"{indent}# {line}" for line in notes)]


def print_command(console: Console, lines: Sequence[str]) -> None:
    """Print a command's lines as they are (no markup read, no wrapping), through the views' shared
    path (kimicount.render.show), which escapes what a terminal would act on."""
    from kimicount.render import show

    for line in lines:
        show(console, Text(line), soft_wrap=True)
