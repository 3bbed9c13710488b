"""Everything that talks to the Hugging Face Hub, through huggingface_hub.

Imported only when a `--repo` is named. huggingface_hub brings HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE,
revisions, its download cache and its HTTP client; this module adds the fewest requests that read a
checkpoint's headers, and turns every failure into a `SourceError` whose single line says which repo,
revision or file could not be had and why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import HfApi, constants, hf_hub_download, hf_hub_url
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
    SafetensorsParsingError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from kimicount.checkpoint import INDEX_FILE, SINGLE_FILE, Checkpoint, Index, assemble, parse_index
from kimicount.errors import CheckpointError, SourceError
from kimicount.headers import MAX_HEADER_BYTES, FileHeader, header_from_json, header_length, parse_header
from kimicount.spec import ModelSpec, load_config_file, spec_from_config

# huggingface_hub >= 1.0 talks HTTP through httpx (some builds vendor it as httpx2); its transport
# errors are not OSErrors, so they are caught by class.
try:
    from httpx2 import TransportError
except ImportError:  # pragma: no cover - depends on the huggingface_hub build
    from httpx import TransportError


@contextmanager
def hub_errors(repo: str, revision: str | None, filename: str) -> Iterator[None]:
    """Turn huggingface_hub's exceptions into one-line SourceErrors naming what was asked for."""
    where = _where(repo, revision)
    try:
        yield
    except GatedRepoError as error:
        raise SourceError(
            f"{where}: gated repo; accept its terms on the Hub and set HF_TOKEN (or run `hf auth login`)"
        ) from error
    except RepositoryNotFoundError as error:
        raise SourceError(
            f"{where}: repo not found at {constants.ENDPOINT} (if it is private, set HF_TOKEN)"
        ) from error
    except RevisionNotFoundError as error:
        raise SourceError(f"{where}: revision '{revision}' not found") from error
    except LocalEntryNotFoundError as error:
        # Raised when the Hub cannot be reached (offline mode, connection refused, timeout) and the
        # file is not in the local cache either.
        offline = " (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else ""
        raise SourceError(
            f"{where}: cannot reach {constants.ENDPOINT}{offline} and {filename} is not in the cache"
        ) from error
    except EntryNotFoundError as error:
        raise SourceError(f"{where}: no file '{filename}' in the repo") from error
    except OfflineModeIsEnabled as error:
        raise SourceError(f"{where}: HF_HUB_OFFLINE is set and {filename} must be fetched") from error
    except HFValidationError as error:
        raise SourceError(f"'{repo}': not a valid repo id ({_first_line(error)})") from error
    except HfHubHTTPError as error:
        raise SourceError(f"{where}: {filename}: {_first_line(error)}") from error
    except (OSError, TransportError) as error:  # network failures that huggingface_hub passes through
        raise SourceError(f"{where}: cannot reach {constants.ENDPOINT}: {_first_line(error)}") from error


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def spec_from_hub_config(path: Path, repo: str, revision: str | None) -> ModelSpec:
    """The spec of a config.json fetched from the Hub; errors name the repo and revision."""
    where = f"{_where(repo, revision)} config.json"
    return spec_from_config(load_config_file(path), name=repo, where=where)


def download_config(repo: str, revision: str | None) -> Path:
    """config.json of the repo at the revision, through the Hub cache (only that file is fetched)."""
    with hub_errors(repo, revision, "config.json"):
        return Path(hf_hub_download(repo, "config.json", revision=revision))


# --- checkpoint headers --------------------------------------------------------------------------

#: Parallel header reads, as huggingface_hub's own thread map uses.
MAX_WORKERS = 8
#: Bytes to ask for when the header size cannot be estimated (a single model.safetensors).
DEFAULT_WINDOW = 256 * 1024


def fetch_checkpoint(
    repo: str, revision: str | None, on_file: Callable[[str], None] | None = None
) -> tuple[Path, Checkpoint]:
    """config.json and every safetensors header of repo@revision, never the tensor data.

    The config is fetched first, through the Hub cache; its snapshot folder names the commit the
    revision resolves to. On `main` the Hub's bulk endpoint returns every shard header in one request
    (it reads `main` as it is at that moment: a commit pushed in between would not match the config;
    name the commit with --revision to pin both). Elsewhere (another revision, or an endpoint without
    the bulk route) everything is read at the config's commit: the index, then one ranged GET per shard
    sized from it (a second only if the header is longer than estimated), in parallel.
    """
    config = download_config(repo, revision)
    commit = config.parent.name  # the cache keeps files under snapshots/<commit>/
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        commit = revision or constants.DEFAULT_REVISION
    source = _where(repo, revision)
    if revision in (None, constants.DEFAULT_REVISION):
        with hub_errors(repo, revision, "the safetensors headers"):
            bulk = _bulk_headers(repo, source)
        if bulk is not None:
            return config, bulk
    index = _download_index(repo, commit)
    files = index.files if index else [SINGLE_FILE]
    headers, bytes_read, requests = [], 0, 0
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(files))) as pool:
        futures = [pool.submit(_read_remote_header, repo, commit, f, _window(index, f)) for f in files]
        for future in as_completed(futures):
            header, received, made = future.result()
            headers.append(header)
            bytes_read += received
            requests += made
            if on_file:
                on_file(header.file)
    return config, assemble(source, headers, index, bytes_read, requests)


