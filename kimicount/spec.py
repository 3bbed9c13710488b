"""The model spec: a frozen, validated view of config.json.

This is the only module that knows Hugging Face config keys. Everything downstream (the anatomy, the
KV-cache formulas, verification) reads a `ModelSpec`, never the raw dictionary, so a key renamed by a
new transformers release is handled here once.

    >>> spec = bundled_spec()
    >>> spec.name, spec.num_hidden_layers, spec.qk_head_dim
    ('moonshotai/Kimi-K2-Instruct', 61, 192)
    >>> spec.moe_layers[:3], spec.dense_layers
    ((1, 2, 3), (0,))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from kimicount.errors import ConfigError

#: model_type values whose architecture kimicount models (MLA attention + DeepSeek MoE).
SUPPORTED_MODEL_TYPES = ("kimi_k2", "deepseek_v3", "deepseek_v32", "deepseek_v2")

#: The model used when none is named; its config ships inside the package.
BUNDLED_MODEL = "moonshotai/Kimi-K2-Instruct"
_BUNDLED_CONFIG = "kimi-k2-instruct.json"

# DeepSeek-V3's router always has a score-correction bias (aux-loss-free balancing, topk_method
# "noaux_tc"); transformers' own DeepseekV3Config drops the key when it re-saves a config, so a missing
# topk_method means the family default rather than "no bias".
_DEFAULT_TOPK_METHOD = {"deepseek_v2": "greedy"}
_NOAUX = "noaux_tc"


_REQUIRED = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "moe_intermediate_size",
    "n_routed_experts",
    "num_experts_per_tok",
    "max_position_embeddings",
)


@dataclass(frozen=True)
class Fp8Quantization:
    """`quantization_config` with quant_method "fp8": linear weights in FP8 with one F32 scale per block."""

    fmt: str
    block: tuple[int, int]


@dataclass(frozen=True)
class Indexer:
    """DeepSeek-V3.2's lightning indexer: a small extra attention per layer that picks the keys to attend."""

    n_heads: int
    head_dim: int


@dataclass(frozen=True)
class ModelSpec:
    """Every size kimicount needs, validated. Field names are the config keys they come from."""

    name: str
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    moe_intermediate_size: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    first_k_dense_replace: int
    moe_layer_freq: int
    router_bias: bool
    tie_word_embeddings: bool
    num_nextn_predict_layers: int
    max_position_embeddings: int
    torch_dtype: str
    quantization: Fp8Quantization | None = None
    indexer: Indexer | None = None
    #: Prepended to every checkpoint tensor name (multimodal checkpoints nest the language model).
    weight_prefix: str = ""

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: content part plus rotary part (192 for Kimi K2)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def is_moe_layer(self, layer: int) -> bool:
        """DeepSeek's rule: MoE from `first_k_dense_replace` on, every `moe_layer_freq`-th layer."""
        return layer >= self.first_k_dense_replace and layer % self.moe_layer_freq == 0

    @cached_property
    def moe_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_hidden_layers) if self.is_moe_layer(i))

    @cached_property
    def dense_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_hidden_layers) if not self.is_moe_layer(i))

    @property
    def mtp_layers(self) -> tuple[int, ...]:
        """Multi-token-prediction layers are stored after the main layers (DeepSeek-V3: layer 61)."""
        first = self.num_hidden_layers
        return tuple(range(first, first + self.num_nextn_predict_layers))


class _Reader:
    """Typed access to one config dictionary; every failure names the file and the key."""

    def __init__(self, config: dict[str, Any], where: str):
        self.config = config
        self.where = where

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: key '{key}': {message}")

    def integer(self, key: str, *, minimum: int = 1, default: int | None = None) -> int:
        if key not in self.config or (self.config[key] is None and default is not None):
            if default is None:
                raise self.fail(key, "missing (required)")
            return default
        value = self.config[key]
        # bool is an int subclass in Python; `true` is never a size.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, found {json.dumps(value)}")
        if value < minimum:
            bound = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.fail(key, f"expected {bound}, found {value}")
        return value

    def optional_integer(self, key: str) -> int | None:
        """A size that may be null (q_lora_rank: null means no query compression)."""
        if self.config.get(key) is None:
            if key not in self.config:
                raise self.fail(key, "missing (required; null is allowed)")
            return None
        return self.integer(key)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.config.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, found {json.dumps(value)}")
        return value

    def string(self, key: str, default: str | None = None) -> str:
        value = self.config.get(key, default)
        if value is None:
            raise self.fail(key, "missing (required)")
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, found {json.dumps(value)}")
        return value


