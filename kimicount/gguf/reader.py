"""A GGUF file, or a split set of them, read from the header alone: metadata and every tensor's name,
shape, ggml type and bytes. The tensor data is never read.

Why a parser of our own over the header bytes rather than gguf-py's `GGUFReader`: GGUFReader maps the
whole file (numpy.memmap) and builds a numpy view per field and per tensor; it needs a local file of
full size, so it cannot read the first megabytes of a file on the Hub, and it reads every array of the
metadata (the 163,840 token strings of Kimi K2) into numpy objects. benchmarks/gguf_read.py measures
both on a full-size (sparse) Kimi K2 Q6_K file: GGUFReader 6.1 s and 246 MB peak RSS, this parser
0.28 s and 61.8 MB, of which the imports alone take 0.22 s and 61.8 MB (a loaded machine; the parser
that re-read growing windows took 1.34 s there). What we do take from gguf-py is its knowledge: the value types
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kimicount.errors import CheckpointError, SourceError
from kimicount.reading import short_json, shorten

#: The 4 bytes every GGUF file starts with.
MAGIC = b"GGUF"
#: Versions gguf.cpp reads (version 1, with 32-bit counts, was dropped in November 2023).
VERSIONS = (2, 3)
#: ggml tensors have at most 4 dimensions (GGML_MAX_DIMS).
MAX_DIMS = 4
#: The largest element count or byte size of one tensor: ggml counts in int64.
MAX_SIZE = 2**63 - 1
#: A header that would run past this is refused before the bytes past it are read: Kimi K2's, with
#: its 163,840-token vocabulary, is about 2.5 MB, and a vocabulary of 262,144 tokens with as many
#: merges (20 bytes each, length included) takes about 10 MB. It also bounds the parse: at most 8 Mi
#: strings, the longest loop a header can ask for, about a second.
MAX_HEADER_BYTES = 64 << 20
#: Arrays of metadata up to this length are kept with their values; longer ones (the tokenizer's
#: tokens, merges, scores) are kept as their item type and length only.
MAX_KEPT_ARRAY = 256
#: The first read; each next one is twice as long, up to MAX_CHUNK.
FIRST_CHUNK = 1 << 20
MAX_CHUNK = 16 << 20
#: Tensors of one listing (a file or a whole split set): the largest real GGUFs hold about 1,100
#: (Kimi K2, DeepSeek-V3: every layer's experts in one 3-D tensor); each one kept costs ~300 bytes.
MAX_TENSORS = 1 << 18
#: Key-value pairs of one header: a converted model writes about 50 (general.*, the architecture's,
#: the tokenizer's). gguf.cpp compares each new key with every one before it (line 564): llama.cpp
#: itself would make 5 × 10^11 comparisons over a million.
MAX_KEYS = 1 << 16
#: The longest tensor name: ggml keeps names in char[GGML_MAX_NAME] (64, ggml.h), NUL included, and
#: gguf.cpp refuses a longer one.
MAX_NAME = 63
#: split.count is a u16 (gguf-split.cpp writes it with gguf_set_val_u16; llama-model-loader.cpp reads
#: it into a uint16_t n_split).
MAX_SPLIT_COUNT = 2**16 - 1
#: The key that sets the alignment (GGUF_KEY_GENERAL_ALIGNMENT).
ALIGNMENT = "general.alignment"
#: A split set's file names, as llama_split_path writes them ("%s-%05d-of-%05d.gguf").
SPLIT_NAME = re.compile(r"^(?P<prefix>.*)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")

#: The split keys (gguf-py constants.py Keys.Split, LLM_KV_SPLIT_* in llama-arch.cpp).
SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"


@dataclass(frozen=True, slots=True)
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


_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_DIMS = {n: struct.Struct(f"<{n}Q") for n in range(1, MAX_DIMS + 1)}
_TYPE_OFFSET = struct.Struct("<IQ")


class _Cursor:
    """The header's bytes, read forward once, in a single pass: fetched as parsing needs them, in chunks
    that start at FIRST_CHUNK and double up to MAX_CHUNK, never past the file or MAX_HEADER_BYTES, and
    dropped once parsed. A numeric array longer than a chunk is stepped over without fetching it (a
    ranged read resumes after it). So time and memory are linear in the header, each byte is fetched at
    most once, and the bytes fetched beyond the header are at most one chunk (about as many as it took).

    Every count is bounded, before anything is built from it, by what the rest of the header can hold:
    n strings take at least 8n bytes, n numbers n × their size."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, where: str):
        self._read, self.size, self.where = read, size, where
        self.limit = min(size, MAX_HEADER_BYTES)  # where the header must end by
        self.buffer = b""
        self.base = 0  # the file offset of buffer[0]
        self.pos = 0  # the position in buffer
        self._chunk = FIRST_CHUNK
        #: What is being read, for the error: a text, or a template and what it names, formatted (and
        #: the name shortened) only on failure.
        self.field: str | tuple[str, object] = "magic"

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def fail(self, message: str) -> CheckpointError:
        field = self.field
        if isinstance(field, tuple):
            template, name = field
            field = template.format(shorten(str(name), 80))
        return CheckpointError(f"{self.where}: {field}: {message}")

    def _past(self, end: int) -> CheckpointError:
        """The error for a header that would need bytes up to `end`, past the file or the cap."""
        if end > self.size:
            return self.fail(
                f"the header is cut short: it needs byte {end:,}, the file has {self.size:,} bytes"
            )
        return self.fail(
            f"the header runs past {MAX_HEADER_BYTES:,} bytes (64 MiB), more than any GGUF header "
            "(the largest vocabularies take about 10 MB)"
        )

    def _fill(self, n: int) -> None:
        """Have the `n` bytes from the position in the buffer: fetch what is missing, at least a chunk."""
        offset = self.offset
        end = offset + n
        if end > self.limit:
            raise self._past(end)
        fetched = self.base + len(self.buffer)  # the first byte not yet read
        length = min(max(end - fetched, self._chunk), self.limit - fetched)
        data = self._read(fetched, length)
        if len(data) < end - fetched:
            raise SourceError(
                f"{self.where}: {len(data):,} bytes where {length:,} were asked for at byte {fetched:,}, "
                f"of a file of {self.size:,} bytes (it changed while it was read?)"
            )
        self.buffer = self.buffer[self.pos :] + data
        self.base, self.pos = offset, 0
        self._chunk = min(2 * self._chunk, MAX_CHUNK)

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buffer):
            self._fill(n)
        start = self.pos
        self.pos = start + n
        return self.buffer[start : start + n]

    def skip(self, n: int) -> None:
        """Step over `n` bytes (a numeric array): without reading them when they are more than a chunk."""
        if self.pos + n <= len(self.buffer):
            self.pos += n
            return
        end = self.offset + n
        if end > self.limit:
            raise self._past(end)
        if n <= self._chunk:
            self._fill(n)
            self.pos += n
            return
        self.buffer, self.base, self.pos = b"", end, 0

    def unpack(self, fmt: struct.Struct) -> Any:
        if self.pos + fmt.size > len(self.buffer):
            self._fill(fmt.size)
        value = fmt.unpack_from(self.buffer, self.pos)[0]
        self.pos += fmt.size
        return value

    def count(self, what: str, each: int) -> int:
        """A u64 count of things that take at least `each` bytes each: refused when the rest of the
        header could not hold that many."""
        n = self.unpack(_U64)
        left = self.limit - self.offset
        if n * each > left:
            room = (
                "of the file" if self.limit == self.size else f"of the {MAX_HEADER_BYTES:,} a header may take"
            )
            raise self.fail(f"{n:,} {what} cannot fit in the {left:,} bytes left {room}")
        return n

    def _length(self) -> int:
        length = self.unpack(_U64)
        if length > self.limit - self.offset:
            if self.offset + length > self.size:
                raise self.fail(f"a string of {length:,} bytes runs past the end of the file")
            raise self._past(self.offset + length)
        return length

    def text(self) -> str:
        """A string value: UTF-8, as the format says; what is not shows as U+FFFD."""
        return self.take(self._length()).decode("utf-8", errors="replace")

    def name(self, what: str) -> str:
        """A key or tensor name: UTF-8 (the format's strings; gguf-py's GGUFReader decodes them strictly,
        gguf_reader.py lines 284, 302, 324), or the header is refused."""
        start = self.offset
        data = self.take(self._length())
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(
                f"{what} is not UTF-8 ({error.reason} at byte {start + 8 + error.start:,} of the file)"
            ) from None

    def key_value(self, formats: dict[int, struct.Struct], types: Any) -> tuple[str, int, Any]:
        """One key-value pair: (key, value type, value). A pair of a scalar wholly in the buffer (most of
        them) is read in one step; anything else, and anything wrong, the long way."""
        buffer, pos = self.buffer, self.pos
        size = len(buffer)
        if pos + 8 <= size:
            end = pos + 8 + _U64.unpack_from(buffer, pos)[0]
            if pos + 8 < end and end + 4 <= size:
                kind = _U32.unpack_from(buffer, end)[0]
                fmt = formats.get(kind)
                if fmt is not None and end + 4 + fmt.size <= size:
                    try:
                        key = buffer[pos + 8 : end].decode("utf-8")
                    except UnicodeDecodeError:
                        pass  # said below
                    else:
                        self.pos = end + 4 + fmt.size
                        return key, kind, fmt.unpack_from(buffer, end + 4)[0]
        key = self.name("its key")
        if not key:
            raise self.fail("an empty key")
        self.field = ("key '{}'", key)
        kind = self.unpack(_U32)
        return key, kind, _value(self, kind, formats, types)

    def tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        """One tensor info: (name, shape, ggml type code, data offset), its name and dimensions checked;
        `field` names the tensor from then on. One step when it is wholly in the buffer."""
        buffer, pos = self.buffer, self.pos
        size = len(buffer)
        if pos + 8 <= size:
            end = pos + 8 + _U64.unpack_from(buffer, pos)[0]
            if end - pos - 8 <= MAX_NAME and end + 4 <= size:
                n_dims = _U32.unpack_from(buffer, end)[0]
                after = end + 16 + 8 * n_dims
                if 1 <= n_dims <= MAX_DIMS and after <= size:
                    try:
                        name = buffer[pos + 8 : end].decode("utf-8")
                    except UnicodeDecodeError:
                        pass  # said below
                    else:
                        self.pos = after
                        self.field = ("tensor '{}'", name)
                        shape = _DIMS[n_dims].unpack_from(buffer, end + 4)
                        return name, shape, *_TYPE_OFFSET.unpack_from(buffer, after - 12)
        name = self.name("its name")
        if len(name.encode()) > MAX_NAME:
            raise self.fail(f"a name of {len(name.encode()):,} bytes, at most {MAX_NAME} (GGML_MAX_NAME)")
        self.field = ("tensor '{}'", name)
        n_dims = self.unpack(_U32)
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.fail(f"{n_dims} dimensions, expected 1 to {MAX_DIMS}")
        shape = _DIMS[n_dims].unpack(self.take(8 * n_dims))
        return name, shape, self.unpack(_U32), self.unpack(_U64)

    def skip_strings(self, count: int) -> None:
        """Step over `count` strings (a long array's, kept as its length only), parsing each one's length
        and nothing else: the loop that bounds the time of the largest headers."""
        unpack = _U64.unpack_from
        while count:
            buffer, pos = self.buffer, self.pos
            size = len(buffer)
            last = size - 8
            done = 0
            for done in range(count):  # `done`: the strings stepped over, when the loop breaks
                if pos > last:
                    break
                after = pos + 8 + unpack(buffer, pos)[0]
                if after > size:
                    break
                pos = after
            else:
                done = count
            self.pos = pos
            count -= done
            if count:  # a string that runs past the buffer: read its length, then step over it
                self.skip(self._length())
                count -= 1


