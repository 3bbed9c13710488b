"""Where the code evidence comes from: the modeling file the config's `auto_map` names, and config.json.

The config names its modeling code: `"auto_map": {"AutoModelForCausalLM":
"modeling_deepseek.DeepseekV3ForCausalLM"}` is modeling_deepseek.py, class DeepseekV3ForCausalLM. The
file is looked for, in order:

1. `--modeling FILE`, given explicitly (its revision unknown unless given with it, or the file is in
   the Hub cache, whose snapshot folder names the commit);
2. beside config.json: in a `--config DIR` or checkpoint folder (where `hf download` puts it), or the
   Hub cache's snapshot of the config (whose folder names the commit);
3. on the Hub, for `--repo`: that one small file at the commit the config came from, through
   huggingface_hub and its cache, under kimicount.hub's deadline and error rules;

and otherwise there is none, and the page says how to get it (`absent_message`). A file that is there
but unusable (unreadable, over 1 MiB, not UTF-8, not Python) is a one-line ModelingError, as is a
config without `auto_map` when evidence is asked of it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kimicount.errors import ConfigError, UsageError
from kimicount.explorer.evidence import Evidence, ModelingError, ModelingIndex, config_evidence
from kimicount.reading import parse_json, read_capped, shorten
from kimicount.source import HubOptions
from kimicount.spec import BUNDLED_MODEL, MAX_CONFIG_BYTES

#: modeling_deepseek.py is about 76 KB, and the largest modeling files of transformers about 200 KB
#: (models/seamless_m4t_v2/modeling_seamless_m4t_v2.py, 206,276 characters); one of more than this is
#: refused before it is read, or downloaded. It bounds the parse: Python's ast takes about 110 bytes of
#: memory per byte of source at worst, and a file just under the 16 MiB cap before took 26 s and 2.7 GB
#: (benchmarks/hostile_input.py).
MAX_MODELING_BYTES = 2**20

#: The auto_map entries that name the model's code, most specific first.
_AUTO_MAP_KEYS = ("AutoModelForCausalLM", "AutoModel")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class NoAutoMap(ModelingError):
    """The config has no auto_map naming its code: nothing to look for (the pages then say so); unlike
    an auto_map that names something other than a module of the repo, which is refused."""


@dataclass(frozen=True)
class ModelingFile:
    """A modeling file's text, where it came from, and the commit it is at (None: unknown)."""

    name: str  # "modeling_deepseek.py", as evidence cites it
    text: str
    revision: str | None
    path: Path
    origin: str  # "--modeling", "beside config.json", "the Hub"
    model_class: str | None = None  # "DeepseekV3ForCausalLM", as auto_map names it
    #: config.json's values, which decide what the file leaves to them (layer 0's MLP, sizes).
    config: Mapping[str, Any] | None = field(default=None, repr=False)

    def index(self) -> ModelingIndex:
        """The file parsed; module paths start from the class auto_map names."""
        return ModelingIndex.parse(
            self.text,
            file=self.name,
            revision=self.revision,
            root=self.model_class,
            config=self.config,
            where=str(self.path),
        )


def auto_map_entry(config: Mapping[str, Any], where: str = "config.json") -> tuple[str, str]:
    """(file name, class) of the model's code as the config's auto_map names it:
    ('modeling_deepseek.py', 'DeepseekV3ForCausalLM'). A config without one (or with one that names
    no Python module: a path, a URL) is a ModelingError naming the config.

    >>> auto_map_entry({"auto_map": {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}})
    ('modeling_deepseek.py', 'DeepseekV3ForCausalLM')
    >>> auto_map_entry({"model_type": "deepseek_v3"})
    Traceback (most recent call last):
    kimicount.explorer.modeling.NoAutoMap: config.json: no auto_map naming the modeling file (expected e.g. "auto_map": {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}); give it with --modeling FILE
    """
    auto_map = config.get("auto_map")
    value = None
    if isinstance(auto_map, dict):
        value = next((auto_map[k] for k in _AUTO_MAP_KEYS if isinstance(auto_map.get(k), str)), None)
    if value is None:
        raise NoAutoMap(
            f'{where}: no auto_map naming the modeling file (expected e.g. "auto_map": '
            '{"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}); give it with --modeling FILE'
        )
    reference = value.split("--", 1)[-1]  # "other/repo--modeling_x.Class": code kept in another repo
    module, _, cls = reference.rpartition(".")
    if not (_MODULE.fullmatch(module) and _MODULE.fullmatch(cls)):
        path = any(mark in reference for mark in ("/", "\\", ":")) or reference.startswith(".")
        raise ModelingError(
            f"{where}: auto_map names '{shorten(value, 100)}', "
            + ("a path outside the repo; " if path else "")
            + "expected module.Class, a module of the repo (e.g. modeling_deepseek.DeepseekV3ForCausalLM)"
        )
    return f"{module}.py", cls


