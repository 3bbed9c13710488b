"""A checkpoint as its headers describe it: every file's tensors, and the index that maps them.

`read_folder` reads a local checkpoint (header bytes only); `kimicount.hub.fetch_checkpoint` builds the
same object from the Hub. Verification (`kimicount.verify`) only ever sees a `Checkpoint`.
"""

from __future__ import annotations

import gc
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain
from pathlib import Path
from typing import Any

from kimicount.errors import CheckpointError, SourceError
from kimicount.headers import MAX_HEADER_BYTES, FileHeader, Kind, TensorInfo, read_local_header
from kimicount.reading import parse_checked, read_capped, short_json, shorten

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

#: An index holds tensor and file names only (13.4 MB for Kimi K2's 139,644 tensors). A larger one is
#: refused before it is read, with the cap safetensors puts on one header.
MAX_INDEX_BYTES = MAX_HEADER_BYTES
#: The longest name of one path component on Linux, macOS and Windows file systems (NAME_MAX) [bytes].
MAX_NAME_BYTES = 255


@dataclass(frozen=True)
class Index:
    """model.safetensors.index.json: which file holds each tensor, and the declared data size."""

    weight_map: Mapping[str, str]
    total_size: int | None
    #: metadata.total_parameters, which transformers writes beside total_size (Kimi Linear's index has it).
    total_parameters: int | None = None

    @property
    def files(self) -> list[str]:
        return sorted(set(self.weight_map.values()))


@dataclass(frozen=True)
class Checkpoint:
    source: str
    files: tuple[FileHeader, ...]
    index: Index | None = None
    #: What reading cost: header bytes read or downloaded (None when the Hub served them already
    #: parsed) and HTTP requests made.
    bytes_read: int | None = 0
    requests: int = 0
    #: Tensor names found in more than one file (each is reported as a mismatch).
    duplicates: tuple[str, ...] = field(default=())

    @cached_property
    def tensors(self) -> dict[str, TensorInfo]:
        return {t.name: t for f in self.files for t in f.tensors}

    @cached_property
    def kinds(self) -> dict[str, Kind]:
        """Every tensor's (dtype, shape) by name (of a name in several files, the last file's, as in
        `tensors`)."""
        kinds: dict[str, Kind] = {}
        for header in self.files:
            kinds.update(zip(header.names, header.kinds))
        return kinds

    @cached_property
    def located(self) -> dict[str, str]:
        """The file that holds each tensor, by name (the last one, as in `tensors`)."""
        located: dict[str, str] = {}
        for header in self.files:
            located.update(dict.fromkeys(header.names, header.file))
        return located

    @property
    def data_bytes(self) -> int:
        return sum(f.data_bytes for f in self.files)


def parse_index(text: str | bytes, where: str) -> Index:
    """Parse an index file's contents (13.4 MB for Kimi K2); errors name the file and what is wrong."""
    return parse_checked(text, where, CheckpointError, lambda raw: _index_from_json(raw, where))


def _index_from_json(raw: Any, where: str) -> Index:
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    # JSON object keys are always strings; the values (file names) must be too (checked in C: 139,644
    # entries for Kimi K2).
    if not isinstance(weight_map, dict) or not set(map(type, weight_map.values())) <= {str}:
        raise CheckpointError(f"{where}: expected an object with a 'weight_map' of tensor name -> file name")
    if not weight_map:
        raise CheckpointError(f"{where}: the weight_map names no tensors, so no shards")
    for file in set(weight_map.values()):
        check_file_name(file, where)
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{where}: metadata {short_json(metadata)} is not an object")
    counts = {}
    for key, what in (("total_size", "a byte count"), ("total_parameters", "a parameter count")):
        value = metadata.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise CheckpointError(f"{where}: metadata.{key} {short_json(value)} is not {what}")
        counts[key] = value
    return Index(weight_map=weight_map, **counts)


