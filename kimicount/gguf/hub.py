"""GGUF files on the Hub, read from their headers by ranged GETs (kimicount.hub's machinery: one
deadline, retries said, errors named), never downloaded.

The repo's files are listed with huggingface_hub's documented `HfApi.list_repo_tree(recursive=True)`
and chosen with `--include` as `hf download --include` chooses them (huggingface_hub's
`filter_repo_objects`, fnmatch patterns). The .gguf files chosen must be one file or one split set.
"""

from __future__ import annotations

from collections.abc import Sequence

from huggingface_hub import HfApi, constants, hf_hub_url
from huggingface_hub.utils import filter_repo_objects

from kimicount.errors import SourceError
from kimicount.gguf.reader import FileHeader, GGUFListing, assemble, listed, one_set, read_header
from kimicount.hub import MAX_FILE_SIZE, get_range, hub_errors, repo_label
from kimicount.hub_transport import Operation, map_parallel, run
from kimicount.options import HubOptions
from kimicount.reading import short_json, shorten


def read_gguf_hub(
    repo: str, include: Sequence[str], revision: str | None = None, options: HubOptions | None = None
) -> GGUFListing:
    """The listing of the .gguf files of repo@revision that `include` matches (all when empty)."""
    where = repo_label(repo, revision)
    return run(options or HubOptions(), where, lambda op: _read(op, repo, list(include), revision))


def _read(operation: Operation, repo: str, include: list[str], revision: str | None) -> GGUFListing:
    where, endpoint = repo_label(repo, revision), constants.ENDPOINT
    token = operation.options.token
    operation.status(f"listing the files of {where} at {endpoint}")
    with hub_errors(repo, revision, "the file list"):
        entries = [
            e
            for e in HfApi(endpoint=endpoint).list_repo_tree(
                repo, recursive=True, revision=revision, token=token
            )
            if getattr(e, "size", None) is not None  # files, not folders
        ]
    chosen = list(filter_repo_objects(entries, allow_patterns=include or None, key=lambda e: e.path))
    ggufs = sorted((e for e in chosen if e.path.endswith(".gguf")), key=lambda e: e.path)
    patterns = " ".join(include) or "(none)"
    if not ggufs:
        raise SourceError(f"{where}: no .gguf file matches --include {patterns}")
    _one_set(where, [e.path for e in ggufs], bool(include))
    sizes: dict[str, int] = {}
    for entry in ggufs:
        size = getattr(entry, "size", None)  # a folder named *.gguf has none
        if type(size) is not int or not 0 <= size <= MAX_FILE_SIZE:
            raise SourceError(
                f"{where}: the file list says {shorten(entry.path)} is {short_json(size)} bytes; expected a "
                "size of at most 2^64 − 1 (a GGUF's offsets are u64)"
            )
        sizes[entry.path] = size

    def read(path: str) -> FileHeader:
        url = hf_hub_url(repo, path, revision=revision)
        file_where = f"{where}/{path}"
        with hub_errors(repo, revision, path):
            return read_header(
                lambda start, length: get_range(operation, url, start, length, file_where)[0],
                sizes[path],
                file_where,
            )

    headers: dict[str, FileHeader] = {}
    for done, header in enumerate(map_parallel(operation, read, list(sizes)), start=1):
        headers[header.file] = header
        operation.status(f"reading the GGUF headers of {where} from {endpoint}: {done} of {len(sizes)} files")
    ordered = [headers[f"{where}/{path}"] for path in sizes]
    return assemble(ordered)


def _one_set(where: str, paths: list[str], included: bool) -> None:
    if not one_set(paths):
        matched = "--include matches" if included else "the repo has"
        raise SourceError(
            f"{where}: {matched} {len(paths)} .gguf files that are not one split set ({listed(paths)}); "
            'choose one quantization with --include (e.g. "Q4_K_M/*")'
        )
