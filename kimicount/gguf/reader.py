"""A GGUF file, or a split set of them, read from the header alone: metadata and every tensor's name,
shape, ggml type and bytes. The tensor data is never read.

Why a parser of our own over the header bytes rather than gguf-py's `GGUFReader`: GGUFReader maps the
whole file (numpy.memmap) and builds a numpy view per field and per tensor; it needs a local file of
full size, so it cannot read the first megabytes of a file on the Hub, and it reads every array of the
metadata (the 163,840 token strings of Kimi K2) into numpy objects. benchmarks/gguf_read.py measures
both on a full-size (sparse) Kimi K2 Q6_K file: GGUFReader 4.2 s and 246 MB peak RSS, this parser
0.52 s and 62.5 MB, of which the imports alone take 0.16 s and 62.5 MB. What we do take from gguf-py is its knowledge: the value types
(`GGUFValueType`), the ggml types and their names (`GGMLQuantizationType`), their block sizes
(`GGML_QUANT_SIZES`), the default alignment and the split keys (`Keys.Split`).

The format (gguf-py gguf_reader.py, llama.cpp ggml/src/gguf.cpp `gguf_init_from_file_impl`), all
little-endian: magic "GGUF", version u32 (2 or 3), tensor_count u64, kv_count u64; kv_count pairs of
key (string: u64 length + UTF-8) · value type u32 · value (an array: item type u32, count u64, items);
tensor_count infos of name · n_dims u32 · ne[n_dims] u64 · ggml type u32 · offset u64 (from the start
of the data, a multiple of the alignment); then padding to `general.alignment` (32 by default), then
the data. A tensor takes ne / block_size × type_size bytes (`ggml_nbytes`); gguf.cpp refuses a row
length (ne0) that is not a multiple of the block size.

Split sets (llama.cpp tools/gguf-split/gguf-split.cpp; llama_split_path in src/llama.cpp): files
`PREFIX-00001-of-00009.gguf` …, each with `split.no` (u16, from 0), `split.count` (u16) and, in the
first, `split.tensors.count`; llama-model-loader.cpp loads the first file first and refuses another
(`split.no` ≠ 0). We read every file's header and check those keys.

Bad input is one CheckpointError (a file that is not what it should be) or SourceError (a file that is
not there) naming the file and the field; the CLI prints it as one line and exits 2.
"""

from __future__ import annotations

import math
import os
import re
import stat
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kimicount.errors import CheckpointError, SourceError

#: The 4 bytes every GGUF file starts with.
MAGIC = b"GGUF"
#: Versions gguf.cpp reads (version 1, with 32-bit counts, was dropped in November 2023).
VERSIONS = (2, 3)
#: ggml tensors have at most 4 dimensions (GGML_MAX_DIMS).
MAX_DIMS = 4
#: The largest element count or byte size of one tensor: ggml counts in int64.
MAX_SIZE = 2**63 - 1
#: A header larger than this is refused before it is read: Kimi K2's, with its 163,840-token vocabulary,
#: is about 2.5 MB; the largest vocabularies (256k tokens and their merges) make tens of MB.
MAX_HEADER_BYTES = 256 << 20
#: Arrays of metadata up to this length are kept with their values; longer ones (the tokenizer's
#: tokens, merges, scores) are kept as their item type and length only.
MAX_KEPT_ARRAY = 256
#: The first read; the window grows fourfold until the header fits.
FIRST_WINDOW = 1 << 20
#: A split set's file names, as llama_split_path writes them ("%s-%05d-of-%05d.gguf").
SPLIT_NAME = re.compile(r"^(?P<prefix>.*)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")

#: The split keys (gguf-py constants.py Keys.Split, LLM_KV_SPLIT_* in llama-arch.cpp).
SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor as its header describes it."""

    name: str
    shape: tuple[int, ...]  # GGUF order: ne0 (the row length) first
    ggml_type: str  # the GGMLQuantizationType name: "Q4_K", "F32", "BF16", ...
    nbytes: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def layer(self) -> int | None:
        """The block a `blk.N.…` tensor belongs to; None for token_embd, output_norm, output.

        >>> GGUFTensor("blk.12.ffn_up_exps.weight", (7168, 2048, 384), "Q6_K", 0).layer
        12
        """
        head, _, rest = self.name.partition(".")
        number = rest.partition(".")[0]
        return int(number) if head == "blk" and number.isdigit() else None


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array: its item type (a GGUFValueType name) and length; its values when short."""

    item_type: str
    length: int
    values: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class GGUFListing:
    """A GGUF checkpoint (one file or a split set): what its headers say."""

    files: tuple[str, ...]
    metadata: Mapping[str, object]  # the first file's key-value pairs
    tensors: tuple[GGUFTensor, ...]
    file_bytes: int  # the sum of the files' sizes

    @property
    def tensor_bytes(self) -> int:
        """The sum of the tensors' bytes: what llama.cpp prints as "file size" (llama-model-loader.cpp
        sums ggml_nbytes of every tensor into n_bytes)."""
        return sum(t.nbytes for t in self.tensors)

    @property
    def elements(self) -> int:
        return sum(t.elements for t in self.tensors)

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None