def _bulk_headers(repo: str, source: str) -> Checkpoint | None:
    """Every shard header of `main` in one request, or None where the endpoint does not serve it."""
    api = HfApi()
    if not hasattr(api, "get_sharded_safetensors_metadata"):  # older huggingface_hub
        return None
    try:
        metadata = api.get_sharded_safetensors_metadata(repo, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT)
    except (HfHubHTTPError, KeyError, ValueError, TypeError):
        return None  # not a sharded repo, or a Hub mirror without the endpoint: read shard by shard
    except SafetensorsParsingError as error:
        raise CheckpointError(f"{source}: {error}") from error
    headers = []
    for file, meta in metadata.files_metadata.items():
        parsed = {
            name: {"dtype": t.dtype, "shape": t.shape, "data_offsets": list(t.data_offsets)}
            for name, t in meta.tensors.items()
        }
        parsed["__metadata__"] = meta.metadata or {}
        headers.append(header_from_json(parsed, file, f"{source}/{file}", file_size=None, header_size=None))
    total = (metadata.metadata or {}).get("total_size")
    index = Index(weight_map=None, total_size=total if isinstance(total, int) else None)
    return assemble(source, headers, index, bytes_read=None, requests=1)


def _download_index(repo: str, commit: str) -> Index | None:
    """The shard index at the commit, or None for a single-file checkpoint."""
    with hub_errors(repo, commit, INDEX_FILE):
        try:
            path = Path(hf_hub_download(repo, INDEX_FILE, revision=commit))
        except RemoteEntryNotFoundError:
            return None
    return parse_index(path.read_bytes(), f"{_where(repo, commit)}/{INDEX_FILE}")


def _window(index: Index | None, file: str) -> int:
    """Bytes to request so that the header is in one response: the 8-byte length, then per tensor
    `"name":{"dtype":"F8_E4M3","shape":[d,d],"data_offsets":[b,e]},` (46 bytes of JSON syntax, a
    7-letter dtype, a 2-D shape of 6-digit sizes, 12-digit offsets: name + 90, rounded up to 96),
    then room for __metadata__. A longer header costs one more request."""
    if index is None or index.weight_map is None:
        return DEFAULT_WINDOW
    names = [name for name, f in index.weight_map.items() if f == file]
    return min(8 + sum(len(name) + 96 for name in names) + 4096, 8 + MAX_HEADER_BYTES)


def _read_remote_header(repo: str, commit: str, file: str, window: int) -> tuple[FileHeader, int, int]:
    """One file's header by ranged GETs; returns it, the bytes received and the requests made."""
    url = hf_hub_url(repo, file, revision=commit)
    where = f"{_where(repo, commit)}/{file}"
    with hub_errors(repo, commit, file):
        data, size = _get_range(url, 0, window)
        requests = 1
        length = header_length(data, where, size)
        if 8 + length > len(data):  # longer than estimated: fetch the rest
            rest, _ = _get_range(url, len(data), 8 + length - len(data))
            data, requests = data + rest, 2
    return parse_header(data[8 : 8 + length], file, size, where=where), len(data), requests


def _get_range(url: str, start: int, length: int) -> tuple[bytes, int]:
    """Up to `length` bytes from `start`, and the file's total size. Streams, so that a server that
    ignores Range (answering 200 with the whole file) costs no more than the bytes up to those asked for."""
    headers = {**build_hf_headers(), "Range": f"bytes={start}-{start + length - 1}"}
    with get_session().stream(
        "GET", url, headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
    ) as response:
        if response.status_code >= 400:
            response.read()  # so that the error can quote the body
            hf_raise_for_status(response)
        if response.status_code == 206:  # bytes start..: the total follows the slash, "bytes a-b/total"
            skip, total = 0, response.headers.get("Content-Range", "").rpartition("/")[2]
        else:  # 200: the whole file, from byte 0
            skip, total = start, response.headers.get("Content-Length", "")
        if not total.isdigit():
            raise SourceError(f"{url}: the server did not say how long the file is (no total size)")
        data = bytearray()
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) >= skip + length:
                break
    return bytes(data[skip : skip + length]), int(total)


def _where(repo: str, revision: str | None) -> str:
    """repo@revision, a commit shortened to 12 characters."""
    revision = revision or constants.DEFAULT_REVISION
    return f"{repo}@{revision[:12] if re.fullmatch(r'[0-9a-f]{40}', revision) else revision}"
