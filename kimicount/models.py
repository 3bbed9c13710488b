"""The models kimicount knows by name: a config.json for each, shipped in kimicount/data, so that
`kimicount params moonshotai/Kimi-K2-Thinking` or `kimicount plan deepseek-v3` needs no Hub.

Each entry says where its config came from and what it is. Only some are the raw config.json of the
repo; others are the same values as transformers re-serializes them, or are derived from a sibling's
config (DeepSeek-R1 from V3, Kimi-K2-Thinking from K2-Instruct plus its own quantization_config):
`provenance` says which, and a derived config is built here from its base file and the stated changes,
never stored as if it were the raw file. None was downloaded from the Hub; the commit each was read at
was not recorded, so `release` names the release instead.

Names resolve case-insensitively: the Hub repo id (`moonshotai/Kimi-K2-Instruct`), the name alone
(`Kimi-K2-Instruct`) or a short name (`kimi-k2`, `k2-thinking`, `deepseek-v3`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicount.spec import ModelSpec, spec_from_config

DATA = Path(__file__).parent / "data"  # read beside this file: importlib.resources costs more start-up

#: What a bundled config is, in a word (the `kind` of an entry) and in the words `kimicount models` uses.
KINDS = {
    "raw": "the raw config.json",
    "re-serialized": "its values as transformers re-serializes them (keys added or renamed), not the raw file",
    "values": "its values, from a public test fixture that says it holds the real config; not the raw file",
    "derived": "derived from a sibling's config (see provenance)",
}


@dataclass(frozen=True)
class KnownModel:
    """One bundled model: its Hub repo, the release its config is from, the short names it answers to,
    and how its config is made: `base` (a file in kimicount/data) with `overrides` (top-level keys
    replaced, a value or the name of another data file) applied."""

    name: str
    repo: str
    release: str
    kind: str
    summary: str  # what the config is, in a few words (the table); `provenance` says it in full
    provenance: str
    base: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()

    @property
    def revision(self) -> None:
        """The commit the config was read at: not recorded for any (see `release`)."""
        return None

    def config(self) -> dict[str, Any]:
        """The config.json this entry stands for, as a parsed object."""
        config = _read(self.base)
        for key, value in self.overrides.items():
            config[key] = _read(value) if isinstance(value, str) and value.endswith(".json") else value
        return config

    def spec(self) -> ModelSpec:
        where = f"bundled {self.repo} config ({self.base}" + (" + changes" if self.overrides else "") + ")"
        return spec_from_config(self.config(), name=self.repo, where=where)

    def config_text(self) -> str:
        """The config as text, for the lines the explorer cites: the bundled file itself where it is the
        raw config.json, else its values laid out by json.dumps (indent 2), which no repo holds."""
        if self.kind == "raw" and not self.overrides:
            return (DATA / self.base).read_text(encoding="utf-8")
        return json.dumps(self.config(), indent=2) + "\n"

    def names(self) -> tuple[str, ...]:
        """Every name this entry answers to, lower-case."""
        return tuple(n.lower() for n in (self.repo, self.repo.split("/")[-1], self.name, *self.aliases))


def _read(file: str) -> dict[str, Any]:
    return json.loads((DATA / file).read_text(encoding="utf-8"))


#: Kimi K2-Instruct's rope_scaling, with 0905's factor: 64 × 4,096 original positions = 262,144 tokens.
_K2_0905_ROPE = {
    "beta_fast": 1.0,
    "beta_slow": 1.0,
    "factor": 64.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn",
}

#: Every bundled model, in the order `kimicount models` lists them. Sources: the shared reference data's
#: PROVENANCE.md (each file was read from a public report that printed it while reading the checkpoint).
MODELS: tuple[KnownModel, ...] = (
    KnownModel(
        "kimi-k2-instruct",
        "moonshotai/Kimi-K2-Instruct",
        "July 2025 release (61 shards)",
        "raw",
        "raw config.json",
        "the raw config.json",
        "kimi-k2-instruct.json",
        aliases=("kimi-k2", "k2", "k2-instruct"),
    ),
    KnownModel(
        "kimi-k2-instruct-0905",
        "moonshotai/Kimi-K2-Instruct-0905",
        "September 2025 release (62 shards)",
        "derived",
        "K2-Instruct's + 256K rope_scaling",
        "Kimi-K2-Instruct's config with 0905's 256K context: rope_scaling factor 64 over 4,096 original "
        "positions (a public inspection report shows it), so max_position_embeddings 262,144",
        "kimi-k2-instruct.json",
        {"rope_scaling": _K2_0905_ROPE, "max_position_embeddings": 64 * 4096},
        aliases=("k2-0905", "kimi-k2-0905", "k2-instruct-0905"),
    ),
    KnownModel(
        "kimi-k2-thinking",
        "moonshotai/Kimi-K2-Thinking",
        "November 2025 release",
        "derived",
        "K2-Instruct's + its INT4 quantization",
        "Kimi-K2-Instruct's keys with K2-Thinking's published quantization_config (compressed-tensors "
        "INT4, groups of 32), quoted by a secondary source; its context keys are K2-Instruct's",
        "kimi-k2-instruct.json",
        {"quantization_config": "kimi-k2-thinking.quantization_config.json"},
        aliases=("k2-thinking",),
    ),
    KnownModel(
        "kimi-k2.5",
        "moonshotai/Kimi-K2.5",
        "first release",
        "raw",
        "raw config.json",
        "the raw config.json (language model under text_config)",
        "kimi-k2.5.json",
        aliases=("k2.5",),
    ),
    KnownModel(
        "kimi-k2.6",
        "moonshotai/Kimi-K2.6",
        "2026 release (INT4)",
        "derived",
        "K2.5's raw config.json",
        "Kimi-K2.5's raw config.json, with its INT4 quantization (compressed-tensors, groups of 32): K2.6 has "
        "K2.5's architecture (NVIDIA's K2.6-NVFP4 config has K2.5's text_config and vision_config values in "
        "every key that changes a count) and Moonshot releases it in INT4 as it did K2.5",
        "kimi-k2.5.json",
        aliases=("k2.6",),
    ),
    KnownModel(
        "kimi-k2.6-nvfp4",
        "nvidia/Kimi-K2.6-NVFP4",
        "2026 release (ModelOpt NVFP4)",
        "raw",
        "raw config.json (aiconfigurator copy)",
        "the raw config.json as ai-dynamo/aiconfigurator stores it (commit 095f58a): K2.5's architecture, "
        "ModelOpt NVFP4 (groups of 16) on the routed experts of layers 1–60 only",
        "kimi-k2.6-nvfp4.json",
        aliases=("k2.6-nvfp4",),
    ),
    KnownModel(
        "kimi-k2.7-code",
        "moonshotai/Kimi-K2.7-Code",
        "2026 release (INT4)",
        "derived",
        "K2.5's raw config.json",
        "Kimi-K2.5's raw config.json, with its INT4 quantization (compressed-tensors, groups of 32): "
        "K2.7-Code has K2.5's architecture (NVIDIA's K2.7-Code-NVFP4 config has K2.5's values in every key "
        "that changes a count) and Moonshot releases it in INT4 as it did K2.5",
        "kimi-k2.5.json",
        aliases=("k2.7-code",),
    ),
    KnownModel(
        "kimi-k2.7-code-nvfp4",
        "nvidia/Kimi-K2.7-Code-NVFP4",
        "2026 release (ModelOpt NVFP4)",
        "raw",
        "raw config.json (aiconfigurator copy)",
        "the raw config.json as ai-dynamo/aiconfigurator stores it (commit 095f58a): K2.5's architecture, "
        "ModelOpt NVFP4 (groups of 16) on the routed experts of layers 1–60 only",
        "kimi-k2.7-code-nvfp4.json",
        aliases=("k2.7-code-nvfp4",),
    ),
    KnownModel(
        "deepseek-v3",
        "deepseek-ai/DeepSeek-V3",
        "December 2024 release",
        "re-serialized",
        "re-serialized values",
        "the config as transformers 5.7 re-serializes it: the same values, not the raw file",
        "deepseek-v3.json",
        aliases=("v3",),
    ),
    KnownModel(
        "deepseek-r1",
        "deepseek-ai/DeepSeek-R1",
        "January 2025 release",
        "derived",
        "DeepSeek-V3's values",
        "DeepSeek-V3's values (R1 has V3's architecture; its config differs in no key that changes a count)",
        "deepseek-v3.json",
        aliases=("r1",),
    ),
    KnownModel(
        "deepseek-v3.1",
        "deepseek-ai/DeepSeek-V3.1",
        "August 2025 release",
        "re-serialized",
        "re-serialized values",
        "the config as transformers re-serializes it (scale_fmt ue8m0): the same values, not the raw file",
        "deepseek-v3.1.json",
        aliases=("v3.1",),
    ),
    KnownModel(
        "deepseek-v3.2",
        "deepseek-ai/DeepSeek-V3.2",
        "final release (deepseek_v32)",
        "raw",
        "raw config.json",
        "the raw config.json",
        "deepseek-v3.2.json",
        aliases=("v3.2",),
    ),
    KnownModel(
        "deepseek-v3.2-exp",
        "deepseek-ai/DeepSeek-V3.2-Exp",
        "September 2025 release",
        "derived",
        "DeepSeek-V3.2's raw config.json",
        "DeepSeek-V3.2's raw config.json (V3.2-Exp has the same architecture)",
        "deepseek-v3.2.json",
        aliases=("v3.2-exp",),
    ),
    KnownModel(
        "deepseek-v2-lite",
        "deepseek-ai/DeepSeek-V2-Lite",
        "May 2024 release",
        "re-serialized",
        "re-serialized values",
        "the config as transformers 4.57 re-serializes it: the same values, not the raw file",
        "deepseek-v2-lite.json",
        aliases=("v2-lite",),
    ),
    KnownModel(
        "deepseek-v2-lite-chat",
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
        "May 2024 release",
        "derived",
        "DeepSeek-V2-Lite's values",
        "DeepSeek-V2-Lite's re-serialized values (Lite-Chat has the same architecture)",
        "deepseek-v2-lite.json",
        aliases=("v2-lite-chat",),
    ),
    KnownModel(
        "kimi-linear-48b-a3b",
        "moonshotai/Kimi-Linear-48B-A3B-Instruct",
        "October 2025 release (Hub revision e1df551, 20 shards)",
        "values",
        "values from public copies",
        "the architecture keys as several public copies print them (a Swift test holding the config.json "
        "of an MLX conversion, its quantization block left out; Rust and Python test fixtures agree key for "
        "key); not the raw file",
        "kimi-linear-48b-a3b.values.json",
        aliases=("kimi-linear", "kimi-linear-48b", "kimi-linear-instruct"),
    ),
    KnownModel(
        "kimi-k3",
        "moonshotai/Kimi-K3",
        "July 2026 release (96 shards)",
        "re-serialized",
        "config as a public project stores it",
        "the Hugging Face config.json as ai-dynamo/aiconfigurator stores it (commit 095f58a; the language "
        "model under text_config with transformers' defaults written out): the same values, not the raw file",
        "kimi-k3.json",
        aliases=("k3",),
    ),
    KnownModel(
        "glm-5",
        "zai-org/GLM-5",
        "2026 release (BF16)",
        "raw",
        "raw config.json (aiconfigurator copy)",
        "the raw config.json as ai-dynamo/aiconfigurator stores it (commit 095f58a)",
        "glm-5.json",
    ),
    KnownModel(
        "glm-5-fp8",
        "zai-org/GLM-5-FP8",
        "2026 release (FP8)",
        "raw",
        "raw config.json (aiconfigurator copy)",
        "the raw config.json as ai-dynamo/aiconfigurator stores it (commit 095f58a): GLM-5 with DeepSeek's "
        "FP8 (128 × 128 blocks)",
        "glm-5-fp8.json",
    ),
    KnownModel(
        "glm-5.1",
        "zai-org/GLM-5.1",
        "2026 release (BF16)",
        "raw",
        "raw config.json (aiconfigurator copy)",
        "the raw config.json as ai-dynamo/aiconfigurator stores it (commit 095f58a)",
        "glm-5.1.json",
    ),
    KnownModel(
        "glm-5.2",
        "zai-org/GLM-5.2",
        "2026 release (BF16)",
        "raw",
        "raw config.json (aiconfigurator copy)",
        "the raw config.json as ai-dynamo/aiconfigurator stores it (commit 095f58a): indexer_types, 21 layers "
        "with their own indexer and 57 sharing one",
        "glm-5.2.json",
    ),
    KnownModel(
        "deepseek-v4-flash",
        "deepseek-ai/DeepSeek-V4-Flash",
        "April 2026 preview release",
        "re-serialized",
        "config as a public project stores it",
        "the Hugging Face config.json as ai-dynamo/aiconfigurator stores it (commit 095f58a, "
        "model_configs/deepseek-ai--DeepSeek-V4-Flash_config.json), copied byte for byte; whether "
        "that is the raw file is not known",
        "deepseek-v4-flash.json",
        aliases=("v4-flash", "deepseek-v4"),
    ),
    KnownModel(
        "deepseek-v4-pro",
        "deepseek-ai/DeepSeek-V4-Pro",
        "April 2026 preview release",
        "re-serialized",
        "config as a public project stores it",
        "the Hugging Face config.json as ai-dynamo/aiconfigurator stores it (commit 095f58a, "
        "model_configs/deepseek-ai--DeepSeek-V4-Pro_config.json), copied byte for byte; whether "
        "that is the raw file is not known",
        "deepseek-v4-pro.json",
        aliases=("v4-pro",),
    ),
    KnownModel(
        "moonlight-16b-a3b",
        "moonshotai/Moonlight-16B-A3B",
        "February 2025 release",
        "values",
        "values from a test fixture",
        "values from a public test fixture that says it holds the real config; not the raw file",
        "moonlight-16b-a3b.values.json",
        aliases=("moonlight",),
    ),
)

_BY_NAME = {name: model for model in MODELS for name in model.names()}


def known_model(name: str) -> KnownModel | None:
    """The bundled model a repo id or short name names (any case), or None.

    >>> known_model("MoonshotAI/kimi-k2-thinking").repo, known_model("deepseek-v3").kind
    ('moonshotai/Kimi-K2-Thinking', 're-serialized')
    >>> known_model("org/unknown") is None
    True
    """
    return _BY_NAME.get(name.strip().lower())


def short_names() -> str:
    """The short names, for an error that lists them."""
    return ", ".join(model.name for model in MODELS)


def resolve(
    repo: str, revision: str | None, note: Callable[[str], None], from_hub: Callable[[str], ModelSpec]
) -> ModelSpec:
    """The spec a repo id or short name names: the bundled config of a known model (said in one `note`
    when a repo id was given, where the Hub's may be expected), unless a revision is asked for; then,
    and for a repo kimicount does not know, `from_hub(repo id)`. An unreachable Hub falls back to the
    bundled config of a known model, with a warning; for any other repo its error suggests --config."""
    from kimicount.errors import SourceError, UnreachableError

    known = known_model(repo)
    if known is None:
        try:
            return from_hub(repo)
        except UnreachableError as error:
            raise SourceError(
                f"{error}; {repo} is not one of the models kimicount bundles (`kimicount models` lists "
                "them): give its config.json with --config PATH"
            ) from error
    if revision is None:
        if "/" in repo:  # a repo id, where the Hub's config may be expected; a short name asks for this one
            note(bundled_note(known))
        return known.spec()
    try:
        return from_hub(known.repo)
    except UnreachableError as error:
        note(f"warning: {error}; using the bundled config of {known.repo} instead of revision {revision}")
        return known.spec()


def bundled_note(known: KnownModel) -> str:
    """The line that says a repo id was read from its bundled config, not from the Hub."""
    return (
        f"{known.repo}: the bundled config ({known.kind}; `kimicount models` says where it is from); "
        "--revision REV reads the Hub's"
    )


def spec_for_config_option(path: Path, read: Callable[[Path], ModelSpec]) -> ModelSpec:
    """--config PATH, or a known model's name given there (`--config deepseek-v3`) when no such file is."""
    known = None if os.path.lexists(path) else known_model(str(path))
    return known.spec() if known is not None else read(path)


def looks_like_folder(repo: str) -> bool:
    """A repo argument that is a local path, not a Hub id (ORG/NAME): /data/k2, ./k2, ~/k2, a/b/c.

    >>> looks_like_folder("/some/dir"), looks_like_folder("moonshotai/Kimi-K2-Instruct")
    (True, False)
    """
    return repo.startswith(("/", ".", "~")) or repo.count("/") > 1 or "\\" in repo


def catalogue() -> list[dict[str, Any]]:
    """Every bundled model as `kimicount models --json` lists it: names, where its config is from, and
    its parameters (total and activated per token, outside any MTP module), counted from that config."""
    from kimicount.anatomy import build_anatomy

    rows = []
    for model in MODELS:
        anatomy = build_anatomy(model.spec())
        rows.append(
            {
                "name": model.name,
                "repo": model.repo,
                "aliases": list(model.aliases),
                "revision": model.revision,
                "release": model.release,
                "kind": model.kind,
                "summary": model.summary,
                "provenance": model.provenance,
                "model_type": anatomy.spec.model_type,
                "total": anatomy.total,
                "activated": anatomy.activated,
            }
        )
    return rows
