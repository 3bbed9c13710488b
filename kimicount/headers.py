"""safetensors headers: parse and validate one file's header without touching its tensor data.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
(`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}`), then the data.
The rules checked here are the format's own (safetensors' `Metadata::validate`): the header is at most
100 MB, lies inside the file, is a JSON object; every dtype is known, every shape a list of
non-negative integers, every tensor's bytes equal dtype size × elements; the tensors tile the data
area from 0 with no gap or overlap, and end where the file ends.

safetensors' own Python API needs the whole file (or an mmap of it), cannot take the header bytes
fetched over HTTP, and its errors do not name the tensor; so the header is parsed here, by those rules,
and each error names the file and the tensor.
"""

from __future__ import annotations

import math
import operator
import os
import struct
from collections import Counter
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import accumulate, chain
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from kimicount.errors import CheckpointError
from kimicount.reading import optional_msgspec, parse_checked, short_json

#: safetensors refuses headers larger than this (its MAX_HEADER_SIZE), so do we: a lying length
#: prefix must not make us allocate or download gigabytes.
MAX_HEADER_BYTES = 100_000_000

#: The most elements a tensor can have: its data_offsets are u64 bytes, and the smallest dtype is 4 bits.
MAX_ELEMENTS = 2**65
#: The largest data offset: safetensors stores them as u64.
MAX_OFFSET = 2**64 - 1

#: Bits per element of every dtype the safetensors format defines.
DTYPE_BITS = MappingProxyType(
    {
        "BOOL": 8,
        "U8": 8,
        "I8": 8,
        "F8_E5M2": 8,
        "F8_E4M3": 8,
        "F8_E8M0": 8,
        "F4": 4,
        "F6_E2M3": 6,
        "F6_E3M2": 6,
        "I16": 16,
        "U16": 16,
        "F16": 16,
        "BF16": 16,
        "I32": 32,
        "U32": 32,
        "F32": 32,
        "C64": 64,
        "F64": 64,
        "I64": 64,
        "U64": 64,
    }
)