# --- one file's header --------------------------------------------------------------------------


@dataclass(frozen=True)
class FileHeader:
    """One file's header: its metadata and tensors, where its data starts and the file's size."""

    file: str
    version: int
    metadata: Mapping[str, object]
    tensors: tuple[GGUFTensor, ...]
    offsets: tuple[int, ...]  # of each tensor's data, from the start of the data
    data_start: int
    size: int


class _Short(Exception):
    """The header runs past the bytes read so far; `end` is the byte it needs up to."""

    def __init__(self, end: int):
        self.end = end


class _Cursor:
    """Reads little-endian values from a prefix of the file; running out raises _Short."""

    def __init__(self, data: bytes, size: int, where: str):
        self.data, self.size, self.where, self.pos = data, size, where, 0
        self.field = "magic"

    def fail(self, message: str) -> CheckpointError:
        return CheckpointError(f"{self.where}: {self.field}: {message}")

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            if end > self.size:
                raise self.fail(
                    f"the header is cut short: it needs byte {end:,}, the file has {self.size:,} bytes"
                )
            raise _Short(end)
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, fmt: str) -> Any:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, what: str, each: int) -> int:
        """A u64 count of things that take at least `each` bytes each: refused when the rest of the
        file could not hold that many."""
        n = self.unpack("Q")
        if n * each > self.size - self.pos:
            raise self.fail(f"{n:,} {what} cannot fit in the {self.size - self.pos:,} bytes left of the file")
        return n

    def string(self) -> str:
        length = self.unpack("Q")
        if length > self.size - self.pos:
            raise self.fail(f"a string of {length:,} bytes runs past the end of the file")
        return self.take(length).decode("utf-8", errors="replace")


def _scalar_formats() -> dict[int, str]:
    from gguf import GGUFValueType as V

    return {
        V.UINT8: "B", V.INT8: "b", V.UINT16: "H", V.INT16: "h", V.UINT32: "I", V.INT32: "i",
        V.FLOAT32: "f", V.BOOL: "?", V.UINT64: "Q", V.INT64: "q", V.FLOAT64: "d",
    }  # fmt: skip


def _value(cursor: _Cursor, kind: int, formats: dict[int, str], nested: bool = False) -> Any:
    from gguf import GGUFValueType as V

    if kind in formats:
        return cursor.unpack(formats[kind])
    if kind == V.STRING:
        return cursor.string()
    if kind == V.ARRAY and not nested:
        item = cursor.unpack("I")
        if item not in formats and item not in (V.STRING, V.ARRAY):
            raise cursor.fail(f"array of unknown value type {item}")
        size = struct.calcsize(formats[item]) if item in formats else 8
        length = cursor.count("array items", size)
        if item in formats and length > MAX_KEPT_ARRAY:  # skipped whole: numbers need no parsing
            cursor.take(length * size)
            return GGUFArray(V(item).name, length)
        values = [_value(cursor, item, formats, nested=True) for _ in range(length)]
        return GGUFArray(V(item).name, length, tuple(values) if length <= MAX_KEPT_ARRAY else None)
    raise cursor.fail(f"unknown value type {kind}" + (" (an array of arrays)" if nested else ""))


