"""Where the model comes from: the bundled Kimi K2 config, a local config.json, or a Hub repo."""

from __future__ import annotations

from pathlib import Path

from kimicount.errors import UsageError
from kimicount.spec import ModelSpec, bundled_spec, load_config_file, spec_from_config, spec_from_path


def load_spec(config: Path | None = None, repo: str | None = None, revision: str | None = None) -> ModelSpec:
    """The spec named by the CLI's model options; nothing named means the bundled Kimi-K2-Instruct.

    The Hub client is imported only when a repo is named, so local use never pays for it.
    """
    if config is not None and repo is not None:
        raise UsageError("name the model once: --config or --repo, not both")
    if revision is not None and repo is None:
        raise UsageError("--revision needs --repo")
    if repo is not None:
        from kimicount import hub

        path = hub.download_config(repo, revision)
        where = f"{repo}@{revision or 'main'} config.json"
        return spec_from_config(load_config_file(path), name=repo, where=where)
    if config is not None:
        return spec_from_path(config)
    return bundled_spec()
