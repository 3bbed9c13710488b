"""Where the model comes from: the bundled Kimi K2 config, a local config.json, or a Hub repo; and
where a checkpoint comes from: a local folder or a Hub repo, with the config that goes with it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from kimicount.errors import SourceError, UsageError

# HubOptions lives with the other option values, below both this module and kimicount.hub, so that the
# imports run one way (source -> hub -> hub_transport -> options); it is named here for library users.
from kimicount.options import DEFAULT_TIMEOUT, HubOptions

__all__ = ["DEFAULT_TIMEOUT", "HubOptions", "load_checkpoint", "load_spec"]
from kimicount.reading import shorten
from kimicount.spec import ModelSpec, bundled_spec, spec_from_path

if TYPE_CHECKING:  # params and kv-cache read no checkpoint
    from kimicount.checkpoint import Checkpoint


def load_spec(
    config: Path | None = None,
    repo: str | None = None,
    revision: str | None = None,
    hub_options: HubOptions | None = None,
) -> ModelSpec:
    """The spec named by the CLI's model options; nothing named means the bundled Kimi-K2-Instruct.

    The Hub client is imported only when a repo is named, so local use never pays for it.
    """
    if config is not None and repo is not None:
        raise UsageError("name the model once: --config or --repo, not both")
    _hub_options_need_repo(revision, hub_options, repo)
    if repo is not None:
        from kimicount import models

        if models.looks_like_folder(repo):
            raise UsageError(
                f"{shorten(repo)}: a folder, not a Hub repo id (ORG/NAME): give it as --config {shorten(repo)}"
            )

        def from_hub(repo_id: str) -> ModelSpec:
            hub = hub_module()
            return hub.spec_from_hub_config(
                hub.download_config(repo_id, revision, hub_options), repo_id, revision
            )

        note = (hub_options or HubOptions()).note
        return models.resolve(repo, revision, note, from_hub)
    if config is not None:
        from kimicount.models import spec_for_config_option

        return spec_for_config_option(config, spec_from_path)
    return bundled_spec()


def load_checkpoint(
    path: Path | None = None,
    repo: str | None = None,
    revision: str | None = None,
    config: Path | None = None,
    on_file: Callable[[str], None] | None = None,
    hub_options: HubOptions | None = None,
) -> tuple[ModelSpec, Checkpoint]:
    """The headers of the checkpoint named by --path or --repo, and the spec to check them against:
    `config` if given, else the checkpoint's own config.json (from the same folder, or the same Hub
    revision). `on_file` is called as each file's header is read."""
    if (path is None) == (repo is None):
        raise UsageError("name one checkpoint: --path DIR or --repo ORG/NAME")
    _hub_options_need_repo(revision, hub_options, repo)
    if repo is not None:
        from kimicount.models import known_model, looks_like_folder, spec_for_config_option

        if (
            known := known_model(repo)
        ) is not None:  # a short name stands for its repo (the headers are the Hub's)
            repo = known.repo
        if looks_like_folder(repo):
            raise UsageError(
                f"{shorten(repo)}: a folder, not a Hub repo id (ORG/NAME): give it as --path {shorten(repo)}"
            )
        hub = hub_module()
        config_path, checkpoint = hub.fetch_checkpoint(repo, revision, on_file, hub_options)
        if config:
            return spec_for_config_option(config, spec_from_path), checkpoint
        return hub.spec_from_hub_config(config_path, repo, revision), checkpoint
    from kimicount.checkpoint import read_folder

    assert path is not None
    checkpoint = read_folder(path, on_file)
    if config is None:
        config = path / "config.json"
        if not os.path.lexists(config):  # one that is there but no regular file is read, to say so
            raise UsageError(f"{path}: no config.json here; give --config")
    from kimicount.models import spec_for_config_option

    return spec_for_config_option(config, spec_from_path), checkpoint


def hub_module() -> ModuleType:
    """kimicount.hub, imported on first use. huggingface_hub reads its HF_* environment variables as it
    is imported, and a malformed one fails that import itself (HF_ENDPOINT=http://[bad,
    HF_HUB_ETAG_TIMEOUT=abc) or every request later (HF_HUB_DOWNLOAD_TIMEOUT=-1): the ones it reads are
    checked first, to name the variable and say what it should be. A ValueError from the import of any
    other names the HF_* variables set; anything else is no fault of the environment."""
    _check_hf_variables()
    try:
        from kimicount import hub
    except ValueError as error:  # another variable huggingface_hub parses as it is imported (int(), a URL)
        reason = shorten(" ".join(f"{type(error).__name__}: {error}".split()))
        raise SourceError(
            f"huggingface_hub cannot start with the HF_* environment variables set here "
            f"({_hf_variables()}): {reason}"
        ) from error
    return hub


def _hf_variables() -> str:
    """HF_HUB_ETAG_TIMEOUT='abc', ... (a token's value left out)."""
    shown = [
        name if "TOKEN" in name else f"{name}={shorten(value, 60)!r}"
        for name, value in sorted(os.environ.items())
        if name.startswith("HF_")
    ]
    return ", ".join(shown) or "none"


#: The variables huggingface_hub reads as whole seconds (0 or unset: its own default, 10 s).
HF_SECONDS_VARIABLES = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")


def _check_hf_variables() -> None:
    """HF_ENDPOINT an http(s) URL with a host; HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT whole
    numbers of seconds, not negative (huggingface_hub parses them with int(), and a negative one fails
    each request with "Timeout value out of range")."""
    endpoint = os.environ.get("HF_ENDPOINT")
    if endpoint:
        try:
            parts = urlsplit(endpoint)
            valid = parts.scheme in ("http", "https") and bool(parts.hostname)
            parts.port  # noqa: B018 - raises ValueError on a port that is not a number
        except ValueError:
            valid = False
        if not valid:
            raise SourceError(
                f"HF_ENDPOINT={shorten(endpoint)!r}: not an http(s) URL with a host "
                "(e.g. https://huggingface.co)"
            )
    for name in HF_SECONDS_VARIABLES:
        value = os.environ.get(name)
        if value is None:
            continue
        try:
            valid = int(value) >= 0
        except ValueError:  # not an integer, or one of more than 4,300 digits
            valid = False
        if not valid:
            raise SourceError(
                f"{name}={shorten(value, 60)!r}: expected a whole number of seconds, 0 or more "
                "(0: huggingface_hub's default, 10)"
            )


def _hub_options_need_repo(revision: str | None, hub_options: HubOptions | None, repo: str | None) -> None:
    if repo is not None:
        return
    if revision is not None:
        raise UsageError("--revision needs --repo")
    if hub_options is not None and hub_options.token is not None:
        raise UsageError("--token needs --repo")
