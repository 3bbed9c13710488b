"""Everything that talks to the Hugging Face Hub, through huggingface_hub: its protocol.

Imported only when a `--repo` is named. huggingface_hub brings HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE,
revisions, its download cache and its HTTP client; this module makes the fewest requests that read a
checkpoint's headers, on the routes the Hub documents and nothing else (docs/hub.md): a file at a
revision, `/{repo}/resolve/{revision}/{path}`, whole (config.json, through the cache; the index) or a
byte range of it (a shard's header), as huggingface_hub's own HfApi.get_safetensors_metadata and
parse_safetensors_file_metadata read them (hf_api.py: hf_hub_url, then a GET with a Range header).
It works under the guarantees of kimicount.hub_transport: one deadline for the whole operation
(`HubOptions.timeout`), each request bounded by its progress and tried at most `HubOptions.tries`
times, each retry said (`HubOptions.note`), a connection that cannot be made failing at once
(config.json then comes from the Hub cache if it is there, as huggingface_hub does offline), and what
is being fetched from where (`HubOptions.status`).

Every failure becomes a SourceError whose single line says which repo, revision or file could not be
had and why; what the files themselves say wrong is a CheckpointError.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

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
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from kimicount.checkpoint import (
    INDEX_FILE,
    SINGLE_FILE,
    Checkpoint,
    Index,
    assemble,
    index_from_stream,
    paused_gc,
)
from kimicount.errors import CheckpointError, SourceError, UnreachableError
from kimicount.headers import MAX_HEADER_BYTES, FileHeader, header_length, parse_header
from kimicount.hub_transport import (
    COMMIT,
    RETRIED_STATUSES,
    TRANSIENT,
    GaveUp,
    Operation,
    OutOfTime,
    Refused,
    Sent,
    Unreachable,
    capped,
    first_line,
    httpx,
    in_background,
    map_parallel,
    retried,
    run,
)
from kimicount.options import HubOptions
from kimicount.reading import shorten
from kimicount.spec import MAX_CONFIG_BYTES, ModelSpec, load_config_file, spec_from_config

CONFIG_FILE = "config.json"
#: Bytes to ask for when the header size cannot be estimated (a single model.safetensors).
DEFAULT_WINDOW = 256 * 1024
#: The largest file size a Content-Range or Content-Length may state: safetensors offsets are u64.
MAX_FILE_SIZE = 2**64 - 1

T = TypeVar("T")


# --- errors ----------------------------------------------------------------------------------------


@contextmanager
def hub_errors(repo: str, revision: str | None, filename: str) -> Iterator[None]:
    """Turn huggingface_hub's and httpx's exceptions into one-line SourceErrors naming what was asked for."""
    where = repo_label(repo, revision)
    try:
        yield
    except (OutOfTime, SourceError, CheckpointError):
        raise
    except Unreachable as error:
        raise UnreachableError(f"{where}: cannot reach {constants.ENDPOINT}: {error}") from error
    except Refused as error:
        raise SourceError(f"{where}: {filename}: {error}") from error
    except GaveUp as error:  # already names the request, what failed and how often
        raise UnreachableError(f"{where}: {error}") from error
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
        raise SourceError(f"{where}: revision '{shorten(revision or '', 100)}' not found") from error
    except LocalEntryNotFoundError as error:
        # The Hub could not be asked (offline mode, a timeout) or did not answer with the file, and the
        # file is not in the local cache either: say which.
        answered = isinstance(error.__cause__, HfHubHTTPError) and error.__cause__.response is not None
        raise (SourceError if answered else UnreachableError)(
            f"{where}: {_why_not_fetched(error, filename)}"
        ) from error
    except EntryNotFoundError as error:
        raise SourceError(f"{where}: no file '{filename}' in the repo") from error
    except OfflineModeIsEnabled as error:
        raise UnreachableError(f"{where}: HF_HUB_OFFLINE is set and {filename} must be fetched") from error
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
        raise UnreachableError(
            f"{where}: {filename}: no answer from {constants.ENDPOINT} in time ({error})"
        ) from error
    except httpx.HTTPError as error:  # any other network failure
        raise UnreachableError(f"{where}: cannot reach {constants.ENDPOINT}: {first_line(error)}") from error
    except httpx.InvalidURL as error:
        raise SourceError(f"{where}: {filename}: not a valid URL ({first_line(error)})") from error
    except OSError as error:  # the Hub cache: a file name too long, a full disk, no permission
        raise SourceError(
            f"{where}: {filename}: {error.strerror or error} ({constants.HF_HUB_CACHE})"
        ) from error


def _no_answer(error: BaseException) -> bool:
    """A failure of hf_hub_download's HEAD worth another try: no answer in time, a connection dropped
    (huggingface_hub raises it, or reports it as a LocalEntryNotFoundError caused by it)."""
    if isinstance(error, LocalEntryNotFoundError) and not constants.HF_HUB_OFFLINE:
        error = error.__cause__ or error
    return isinstance(error, TRANSIENT)


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
    where = f"{repo_label(repo, revision)} {CONFIG_FILE}"
    return spec_from_config(load_config_file(path), name=repo, where=where)


def download_config(repo: str, revision: str | None, options: HubOptions | None = None) -> Path:
    """config.json of the repo at the revision, through the Hub cache (only that file is fetched)."""
    where = repo_label(repo, revision)

    def work(operation: Operation) -> Path:
        operation.status(f"fetching {CONFIG_FILE} of {where} from {constants.ENDPOINT}")
        return _config(operation, repo, revision)

    return run(options or HubOptions(), where, work)


def _config(operation: Operation, repo: str, revision: str | None) -> Path:
    def download() -> str:
        with capped(MAX_CONFIG_BYTES, CONFIG_FILE):
            return hf_hub_download(repo, CONFIG_FILE, revision=revision, token=operation.options.token)

    with hub_errors(repo, revision, CONFIG_FILE):
        head = hf_hub_url(repo, CONFIG_FILE, revision=revision)  # what hf_hub_download asks first
        try:
            # huggingface_hub retries a HEAD that times out or is hung up on not at all: here it is.
            return Path(retried(operation, "HEAD", head, download, _no_answer))
        except (Unreachable, GaveUp) as error:
            cached = try_to_load_from_cache(repo, CONFIG_FILE, revision=revision)
            if not isinstance(cached, str):
                raise
            why = (
                f"cannot reach {constants.ENDPOINT} ({error})"
                if isinstance(error, Unreachable)
                else str(error)
            )
            operation.options.note(f"{why}; {CONFIG_FILE} from the cache")
            return Path(cached)


# --- checkpoint headers ----------------------------------------------------------------------------


def fetch_checkpoint(
    repo: str,
    revision: str | None,
    on_file: Callable[[str], None] | None = None,
    options: HubOptions | None = None,
) -> tuple[Path, Checkpoint]:
    """config.json and every safetensors header of repo@revision, never the tensor data, on the
    documented routes only (docs/hub.md): config.json through the Hub cache (a HEAD, then a GET), its
    snapshot folder naming the commit the revision resolves to; beside it, at once, the index at the
    revision (one GET); then one ranged GET per shard at the config's commit, sized from the index in
    one pass over it (a second GET only if a header is longer than estimated), MAX_WORKERS at a time.
    The same on `main` as at a commit: 2 + 1 + N requests for N shards, in 2 + ceil(N / 8) round trips.
    """
    where = repo_label(repo, revision)
    with paused_gc():  # as read_folder: the headers are hundreds of thousands of objects, none in a cycle
        return run(options or HubOptions(), where, lambda op: _checkpoint(op, repo, revision, on_file))


def _checkpoint(
    operation: Operation, repo: str, revision: str | None, on_file: Callable[[str], None] | None
) -> tuple[Path, Checkpoint]:
    source, endpoint = repo_label(repo, revision), constants.ENDPOINT
    operation.status(f"fetching {CONFIG_FILE} and {INDEX_FILE} of {source} from {endpoint}")
    # Offline, nothing is sent: the config comes from the cache, and the index is then asked for (and
    # refused) at the config's commit, which the error names.
    beside = (
        None
        if constants.HF_HUB_OFFLINE
        else in_background(operation, lambda: _download_index(operation, repo, revision))
    )
    config = _config(operation, repo, revision)
    commit = config.parent.name  # the cache keeps files under snapshots/<commit>/
    if not _is_commit(commit):
        commit = revision or constants.DEFAULT_REVISION
    index, index_commit = beside() if beside else _download_index(operation, repo, commit)
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

    def reread() -> Index:  # the index disagrees with the headers: again, with its map, to say where
        full, _ = _download_index(operation, repo, commit, keep_map=True)
        if full is None:
            raise SourceError(f"{repo_label(repo, commit)}/{INDEX_FILE}: gone since it was read")
        return full

    return config, assemble(source, headers, index, bytes_read, requests, reread)


def _download_index(
    operation: Operation, repo: str, revision: str | None, keep_map: bool = False
) -> tuple[Index | None, str | None]:
    """The shard index at the revision (None for a single-file checkpoint), and the commit the Hub says
    it read it at. One GET, not through the cache (at a commit it never changes), read as it arrives
    (kimicount.index_stream: never the whole body in memory, whatever its size); `keep_map` keeps its
    name -> file map."""
    where = f"{repo_label(repo, revision)}/{INDEX_FILE}"

    def read(response: Any) -> tuple[Index, httpx.Headers]:
        return index_from_stream(response.iter_bytes(), where, keep_map), response.headers

    with hub_errors(repo, revision, INDEX_FILE):
        url = hf_hub_url(repo, INDEX_FILE, revision=revision)
        try:
            index, headers = _get(operation, url, _request_headers(operation.options.token), read)
        except RemoteEntryNotFoundError:
            return None, None
    return index, headers.get(constants.HUGGINGFACE_HEADER_X_REPO_COMMIT)


def _windows(index: Index | None) -> dict[str, int]:
    """Bytes to request per shard so that its header is in one response, from what the index lists in
    it: the 8-byte length, then per tensor `"name":{"dtype":"F8_E4M3","shape":[d,d],"data_offsets":[b,e]},`
    (46 bytes of JSON syntax, a 7-letter dtype, a 2-D shape of 6-digit sizes, 12-digit offsets: name +
    90, rounded up to 96), then 4 KiB for __metadata__. A longer header costs one more request."""
    if index is None:
        return {}
    return {
        file: min(8 + 4096 + listing.name_chars + 96 * listing.tensors, 8 + MAX_HEADER_BYTES)
        for file, listing in index.listings.items()
    }


def _read_remote_header(
    operation: Operation, repo: str, commit: str, file: str, window: int
) -> tuple[FileHeader, int, int]:
    """One file's header by ranged GETs; returns it, the bytes received and the requests made."""
    url = hf_hub_url(repo, file, revision=commit)
    where = f"{repo_label(repo, commit)}/{file}"
    with hub_errors(repo, commit, file):
        data, size = get_range(operation, url, 0, window, where)
        requests = 1
        length = header_length(data, where, size)
        if 8 + length > len(data):  # longer than estimated: fetch the rest
            rest, _ = get_range(operation, url, len(data), 8 + length - len(data), where)
            data, requests = data + rest, 2
    return parse_header(data[8 : 8 + length], file, size, where=where), len(data), requests


