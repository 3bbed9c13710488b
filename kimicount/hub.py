"""Everything that talks to the Hugging Face Hub, through huggingface_hub: its protocol.

Imported only when a `--repo` is named. huggingface_hub brings HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE,
revisions, its download cache, its HTTP client and its retries; this module makes the fewest requests
that read a checkpoint's headers, under the guarantees of kimicount.hub_transport: one deadline for the
whole operation (`HubOptions.timeout`), a connection that cannot be made failing at once (config.json
then comes from the Hub cache if it is there, as huggingface_hub does offline), retries said
(`HubOptions.note`), and what is being fetched from where (`HubOptions.status`).

Every failure becomes a SourceError whose single line says which repo, revision or file could not be
had and why; what the files themselves say wrong is a CheckpointError.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from huggingface_hub import constants, hf_hub_download, hf_hub_url, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_stream_backoff

from kimicount.checkpoint import (
    INDEX_FILE,
    MAX_INDEX_BYTES,
    SINGLE_FILE,
    Checkpoint,
    Index,
    assemble,
    check_file_name,
    parse_index,
    paused_gc,
)
from kimicount.errors import CheckpointError, SourceError
from kimicount.headers import MAX_HEADER_BYTES, FileHeader, header_from_json, header_length, parse_header
from kimicount.hub_transport import (
    COMMIT,
    Operation,
    OutOfTime,
    Refused,
    Unreachable,
    capped,
    first_line,
    httpx,
    in_background,
    map_parallel,
    run,
)
from kimicount.reading import parse_checked, shorten
from kimicount.source import HubOptions
from kimicount.spec import MAX_CONFIG_BYTES, ModelSpec, load_config_file, spec_from_config

CONFIG_FILE = "config.json"
#: Bytes to ask for when the header size cannot be estimated (a single model.safetensors).
DEFAULT_WINDOW = 256 * 1024
#: The bulk answer holds every shard's header (about 14 MB for Kimi K2). A larger one is not read:
#: the shards are then read one by one, each header capped as safetensors caps it.
MAX_BULK_BYTES = MAX_HEADER_BYTES
#: The largest file size a Content-Range or Content-Length may state: safetensors offsets are u64.
MAX_FILE_SIZE = 2**64 - 1


# --- errors ----------------------------------------------------------------------------------------


@contextmanager
def hub_errors(repo: str, revision: str | None, filename: str) -> Iterator[None]:
    """Turn huggingface_hub's and httpx's exceptions into one-line SourceErrors naming what was asked for."""
    where = _where(repo, revision)
    try:
        yield
    except (OutOfTime, SourceError, CheckpointError):
        raise
    except Unreachable as error:
        raise SourceError(f"{where}: cannot reach {constants.ENDPOINT}: {error}") from error
    except Refused as error:
        raise SourceError(f"{where}: {filename}: {error}") from error
    except GatedRepoError as error:
        raise SourceError(
            f"{where}: gated repo; accept its terms on the Hub and set HF_TOKEN or --token "
            "(or run `hf auth login`)"
        ) from error
    except RepositoryNotFoundError as error:
        raise SourceError(
            f"{where}: repo not found at {constants.ENDPOINT} (if it is private, set HF_TOKEN or --token)"
        ) from error
    except RevisionNotFoundError as error:
        raise SourceError(f"{where}: revision '{revision}' not found") from error
    except LocalEntryNotFoundError as error:
        # The Hub could not be asked (offline mode, a timeout) or did not answer with the file, and the
        # file is not in the local cache either: say which.
        raise SourceError(f"{where}: {_why_not_fetched(error, filename)}") from error
    except EntryNotFoundError as error:
        raise SourceError(f"{where}: no file '{filename}' in the repo") from error
    except OfflineModeIsEnabled as error:
        raise SourceError(f"{where}: HF_HUB_OFFLINE is set and {filename} must be fetched") from error
    except HFValidationError as error:
        raise SourceError(f"'{shorten(repo)}': not a valid repo id ({first_line(error)})") from error
    except HfHubHTTPError as error:
        raise SourceError(f"{where}: {filename}: {first_line(error)}") from error
    except httpx.TooManyRedirects as error:
        raise SourceError(
            f"{where}: {filename}: {constants.ENDPOINT} redirects in a loop ({error})"
        ) from error
    except httpx.DecodingError as error:
        raise SourceError(
            f"{where}: {filename}: the answer from {constants.ENDPOINT} cannot be decoded "
            f"({first_line(error)})"
        ) from error
    except httpx.TimeoutException as error:
        raise SourceError(
            f"{where}: {filename}: no answer from {constants.ENDPOINT} in time ({error})"
        ) from error
    except httpx.HTTPError as error:  # any other network failure
        raise SourceError(f"{where}: cannot reach {constants.ENDPOINT}: {first_line(error)}") from error
    except httpx.InvalidURL as error:
        raise SourceError(f"{where}: {filename}: not a valid URL ({first_line(error)})") from error
    except OSError as error:  # the Hub cache: a file name too long, a full disk, no permission
        raise SourceError(
            f"{where}: {filename}: {error.strerror or error} ({constants.HF_HUB_CACHE})"
        ) from error


def _why_not_fetched(error: LocalEntryNotFoundError, filename: str) -> str:
    cause = error.__cause__
    not_cached = f"and {filename} is not in the cache"
    if constants.HF_HUB_OFFLINE or isinstance(cause, OfflineModeIsEnabled):
        return f"HF_HUB_OFFLINE is set {not_cached}"
    if isinstance(cause, HfHubHTTPError) and cause.response is not None:
        answer = f"HTTP {cause.response.status_code} {cause.response.reason_phrase}".strip()
        return f"{constants.ENDPOINT} answered {answer} for {filename}, {not_cached}"
    if isinstance(cause, httpx.TimeoutException):
        return f"no answer from {constants.ENDPOINT} in time for {filename} ({cause}), {not_cached}"
    detail = f" ({first_line(cause)})" if cause is not None else ""
    return f"cannot reach {constants.ENDPOINT}{detail} {not_cached}"


# --- config ----------------------------------------------------------------------------------------


def spec_from_hub_config(path: Path, repo: str, revision: str | None) -> ModelSpec:
    """The spec of a config.json fetched from the Hub; errors name the repo and revision."""
    where = f"{_where(repo, revision)} {CONFIG_FILE}"
    return spec_from_config(load_config_file(path), name=repo, where=where)


def download_config(repo: str, revision: str | None, options: HubOptions | None = None) -> Path:
    """config.json of the repo at the revision, through the Hub cache (only that file is fetched)."""
    where = _where(repo, revision)

    def work(operation: Operation) -> Path:
        operation.status(f"fetching {CONFIG_FILE} of {where} from {constants.ENDPOINT}")
        return _config(operation, repo, revision)

    return run(options or HubOptions(), where, work)


def _config(operation: Operation, repo: str, revision: str | None) -> Path:
    with hub_errors(repo, revision, CONFIG_FILE):
        try:
            with capped(MAX_CONFIG_BYTES, CONFIG_FILE):
                path = hf_hub_download(repo, CONFIG_FILE, revision=revision, token=operation.options.token)
            return Path(path)
        except Unreachable as error:
            cached = try_to_load_from_cache(repo, CONFIG_FILE, revision=revision)
            if not isinstance(cached, str):
                raise
            operation.options.note(
                f"cannot reach {constants.ENDPOINT} ({error}); {CONFIG_FILE} from the cache"
            )
            return Path(cached)


# --- checkpoint headers ----------------------------------------------------------------------------


def fetch_checkpoint(
    repo: str,
    revision: str | None,
    on_file: Callable[[str], None] | None = None,
    options: HubOptions | None = None,
) -> tuple[Path, Checkpoint]:
    """config.json and every safetensors header of repo@revision, never the tensor data.

    config.json comes through the Hub cache; its snapshot folder names the commit the revision resolves
    to. Beside it, at once: on `main`, the Hub's bulk endpoint, which returns every shard header in one
    request (it reads `main` as it is at that moment: a commit pushed in between would not match the
    config; name the commit with --revision to pin both); elsewhere, the index at the revision. The
    shards are then read at the config's commit, one ranged GET each, sized from the index in one pass
    over it (a second GET only if a header is longer than estimated), in parallel. Without the bulk route
    (another endpoint), main is read the same way.
    """
    where = _where(repo, revision)
    with paused_gc():  # as read_folder: the headers are hundreds of thousands of objects, none in a cycle
        return run(options or HubOptions(), where, lambda op: _checkpoint(op, repo, revision, on_file))


def _checkpoint(
    operation: Operation, repo: str, revision: str | None, on_file: Callable[[str], None] | None
) -> tuple[Path, Checkpoint]:
    source, endpoint = _where(repo, revision), constants.ENDPOINT
    on_main = revision in (None, constants.DEFAULT_REVISION)
    if on_main:
        operation.status(f"fetching {CONFIG_FILE} and the safetensors headers of {source} from {endpoint}")
        beside = in_background(operation, lambda: _bulk_headers(operation, repo, source))
    else:
        operation.status(f"fetching {CONFIG_FILE} and {INDEX_FILE} of {source} from {endpoint}")
        beside = in_background(operation, lambda: _download_index(operation, repo, revision))
    config = _config(operation, repo, revision)
    commit = config.parent.name  # the cache keeps files under snapshots/<commit>/
    if not _is_commit(commit):
        commit = revision or constants.DEFAULT_REVISION
    if on_main:
        bulk = beside()
        if bulk is not None:
            return config, bulk
        operation.status(f"fetching {INDEX_FILE} of {source} from {endpoint}")
        index, _ = _download_index(operation, repo, commit)
    else:
        index, index_commit = beside()
        if index_commit is not None and _is_commit(commit) and index_commit != commit:
            index, _ = _download_index(operation, repo, commit)  # the branch moved in between
    files = index.files if index else [SINGLE_FILE]
    windows = _windows(index)
    operation.status(f"reading the safetensors headers of {source} from {endpoint}: 0 of {len(files)} files")

    def read(file: str) -> tuple[FileHeader, int, int]:
        return _read_remote_header(operation, repo, commit, file, windows.get(file, DEFAULT_WINDOW))

    headers, bytes_read, requests = [], 0, 0
    for header, received, made in map_parallel(operation, read, files):
        headers.append(header)
        bytes_read += received
        requests += made
        operation.status(
            f"reading the safetensors headers of {source} from {endpoint}: "
            f"{len(headers)} of {len(files)} files"
        )
        if on_file:
            on_file(header.file)
    return config, assemble(source, headers, index, bytes_read, requests)


def _bulk_headers(operation: Operation, repo: str, source: str) -> Checkpoint | None:
    """Every shard header of `main` in one request, or None where it is not to be had that way (not a
    sharded repo, an endpoint without the route, an answer too large): the shards are then read one
    by one. The request is not retried; the shard reads are the fallback."""
    url = f"{constants.ENDPOINT}/api/models/{repo}/safetensors-metadata/{INDEX_FILE}"
    try:
        with hub_errors(repo, None, "the safetensors headers"):
            body, _ = _get_capped(url, MAX_BULK_BYTES, operation.options.token, retries=0)
    except SourceError:
        return None
    if body is None:
        operation.options.note(
            f"the safetensors headers of {source} are over {MAX_BULK_BYTES:,} bytes in one answer; "
            "reading them shard by shard"
        )
        return None
    where = f"{url} (the safetensors headers of {source})"
    return parse_checked(body, where, CheckpointError, lambda answer: _bulk_checkpoint(answer, source, where))


def _bulk_checkpoint(answer: Any, source: str, where: str) -> Checkpoint:
    """The checkpoint the bulk endpoint's answer describes: {"index": the index without its weight map,
    "headers": {shard: its header}}."""
    raw_headers = answer.get("headers") if isinstance(answer, dict) else None
    raw_index = answer.get("index", {}) if isinstance(answer, dict) else None
    if not isinstance(raw_headers, dict) or not raw_headers or not isinstance(raw_index, dict):
        raise CheckpointError(
            f"{where}: expected an object with 'headers' (shard name -> header) and 'index', found "
            f"{_shape(answer)}"
        )
    headers = []
    for file, header in raw_headers.items():
        check_file_name(file, where)
        headers.append(header_from_json(header, file, f"{source}/{file}", file_size=None, header_size=None))
    metadata = raw_index.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{where}: index.metadata is {_shape(metadata)}, expected an object")
    total = metadata.get("total_size")
    index = Index(weight_map=None, total_size=total if type(total) is int and total >= 0 else None)
    return assemble(source, headers, index, bytes_read=None, requests=1)


def _shape(value: Any) -> str:
    return f"a JSON {type(value).__name__}" if not isinstance(value, dict) else f"keys {sorted(value)[:5]}"


def _download_index(operation: Operation, repo: str, revision: str | None) -> tuple[Index | None, str | None]:
    """The shard index at the revision (None for a single-file checkpoint), and the commit the Hub says
    it read it at. One GET, not through the cache: at a commit it never changes, and its size is
    checked before it is read."""
    url = hf_hub_url(repo, INDEX_FILE, revision=revision)
    with hub_errors(repo, revision, INDEX_FILE):
        try:
            body, headers = _get_capped(url, MAX_INDEX_BYTES, operation.options.token)
        except RemoteEntryNotFoundError:
            return None, None
    where = f"{_where(repo, revision)}/{INDEX_FILE}"
    if body is None:
        raise CheckpointError(f"{where}: over {MAX_INDEX_BYTES:,} bytes, more than any index")
    return parse_index(body, where), headers.get(constants.HUGGINGFACE_HEADER_X_REPO_COMMIT)


def _windows(index: Index | None) -> dict[str, int]:
    """Bytes to request per shard so that its header is in one response, in one pass over the index:
    the 8-byte length, then per tensor `"name":{"dtype":"F8_E4M3","shape":[d,d],"data_offsets":[b,e]},`
    (46 bytes of JSON syntax, a 7-letter dtype, a 2-D shape of 6-digit sizes, 12-digit offsets: name +
    90, rounded up to 96), then 4 KiB for __metadata__. A longer header costs one more request."""
    if index is None or index.weight_map is None:
        return {}
    windows = dict.fromkeys(index.files, 8 + 4096)
    for name, file in index.weight_map.items():
        windows[file] += len(name) + 96
    return {file: min(size, 8 + MAX_HEADER_BYTES) for file, size in windows.items()}


def _read_remote_header(
    operation: Operation, repo: str, commit: str, file: str, window: int
) -> tuple[FileHeader, int, int]:
    """One file's header by ranged GETs; returns it, the bytes received and the requests made."""
    url = hf_hub_url(repo, file, revision=commit)
    where = f"{_where(repo, commit)}/{file}"
    token = operation.options.token
    with hub_errors(repo, commit, file):
        data, size = _get_range(url, 0, window, token, where)
        requests = 1
        length = header_length(data, where, size)
        if 8 + length > len(data):  # longer than estimated: fetch the rest
            rest, _ = _get_range(url, len(data), 8 + length - len(data), token, where)
            data, requests = data + rest, 2
    return parse_header(data[8 : 8 + length], file, size, where=where), len(data), requests