def read_modeling_file(
    path: Path, *, revision: str | None = None, origin: str = "--modeling", model_class: str | None = None
) -> ModelingFile:
    """A local modeling file, read capped; not a regular file, too large or not UTF-8: a ModelingError."""
    data = read_capped(path, MAX_MODELING_BYTES, "modeling file", ModelingError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ModelingError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start:,})") from None
    return ModelingFile(path.name, text, revision, path, origin, model_class)


def find_modeling(
    config: Mapping[str, Any],
    *,
    modeling: Path | None = None,
    modeling_revision: str | None = None,
    config_path: Path | None = None,
    repo: str | None = None,
    revision: str | None = None,
    hub_options: HubOptions | None = None,
    where: str = "config.json",
) -> ModelingFile | None:
    """The modeling file for evidence, from the first source that has it (see the module's notes), or
    None where none has it. `config_path` is the config.json read (or its folder); `repo` and
    `revision` the Hub repo it came from, for the download. A --modeling file is taken as it is,
    whatever the config names; otherwise the config must have an auto_map."""
    found = _find_modeling(
        config, modeling, modeling_revision, config_path, repo, revision, hub_options, where
    )
    return None if found is None else replace(found, config=dict(config))


def _find_modeling(
    config: Mapping[str, Any],
    modeling: Path | None,
    modeling_revision: str | None,
    config_path: Path | None,
    repo: str | None,
    revision: str | None,
    hub_options: HubOptions | None,
    where: str,
) -> ModelingFile | None:
    if modeling is not None:
        model_class = None
        if isinstance(config.get("auto_map"), dict):
            try:
                model_class = auto_map_entry(config, where)[1]
            except ModelingError:
                pass  # the file given is read for what it has
        revision = modeling_revision or _commit_of(modeling)  # a file in the Hub cache says its commit
        return read_modeling_file(modeling, revision=revision, model_class=model_class)
    name, model_class = auto_map_entry(config, where)
    if config_path is not None:
        folder = config_path if _is_dir(config_path) else config_path.parent
        beside = folder / name
        if os.path.lexists(beside):
            # a Hub cache snapshot (…/snapshots/<commit>/) says its commit; a plain folder does not
            commit = folder.name if _COMMIT.fullmatch(folder.name) else None
            return read_modeling_file(
                beside, revision=commit, origin="beside config.json", model_class=model_class
            )
    if repo is not None:
        path = download_modeling(repo, _commit_of(config_path) or revision, name, hub_options)
        commit = path.parent.name if _COMMIT.fullmatch(path.parent.name) else None
        return read_modeling_file(path, revision=commit, origin="the Hub", model_class=model_class)
    return None


def absent_message(config: Mapping[str, Any], repo: str | None) -> str:
    """What a page says where there is no modeling file: what evidence needs and how to get it.

    >>> print(absent_message({"auto_map": {"AutoModel": "modeling_deepseek.DeepseekV3Model"}}, "moonshotai/Kimi-K2-Instruct"))
    code evidence needs modeling_deepseek.py: `hf download moonshotai/Kimi-K2-Instruct modeling_deepseek.py config.json --local-dir DIR` then --config DIR, or --modeling FILE
    """
    try:
        name = auto_map_entry(config)[0]
    except ModelingError:  # nothing to download by name
        return (
            "code evidence needs the model's modeling file: config.json has no auto_map naming it; give it "
            "with --modeling FILE"
        )
    source = repo or "REPO"
    return (
        f"code evidence needs {name}: `hf download {source} {name} config.json --local-dir DIR` "
        "then --config DIR, or --modeling FILE"
    )