def spec_from_config(config: Any, *, name: str, where: str) -> ModelSpec:
    """Validate a parsed config.json and return its spec.

    `name` is what reports call the model; `where` names the file in error messages.
    """
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: expected a JSON object at the top level, found {type(config).__name__}")
    read = _Reader(config, where)

    model_type = read.string("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        supported = ", ".join(SUPPORTED_MODEL_TYPES)
        raise read.fail("model_type", f"unsupported model type '{model_type}' (supported: {supported})")

    missing = [key for key in _REQUIRED if key not in config]
    if len(missing) > 1:  # name them all at once rather than one per run
        raise ConfigError(f"{where}: missing required keys: {', '.join(missing)}")

    if read.boolean("attention_bias", False):
        raise read.fail(
            "attention_bias", "true is not supported (no released MLA model uses attention biases)"
        )

    num_hidden_layers = read.integer("num_hidden_layers")
    n_routed_experts = read.integer("n_routed_experts")
    first_k_dense_replace = read.integer("first_k_dense_replace", minimum=0, default=0)
    if first_k_dense_replace > num_hidden_layers:
        raise read.fail(
            "first_k_dense_replace",
            f"{first_k_dense_replace} is beyond num_hidden_layers ({num_hidden_layers})",
        )
    num_experts_per_tok = read.integer("num_experts_per_tok")
    if num_experts_per_tok > n_routed_experts:
        raise read.fail(
            "num_experts_per_tok",
            f"{num_experts_per_tok} is more than n_routed_experts ({n_routed_experts})",
        )

    topk_method = read.string("topk_method", _DEFAULT_TOPK_METHOD.get(model_type, _NOAUX))

    qk_nope_head_dim = read.integer("qk_nope_head_dim")
    qk_rope_head_dim = read.integer("qk_rope_head_dim")
    # transformers >= 4.56 re-saves configs with a derived qk_head_dim; it must agree with its parts.
    if "qk_head_dim" in config and read.integer("qk_head_dim") != qk_nope_head_dim + qk_rope_head_dim:
        raise read.fail(
            "qk_head_dim",
            f"{config['qk_head_dim']} is not qk_nope_head_dim + qk_rope_head_dim "
            f"({qk_nope_head_dim} + {qk_rope_head_dim})",
        )

    return ModelSpec(
        name=name,
        model_type=model_type,
        vocab_size=read.integer("vocab_size"),
        hidden_size=read.integer("hidden_size"),
        intermediate_size=read.integer("intermediate_size"),
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=read.integer("num_attention_heads"),
        q_lora_rank=read.optional_integer("q_lora_rank"),
        kv_lora_rank=read.integer("kv_lora_rank"),
        qk_nope_head_dim=qk_nope_head_dim,
        qk_rope_head_dim=qk_rope_head_dim,
        v_head_dim=read.integer("v_head_dim"),
        moe_intermediate_size=read.integer("moe_intermediate_size"),
        n_routed_experts=n_routed_experts,
        n_shared_experts=read.integer("n_shared_experts", minimum=0, default=0),
        num_experts_per_tok=num_experts_per_tok,
        first_k_dense_replace=first_k_dense_replace,
        moe_layer_freq=read.integer("moe_layer_freq", default=1),
        router_bias=topk_method == _NOAUX,
        tie_word_embeddings=read.boolean("tie_word_embeddings", False),
        num_nextn_predict_layers=read.integer("num_nextn_predict_layers", minimum=0, default=0),
        max_position_embeddings=read.integer("max_position_embeddings"),
        # transformers >= 4.56 writes "dtype"; older releases and the Hub originals "torch_dtype".
        torch_dtype=read.string("torch_dtype", config.get("dtype", "bfloat16")),
        quantization=_quantization(read),
        indexer=_indexer(read, model_type),
    )


def _quantization(read: _Reader) -> Fp8Quantization | None:
    raw = read.config.get("quantization_config")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise read.fail("quantization_config", f"expected an object, found {json.dumps(raw)}")
    sub = _Reader(raw, f"{read.where} quantization_config")
    method = sub.string("quant_method")
    if method != "fp8":
        raise sub.fail("quant_method", f"unsupported quantization '{method}' (supported: fp8)")
    block = raw.get("weight_block_size")
    if (
        not isinstance(block, list)
        or len(block) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        raise sub.fail("weight_block_size", f"expected two positive integers, found {json.dumps(block)}")
    return Fp8Quantization(fmt=sub.string("fmt", "e4m3"), block=(block[0], block[1]))


def _indexer(read: _Reader, model_type: str) -> Indexer | None:
    # DeepSeek-V3.2 is the only family member with a lightning indexer; its config names the sizes.
    if model_type != "deepseek_v32" and "index_n_heads" not in read.config:
        return None
    return Indexer(n_heads=read.integer("index_n_heads"), head_dim=read.integer("index_head_dim"))


def load_config_file(path: Path) -> Any:
    """Read and parse a config.json file; errors name the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"{path}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from error


def spec_from_path(path: Path) -> ModelSpec:
    """The spec of a config.json file, or of the config.json inside a folder."""
    if path.is_dir():
        path = path / "config.json"
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return spec_from_config(load_config_file(path), name=name, where=str(path))


def bundled_spec() -> ModelSpec:
    """moonshotai/Kimi-K2-Instruct, from the config.json shipped with kimicount."""
    text = resources.files("kimicount.data").joinpath(_BUNDLED_CONFIG).read_text(encoding="utf-8")
    return spec_from_config(
        json.loads(text), name=BUNDLED_MODEL, where=f"bundled {BUNDLED_MODEL} config.json"
    )