def _request_headers(token: str | None, **extra: str) -> dict[str, str]:
    # identity: the bytes as stored (a compressed byte range would mean nothing), and sizes that are true
    return {**build_hf_headers(token=token), "Accept-Encoding": "identity", **extra}


def _get_capped(
    url: str, limit: int, token: str | None, retries: int = 5
) -> tuple[bytes | None, httpx.Headers]:
    """The body of a GET (None when it is longer than `limit` bytes, stated or received: reading stops
    there), and the response's headers."""
    with http_stream_backoff(
        "GET",
        url,
        headers=_request_headers(token),
        timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT,
        max_retries=retries,
    ) as response:
        _raise_for_status(response)
        stated = response.headers.get("Content-Length", "")
        if re.fullmatch(r"[0-9]{1,20}", stated) and int(stated) > limit:
            return None, response.headers
        data = bytearray()
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) > limit:
                return None, response.headers
    return bytes(data), response.headers


def _get_range(url: str, start: int, length: int, token: str | None, where: str) -> tuple[bytes, int]:
    """Up to `length` bytes from `start`, and the file's total size. Streams, so that a server that
    ignores Range (answering 200 with the whole file) costs no more than the bytes up to those asked for."""
    headers = _request_headers(token, Range=f"bytes={start}-{start + length - 1}")
    with http_stream_backoff(
        "GET", url, headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
    ) as response:
        _raise_for_status(response)
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise SourceError(
                f"{where}: the server sent a byte range compressed as '{shorten(encoding, 40)}'"
            )
        if response.status_code == 206:  # "bytes first-last/total"
            skip, total = 0, _content_range_total(response.headers.get("Content-Range", ""), start, where)
        else:  # 200: the whole file, from byte 0
            skip, total = start, _size(response.headers.get("Content-Length", ""), "Content-Length", where)
        data = bytearray()
        for chunk in response.iter_raw():
            data += chunk
            if len(data) >= skip + length:
                break
    return bytes(data[skip : skip + length]), total


