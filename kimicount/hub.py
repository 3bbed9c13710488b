"""Everything that talks to the Hugging Face Hub, through huggingface_hub.

Imported only when a `--repo` is named. huggingface_hub brings HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE,
revisions and its download cache; this module adds one thing: every failure becomes a `SourceError`
whose single line says which repo, revision or file could not be had and why.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import constants, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from kimicount.errors import SourceError


@contextmanager
def hub_errors(repo: str, revision: str | None, filename: str) -> Iterator[None]:
    """Turn huggingface_hub's exceptions into one-line SourceErrors naming what was asked for."""
    where = f"{repo}@{revision or constants.DEFAULT_REVISION}"
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
    except OSError as error:  # network failures that huggingface_hub passes through
        raise SourceError(f"{where}: cannot reach {constants.ENDPOINT}: {_first_line(error)}") from error


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def download_config(repo: str, revision: str | None) -> Path:
    """config.json of the repo at the revision, through the Hub cache (only that file is fetched)."""
    with hub_errors(repo, revision, "config.json"):
        return Path(hf_hub_download(repo, "config.json", revision=revision))