def check_file_name(name: str, where: str) -> None:
    """A file the index names must be a plain relative name inside the checkpoint: parts separated by
    '/', none empty, '.' or '..', none over 255 bytes, no backslash or NUL. Anything else would read a
    file outside the folder, or build the URL of another repo's file on the Hub.

    >>> check_file_name("model-00001-of-00061.safetensors", "index")
    >>> check_file_name("../outside.safetensors", "index")
    Traceback (most recent call last):
    kimicount.errors.CheckpointError: index: names the file "../outside.safetensors", which is not a plain relative name inside the checkpoint: it starts with '/' or has an empty, '.' or '..' part
    """
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        problem = "it starts with '/' or has an empty, '.' or '..' part"
    elif "\\" in name or "\0" in name:
        problem = "it has a backslash or a NUL character"
    elif (longest := max(len(part.encode("utf-8", "surrogatepass")) for part in parts)) > MAX_NAME_BYTES:
        problem = f"a part of it is {longest:,} bytes long; a file name has at most {MAX_NAME_BYTES}"
    else:
        return
    shown = json.dumps(shorten(name), ensure_ascii=False)
    raise CheckpointError(
        f"{where}: names the file {shown}, which is not a plain relative name inside the checkpoint: "
        f"{problem}"
    )


def assemble(
    source: str, headers: list[FileHeader], index: Index | None, bytes_read: int | None, requests: int = 0
) -> Checkpoint:
    """A Checkpoint from headers read in any order (sorted by file name for stable reports)."""
    headers = sorted(headers, key=lambda h: h.file)
    checkpoint = Checkpoint(source, tuple(headers), index, bytes_read, requests)
    if len(checkpoint.kinds) < sum(len(header.names) for header in headers):  # rare: find which
        counts = Counter(chain.from_iterable(header.names for header in headers))
        duplicates = tuple(name for name, count in counts.items() if count > 1)
        return replace(checkpoint, duplicates=duplicates)
    return checkpoint


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: reading and checking a 1T checkpoint's headers allocates
    hundreds of thousands of small objects, none in a cycle, which the collector would otherwise scan
    again and again as they pile up (a third of the time, and more the more there are)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_index_file(path: Path) -> Index:
    """A model.safetensors.index.json on its own (`verify --index`), capped in size as a checkpoint's."""
    return parse_index(read_capped(path, MAX_INDEX_BYTES, "index", CheckpointError), str(path))


def checkpoint_files(folder: Path) -> tuple[list[Path], Index | None]:
    """The safetensors files of a local checkpoint: from the index, the single file, or every shard."""
    try:
        if not folder.is_dir():
            raise SourceError(f"{folder}: no such folder")
    except OSError as error:  # a name too long, a symlink loop
        raise SourceError(f"{folder}: cannot read: {error.strerror or error}") from None
    index_path = folder / INDEX_FILE
    # An index that is there but is no regular file (a dangling link in a Hub snapshot, a FIFO, a
    # folder) is read all the same, to say so: passed over, the checkpoint would be checked without it.
    if os.path.lexists(index_path):
        text = read_capped(index_path, MAX_INDEX_BYTES, "index", CheckpointError)
        index = parse_index(text, str(index_path))
        missing = [name for name in index.files if not (folder / name).is_file()]
        if len(missing) == 1:
            raise CheckpointError(f"{index_path}: names shard '{missing[0]}', which is not in {folder}")
        if missing:  # every one, so that one download fetches them all
            names = ", ".join(f"'{name}'" for name in missing)
            raise CheckpointError(
                f"{index_path}: names {len(missing)} shards that are not in {folder}: {names}"
            )
        return [folder / name for name in index.files], index
    if os.path.lexists(folder / SINGLE_FILE):  # read_local_header says if it is no regular file
        return [folder / SINGLE_FILE], None
    # Only regular files: opening a FIFO that happens to be named *.safetensors would block.
    shards = sorted(path for path in folder.glob("*.safetensors") if path.is_file())
    if not shards:
        raise SourceError(f"{folder}: no {INDEX_FILE}, {SINGLE_FILE} or *.safetensors files")
    return shards, None


def read_folder(folder: Path, on_file: Callable[[str], None] | None = None) -> Checkpoint:
    """Read every header of a local checkpoint, and nothing of its data."""
    with paused_gc():
        paths, index = checkpoint_files(folder)
        headers, bytes_read = [], 0
        for path in paths:
            # Files are named relative to the folder, as the index names them.
            header, read = read_local_header(path, str(path.relative_to(folder)))
            headers.append(header)
            bytes_read += read
            if on_file:
                on_file(header.file)
        return assemble(str(folder), headers, index, bytes_read)