def _content_range_total(value: str, start: int, where: str) -> int:
    """The file size a Content-Range states, checked to describe the range asked for (from `start`).

    >>> _content_range_total("bytes 0-99/1000", 0, "f")
    1000
    >>> _content_range_total("bytes 0-99/*", 0, "f")
    Traceback (most recent call last):
    kimicount.errors.SourceError: f: the server's Content-Range 'bytes 0-99/*' does not give the file size as bytes first-last/size
    """
    match = re.fullmatch(r"bytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20})", value.strip())
    if not match:
        raise SourceError(
            f"{where}: the server's Content-Range '{shorten(value, 60)}' does not give the file size "
            "as bytes first-last/size"
        )
    first, total = int(match[1]), int(match[3])
    if first != start or total > MAX_FILE_SIZE:
        raise SourceError(
            f"{where}: the server's Content-Range '{value}' is not the range asked for (from byte {start})"
        )
    return total


def _size(value: str, header: str, where: str) -> int:
    if not re.fullmatch(r"[0-9]{1,20}", value.strip()) or int(value) > MAX_FILE_SIZE:
        raise SourceError(
            f"{where}: the server did not say how long the file is ({header} '{shorten(value, 60)}')"
        )
    return int(value)


def _raise_for_status(response: httpx.Response) -> None:
    """huggingface_hub's errors for an error status, from at most 64 KiB of the body (an error page
    may be anything)."""
    if response.status_code < 400:
        return
    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) > 65536:
            break
    read = httpx.Response(
        response.status_code, headers=response.headers, content=bytes(body[:65536]), request=response.request
    )
    hf_raise_for_status(read)


def _is_commit(revision: str | None) -> bool:
    return revision is not None and COMMIT.fullmatch(revision) is not None


def _where(repo: str, revision: str | None) -> str:
    """repo@revision, a commit shortened to 12 characters (and anything very long cut short)."""
    revision = revision or constants.DEFAULT_REVISION
    return f"{shorten(repo, 100)}@{revision[:12] if _is_commit(revision) else shorten(revision, 100)}"