def _request_headers(token: str | None, **extra: str) -> dict[str, str]:
    # identity: the bytes as stored (a compressed byte range would mean nothing), and sizes that are true
    return {**build_hf_headers(token=token), "Accept-Encoding": "identity", **extra}


def _get(operation: Operation, url: str, headers: dict[str, str], read: Callable[[Any], T]) -> T:
    """read(the response) of a GET, tried again when a try fails the way huggingface_hub retries (a
    timeout, a dropped connection, a transfer too slow, 408, 429 or 5xx), after 1 s, then 2 s, …: the
    transport (kimicount.hub_transport.Watched) counts the tries, says each retry, and ends the last
    failure as GaveUp. A loop around the whole request and its body, not a generator (as
    huggingface_hub's http_stream_backoff is): a body that fails half read is retried like any other
    failure, instead of being thrown into a generator that yields again ("generator didn't stop after
    throw()")."""

    def once() -> T:
        with get_session().stream(
            "GET", url, headers=headers, timeout=operation.options.speed_time
        ) as response:
            if response.status_code in RETRIED_STATUSES:
                raise _Retry(response.status_code)
            _raise_for_status(response)
            return read(response)

    try:
        return retried(operation, "GET", url, once, lambda e: isinstance(e, (_Retry, _Short, *TRANSIENT)))
    except _Retry as error:  # the last try, when Watched is not counting: the Hub's own words for it
        raise SourceError(
            f"GET {url}: HTTP {error.status}; gave up after {operation.options.tries} tries"
        ) from None


