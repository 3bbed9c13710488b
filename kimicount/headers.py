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

import json
import operator
import struct
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from kimicount.errors import CheckpointError

#: safetensors refuses headers larger than this (its MAX_HEADER_SIZE), so do we: a lying length
#: prefix must not make us allocate or download gigabytes.
MAX_HEADER_BYTES = 100_000_000

#: The most elements a tensor can have: its data_offsets are u64 bytes, and the smallest dtype is 4 bits.
MAX_ELEMENTS = 2**65

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
    """One tensor as its header describes it. (A NamedTuple: a 1T checkpoint has 139,644 of them,
    and verification of a full-size local checkpoint must stay well under a second.)"""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]
    file: str
    elements: int
    nbytes: int


@dataclass(frozen=True)
class FileHeader:
    """The validated header of one safetensors file."""

    file: str
    file_size: int | None  # None when the header came without its file (the Hub's bulk endpoint)
    header_size: int | None  # the JSON part, without the 8-byte length prefix
    tensors: tuple[TensorInfo, ...]
    metadata: dict[str, str]
    data_bytes: int  # where the last tensor ends: the tensors tile the data area from 0


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
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{where}: header is not valid JSON ({error})") from error
    except RecursionError:
        raise CheckpointError(f"{where}: header is not valid JSON (nested too deeply)") from None
    except ValueError:  # Python reads integers of at most 4,300 digits
        raise CheckpointError(
            f"{where}: header is not valid JSON (an integer of more than 4,300 digits)"
        ) from None
    return header_from_json(parsed, file, where, file_size=file_size, header_size=len(raw))


def header_from_json(
    parsed: Any, file: str, where: str, *, file_size: int | None, header_size: int | None
) -> FileHeader:
    """Validate a parsed header. Without the file size (headers served already parsed, as the Hub's
    bulk endpoint does), the tensors must still tile the data from 0, but where the file ends is unknown."""
    if not isinstance(parsed, dict):
        raise CheckpointError(f"{where}: header is a JSON {type(parsed).__name__}, expected an object")
    parsed = dict(parsed)
    metadata = parsed.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"{where}: __metadata__ must map strings to strings")
    tensors = [_tensor_info(name, entry, file, where) for name, entry in parsed.items()]
    data_size = None if file_size is None or header_size is None else file_size - 8 - header_size
    data_end = _check_tiling(tensors, data_size, where)
    return FileHeader(file, file_size, header_size, tuple(tensors), metadata, data_end)


_new_tensor_info = tuple.__new__  # TensorInfo(...) without its Python-level __new__: 139,644 of them


def _tensor_info(name: str, entry: Any, file: str, where_file: str) -> TensorInfo:
    # The common case is checked inline (type(x) is int also refuses bool); anything else goes to
    # _invalid, which says precisely what is wrong.
    try:
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        bits = DTYPE_BITS[dtype]
        begin, end = offsets
    except (TypeError, KeyError, ValueError):
        raise _invalid(name, entry, where_file) from None
    elements = 1
    for dim in shape if type(shape) is list else ("not a list",):
        if type(dim) is not int or dim < 0:
            raise _invalid(name, entry, where_file)
        elements *= dim
        if elements > MAX_ELEMENTS:  # checked as it grows: a shape of a million huge dims must not hang
            raise CheckpointError(
                f"{where_file}: tensor '{name}': shape of more elements than safetensors' u64 offsets "
                "can hold"
            )
    if type(begin) is not int or type(end) is not int or begin < 0 or end < begin:
        raise _invalid(name, entry, where_file)
    if elements * bits != (end - begin) * 8:
        raise CheckpointError(
            f"{where_file}: tensor '{name}': data_offsets [{begin}, {end}] hold {end - begin:,} bytes, "
            f"but {dtype} {shape} needs {_bytes_needed(elements * bits)}"
        )
    return _new_tensor_info(
        TensorInfo, (name, dtype, tuple(shape), (begin, end), file, elements, end - begin)
    )


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
            f"{where}: unknown dtype {json.dumps(dtype)} (safetensors dtypes: {', '.join(DTYPE_BITS)})"
        )
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        return CheckpointError(f"{where}: shape {json.dumps(shape)} is not a list of non-negative integers")
    return CheckpointError(
        f"{where}: data_offsets {json.dumps(offsets)} is not two ascending non-negative integers"
    )


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


_by_offsets = operator.attrgetter("data_offsets")


def _check_tiling(tensors: list[TensorInfo], data_size: int | None, file: str) -> int:
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
    if data_size is not None and position != data_size:
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
        with path.open("rb") as handle:
            size = path.stat().st_size
            length = header_length(handle.read(8), str(path), size)
            raw = handle.read(length)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read: {error.strerror or error}") from error
    return parse_header(raw, file, size, where=str(path)), 8 + length