def _scalar_formats() -> dict[int, struct.Struct]:
    from gguf import GGUFValueType as V

    formats = {
        V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I", V.INT32: "<i",
        V.FLOAT32: "<f", V.BOOL: "<?", V.UINT64: "<Q", V.INT64: "<q", V.FLOAT64: "<d",
    }  # fmt: skip
    return {kind: struct.Struct(fmt) for kind, fmt in formats.items()}


def _value(cursor: _Cursor, kind: int, formats: dict[int, struct.Struct], types: Any) -> Any:
    V = types  # GGUFValueType
    if kind in formats:
        return cursor.unpack(formats[kind])
    if kind == V.STRING:
        return cursor.text()
    if kind != V.ARRAY:
        raise cursor.fail(f"unknown value type {kind}")
    item = cursor.unpack(_U32)
    if item not in formats and item != V.STRING:
        arrays = " (an array of arrays)" if item == V.ARRAY else ""
        raise cursor.fail(f"array of unknown value type {item}{arrays}")
    size = formats[item].size if item in formats else 8  # a string takes its 8-byte length at least
    length = cursor.count(f"{V(item).name} items of at least {size} byte{'s' * (size > 1)}", size)
    if length > MAX_KEPT_ARRAY:  # the tokenizer's tokens, merges, scores: their type and length only
        if item in formats:
            cursor.skip(length * size)
        else:
            cursor.skip_strings(length)
        return GGUFArray(V(item).name, length)
    if item in formats:
        values = tuple(cursor.unpack(formats[item]) for _ in range(length))
    else:
        values = tuple(cursor.text() for _ in range(length))
    return GGUFArray(V(item).name, length, values)