class TensorInfo(NamedTuple):
    """One tensor as its header describes it (built on demand: verification reads the columns of
    `FileHeader`, and builds these only for the tensors it reports on)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]
    file: str
    elements: int
    nbytes: int


#: What a tensor is, as verification compares it: its shape and dtype, written as mismatches show them
#: ("[2048, 7168] F8_E4M3"). A string, one object per distinct kind in a header: a 1T checkpoint has
#: 139,644 tensors of a few dozen kinds, and sets and counts of strings hash each only once.
Kind = str


def kind_of(dtype: str, shape: tuple[int, ...]) -> Kind:
    """
    >>> kind_of("F8_E4M3", (2048, 7168)), kind_of("F32", ())
    ('[2048, 7168] F8_E4M3', '[] F32')
    """
    return f"{list(shape)} {dtype}"


@lru_cache(maxsize=4096)
def kind_parts(kind: Kind) -> tuple[str, tuple[int, ...], int, int]:
    """A kind's dtype, shape, elements and bytes (whole bytes, and elements bounded: the kinds are those
    of checked headers).

    >>> kind_parts("[2048, 7168] F8_E4M3"), kind_parts("[] F32")
    (('F8_E4M3', (2048, 7168), 14680064, 14680064), ('F32', (), 1, 4))
    """
    shape_text, dtype = kind.rsplit(" ", 1)
    shape = tuple(map(int, shape_text[1:-1].split(", "))) if shape_text != "[]" else ()
    elements = math.prod(shape)
    return dtype, shape, elements, elements * DTYPE_BITS[dtype] // 8


@dataclass(frozen=True)
class FileHeader:
    """The validated header of one safetensors file, column by column: one entry per tensor, in the
    header's order. (A 1T checkpoint has 139,644 tensors; checking them as columns costs less than
    building an object for each, so `tensors` builds those only when asked.)"""

    file: str
    file_size: int
    header_size: int  # the JSON part, without the 8-byte length prefix
    names: tuple[str, ...]
    kinds: tuple[Kind, ...]  # shape and dtype of each tensor
    #: Each tensor's data_offsets, begins and ends; None when the tensors lie in the header's order,
    #: each where the one before ends (the usual case: then the kinds' sizes say where each is).
    spans: tuple[tuple[int, ...], tuple[int, ...]] | None
    kind_counts: dict[Kind, int]  # tensors of each kind
    metadata: dict[str, str]
    data_bytes: int  # where the last tensor ends: the tensors tile the data area from 0

    @property
    def begins(self) -> tuple[int, ...]:
        return self._spans[0]

    @property
    def ends(self) -> tuple[int, ...]:
        return self._spans[1]

    @property
    def _spans(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if self.spans is not None:
            return self.spans
        ends = tuple(accumulate(kind_parts(kind)[3] for kind in self.kinds))
        return (0, *ends[:-1]), ends

    @cached_property
    def names_digest(self) -> int:
        """The sum of the names' hashes, which an index's listing of this file must have
        (kimicount.checkpoint.index_agrees)."""
        return sum(map(hash, self.names))

    @cached_property
    def kinds_by_name(self) -> dict[str, Kind]:
        """Each tensor's kind, by name: one file's few thousand (kimicount.checkpoint.Checkpoint.kinds_of)."""
        return dict(zip(self.names, self.kinds))

    @cached_property
    def tensors(self) -> tuple[TensorInfo, ...]:
        infos = []
        for name, kind, begin, end in zip(self.names, self.kinds, self.begins, self.ends):
            dtype, shape, elements, _ = kind_parts(kind)
            infos.append(TensorInfo(name, dtype, shape, (begin, end), self.file, elements, end - begin))
        return tuple(infos)


def header_length(prefix: bytes, file: str, file_size: int) -> int:
    """The JSON header length from the first 8 bytes, checked against the cap and the file size."""
    if len(prefix) < 8:
        raise CheckpointError(f"{file}: {file_size} bytes, too short for a safetensors header (needs 8)")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > MAX_HEADER_BYTES:
        raise CheckpointError(
            f"{file}: header length {length:,} bytes is over safetensors' limit of {MAX_HEADER_BYTES:,}"
        )
    if 8 + length > file_size:
        raise CheckpointError(
            f"{file}: header length {length:,} bytes runs past the end of the file ({file_size:,} bytes)"
        )
    return length


def parse_header(raw: bytes, file: str, file_size: int, where: str | None = None) -> FileHeader:
    """Validate the JSON header bytes (without the length prefix) of a file of `file_size` bytes.

    `file` is the name recorded for each tensor (as the index names it); `where` names the file in
    error messages (a full path or URL; defaults to `file`).
    """
    where = where or file
    typed = _typed_header(raw)
    if typed is not None:  # the usual case: well formed, every check passed in C or by columns
        names, dtypes, shapes, offsets, metadata = typed
        columns = _columns(names, dtypes, shapes, offsets)
        if columns is not None and columns[-1] == file_size - 8 - len(raw):
            return FileHeader(file, file_size, len(raw), *columns[:-1], metadata, columns[-1])

    def check(parsed: Any) -> FileHeader:
        return header_from_json(parsed, file, where, file_size=file_size, header_size=len(raw))

    return parse_checked(raw, where, CheckpointError, check, what="header")


def header_from_json(parsed: Any, file: str, where: str, *, file_size: int, header_size: int) -> FileHeader:
    """Validate a parsed header of a file of `file_size` bytes: the tensors tile its data from 0 to
    the end of the file."""
    if not isinstance(parsed, dict):
        raise CheckpointError(f"{where}: header is a JSON {type(parsed).__name__}, expected an object")
    parsed = dict(parsed)
    metadata = parsed.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"{where}: __metadata__ must map strings to strings")
    data_size = file_size - 8 - header_size
    columns = _columns_in_bulk(parsed)
    if columns is None or columns[-1] != data_size:
        # Something is wrong: tensor by tensor, to name it.
        tensors = [_tensor_info(name, entry, file, where) for name, entry in parsed.items()]
        data_end = _check_tiling(tensors, data_size, where)
        kinds = tuple(kind_of(t.dtype, t.shape) for t in tensors)
        columns = (
            tuple(t.name for t in tensors),
            kinds,
            (tuple(t.data_offsets[0] for t in tensors), tuple(t.data_offsets[1] for t in tensors)),
            dict(Counter(kinds)),
            data_end,
        )
    names, kinds, spans, kind_counts, data_end = columns
    return FileHeader(file, file_size, header_size, names, kinds, spans, kind_counts, metadata, data_end)


def _typed_header(raw: bytes) -> tuple[tuple[str, ...], list, list, list, dict[str, str]] | None:
    """The columns (names, dtypes, shapes, data_offsets) and metadata of a header, decoded by msgspec
    into typed entries, where it is installed and the header is of the usual form: each entry an object
    whose dtype is a safetensors dtype, shape a list of ints (no bool, no float) and data_offsets two of
    them, checked in C as it decodes, without a dict or list per tensor (three times as fast as a JSON
    parse on Kimi K2.5's 30 MB of headers); a field that is missing decodes as None, which `_columns`
    finds among the distinct kinds and offsets (as it finds negative sizes). None at the first doubt,
    and the header is parsed again as plain JSON, by `header_from_json`, which says what is wrong."""
    decoders = _header_decoders()
    if decoders is None:
        return None
    header, metadata_only, errors = decoders
    try:
        entries = header.decode(raw)
        # Every entry is decoded as a tensor, fields missing as None: the header's own metadata too,
        # which is read again as a map of strings.
        metadata = _metadata(raw, metadata_only, errors) if entries.pop("__metadata__", None) else {}
    except errors:
        return None
    values = list(entries.values())
    return (
        tuple(entries),
        list(map(_entry_dtype, values)),
        list(map(_entry_shape, values)),
        list(map(_entry_offsets, values)),
        metadata,
    )


def _metadata(raw: bytes, decoder: Any, errors: tuple[type[Exception], ...]) -> dict[str, str]:
    """A header's __metadata__, a map of strings. safetensors writes it first, so only the bytes up to
    its first '}' are decoded, closed by another: a '}' inside one of its strings leaves that string
    unterminated, which msgspec refuses, and then the whole header is decoded (skipping the tensors),
    as it is when the key comes twice (the last counts)."""
    key = raw.find(b'"__metadata__"')
    end = raw.find(b"}", key)
    if key != -1 and end != -1 and raw.count(b'"__metadata__"') == 1:
        try:
            return decoder.decode(raw[: end + 1] + b"}").metadata
        except errors:
            pass
    return decoder.decode(raw).metadata


@lru_cache(maxsize=1)
def _header_decoders():
    """msgspec's decoders of a header and of its metadata alone, and its errors; None without msgspec.
    Made when first asked for: importing msgspec takes 25 ms, which only verify's headers repay."""
    msgspec = optional_msgspec()
    if msgspec is None:
        return None
    entry = msgspec.defstruct(
        "Entry",
        [
            ("dtype", Literal[tuple(DTYPE_BITS)] | None, None),
            ("shape", tuple[int, ...] | None, None),
            ("data_offsets", tuple[int, int] | None, None),
        ],
        gc=False,
    )
    metadata = msgspec.defstruct(
        "Metadata", [("metadata", dict[str, str], {})], rename={"metadata": "__metadata__"}, gc=False
    )
    return (
        msgspec.json.Decoder(dict[str, entry]),  # type: ignore[valid-type]  # a struct made at run time
        msgspec.json.Decoder(metadata),
        (msgspec.DecodeError, RecursionError),
    )


class _KindNames(dict):
    """(dtype, shape) -> its Kind, made when first asked for."""

    def __missing__(self, pair: tuple[str, tuple[int, ...]]) -> Kind:
        kind = self[pair] = kind_of(*pair)
        return kind


# Each field of every entry in one pass in C: of msgspec's typed entries, and of plain JSON objects.
_entry_dtype = operator.attrgetter("dtype")
_entry_shape = operator.attrgetter("shape")
_entry_offsets = operator.attrgetter("data_offsets")
_json_dtype = operator.itemgetter("dtype")
_json_shape = operator.itemgetter("shape")
_json_offsets = operator.itemgetter("data_offsets")
_DTYPES = frozenset(DTYPE_BITS)
_Columns = tuple[
    tuple[str, ...], tuple[Kind, ...], tuple[tuple[int, ...], tuple[int, ...]] | None, dict[Kind, int], int
]


def _columns_in_bulk(entries: dict[str, Any]) -> _Columns | None:
    """The columns of a header parsed as plain JSON whose every entry is well formed, and where its
    data ends; None at the first doubt: `_tensor_info` and `_check_tiling`, tensor by tensor, then say
    what is wrong. The types are checked column by column in C: each entry an object (only objects take
    string subscripts) with a known dtype, a shape that is a list of non-negative ints (`type(x) is
    int`: no bool, no float, before equal shapes are merged), and data_offsets two ints."""
    if not entries:
        return (), (), None, {}, 0
    try:
        values = list(entries.values())
        dtypes = list(map(_json_dtype, values))
        shapes = list(map(_json_shape, values))
        offsets = list(map(_json_offsets, values))
        if not (
            set(dtypes) <= _DTYPES
            and set(map(type, shapes)) == {list}
            and set(map(len, offsets)) == {2}
            and set(map(type, chain.from_iterable(offsets))) == {int}
            and set(map(type, chain.from_iterable(shapes))) <= {int}
        ):
            return None
    except (KeyError, TypeError):  # an entry that is not an object, or lacks a key; an unhashable dtype
        return None
    return _columns(tuple(entries), dtypes, list(map(tuple, shapes)), offsets)


def _columns(
    names: tuple[str, ...], dtypes: list[str], shapes: list[tuple[int, ...]], offsets: list
) -> _Columns | None:
    """The columns of a header whose entries are of the right types (known dtypes; shapes and offsets
    of ints, dims and offsets not yet known to be >= 0; from msgspec, a field that was missing as None),
    and where its data ends; checked
    once per distinct dtype × shape where that is enough (a 1T checkpoint has 139,644 entries of a few
    dozen kinds): each tensor's bytes (end − begin) those of its dtype × shape; the spans, in order,
    start at 0 and each begins where the one before ends. None at the first doubt."""
    if not names:
        return (), (), None, {}, 0
    kinds_of = _KindNames()
    try:
        kinds = tuple(map(kinds_of.__getitem__, zip(dtypes, shapes)))  # each pair hashed once
        bounds = list(chain.from_iterable(offsets))
    except TypeError:  # a shape or data_offsets that msgspec decoded as None: the field is missing
        return None
    nbytes_of = {}
    for (dtype, shape), kind in kinds_of.items():
        elements = _elements(shape) if dtype is not None and min(shape, default=0) >= 0 else None
        if elements is None or elements * DTYPE_BITS[dtype] % 8:
            return None
        nbytes_of[kind] = elements * DTYPE_BITS[dtype] // 8
    if len(bounds) != 2 * len(names):
        return None
    begins, ends = bounds[0::2], bounds[1::2]
    nbytes = list(map(nbytes_of.__getitem__, kinds))
    # Written in data order (the usual case), each tensor's bytes and the tiling are one check: every
    # tensor ends where the running total of the sizes its kinds need says, and begins where the one
    # before ends, the first at 0.
    stops = list(accumulate(nbytes))
    spans = None  # in the header's order, each where the one before ends: said by the kinds
    if ends != stops or begins[0] != 0 or begins[1:] != ends[:-1]:
        # Otherwise: each tensor's bytes, then the spans sorted as `_check_tiling` sorts them (sizes
        # are known to be >= 0 then).
        if list(map(operator.sub, ends, begins)) != nbytes:
            return None
        sorted_begins, sorted_ends = zip(*sorted(zip(begins, ends)))
        if sorted_begins[0] != 0 or sorted_begins[1:] != sorted_ends[:-1]:
            return None
        spans = (tuple(begins), tuple(ends))
    if stops[-1] > MAX_OFFSET:  # the last tensor ends past what a u64 offset holds
        return None
    return names, kinds, spans, dict(Counter(kinds)), stops[-1]


def _elements(shape: tuple[int, ...] | list[int]) -> int | None:
    """The elements of a shape of non-negative dims, or None past MAX_ELEMENTS, in time linear in the
    dims however large they are: each dim d >= 2 is at least 2^(bit_length(d) − 1), so when those
    exponents add up past 65 the product is past MAX_ELEMENTS before it is computed (a header may hold
    100,000 dims of 2^62); otherwise at most 65 dims are over 1 and the product is small.

    >>> _elements((2048, 7168)), _elements(()), _elements((2**40, 2**40)), _elements((0,) + (2**62,) * 9)
    (14680064, 1, None, 0)
    """
    if 0 in shape:
        return 0
    if sum(map(int.bit_length, shape)) - len(shape) > 65:
        return None
    elements = math.prod(shape)
    return elements if elements <= MAX_ELEMENTS else None


def _tensor_info(name: str, entry: Any, file: str, where_file: str) -> TensorInfo:
    # The common case is checked inline (type(x) is int also refuses bool); anything else goes to
    # _invalid, which says precisely what is wrong.
    try:
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        bits = DTYPE_BITS[dtype]
        begin, end = offsets
    except (TypeError, KeyError, ValueError):
        raise _invalid(name, entry, where_file) from None
    if type(shape) is not list or not all(type(dim) is int and dim >= 0 for dim in shape):
        raise _invalid(name, entry, where_file)
    elements = _elements(shape)
    if elements is None:  # bounded before it is multiplied out: a shape of a million huge dims must not hang
        raise CheckpointError(
            f"{where_file}: tensor '{name}': shape of more elements than safetensors' u64 offsets can hold"
        )
    if type(begin) is not int or type(end) is not int or begin < 0 or end < begin:
        raise _invalid(name, entry, where_file)
    if end > MAX_OFFSET:
        raise CheckpointError(
            f"{where_file}: tensor '{name}': data_offsets end past byte {MAX_OFFSET:,}, more than "
            "safetensors' u64 offsets can hold"
        )
    if elements * bits != (end - begin) * 8:
        raise CheckpointError(
            f"{where_file}: tensor '{name}': data_offsets [{begin}, {end}] hold {end - begin:,} bytes, "
            f"but {dtype} {shape} needs {_bytes_needed(elements * bits)}"
        )
    return TensorInfo(name, dtype, tuple(shape), (begin, end), file, elements, end - begin)


def _bytes_needed(bits: int) -> str:
    """'14,336', or '4,096 and 4 bits' for a size that is not whole bytes (exact for any size)."""
    whole, rest = divmod(bits, 8)
    return f"{whole:,}" + (f" and {rest} bits" if rest else "")


def _invalid(name: str, entry: Any, where_file: str) -> CheckpointError:
    """The error for a tensor entry that is not {dtype, shape, data_offsets} of the right types."""
    where = f"{where_file}: tensor '{name}'"
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        return CheckpointError(f"{where}: expected an object with dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        return CheckpointError(
            f"{where}: unknown dtype {short_json(dtype)} (safetensors dtypes: {', '.join(DTYPE_BITS)})"
        )
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        return CheckpointError(f"{where}: shape {short_json(shape)} is not a list of non-negative integers")
    return CheckpointError(
        f"{where}: data_offsets {short_json(offsets)} is not two ascending non-negative integers"
    )


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


_by_offsets = operator.attrgetter("data_offsets")


def _check_tiling(tensors: list[TensorInfo], data_size: int, file: str) -> int:
    """The tensors must cover the data area exactly: from 0, no gap, no overlap, to the end of the file.
    Returns where the data ends."""
    position = 0
    for tensor in sorted(tensors, key=_by_offsets):
        begin, end = tensor.data_offsets
        if begin != position:
            problem = (
                "overlaps the tensor before it" if begin < position else f"leaves a gap at byte {position:,}"
            )
            raise CheckpointError(
                f"{file}: tensor '{tensor.name}' at data_offsets [{begin}, {end}] {problem}"
            )
        position = end
    if position != data_size:
        if position > data_size:
            raise CheckpointError(
                f"{file}: tensors end at byte {position:,} of the data, past the end of the file "
                f"(the data area holds {data_size:,} bytes)"
            )
        raise CheckpointError(
            f"{file}: tensors cover {position:,} bytes but the data area holds {data_size:,} (trailing bytes)"
        )
    return position


def read_local_header(path: Path, file: str) -> tuple[FileHeader, int]:
    """Read and validate the header of a local file, recorded under the name `file`; returns it and
    the bytes read (never the data)."""
    try:
        if not path.is_file():  # a FIFO would block the open, a dangling link has nothing to read
            raise CheckpointError(f"{path}: not a regular file")
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            length = header_length(handle.read(8), str(path), size)
            raw = handle.read(length)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read: {error.strerror or error}") from error
    return parse_header(raw, file, size, where=str(path)), 8 + length
