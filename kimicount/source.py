"""Where the model comes from: the bundled Kimi K2 config, a local config.json, or a Hub repo; and
where a checkpoint comes from: a local folder or a Hub repo, with the config that goes with it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kimicount.errors import UsageError
from kimicount.spec import ModelSpec, bundled_spec, spec_from_path

if TYPE_CHECKING:  # params and kv-cache read no checkpoint
    from kimicount.checkpoint import Checkpoint


def load_spec(config: Path | None = None, repo: str | None = None, revision: str | None = None) -> ModelSpec:
    """The spec named by the CLI's model options; nothing named means the bundled Kimi-K2-Instruct.

    The Hub client is imported only when a repo is named, so local use never pays for it.
    """
    if config is not None and repo is not None:
        raise UsageError("name the model once: --config or --repo, not both")
    _revision_needs_repo(revision, repo)
    if repo is not None:
        from kimicount import hub

        return hub.spec_from_hub_config(hub.download_config(repo, revision), repo, revision)
    if config is not None:
        return spec_from_path(config)
    return bundled_spec()


def load_checkpoint(
    path: Path | None = None,
    repo: str | None = None,
    revision: str | None = None,
    config: Path | None = None,
    on_file: Callable[[str], None] | None = None,
) -> tuple[ModelSpec, Checkpoint]:
    """The headers of the checkpoint named by --path or --repo, and the spec to check them against:
    `config` if given, else the checkpoint's own config.json (from the same folder, or the same Hub
    revision). `on_file` is called as each file's header is read."""
    if (path is None) == (repo is None):
        raise UsageError("name one checkpoint: --path DIR or --repo ORG/NAME")
    _revision_needs_repo(revision, repo)
    if repo is not None:
        from kimicount import hub

        config_path, checkpoint = hub.fetch_checkpoint(repo, revision, on_file)
        spec = spec_from_path(config) if config else hub.spec_from_hub_config(config_path, repo, revision)
        return spec, checkpoint
    from kimicount.checkpoint import read_folder

    assert path is not None
    checkpoint = read_folder(path, on_file)
    if config is None:
        config = path / "config.json"
        if not config.is_file():
            raise UsageError(f"{path}: no config.json here; give --config")
    return spec_from_path(config), checkpoint


def _revision_needs_repo(revision: str | None, repo: str | None) -> None:
    if revision is not None and repo is None:
        raise UsageError("--revision needs --repo")
