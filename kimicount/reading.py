"""Reading input that nobody here wrote: local files refused by size before they are read, JSON parsed
into one-line errors that say where and why, and long text cut short for those messages.

Configs, indexes and safetensors headers all go through here, so that each of them is capped, parsed
and reported the same way.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from kimicount.errors import KimicountError

T = TypeVar("T")


def read_capped(path: Path, limit: int, what: str, error: type[KimicountError]) -> bytes:
    """The bytes of the regular file `path`, refused (as `error`, naming the file) before it is read when
    it is larger than `limit` bytes, or not a regular file at all: a FIFO would block, a device never end.
    """
    with _failures(path, error):
        status = _regular(path, error)
        if status.st_size > limit:
            raise error(f"{path}: {status.st_size:,} bytes, more than any {what} ({limit:,} at most)")
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    if len(data) > limit:  # it grew since
        raise error(f"{path}: more than {limit:,} bytes, more than any {what}")
    return data


def read_chunks(path: Path, error: type[KimicountError], size: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of the regular file `path`, `size` at a time (a reader that holds no more than it
    needs: kimicount.index_stream), refused as read_capped refuses what is no regular file."""
    with _failures(path, error):
        _regular(path, error)
        with path.open("rb") as handle:
            while chunk := handle.read(size):
                yield chunk


def _regular(path: Path, error: type[KimicountError]) -> os.stat_result:
    status = path.stat()
    if not stat.S_ISREG(status.st_mode):
        raise error(f"{path}: not a regular file")
    return status


@contextmanager
def _failures(path: Path, error: type[KimicountError]) -> Iterator[None]:
    """A file that cannot be read, said as `error` naming it."""
    try:
        yield
    except FileNotFoundError:
        if path.is_symlink():  # a Hub snapshot's link into blobs/ whose blob is gone, say
            raise error(f"{path}: a link to {shorten(os.readlink(path))}, which is not there") from None
        raise error(f"{path}: no such file") from None
    except OSError as failure:  # a directory, no permission, a name too long, a symlink loop
        raise error(f"{path}: cannot read: {failure.strerror or failure}") from None


def parse_json(data: bytes | bytearray | str, where: str, error: type[KimicountError], what: str = "") -> Any:
    """The JSON value of `data` (UTF-8), as the standard library parses it; whatever it refuses is one
    `error` naming `where` (and `what` there: "header") and why.

    >>> parse_json(b'{"a": [1, 2]}', "f", ValueError)
    {'a': [1, 2]}
    >>> parse_json(b'{"a": ', "config.json", ValueError)
    Traceback (most recent call last):
    ValueError: config.json: not valid JSON (Expecting value at line 1 column 7)
    >>> parse_json(b'[' * 100_000, "h", ValueError, what="header")
    Traceback (most recent call last):
    ValueError: h: header is not valid JSON (nested too deeply)
    """
    try:
        return json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except UnicodeDecodeError as failure:
        reason = f"not UTF-8: {failure.reason} at byte {failure.start:,}"
    except json.JSONDecodeError as failure:
        reason = f"{failure.msg} at line {failure.lineno} column {failure.colno}"
    except RecursionError:
        reason = "nested too deeply"
    except ValueError as failure:  # Python reads integers of at most 4,300 digits
        limit = "integer string conversion" in str(failure)
        reason = "an integer of more than 4,300 digits" if limit else shorten(str(failure))
    raise error(f"{where}: {what + ' is ' if what else ''}not valid JSON ({reason})") from None


def optional_msgspec() -> ModuleType | None:
    """msgspec, imported when first asked for, or None where it is not installed (PyPy has no wheel).
    Only the large JSON of a checkpoint asks: importing it takes about 25 ms, more than the standard
    library takes to parse a config."""
    try:
        import msgspec.json
    except ImportError:
        return None
    return msgspec


def fast_json(data: bytes | str) -> Any | None:
    """msgspec's parse of `data` into plain values, or None when msgspec is not installed or refuses it.

    Where msgspec accepts, it agrees with the standard library (integers of any size, the last of
    duplicate keys in the first one's place). Where it refuses (lone surrogates, NaN, a BOM, numbers
    past a float, nesting deeper than the recursion limit), the standard library parses again."""
    msgspec = optional_msgspec()
    if msgspec is None:
        return None
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


def parse_checked(
    data: bytes | str, where: str, error: type[KimicountError], check: Callable[[Any], T], what: str = ""
) -> T:
    """check(the JSON value of `data`: a checkpoint's index or headers, megabytes of it): parsed by
    msgspec where it is installed and `check` accepts what it made (about twice as fast as the standard
    library); otherwise, and for what `check` refuses, by the standard library, whose parse, and
    `check`'s error on it, is what is reported."""
    parsed = fast_json(data)
    if parsed is not None:
        try:
            return check(parsed)
        except error:
            pass  # said below, from the standard library's parse of the same bytes
    return check(parse_json(data, where, error, what))


def printable(text: str, keep: str = "") -> str:
    r"""`text` with each character that a terminal could act on, or that would hide or reorder what is
    shown, written as its Python escape: C0 and C1 controls (ESC, backspace, U+009B), DEL, format
    characters (U+202E right-to-left override), lone surrogates (an undecodable file name) and line
    separators, all that str.isprintable() calls unprintable; `keep` names those left as they are
    ("\n" for the lines of a table). Every message and every name kimicount writes goes through here
    (kimicount.cli.exits for stderr, kimicount.render for the views).

    >>> print(printable("evil\x1b]0;pwned\x07\x1b[31mRED\x9b2J\b"))
    evil\x1b]0;pwned\x07\x1b[31mRED\x9b2J\x08
    >>> print(printable("Kimi-K2 × 2 – ok"))
    Kimi-K2 × 2 – ok
    >>> print(printable("a\u202eb\udcff"))
    a\u202eb\udcff
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else ascii(c)[1:-1] for c in text)


def shorten(text: str, limit: int = 200) -> str:
    """`text`, or its first `limit` characters and how long it was: a name, value or path for a message.

    >>> shorten("org/name"), shorten("x" * 5000, 10)
    ('org/name', 'xxxxxxxxxx… (5,000 characters)')
    """
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def short_json(value: Any, limit: int = 80) -> str:
    """A JSON value as a message shows it: its JSON text, shortened.

    >>> short_json([1, True, "x"]), short_json(list(range(1000)), 12)
    ('[1, true, "x"]', '[0, 1, 2, 3,… (4,890 characters)')
    """
    return shorten(json.dumps(value), limit)
