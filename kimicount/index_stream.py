"""model.safetensors.index.json read as a stream: a few MiB at a time, never whole.

Kimi K3's index is 59 MB for 497,220 tensors. Read whole and parsed, it took 198 MB at its peak (the
text, then every name and every file name as a string); read here it takes the memory of one piece
(1 MiB) and, per file, what verification needs of it (`FileListing`: how many names, their length, a
digest of them), or with `keep_map` the name -> file map itself (each file name held once).

The weight map is read in pieces: from a pair's start, up to the last complete `"name": "file"` pair of
the next MiB (after its last `",`; or, where msgspec refuses that, found by counting quotes: every quote
delimits a string where there is no backslash), then decoded by msgspec as one object, in C. A piece with a backslash (an escape) or one msgspec refuses
is read pair by pair with the format's own string grammar, which says exactly what is wrong and where.
Other top-level values (`metadata`) are parsed whole by the standard library, up to MAX_VALUE bytes.
Errors are one CheckpointError naming the file and the line and column (in bytes), or the key.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from kimicount.errors import CheckpointError
from kimicount.reading import optional_msgspec, parse_json, short_json

#: Bytes read (and decoded as one piece of the weight map) at a time.
CHUNK = 1 << 20
#: Bytes kept before anything read is dropped: errors in an index this short say their line and column
#: (counting the lines of a whole index would cost an eighth of reading it), later ones their byte.
KEEP = 4 * CHUNK
#: The longest top-level value other than the weight map (metadata holds a few numbers).
MAX_VALUE = 1 << 20
#: The longest single string (a tensor or file name) [bytes].
MAX_STRING = 1 << 24

_WS = re.compile(rb"[ \t\n\r]*")
#: A JSON string as the format defines it (RFC 8259 §7): no raw control character, known escapes.
_STRING = re.compile(rb'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"')
#: The longest start of a string that is right so far.
_STRING_START = re.compile(rb'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')


@dataclass
class FileListing:
    """What an index lists in one file: how many tensor names, their length in characters, and the sum
    of their hashes (Python's str hash, 64 bits, keyed at random for each run): two lists of different
    names have the same count and sum with a chance of about 2^-64 (`kimicount.checkpoint.index_agrees`)."""

    tensors: int = 0
    name_chars: int = 0
    digest: int = 0

    def add(self, names: list[str]) -> None:
        self.tensors += len(names)
        self.name_chars += sum(map(len, names))
        self.digest += sum(map(hash, names))


@dataclass
class WeightMap:
    """The weight map as it is read: per file its listing, and the map itself when kept."""

    keep_map: bool = False
    listings: dict[str, FileListing] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    _files: dict[str, str] = field(default_factory=dict)  # each file name, held once

    def add(self, part: dict[str, str]) -> None:
        """One decoded piece of the map, run by run of names in one file (an index lists a shard's
        names together, as transformers writes it sorted by name, so a piece has a few runs)."""
        names, start = list(part), 0
        for file, run in groupby(part.values()):
            end = start + len(list(run))
            self._listing(file).add(names[start:end])
            if self.keep_map:
                self.names.update(dict.fromkeys(names[start:end], self._files.setdefault(file, file)))
            start = end

    def _listing(self, file: str) -> FileListing:
        listing = self.listings.get(file)
        if listing is None:
            listing = self.listings[file] = FileListing()
        return listing


@dataclass(frozen=True)
class IndexContents:
    """What the stream held: the weight map (None when there was none, or it was not an object), the
    metadata value ({} when absent) and how many bytes it was."""

    weight_map: WeightMap | None
    metadata: Any
    bytes_read: int


def read_index_stream(chunks: Iterable[bytes], where: str, keep_map: bool = False) -> IndexContents:
    """Read an index from its bytes, chunk by chunk (a file's reads, a response's body).

    >>> contents = read_index_stream([b'{"metadata": {"total_size": 8}, "weight_map": {"a": "f", ', b'"b": "f"}}'], "i")
    >>> contents.metadata, {f: l.tensors for f, l in contents.weight_map.listings.items()}
    ({'total_size': 8}, {'f': 2})
    >>> read_index_stream([b'{"weight_map": {"a": "f",}}'], "i")
    Traceback (most recent call last):
    kimicount.errors.CheckpointError: i: not valid JSON (Expecting property name enclosed in double quotes at line 1 column 26)
    """
    return _Reader(chunks, where, keep_map).index()


class _Reader:
    """The stream's bytes from `pos` on, refilled from the chunks as they are asked for."""

    def __init__(self, chunks: Iterable[bytes], where: str, keep_map: bool):
        self.chunks: Iterator[bytes] = iter(chunks)
        self.where = where
        self.keep_map = keep_map
        self.buf = bytearray()
        self.pos = 0
        self.offset = 0  # bytes of the stream before buf
        self.eof = False
        decoders = _decoders()
        self.decoder = decoders[0] if decoders else None
        self.decode_errors = decoders[1] if decoders else (ValueError, RecursionError)

    # --- the buffer ---------------------------------------------------------------------------------

    def more(self) -> bool:
        """Read the next chunk (past KEEP bytes, dropping what has been read but the byte before pos,
        where a piece's '{' goes); False at the end of the stream."""
        if self.eof:
            return False
        chunk = next(self.chunks, None)
        while chunk is not None and not chunk:
            chunk = next(self.chunks, None)
        if chunk is None:
            self.eof = True
            return False
        if len(self.buf) > KEEP:
            drop = max(self.pos - 1, 0)
            del self.buf[:drop]  # a bytearray moves its start, not its bytes
            self.offset += drop
            self.pos -= drop
        self.buf += chunk
        return True

    def ensure(self, n: int) -> int:
        """At least n bytes from pos buffered, unless the stream ends first; how many there are."""
        while len(self.buf) - self.pos < n and self.more():
            pass
        return len(self.buf) - self.pos

    def skip_ws(self) -> None:
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or not self.more():
                return

    def peek(self) -> int | None:
        """The next byte (after no whitespace), None at the end."""
        return self.buf[self.pos] if self.ensure(1) else None

    def take(self, byte: bytes, message: str) -> None:
        if self.peek() != byte[0]:
            raise self.fail(message)
        self.pos += 1

    def fail(self, message: str, at: int | None = None) -> CheckpointError:
        """Invalid JSON at buffer position `at` (pos by default), as the standard library says it: at its
        line and column in the first KEEP bytes, at its byte after them."""
        at = self.pos if at is None else at
        if self.offset:
            where = f"byte {self.offset + at + 1:,}"
        else:
            line, start = self.buf.count(b"\n", 0, at) + 1, self.buf.rfind(b"\n", 0, at) + 1
            where = f"line {line} column {at - start + 1}"
        return CheckpointError(f"{self.where}: not valid JSON ({message} at {where})")

    # --- JSON -----------------------------------------------------------------------------------------

    def string(self) -> str:
        """The JSON string at pos (a name or a key); what cannot be in one is said where it is, as the
        standard library says it."""
        while True:
            match = _STRING.match(self.buf, self.pos)
            if match is not None:
                break
            if self.peek() != ord('"'):
                raise self.fail("Expecting property name enclosed in double quotes")
            bad = _STRING_START.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if bad < len(self.buf) and self.buf[bad] != ord("\\"):
                raise self.fail("Invalid control character", bad)  # (a quote would have ended it)
            if bad + 6 <= len(self.buf) or (self.eof and bad < len(self.buf)):
                escape_u = self.buf[bad + 1 : bad + 2] == b"u"
                raise self.fail("Invalid \\uXXXX escape" if escape_u else "Invalid \\escape", bad + escape_u)
            if len(self.buf) - self.pos > MAX_STRING:
                raise CheckpointError(
                    f"{self.where}: a string over {MAX_STRING:,} bytes, longer than any name"
                )
            if not self.more():
                raise self.fail("Unterminated string starting")
        self.pos = match.end()
        return _string(match[0], self.where)

    def value(self) -> Any:
        """Any JSON value at pos, parsed whole by the standard library (at most MAX_VALUE bytes)."""
        available = self.ensure(MAX_VALUE + 1)
        window = self.buf[self.pos : self.pos + MAX_VALUE]
        text, _ = codecs.utf_8_decode(window, "surrogateescape", not available > MAX_VALUE)
        try:
            _, end = _RAW_DECODER.raw_decode(text)
        except json.JSONDecodeError as error:
            ran_out = error.pos >= len(text) - 1 or error.msg.startswith("Unterminated string")
            if available > MAX_VALUE and ran_out:
                raise self._too_long() from None
            at = self.pos + len(text[: error.pos].encode("utf-8", "surrogateescape"))
            raise self.fail(error.msg, at) from None
        except (ValueError, RecursionError):  # an integer of over 4,300 digits, nesting too deep
            parse_json(window, self.where, CheckpointError)  # which says so
            raise
        size = len(text[:end].encode("utf-8", "surrogateescape"))
        if size == len(window) and available > MAX_VALUE:  # it may go on
            raise self._too_long()
        value = parse_json(window[:size], self.where, CheckpointError)  # strictly: UTF-8, as before
        self.pos += size
        return value

    def _too_long(self) -> CheckpointError:
        return CheckpointError(f"{self.where}: a value over {MAX_VALUE:,} bytes outside the weight_map")

    def index(self) -> IndexContents:
        self.skip_ws()
        if self.peek() is None:
            raise self.fail("Expecting value")
        if self.peek() != ord("{"):
            self.value()  # valid JSON of another kind, or the error that says why not
            raise _not_an_index(self.where)
        self.pos += 1
        weight_map: WeightMap | None = None
        metadata, bad_map = {}, False
        self.skip_ws()
        if self.peek() == ord("}"):
            self.pos += 1
        else:
            while True:
                self.skip_ws()
                key = self.string()
                self.skip_ws()
                self.take(b":", "Expecting ':' delimiter")
                self.skip_ws()
                if key == "weight_map" and self.peek() == ord("{"):
                    weight_map, bad_map = WeightMap(self.keep_map), False  # the last one counts
                    self.weight_map(weight_map)
                else:
                    value = self.value()
                    if key == "weight_map":
                        weight_map, bad_map = None, True
                    elif key == "metadata":
                        metadata = value
                self.skip_ws()
                if self.peek() == ord(","):
                    self.pos += 1
                    continue
                self.take(b"}", "Expecting ',' delimiter")
                break
        self.skip_ws()
        if self.peek() is not None:
            raise self.fail("Extra data")
        if bad_map:
            raise _not_an_index(self.where)
        return IndexContents(weight_map, metadata, self.offset + self.pos)

    def weight_map(self, into: WeightMap) -> None:
        """The weight map's object, at its '{': piece by piece, in C where it can be."""
        self.pos += 1
        self.skip_ws()
        if self.peek() == ord("}"):
            self.pos += 1
            return
        while True:
            part, end = None, None
            for cut in (self.quick_cut, self.counted_cut):  # the first that msgspec accepts
                end = cut()
                if end is not None:
                    part = self.decode(end)
                    if part is not None:
                        break
            if part is not None and end is not None:
                into.add(part)
                self.pos = end
            else:  # an escape, a pair longer than a piece, or something msgspec refuses: pair by pair
                self.pairs(into, self.pos + 1 if end is None else end)
            self.skip_ws()
            if self.peek() == ord(","):
                self.pos += 1
                self.skip_ws()
                continue
            self.take(b"}", "Expecting ',' delimiter")
            return

    def decode(self, end: int) -> dict[str, str] | None:
        """The pairs from pos to `end` as one object, decoded in place (pos > 0 always: `more` keeps the
        byte before it): that byte and the one at `end` are braces while msgspec reads them; None for
        what it refuses (read again pair by pair, to say why)."""
        buf, before = self.buf, self.pos - 1
        saved = buf[before], buf[end] if end < len(buf) else None
        if saved[1] is None:
            buf.append(ord("}"))
        else:
            buf[end] = ord("}")
        buf[before] = ord("{")
        try:
            with memoryview(buf) as view, view[before : end + 1] as piece:
                if self.decoder is not None:
                    return self.decoder.decode(piece)
                # without msgspec (PyPy): the standard library's parse, in C too; names and files strings
                part = json.loads(piece.tobytes())
                return part if isinstance(part, dict) and all(type(v) is str for v in part.values()) else None
        except self.decode_errors:
            return None
        finally:
            buf[before] = saved[0]
            if saved[1] is None:
                del buf[end]
            else:
                buf[end] = saved[1]

    def window(self) -> int:
        """Where the next piece may reach: CHUNK bytes on (2 × CHUNK at most, as buffered), to the first
        backslash (an escape: a quote in it would delimit nothing)."""
        self.ensure(CHUNK)
        stop = min(len(self.buf), self.pos + 2 * CHUNK)
        backslash = self.buf.find(b"\\", self.pos, stop)
        return stop if backslash == -1 else backslash

    def quick_cut(self) -> int | None:
        """After the window's last `",`: a value's closing quote, or msgspec refuses the piece (a cut
        anywhere else leaves it inside a string, or a name without its file)."""
        cut = self.buf.rfind(b'",', self.pos, self.window())
        return None if cut == -1 else cut + 1

    def counted_cut(self) -> int | None:
        """Where the window's last complete pair ends (pos is at a pair's start, outside any string),
        None if there is none. Without a backslash every quote delimits a string, so the quotes say
        where strings are: a brace after an even number of them closes the map, and a pair ends at
        every fourth."""
        buf, start = self.buf, self.pos
        stop = self.window()
        quotes, searched = 0, start
        brace = buf.find(b"}", start, stop)
        while brace != -1:  # the map's end, unless inside a string
            quotes += buf.count(b'"', searched, brace)
            if quotes % 2 == 0:
                stop = brace
                break
            searched, brace = brace, buf.find(b"}", brace + 1, stop)
        count = buf.count(b'"', start, stop)
        if count < 4:
            return None
        end = stop
        for _ in range(count % 4 + 1):
            end = buf.rindex(b'"', start, end)
        return end + 1

    def pairs(self, into: WeightMap, until: int) -> None:
        """Pairs one by one, from pos until past `until` (a buffer position): each name and file name
        by the string grammar, so that an error says what and where."""
        target = self.offset + until
        part: dict[str, str] = {}
        while True:
            name = self.string()
            self.skip_ws()
            self.take(b":", "Expecting ':' delimiter")
            self.skip_ws()
            if self.peek() != ord('"'):
                self.value()  # JSON, or the error that says why not
                raise _not_an_index(self.where)
            part[name] = self.string()
            self.skip_ws()
            if self.offset + self.pos >= target or self.peek() != ord(","):
                break
            self.pos += 1
            self.skip_ws()
        into.add(part)


_RAW_DECODER = json.JSONDecoder()


def _not_an_index(where: str) -> CheckpointError:
    return CheckpointError(f"{where}: expected an object with a 'weight_map' of tensor name -> file name")


def _string(token: bytes, where: str) -> str:
    """A JSON string token's value: msgspec's, or (for what it refuses: a lone surrogate escape) the
    standard library's."""
    msgspec = optional_msgspec()
    if msgspec is not None:
        try:
            return msgspec.json.decode(token)
        except msgspec.DecodeError:
            pass
    value = parse_json(token, where, CheckpointError)
    if not isinstance(value, str):  # cannot be: the token is a string by the grammar
        raise CheckpointError(f"{where}: {short_json(value)} is not a string")
    return value


def _decoders():
    """msgspec's decoder of a piece of the weight map (an object of strings) and its errors; None
    without msgspec."""
    msgspec = optional_msgspec()
    if msgspec is None:
        return None
    return msgspec.json.Decoder(dict[str, str]), (msgspec.DecodeError, RecursionError)
