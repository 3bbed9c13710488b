"""A checkpoint as its headers describe it: every file's tensors, and the index that maps them.

`read_folder` reads a local checkpoint (header bytes only); `kimicount.hub.fetch_checkpoint` builds the
same object from the Hub. Verification (`kimicount.verify`) only ever sees a `Checkpoint`.
"""

from __future__ import annotations

import gc
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain
from pathlib import Path

from kimicount.errors import CheckpointError, SourceError
from kimicount.headers import FileHeader, Kind, TensorInfo, read_local_header
from kimicount.index_stream import CHUNK, FileListing, read_index_stream
from kimicount.reading import read_chunks, short_json, shorten

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

#: The longest name of one path component on Linux, macOS and Windows file systems (NAME_MAX) [bytes].
MAX_NAME_BYTES = 255


@dataclass(frozen=True)
class Index:
    """model.safetensors.index.json: which file holds each tensor, and the declared data size. Read as
    a stream (kimicount.index_stream): per file what it lists (`listings`: how many names, a digest of
    them), and the name -> file map itself only when asked for (`weight_map`)."""

    listings: Mapping[str, FileListing]
    total_size: int | None
    #: metadata.total_parameters, which transformers writes beside total_size (Kimi Linear's index has it).
    total_parameters: int | None = None
    weight_map: Mapping[str, str] | None = None

    @property
    def files(self) -> list[str]:
        return sorted(self.listings)

    @property
    def entries(self) -> int:
        """The tensor names it lists."""
        if self.weight_map is not None:
            return len(self.weight_map)
        return sum(listing.tensors for listing in self.listings.values())


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
    def tensor_names(self) -> frozenset[str]:
        """Every tensor name, once (a name in several files too)."""
        return frozenset().union(*(header.names for header in self.files))

    def kind_counts(self, names: Sequence[str]) -> Counter[Kind | None]:
        """How many of these names have each kind (None: in no file), what `Counter(map(self.kinds.get,
        names))` gives. Looked up file by file, in runs of names that one file holds (the names
        verification asks for come layer by layer, a layer's in one file), a block at a time as a set
        of kinds (one, mostly), so that neither the dict of every name nor a list of every kind is made:
        Kimi K3's 497,220 names cost 0.2 s to put in one dict, and as much again to look up there,
        where each lookup misses the cache (a file's few thousand do not). A name in no file is one
        that `tensor_names` lacks; a name in several files (`duplicates`) has the last file's kind, from
        `kinds`, as has every name once that dict is made."""
        if self.duplicates or "kinds" in self.__dict__:
            return Counter(map(self.kinds.get, names))
        files = [header.kinds_by_name for header in self.files]
        every = self.tensor_names
        counts: Counter[Kind | None] = Counter()
        start, end, current, size = 0, len(names), 0, 64
        while start < end:
            name = names[start]
            if name not in every:
                counts[None] += 1
                start += 1
                continue
            while name not in files[current]:  # one file holds it (no duplicates)
                current = (current + 1) % len(files)
            held, first = files[current], start
            while True:  # in blocks, the first as long as the run before, then twice as long each
                block = names[start : start + size]
                kinds = set(map(held.get, block))
                if None in kinds:  # the run ends in this block: up to there
                    found = list(map(held.get, block))
                    block = block[: found.index(None)]
                    kinds = set(found[: len(block)])
                if len(kinds) == 1:
                    counts[kinds.pop()] += len(block)
                else:
                    counts.update(map(held.get, block))
                start += len(block)
                if len(block) < size or start == end or names[start] not in held:
                    break
                size *= 2
            size = start - first
        return counts

    def kinds_of(self, names: Sequence[str]) -> list[Kind | None]:
        """Each name's kind, None for a name in no file: what `map(self.kinds.get, names)` gives, each
        name sought file by file (for a few names: `kind_counts` takes many), without the dict of
        every name unless it is made already."""
        if self.duplicates or "kinds" in self.__dict__:
            return list(map(self.kinds.get, names))
        files = [header.kinds_by_name for header in self.files]
        every = self.tensor_names
        return [
            next(held[name] for held in files if name in held) if name in every else None for name in names
        ]

    @cached_property
    def kinds(self) -> dict[str, Kind]:
        """Every tensor's (dtype, shape) by name (of a name in several files, the last file's, as in
        `tensors`). Made when asked for: verification asks `kinds_of`."""
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


def parse_index(data: bytes, where: str, keep_map: bool = True) -> Index:
    """An index from its bytes; errors name the file and what is wrong."""
    return index_from_stream([data], where, keep_map)


def index_from_stream(chunks: Iterable[bytes], where: str, keep_map: bool = False) -> Index:
    """An index read chunk by chunk (kimicount.index_stream), never whole: its listings per file, and
    with `keep_map` its name -> file map."""
    contents = read_index_stream(chunks, where, keep_map)
    weight_map = contents.weight_map
    if weight_map is None:
        raise CheckpointError(f"{where}: expected an object with a 'weight_map' of tensor name -> file name")
    if not weight_map.listings:
        raise CheckpointError(f"{where}: the weight_map names no tensors, so no shards")
    for file in weight_map.listings:
        check_file_name(file, where)
    metadata = contents.metadata
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{where}: metadata {short_json(metadata)} is not an object")
    counts = {}
    for key, what in (("total_size", "a byte count"), ("total_parameters", "a parameter count")):
        value = metadata.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise CheckpointError(f"{where}: metadata.{key} {short_json(value)} is not {what}")
        counts[key] = value
    return Index(weight_map.listings, weight_map=weight_map.names if keep_map else None, **counts)


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
    source: str,
    headers: list[FileHeader],
    index: Index | None,
    bytes_read: int | None,
    requests: int = 0,
    reread: Callable[[], Index] | None = None,
) -> Checkpoint:
    """A Checkpoint from headers read in any order (sorted by file name for stable reports). An index
    read without its map that disagrees with the headers is read again, map and all (`reread`), so that
    verification can say which names are listed in the wrong file."""
    headers = sorted(headers, key=lambda h: h.file)
    if (
        index is not None
        and index.weight_map is None
        and reread is not None
        and not index_agrees(index, headers)
    ):
        index = reread()
    checkpoint = Checkpoint(source, tuple(headers), index, bytes_read, requests)
    if len(checkpoint.tensor_names) < sum(len(header.names) for header in headers):  # rare: find which
        counts = Counter(chain.from_iterable(header.names for header in headers))
        duplicates = tuple(name for name, count in counts.items() if count > 1)
        return replace(checkpoint, duplicates=duplicates)
    return checkpoint


def index_agrees(index: Index, headers: Iterable[FileHeader]) -> bool:
    """Whether the index lists each file's tensors, all of them and no other, from what it lists per
    file: as many names, whose hashes add up to the same (kimicount.index_stream.FileListing: two
    different lists of names agree with a chance of about 2^-64). Every name's hash was computed once
    already, when the checkpoint's names were put in a dict."""
    listings = dict(index.listings)
    for header in headers:
        listing = listings.pop(header.file, None)
        if listing is None or (listing.tensors, listing.digest) != (len(header.names), header.names_digest):
            return False
    return not listings


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


def read_index_file(path: Path, keep_map: bool = True) -> Index:
    """A model.safetensors.index.json read as a stream (`verify --index` keeps its map)."""
    return index_from_stream(read_chunks(path, CheckpointError, CHUNK), str(path), keep_map)


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
        index = read_index_file(index_path, keep_map=False)
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
        index_path = folder / INDEX_FILE
        return assemble(str(folder), headers, index, bytes_read, reread=lambda: read_index_file(index_path))