def parse_header(data: bytes, size: int, where: str) -> FileHeader:
    """The header at the start of `data`, the first bytes of a file of `size` bytes. Raises _Short
    when more of the file is needed, CheckpointError (naming `where` and the field) when the header is
    not a valid GGUF header."""
    from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType

    cursor = _Cursor(data, size, where)
    magic = cursor.take(4)
    if magic != MAGIC:
        raise cursor.fail(f"not a GGUF file (it starts with {magic!r}, expected {MAGIC!r})")
    cursor.field = "version"
    version = cursor.unpack("I")
    if version not in VERSIONS:
        raise cursor.fail(f"{version}: expected {' or '.join(map(str, VERSIONS))}")
    cursor.field = "tensor_count"
    # A tensor info takes at least 32 bytes (name length, n_dims, one dimension, type, offset).
    tensor_count = cursor.count("tensor infos", 32)
    cursor.field = "kv_count"
    kv_count = cursor.count("key-value pairs", 13)  # key length, value type, a 1-byte value
    formats = _scalar_formats()
    metadata: dict[str, object] = {}
    for i in range(kv_count):
        cursor.field = f"key-value pair {i}"
        key = cursor.string()
        cursor.field = f"key '{key}'"
        if key in metadata:
            raise cursor.fail("duplicated")
        metadata[key] = _value(cursor, cursor.unpack("I"), formats)
    alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        cursor.field = "key 'general.alignment'"
        raise cursor.fail(f"{alignment!r}: expected a power of two")
    tensors, offsets, names = [], [], set()
    for i in range(tensor_count):
        cursor.field = f"tensor {i}"
        name = cursor.string()
        cursor.field = f"tensor '{name}'"
        n_dims = cursor.unpack("I")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cursor.fail(f"{n_dims} dimensions, expected 1 to {MAX_DIMS}")
        shape = struct.unpack(f"<{n_dims}Q", cursor.take(8 * n_dims))
        elements = 1
        for d in shape:
            elements *= d
        if elements > MAX_SIZE or 0 in shape:
            raise cursor.fail(
                f"shape {list(shape)}: expected dimensions of 1 or more, at most 2^63 − 1 elements"
            )
        code = cursor.unpack("I")
        try:
            ggml_type = GGMLQuantizationType(code)
            block, type_size = GGML_QUANT_SIZES[ggml_type]
        except (ValueError, KeyError):
            raise cursor.fail(f"unknown ggml type {code}") from None
        if shape[0] % block:
            raise cursor.fail(
                f"shape {list(shape)}: a row of {shape[0]:,} is not a whole number of "
                f"{ggml_type.name} blocks of {block}"
            )
        offset = cursor.unpack("Q")
        if offset % alignment:
            raise cursor.fail(f"data offset {offset:,} is not a multiple of the alignment {alignment}")
        if name in names:
            raise cursor.fail("duplicated tensor name")
        names.add(name)
        tensors.append(GGUFTensor(name, tuple(shape), ggml_type.name, elements // block * type_size))
        offsets.append(offset)
    data_start = -(-cursor.pos // alignment) * alignment
    for tensor, offset in zip(tensors, offsets):
        end = data_start + offset + tensor.nbytes
        if end > size:
            cursor.field = f"tensor '{tensor.name}'"
            raise cursor.fail(
                f"its data (bytes {data_start + offset:,} to {end:,}) extends past the end of the file "
                f"({size:,} bytes)"
            )
    return FileHeader(
        where, version, MappingProxyType(metadata), tuple(tensors), tuple(offsets), data_start, size
    )


def read_header(read: Callable[[int, int], bytes], size: int, where: str) -> FileHeader:
    """The header of a file of `size` bytes, `read(start, length)` giving its bytes: the first MiB,
    then four times as much until the header fits."""
    data = b""
    window = FIRST_WINDOW
    while True:
        if len(data) < min(window, size):
            data += read(len(data), min(window, size) - len(data))
        try:
            return parse_header(data, size, where)
        except _Short as short:
            if short.end > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"{where}: the header is over {MAX_HEADER_BYTES:,} bytes, more than any GGUF header"
                ) from None
            window = max(short.end, window * 4)


# --- a local file or split set -------------------------------------------------------------------


def _read_local(path: Path) -> FileHeader:
    where = str(path)
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):
            raise CheckpointError(f"{where}: not a regular file")
        with path.open("rb") as handle:

            def read(start: int, length: int) -> bytes:
                handle.seek(start)
                return handle.read(length)

            return read_header(read, status.st_size, where)
    except FileNotFoundError:
        raise SourceError(f"{where}: no such file") from None
    except OSError as failure:
        raise SourceError(f"{where}: cannot read: {failure.strerror or failure}") from None


def split_count(header: FileHeader) -> int:
    """split.count of a file (1 when it is not part of a split set)."""
    count = header.metadata.get(SPLIT_COUNT, 1)
    if type(count) is not int or count < 1:
        raise CheckpointError(f"{header.file}: key '{SPLIT_COUNT}': {count!r}, expected a positive integer")
    return count


def _split_no(header: FileHeader) -> int:
    number = header.metadata.get(SPLIT_NO, 0)
    if type(number) is not int or number < 0:
        raise CheckpointError(f"{header.file}: key '{SPLIT_NO}': {number!r}, expected an integer >= 0")
    return number


def split_names(first: str, count: int) -> list[str]:
    """The names of a split set's files, from the first one's (llama_split_path's "%s-%05d-of-%05d.gguf").

    >>> split_names("K2/Kimi-K2-Q6_K-00001-of-00003.gguf", 3)[1:]
    ['K2/Kimi-K2-Q6_K-00002-of-00003.gguf', 'K2/Kimi-K2-Q6_K-00003-of-00003.gguf']
    """
    head, _, name = first.rpartition("/")
    match = SPLIT_NAME.match(name)
    if match is None:
        raise CheckpointError(
            f"{first}: key '{SPLIT_COUNT}' is {count} but the name is not PREFIX-00001-of-{count:05d}.gguf, "
            "so its other files cannot be found"
        )
    prefix = f"{head}/{match['prefix']}" if head else match["prefix"]
    return [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def assemble(headers: list[FileHeader]) -> GGUFListing:
    """One listing from the headers of a split set's files, in order (or of a single file), after
    checking split.no, split.count and split.tensors.count, and that no tensor is in two files."""
    first = headers[0]
    count = split_count(first)
    if _split_no(first) != 0:
        raise CheckpointError(
            f"{first.file}: key '{SPLIT_NO}' is {_split_no(first)}: name the first file of the set "
            "(split.no 0), as llama.cpp requires"
        )
    if count != len(headers):
        raise CheckpointError(f"{first.file}: key '{SPLIT_COUNT}' is {count}, found {len(headers)} files")
    for i, header in enumerate(headers[1:], start=1):
        if split_count(header) != count:
            raise CheckpointError(
                f"{header.file}: key '{SPLIT_COUNT}' is {split_count(header)}, the first file says {count}"
            )
        if _split_no(header) != i:
            raise CheckpointError(f"{header.file}: key '{SPLIT_NO}' is {_split_no(header)}, expected {i}")
    tensors = [t for header in headers for t in header.tensors]
    if count > 1:
        declared = first.metadata.get(SPLIT_TENSORS)
        if declared is not None and declared != len(tensors):
            raise CheckpointError(
                f"{first.file}: key '{SPLIT_TENSORS}' is {declared!r}, the files hold {len(tensors):,} tensors"
            )
        seen: dict[str, str] = {}
        for header in headers:
            for tensor in header.tensors:
                if tensor.name in seen:
                    raise CheckpointError(
                        f"{header.file}: tensor '{tensor.name}' is also in {seen[tensor.name]}"
                    )
                seen[tensor.name] = header.file
    return GGUFListing(
        files=tuple(h.file for h in headers),
        metadata=first.metadata,
        tensors=tuple(tensors),
        file_bytes=sum(h.size for h in headers),
    )


def one_set(paths: list[str]) -> bool:
    """Whether the paths are one file, or the files of one split set (PREFIX-0000N-of-0000M.gguf, one
    folder, prefix and M).

    >>> one_set(["a-00001-of-00002.gguf", "a-00002-of-00002.gguf"]), one_set(["a.gguf", "b.gguf"])
    (True, False)
    """
    sets = set()
    for path in paths:
        head, _, name = path.rpartition("/")
        match = SPLIT_NAME.match(name)
        sets.add((head, match["prefix"], match["count"]) if match else (path,))
    return len(sets) <= 1


def listed(paths: list[str]) -> str:
    """The first few of many paths, for a message."""
    return ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")


def _in_folder(folder: Path) -> Path:
    """The first file of the one GGUF (a file or a split set) a folder holds."""
    try:
        paths = sorted(str(p) for p in folder.iterdir() if p.suffix == ".gguf" and p.is_file())
    except OSError as failure:
        raise SourceError(f"{folder}: cannot list: {failure.strerror or failure}") from None
    if not paths:
        raise SourceError(f"{folder}: no .gguf file in this folder")
    if not one_set(paths):
        raise SourceError(
            f"{folder}: {len(paths)} .gguf files that are not one split set ({listed(paths)}); name one file"
        )
    return Path(paths[0])


def read_gguf(path: str | os.PathLike[str]) -> GGUFListing:
    """The listing of a .gguf file, of the split set whose first file `path` is (every file's header is
    read), or of the one file or split set a folder holds. Header bytes only.

    >>> read_gguf("no/such.gguf")
    Traceback (most recent call last):
    kimicount.errors.SourceError: no/such.gguf: no such file
    """
    path = Path(path)
    if path.is_dir():
        path = _in_folder(path)
    first = _read_local(path)
    count = split_count(first)
    if count == 1 or _split_no(first) != 0:
        return assemble([first])
    headers = [first]
    for name in split_names(str(path), count)[1:]:
        sibling = Path(name)
        if not sibling.exists():
            raise SourceError(
                f"{sibling}: no such file (split {len(headers) + 1} of {count} of {path.name}'s set)"
            )
        headers.append(_read_local(sibling))
    return assemble(headers)