def _header(cursor: _Cursor) -> FileHeader:
    """The header the cursor reads, checked as llama.cpp's gguf.cpp checks it (ggml-org/ggml
    src/gguf.cpp at d99724f2, `gguf_init_from_reader`, the file llama.cpp vendors as
    ggml/src/gguf.cpp): magic, version, counts that fit, keys neither empty (line 560) nor repeated
    (564), `general.alignment` a power of two of type u32 (614–627), names shorter than GGML_MAX_NAME
    (64 bytes with the NUL, line 646) and unique, at most 4 dimensions (670), a row a whole number of
    blocks (724), and the tensors' data one after another in the order listed, each padded to the alignment,
    from offset 0 (lines 776–794: "tensor '%s' has offset %, expected %"). Raises CheckpointError naming the
    file and the field."""
    from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType
    from gguf import GGUFValueType as V

    magic = cursor.take(4)
    if magic != MAGIC:
        raise cursor.fail(f"not a GGUF file (it starts with {magic!r}, expected {MAGIC!r})")
    cursor.field = "version"
    version = cursor.unpack(_U32)
    if version not in VERSIONS:
        raise cursor.fail(f"{version}: expected {' or '.join(map(str, VERSIONS))}")
    cursor.field = "tensor_count"
    # A tensor info takes at least 32 bytes (name length, n_dims, one dimension, type, offset).
    tensor_count = cursor.count("tensor infos", 32)
    if tensor_count > MAX_TENSORS:
        raise cursor.fail(f"{tensor_count:,} tensors, more than kimicount lists ({MAX_TENSORS:,} at most)")
    cursor.field = "kv_count"
    kv_count = cursor.count("key-value pairs", 14)  # key length, a 1-byte key, value type, a 1-byte value
    if kv_count > MAX_KEYS:
        raise cursor.fail(f"{kv_count:,} key-value pairs, more than kimicount reads ({MAX_KEYS:,} at most)")
    formats = _scalar_formats()
    metadata: dict[str, object] = {}
    for i in range(kv_count):
        cursor.field = ("key-value pair {}", i)
        key, kind, value = cursor.key_value(formats, V)
        if key in metadata:
            cursor.field = ("key '{}'", key)
            raise cursor.fail("duplicated")
        if key == ALIGNMENT and kind != V.UINT32:
            cursor.field = ("key '{}'", key)
            raise cursor.fail(f"of type {_type_name(kind)}, expected UINT32")
        metadata[key] = value
    alignment = metadata.get(ALIGNMENT, GGUF_DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        cursor.field = ("key '{}'", ALIGNMENT)
        raise cursor.fail(f"{alignment!r}: expected a power of two")
    tensors: list[GGUFTensor] = []
    offsets: list[int] = []
    names: set[str] = set()
    expected = 0  # where the next tensor's data must start: the last one's end, padded
    ggml_types = {
        int(t): (t.name, *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType if t in GGML_QUANT_SIZES
    }
    for i in range(tensor_count):
        cursor.field = ("tensor {}", i)
        name, shape, code, offset = cursor.tensor_info()
        elements = 1
        for d in shape:
            elements *= d
        if elements > MAX_SIZE or 0 in shape:
            raise cursor.fail(
                f"shape {list(shape)}: expected dimensions of 1 or more, at most 2^63 − 1 elements"
            )
        if code not in ggml_types:
            raise cursor.fail(f"unknown ggml type {code}")
        type_name, block, type_size = ggml_types[code]
        if shape[0] % block:
            raise cursor.fail(
                f"shape {list(shape)}: a row of {shape[0]:,} is not a whole number of "
                f"{type_name} blocks of {block}"
            )
        if offset % alignment:
            raise cursor.fail(f"data offset {offset:,} is not a multiple of the alignment {alignment}")
        if name in names:
            raise cursor.fail("duplicated tensor name")
        if offset != expected:
            raise cursor.fail(
                f"data offset {offset:,}, expected {expected:,}: each tensor's data follows the one "
                f"before, padded to the alignment ({alignment}), in the order listed, as llama.cpp requires"
            )
        nbytes = elements // block * type_size
        expected += -(-nbytes // alignment) * alignment
        names.add(name)
        tensors.append(GGUFTensor(name, shape, type_name, nbytes))
        offsets.append(offset)
    data_start = -(-cursor.offset // alignment) * alignment
    for tensor, offset in zip(tensors, offsets):
        end = data_start + offset + tensor.nbytes
        if end > cursor.size:
            cursor.field = ("tensor '{}'", tensor.name)
            raise cursor.fail(
                f"its data (bytes {data_start + offset:,} to {end:,}) extends past the end of the file "
                f"({cursor.size:,} bytes)"
            )
    return FileHeader(
        cursor.where,
        version,
        MappingProxyType(metadata),
        tuple(tensors),
        tuple(offsets),
        data_start,
        cursor.size,
    )


def _type_name(kind: int) -> str:
    from gguf import GGUFValueType as V

    try:
        return V(kind).name
    except ValueError:
        return f"unknown value type {kind}"


def read_header(read: Callable[[int, int], bytes], size: int, where: str) -> FileHeader:
    """The header of a file of `size` bytes, `read(start, length)` giving `length` bytes from `start`:
    read in one pass (see _Cursor). Raises CheckpointError naming `where` and the field when it is not
    a valid GGUF header."""
    return _header(_Cursor(read, size, where))


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


def value_text(value: object) -> str:
    """A metadata value as a message quotes it: its JSON, shortened, or an array's type and length.

    >>> value_text("deepseek2"), value_text(GGUFArray("STRING", 163_840))
    ('"deepseek2"', 'an array of 163,840 STRING')
    """
    if isinstance(value, GGUFArray):
        return f"an array of {value.length:,} {value.item_type}"
    return short_json(value)


def split_count(header: FileHeader) -> int:
    """split.count of a file (1 when it is not part of a split set): at most 65,535, a u16's largest."""
    count = header.metadata.get(SPLIT_COUNT, 1)
    if type(count) is not int or not 1 <= count <= MAX_SPLIT_COUNT:
        raise CheckpointError(
            f"{header.file}: key '{SPLIT_COUNT}': {value_text(count)}, expected 1 to {MAX_SPLIT_COUNT:,} "
            "(a u16, as gguf-split writes it)"
        )
    return count


def _split_no(header: FileHeader) -> int:
    number = header.metadata.get(SPLIT_NO, 0)
    if type(number) is not int or not 0 <= number < MAX_SPLIT_COUNT:
        raise CheckpointError(
            f"{header.file}: key '{SPLIT_NO}': {value_text(number)}, expected 0 to {MAX_SPLIT_COUNT - 1:,}"
        )
    return number


def split_names(first: str, count: int) -> Iterator[str]:
    """The names of a split set's files, from the first one's (llama_split_path's "%s-%05d-of-%05d.gguf"),
    one at a time: a file that is not there ends the walk at once, whatever the count says.

    >>> list(split_names("K2/Kimi-K2-Q6_K-00001-of-00003.gguf", 3))[1:]
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
    return (f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1))


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
    if len(tensors) > MAX_TENSORS:
        raise CheckpointError(
            f"{first.file}: its set of {len(headers):,} files holds {len(tensors):,} tensors, more than "
            f"kimicount lists ({MAX_TENSORS:,} at most)"
        )
    if count > 1:
        declared = first.metadata.get(SPLIT_TENSORS)
        if declared is not None and declared != len(tensors):
            raise CheckpointError(
                f"{first.file}: key '{SPLIT_TENSORS}' is {value_text(declared)}, the files hold "
                f"{len(tensors):,} tensors"
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
    names = split_names(str(path), count)
    next(names)  # the first file's, read above
    for name in names:
        sibling = Path(name)
        if not sibling.exists():
            raise SourceError(
                f"{sibling}: no such file (split {len(headers) + 1} of {count} of {path.name}'s set)"
            )
        headers.append(_read_local(sibling))
    return assemble(headers)