def download_modeling(
    repo: str, revision: str | None, filename: str, options: HubOptions | None = None
) -> Path:
    """The modeling file of repo@revision through the Hub cache (only that file), as kimicount.hub
    fetches config.json: one deadline, its errors as one-line SourceErrors, the cached copy when the
    Hub cannot be reached."""
    from kimicount.source import hub_module

    hub = hub_module()  # checks the HF_* variables, then imports huggingface_hub
    from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache

    from kimicount.hub_transport import Operation, Unreachable, capped, run

    where = hub.repo_label(repo, revision)

    def work(operation: Operation) -> Path:
        operation.status(f"fetching {filename} of {where} from {constants.ENDPOINT}")
        with hub.hub_errors(repo, revision, filename):
            try:
                with capped(MAX_MODELING_BYTES, "modeling file"):
                    path = hf_hub_download(repo, filename, revision=revision, token=operation.options.token)
                return Path(path)
            except Unreachable as error:
                cached = try_to_load_from_cache(repo, filename, revision=revision)
                if not isinstance(cached, str):
                    raise
                operation.options.note(
                    f"cannot reach {constants.ENDPOINT} ({error}); {filename} from the cache"
                )
                return Path(cached)

    return run(options or HubOptions(), where, work)


def _commit_of(config_path: Path | None) -> str | None:
    """The commit of a config.json in the Hub cache (…/snapshots/<commit>/config.json)."""
    if config_path is None:
        return None
    folder = config_path if _is_dir(config_path) else config_path.parent
    return folder.name if _COMMIT.fullmatch(folder.name) else None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long: not a folder that can be read
        return False


@dataclass(frozen=True)
class EvidenceSources:
    """The files a model's evidence is read from: config.json (its text and the commit it is at, when
    known), and the modeling file's index, or why there is none and how to get it (`absent`)."""

    config: dict[str, Any]
    config_text: str
    config_revision: str | None
    modeling: ModelingFile | None
    index: ModelingIndex | None
    absent: str | None

    def config_lines(self, keys: Iterable[str]) -> list[Evidence]:
        """The config.json lines of these top-level keys (those that are there), in the order asked."""
        return config_evidence(self.config_text, keys, revision=self.config_revision)


def load_sources(
    *,
    config: Path | None = None,
    repo: str | None = None,
    revision: str | None = None,
    modeling: Path | None = None,
    modeling_revision: str | None = None,
    hub_options: HubOptions | None = None,
) -> EvidenceSources:
    """The evidence sources for the CLI's model options: the bundled Kimi-K2-Instruct config (nothing
    named), a `--config` file or folder, or a `--repo` (config.json from the Hub cache, the modeling
    file beside it or fetched at its commit); `--modeling FILE` over any of them."""
    if config is not None and repo is not None:
        raise UsageError("name the model once: --config or --repo, not both")
    config_path: Path | None = None
    if repo is not None:
        from kimicount.source import hub_module

        config_path = hub_module().download_config(repo, revision, hub_options)
    elif config is not None:
        config_path = config / "config.json" if _is_dir(config) else config
    if config_path is None:
        text = _BUNDLED_CONFIG.read_text(encoding="utf-8")
        where = f"bundled {BUNDLED_MODEL} config.json"
    else:
        text = _config_text(config_path)
        where = str(config_path)
    parsed = parse_json(text, where, ConfigError)
    if not isinstance(parsed, dict):
        raise ConfigError(f"{where}: expected a JSON object, found a JSON {type(parsed).__name__}")
    found = find_modeling(
        parsed,
        modeling=modeling,
        modeling_revision=modeling_revision,
        config_path=config_path,
        repo=repo,
        revision=revision,
        hub_options=hub_options,
        where=where,
    )
    index = found.index() if found is not None else None
    absent = (
        None
        if found is not None
        else absent_message(parsed, repo or (BUNDLED_MODEL if config is None else None))
    )
    return EvidenceSources(parsed, text, _commit_of(config_path), found, index, absent)


_BUNDLED_CONFIG = Path(__file__).resolve().parent.parent / "data" / "kimi-k2-instruct.json"


def _config_text(path: Path) -> str:
    data = read_capped(path, MAX_CONFIG_BYTES, "config.json", ConfigError)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 ({error.reason} at byte {error.start:,})") from None
