"""Model families: the registry that picks, from a config's model_type (or its architectures), the
module that knows that layout.

A family module maps a config to its frozen spec (`spec_from_config`), the spec to the component tree
with its checkpoint tensors and their storage roles (`build_anatomy`), and the spec to its cache
groups (`cache_groups`, kimicount.cache_groups). Everything downstream reads the tree and the groups.

    >>> family_of(k2).name, [f.name for f in FAMILIES]
    ('deepseek_v3', ['deepseek_v3', 'kimi_linear', 'deepseek_v4'])

Multimodal wrappers (Kimi K2.5 `kimi_k25`, Kimi K3 `kimi_k3`) keep the language model under
`text_config`; the wrapper's model_type names the family. A command that cannot serve a family yet
says so in one line (`require_command`), exit 2.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kimicount.errors import ConfigError, UsageError

#: Every command; a family lists those that serve it.
ALL_COMMANDS = frozenset(
    {
        "params",
        "kv-cache",
        "verify",
        "measure",
        "plan",
        "gguf",
        "flops",
        "models",
        "show",
        "explore",
        "compare",
    }
)


@dataclass(frozen=True)
class Family:
    """One layout kimicount models: the model_type values whose configs it reads (language models,
    then multimodal wrappers holding one under text_config), the `architectures` class names that
    stand for them when model_type is missing, its module, and the commands that serve it."""

    name: str
    title: str
    model_types: tuple[str, ...]
    wrappers: tuple[str, ...]
    architectures: tuple[str, ...]
    module: str
    commands: frozenset[str]

    def load(self) -> ModuleType:
        """The family module, imported on first use (params pays only for its own family)."""
        return importlib.import_module(self.module)


FAMILIES = (
    Family(
        "deepseek_v3",
        "the DeepSeek-V3 layout: MLA + DeepSeek MoE",
        ("kimi_k2", "deepseek_v3", "deepseek_v32", "deepseek_v2", "glm_moe_dsa"),
        ("kimi_k25",),
        (
            "DeepseekV3ForCausalLM",
            "DeepseekV32ForCausalLM",
            "DeepseekV2ForCausalLM",
            "GlmMoeDsaForCausalLM",
        ),
        "kimicount.families.deepseek_v3",
        ALL_COMMANDS,
    ),
    Family(
        "kimi_linear",
        "the Kimi Linear layout: KDA + MLA, (latent) MoE",
        ("kimi_linear",),
        ("kimi_k3",),
        ("KimiLinearForCausalLM", "KimiK3ForConditionalGeneration"),
        "kimicount.families.kimi_linear",
        frozenset(
            {"params", "kv-cache", "verify", "models", "flops", "show", "explore", "plan", "compare", "gguf"}
        ),
    ),
    Family(
        "deepseek_v4",
        "the DeepSeek V4 layout: compressed attention, hyper-connections, FP4 experts",
        ("deepseek_v4",),
        (),
        ("DeepseekV4ForCausalLM",),
        "kimicount.families.deepseek_v4",
        frozenset({"params", "kv-cache", "verify", "models", "flops", "show", "explore", "plan"}),
    ),
)

_BY_NAME = {family.name: family for family in FAMILIES}


def known_model_types() -> tuple[str, ...]:
    """Every model_type a family reads, language models first."""
    return tuple(t for f in FAMILIES for t in f.model_types) + tuple(t for f in FAMILIES for t in f.wrappers)


def family_for_config(config: Mapping[str, Any], where: str) -> Family:
    """The family of a parsed config: by its model_type, else (no model_type) by its architectures;
    an unknown one is refused naming the known model types.

    >>> family_for_config({"model_type": "kimi_k3"}, "config.json").name
    'kimi_linear'
    >>> family_for_config({"model_type": "llama"}, "config.json")
    Traceback (most recent call last):
    kimicount.errors.ConfigError: config.json: key 'model_type': unsupported model type 'llama' (supported: \
kimi_k2, deepseek_v3, deepseek_v32, deepseek_v2, glm_moe_dsa, kimi_linear, deepseek_v4, kimi_k25, kimi_k3)
    """
    from kimicount.reading import short_json

    supported = ", ".join(known_model_types())
    model_type = config.get("model_type")
    if model_type is None:
        architectures = config.get("architectures")
        names = architectures if isinstance(architectures, list) else []
        for family in FAMILIES:
            if any(name in family.architectures for name in names if isinstance(name, str)):
                return family
        raise ConfigError(f"{where}: key 'model_type': missing (required; supported: {supported})")
    if not isinstance(model_type, str):
        raise ConfigError(f"{where}: key 'model_type': expected a string, found {short_json(model_type)}")
    for family in FAMILIES:
        if model_type in family.model_types or model_type in family.wrappers:
            return family
    from kimicount.reading import shorten

    raise ConfigError(
        f"{where}: key 'model_type': unsupported model type '{shorten(model_type, 80)}' (supported: {supported})"
    )


def spec_from_config(config: Any, *, name: str, where: str) -> Any:
    """Validate a parsed config.json with its family's rules and return the family's spec."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: expected a JSON object at the top level, found {type(config).__name__}")
    family = family_for_config(config, where)
    return family.load().spec_from_config(config, name=name, where=where)


def family_of(spec: Any) -> Family:
    """The family that built a spec."""
    return _BY_NAME[spec.FAMILY]


def build_anatomy(spec: Any) -> Any:
    """The component trees (kimicount.anatomy.Anatomy) of the model the spec describes."""
    return family_of(spec).load().build_anatomy(spec)


def cache_groups(spec: Any, include_mtp: bool = False, **layout: str) -> tuple[Any, ...]:
    """The cache groups (kimicount.cache_groups.CacheGroup) of the model: with `include_mtp`, the
    multi-token-prediction layers' caches too (DeepSeek-V3). `layout` are a family's own cache
    choices (DeepSeek V4: the cache dtype, the indexer keys' dtype)."""
    return family_of(spec).load().cache_groups(spec, include_mtp, **layout)


def family_flows(spec: Any) -> Any:
    """The activations into and out of each component (kimicount.flow.Flow by component name), for a
    family whose blocks are its own (DeepSeek V4); None for the MLA families, which kimicount.flow
    describes itself."""
    module = family_of(spec).load()
    return module.component_flows(spec) if hasattr(module, "component_flows") else None


def family_attention(spec: Any, tokens: int, context: int) -> Any:
    """The attention's own FLOPs per layer kind for a family whose attention is not MLA (DeepSeek V4's
    attention_flops); None for the MLA families, whose three ways kimicount.flow counts."""
    module = family_of(spec).load()
    return module.attention_flops(spec, tokens, context) if hasattr(module, "attention_flops") else None


def spec_for_names(spec: Any, names: Any) -> Any:
    """The spec whose tree names tensors as a checkpoint with these names does: a family whose
    checkpoints come in two namings (DeepSeek V4: DeepSeek's own and transformers') picks one; any
    other keeps the spec as it is."""
    module = family_of(spec).load()
    return module.spec_for_names(spec, names) if hasattr(module, "spec_for_names") else spec


def require_command(spec: Any, command: str) -> None:
    """Refuse, in one line naming the command and the model, a command that does not serve the
    spec's family yet (a UsageError: exit 2).

    >>> require_command(k2, "plan")
    """
    family = family_of(spec)
    if command not in family.commands:
        serving = ", ".join(sorted(family.commands))
        raise UsageError(
            f"{command}: {spec.name} ({spec.model_type}, {family.title}) is not supported by this command "
            f"yet; for this model kimicount has: {serving}"
        )