class _Retry(Exception):
    """An answer whose status is worth another try (Watched has counted it)."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class _Short(SourceError):
    """A byte range answered with fewer bytes than asked, short of the end of the file: that try failed
    (counted, so that the last one is GaveUp), as a dropped connection fails it. Taken as progress, a
    server sending 4 bytes at a time would be asked again and again until the deadline. (A SourceError,
    should it ever pass the retries: one line all the same.)"""


def get_range(operation: Operation, url: str, start: int, length: int, where: str) -> tuple[bytes, int]:
    """The `length` bytes from `start` (fewer only where the file ends first), and the file's total size.
    Streams, so that a server that ignores Range (answering 200 with the whole file) costs no more than
    the bytes up to those asked for. An answer shorter than that is a failed try (`_Short`), tried again
    as other failures are."""
    headers = _request_headers(operation.options.token, Range=f"bytes={start}-{start + length - 1}")

    def read(response: Any) -> tuple[bytes, int]:
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
        body = bytes(data[skip : skip + length])
        wanted = max(0, min(length, total - start))
        if len(body) < wanted:
            reason = (
                f"HTTP {response.status_code} with {len(body):,} bytes where {wanted:,} were asked for "
                f"(from byte {start:,} of {total:,})"
            )
            operation.failed(Sent("GET", url), reason)  # GaveUp, when it was the last try
            raise _Short(reason)
        return body, total

    return _get(operation, url, headers, read)


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


def repo_label(repo: str, revision: str | None) -> str:
    """repo@revision, a commit shortened to 12 characters (and anything very long cut short)."""
    revision = revision or constants.DEFAULT_REVISION
    return f"{shorten(repo, 100)}@{revision[:12] if _is_commit(revision) else shorten(revision, 100)}"
