"""The model spec: a frozen, validated view of config.json.

Only the spec modules know Hugging Face config keys: this one (the DeepSeek-V3 family's `ModelSpec`,
the readers every family shares, `quantization_config`, the MLA sub-spec) and the family modules that
build their own specs with them (kimicount.families). Everything downstream (the anatomy, the KV-cache
formulas, verification) reads a spec, never the raw dictionary, so a key renamed by a new transformers
release is handled here once.

    >>> spec = bundled_spec()
    >>> spec.name, spec.num_hidden_layers, spec.qk_head_dim
    ('moonshotai/Kimi-K2-Instruct', 61, 192)
    >>> [spec.is_moe_layer(i) for i in range(3)]
    [False, True, True]
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Protocol

from kimicount.errors import ConfigError
from kimicount.reading import parse_json, read_capped, short_json, shorten

#: model_type values of the DeepSeek-V3 family (MLA attention + DeepSeek MoE; GLM-5's glm_moe_dsa is
#: DeepSeek-V3.2's layout with other dimensions).
SUPPORTED_MODEL_TYPES = ("kimi_k2", "deepseek_v3", "deepseek_v32", "deepseek_v2", "glm_moe_dsa")
#: Multimodal wrappers: the language model under `text_config`, a vision tower under `vision_config`.
MULTIMODAL_MODEL_TYPES = ("kimi_k25",)
#: Where a multimodal checkpoint keeps the language model's tensors.
LANGUAGE_MODEL_PREFIX = "language_model."

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
    # transformers' DeepseekV3Config defaults these to 1 and 3; a missing key must not count as 0
    "n_shared_experts",
    "first_k_dense_replace",
    "max_position_embeddings",
)


# --- bounds ----------------------------------------------------------------------------------------
# Every size is a tensor dimension or a count of tensors, and is checked before anything is built from
# it: a config from anywhere must not make kimicount hang or fill the memory.

#: The largest size: tensor dimensions and element counts are 64-bit signed integers in torch and in
#: engines (safetensors stores them as u64), so nothing larger describes a tensor.
MAX_SIZE = 2**63 - 1
#: The most layers (num_hidden_layers + num_nextn_predict_layers, and vt_num_hidden_layers): kimicount
#: lists every layer (`params --by layer`, the `layers` of the JSON, verify's per-layer counts).
#: Kimi K2 has 61 + 0, DeepSeek-V3 61 + 1.
MAX_LAYERS = 2**16
#: The most routed experts over all layers (n_routed_experts × layers): verify and the INT4 storage model
#: name each expert's tensors one by one. Kimi K2 has 384 × 60 MoE layers = 23,040.
MAX_EXPERTS = 2**18


def _show(value: int) -> str:
    """A size for a message: with thousands separators, or its number of digits when it is very long."""
    return f"{value:,}" if abs(value) < 10**30 else f"a number of {len(str(abs(value))):,} digits"


@dataclass(frozen=True)
class Fp8Quantization:
    """`quantization_config` with quant_method "fp8": linear weights in FP8 with one F32 scale per block.

    A family whose checkpoints store the block scales otherwise says so in the last three fields:
    DeepSeek V4 keeps one F8_E8M0 scale per block as `X.scale` (not `X.weight_scale_inv`) and its routed
    experts in FP4 (`expert_dtype`; transformers' DeepseekV4Config moves that key into the
    quantization_config). The reader of quantization_config leaves them at DeepSeek-V3's storage."""

    fmt: str
    block: tuple[int, int]
    scale_dtype: str = "F32"
    #: How a weight's scale is named: appended to `X.weight` (`_scale_inv`), or replacing `.weight` (`.scale`).
    scale_suffix: str = "_scale_inv"
    #: The routed experts' storage when it is not the Linears' FP8: "fp4" (E2M1 values, E8M0 scales).
    expert_dtype: str | None = None


#: FP8 formats of DeepSeek's quantization_config `fmt`.
FP8_FORMATS = ("e4m3", "e5m2")


@dataclass(frozen=True)
class OtherQuantization:
    """A quantization kimicount does not model (GPTQ, AWQ, ...): parameters and caches are still
    counted; weight bytes and checkpoint verification are not."""

    method: str


@dataclass(frozen=True)
class PackedQuantization:
    """compressed-tensors "pack-quantized": a targeted Linear's integer weights packed into int32
    (32 / num_bits values each), one scale per `group_size` inputs (per row for strategy "channel"),
    symmetric (no zero points). `targets` and `ignore` say which modules were meant to be packed:
    class names ("Linear"), module names, or `re:` regexes, as compressed-tensors matches them."""

    num_bits: int
    group_size: int | None  # None: one scale per output row
    targets: tuple[str, ...]
    ignore: tuple[str, ...]
    #: The config the patterns come from, for errors.
    where: str = field(default="quantization_config", compare=False, repr=False)

    @property
    def pack_factor(self) -> int:
        """Values per int32."""
        return 32 // self.num_bits

    def packs_each(self, modules: Iterable[str]) -> list[bool]:
        """For each Linear module (a dotted name, e.g. model.layers.1.mlp.experts.0.up_proj), whether the
        config means it to be packed; all under one deadline on the `re:` patterns (kimicount.matching).

        >>> q = PackedQuantization(4, 32, ("Linear",), ("lm_head", "re:.*self_attn.*"))
        >>> q.packs_each(["model.layers.1.mlp.experts.0.up_proj", "model.layers.1.self_attn.o_proj", "lm_head"])
        [True, False, False]
        """
        from kimicount.matching import packed

        ignore, targets = self._patterns
        return packed(ignore, targets, "Linear" in self.targets, modules, self.where)

    @cached_property
    def _patterns(self):
        from kimicount.matching import Patterns

        return Patterns.of(self.ignore), Patterns.of(t for t in self.targets if t != "Linear")


@dataclass(frozen=True)
class Fp4Quantization:
    """4-bit floating-point Linears (E2M1, two to a U8 byte along the input) with one scale per
    `group_size` inputs, as NVIDIA ModelOpt (`quant_method: modelopt`, `quant_algo: NVFP4`) or
    compressed-tensors (`nvfp4-pack-quantized`, `mxfp4-pack-quantized`) store them:

    - `scheme` "nvfp4": groups of 16 with an F8_E4M3 scale each, and one F32 global scale per tensor;
      "mxfp4": groups of 32 with a U8 E8M0 (power-of-two) scale each, no global scale.
    - `producer` "modelopt" keeps the name `X.weight` for the U8 pairs, with `X.weight_scale`,
      `X.weight_scale_2` (global) and `X.input_scale`; "compressed-tensors" writes `X.weight_packed`,
      `X.weight_scale`, `X.weight_global_scale` and `X.input_global_scale` (kimicount.storage.fp4_layout).
    - `input_scale`: the activations are quantized with a static scale, stored per Linear (W4A4).
    - `targets` and `ignore`: which Linears are stored so, as compressed-tensors patterns (class names,
      module names, `re:` expressions); for ModelOpt every Linear but those its `exclude_modules`
      wildcards name (`ignore` then holds the wildcards).
    """

    scheme: str  # nvfp4 | mxfp4
    producer: str  # modelopt | compressed-tensors
    group_size: int
    scale_dtype: str  # F8_E4M3 (nvfp4) | U8 (mxfp4: E8M0 exponents)
    input_scale: bool
    targets: tuple[str, ...]
    ignore: tuple[str, ...] = field(repr=False)
    #: The config the patterns come from, for errors.
    where: str = field(default="quantization_config", compare=False, repr=False)

    @property
    def global_scale(self) -> bool:
        """NVFP4's second-level scale: one F32 per tensor over its F8_E4M3 group scales."""
        return self.scheme == "nvfp4"

    def quantizes_each(self, modules: Iterable[str]) -> list[bool]:
        """For each Linear module name, whether the config stores it in FP4 (kimicount.matching).

        >>> q = Fp4Quantization("nvfp4", "modelopt", 16, "F8_E4M3", True, ("Linear",), ("lm_head",))
        >>> q.quantizes_each(["model.layers.1.mlp.experts.0.up_proj", "lm_head"])
        [True, False]
        """
        from kimicount.matching import excluded, packed

        if self.producer == "modelopt":
            return [not skip for skip in excluded(self._patterns, modules, self.where)]
        ignore, targets = self._patterns
        return packed(ignore, targets, "Linear" in self.targets, modules, self.where)

    @cached_property
    def _patterns(self):
        from kimicount.matching import Patterns, Wildcards

        if self.producer == "modelopt":
            return Wildcards.of(self.ignore)
        return Patterns.of(self.ignore), Patterns.of(t for t in self.targets if t != "Linear")


#: How a checkpoint is quantized, as its config's quantization_config says (None: stored as torch_dtype).
Quantization = Fp8Quantization | PackedQuantization | Fp4Quantization | OtherQuantization | None


@dataclass(frozen=True)
class VisionSpec:
    """Kimi K2.5's vision side: a MoonViT tower and the patch-merger projector into the language model."""

    hidden_size: int  # vt_hidden_size
    intermediate_size: int  # vt_intermediate_size
    num_layers: int  # vt_num_hidden_layers
    patch_size: int
    pos_emb_height: int  # init_pos_emb_height
    pos_emb_width: int  # init_pos_emb_width
    mm_hidden_size: int
    merge_kernel: tuple[int, int]  # merge_kernel_size
    text_hidden_size: int

    @property
    def merged_size(self) -> int:
        """The projector's width: mm_hidden_size × the patches merged into one token."""
        return self.mm_hidden_size * self.merge_kernel[0] * self.merge_kernel[1]


@dataclass(frozen=True)
class Indexer:
    """DeepSeek-V3.2's lightning indexer: a small extra attention per layer that picks the keys to attend.

    `layers`: the main layers that have one (GLM-5.2's `indexer_types` "full"); None: every layer. A
    "shared" layer reuses the top-k of the last full one before it and has no indexer weights and no
    indexer cache; multi-token-prediction layers always have their own (see ModelSpec.has_indexer)."""

    n_heads: int
    head_dim: int
    layers: frozenset[int] | None = None


@dataclass(frozen=True)
class MlaSpec:
    """The sizes of one multi-head latent attention, whichever family's layers use it: what the KV-cache
    layouts, the MLA flops and the MLA measurements read (never a family's own config keys).

    >>> k2.mla.qk_head_dim, k2.mla.kv_lora_rank, k2.mla.rotary
    (192, 512, True)
    """

    num_attention_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    indexer: Indexer | None = None
    #: False when the shared key part is cached and used without rotary position (Kimi Linear's
    #: mla_use_nope): the same qk_rope_head_dim rows, not rotated.
    rotary: bool = True
    #: A sigmoid gate on the attention output, from the hidden state (Kimi K3's mla_use_output_gate).
    output_gate: bool = False
    #: The model it belongs to, for errors.
    name: str = field(default="", compare=False)

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: content part plus rotary part (192 for Kimi K2)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class AttentionHeads(Protocol):
    """A model's name and its attention heads, which tensor parallelism splits (every family's spec)."""

    @property
    def name(self) -> str: ...
    @property
    def num_attention_heads(self) -> int: ...


class LayerSizes(Protocol):
    """What the shared MLA and MoE builders (kimicount.anatomy) read of a model: the sizes every
    family with MLA layers and DeepSeek's MoE gives them (ModelSpec; the Kimi Linear family's
    KimiLinearSpec), read-only."""

    @property
    def weight_prefix(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def intermediate_size(self) -> int: ...
    @property
    def num_attention_heads(self) -> int: ...
    @property
    def q_lora_rank(self) -> int | None: ...
    @property
    def kv_lora_rank(self) -> int: ...
    @property
    def qk_nope_head_dim(self) -> int: ...
    @property
    def qk_rope_head_dim(self) -> int: ...
    @property
    def v_head_dim(self) -> int: ...
    @property
    def qk_head_dim(self) -> int: ...
    @property
    def indexer(self) -> Indexer | None: ...
    @property
    def mla(self) -> MlaSpec: ...
    @property
    def moe_intermediate_size(self) -> int: ...
    @property
    def n_routed_experts(self) -> int: ...
    @property
    def n_shared_experts(self) -> int: ...
    @property
    def num_experts_per_tok(self) -> int: ...
    @property
    def router_bias(self) -> bool: ...
    def has_indexer(self, layer: int) -> bool: ...


@dataclass(frozen=True)
class ModelSpec:
    """Every size kimicount needs, validated. Field names are the config keys they come from.

    The spec of the DeepSeek-V3 family (kimicount.families.deepseek_v3); other families have their own."""

    #: The family module that built it (kimicount.families).
    FAMILY: ClassVar[str] = "deepseek_v3"

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
    quantization: Quantization = None
    indexer: Indexer | None = None
    #: Prepended to every checkpoint tensor name (multimodal checkpoints nest the language model).
    weight_prefix: str = ""
    vision: VisionSpec | None = None

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: content part plus rotary part (192 for Kimi K2)."""
        return self.mla.qk_head_dim

    @property
    def mla(self) -> MlaSpec:
        """Every layer's attention: one MLA of these sizes."""
        return MlaSpec(
            num_attention_heads=self.num_attention_heads,
            q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank,
            qk_nope_head_dim=self.qk_nope_head_dim,
            qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim,
            indexer=self.indexer,
            name=self.name,
        )

    def is_moe_layer(self, layer: int) -> bool:
        """DeepSeek's rule: MoE from `first_k_dense_replace` on, every `moe_layer_freq`-th layer."""
        return layer >= self.first_k_dense_replace and layer % self.moe_layer_freq == 0

    def has_indexer(self, layer: int) -> bool:
        """Whether this layer has a lightning indexer of its own (weights and cache): every layer of
        DeepSeek-V3.2, GLM-5 and 5.1; GLM-5.2's "full" ones and its MTP layer (vLLM's deepseek_v2.py at
        002d607, DeepseekV2MLAAttention.__init__'s IndexCache block, builds a full indexer for every
        layer >= num_hidden_layers and none for a skip_topk layer).

        >>> k2.has_indexer(0)  # Kimi K2 has no indexer
        False
        """
        indexer = self.indexer
        if indexer is None:
            return False
        return indexer.layers is None or layer >= self.num_hidden_layers or layer in indexer.layers

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
            raise self.fail(key, f"expected an integer, found {short_json(value)}")
        if value < minimum:
            bound = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.fail(key, f"expected {bound}, found {value if value > -(10**30) else _show(value)}")
        if value > MAX_SIZE:
            raise self.fail(key, f"{_show(value)} is over {MAX_SIZE:,} (2^63 − 1, the largest tensor size)")
        return value

    def bounded(self, key: str, value: int, limit: int, what: str) -> int:
        """`value`, when it is at most `limit`; `what` says what the limit counts."""
        if value > limit:
            raise self.fail(key, f"{_show(value)} {what}; kimicount takes at most {limit:,}")
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
            raise self.fail(key, f"expected true or false, found {short_json(value)}")
        return value

    def string(self, key: str, default: str | None = None) -> str:
        value = self.config.get(key, default)
        if value is None:
            raise self.fail(key, "missing (required)")
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, found {short_json(value)}")
        return value


def spec_from_config(config: Any, *, name: str, where: str) -> Any:
    """Validate a parsed config.json and return its spec, built by the family its model_type names
    (kimicount.families): a ModelSpec for the DeepSeek-V3 family, a KimiLinearSpec for Kimi Linear/K3.

    `name` is what reports call the model; `where` names the file in error messages.
    """
    from kimicount.families import spec_from_config as family_spec

    return family_spec(config, name=name, where=where)


def deepseek_spec(config: Any, *, name: str, where: str) -> ModelSpec:
    """The DeepSeek-V3 family's spec of a parsed config.json (the family registry calls it)."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: expected a JSON object at the top level, found {type(config).__name__}")
    read = _Reader(config, where)
    model_type = read.string("model_type")
    if model_type in MULTIMODAL_MODEL_TYPES:
        return _multimodal_spec(read, model_type, name)
    return _language_spec(read, name)


def _multimodal_spec(read: _Reader, model_type: str, name: str) -> ModelSpec:
    """Kimi K2.5: the language model from `text_config` (its tensors under `language_model.`), the
    vision tower and projector from `vision_config`."""
    text = read.config.get("text_config")
    if not isinstance(text, dict):
        raise read.fail(
            "text_config", f"expected an object (the language model's config), found {short_json(text)}"
        )
    text_read = _Reader(text, f"{read.where} text_config")
    if "quantization_config" not in text and "quantization_config" in read.config:
        text_read = _Reader(
            {**text, "quantization_config": read.config["quantization_config"]}, text_read.where
        )
    language = _language_spec(text_read, name)
    return replace(
        language,
        model_type=model_type,
        weight_prefix=LANGUAGE_MODEL_PREFIX,
        vision=_vision(read, language.hidden_size),
    )


def _language_spec(read: _Reader, name: str) -> ModelSpec:
    """The spec of a DeepSeek-V3-family language model config (a whole config.json, or a text_config)."""
    config, where = read.config, read.where
    model_type = read.string("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        supported = ", ".join(SUPPORTED_MODEL_TYPES + MULTIMODAL_MODEL_TYPES)
        raise read.fail("model_type", f"unsupported model type '{model_type}' (supported: {supported})")

    missing = [key for key in _REQUIRED if key not in config]
    if len(missing) > 1:  # name them all at once rather than one per run
        raise ConfigError(f"{where}: missing required keys: {', '.join(missing)}")

    if read.boolean("attention_bias", False):
        raise read.fail(
            "attention_bias", "true is not supported (no released MLA model uses attention biases)"
        )

    num_hidden_layers = read.integer("num_hidden_layers")
    num_nextn_predict_layers = read.integer("num_nextn_predict_layers", minimum=0, default=0)
    layers = num_hidden_layers + num_nextn_predict_layers
    mtp = " with the num_nextn_predict_layers ones" if num_nextn_predict_layers else ""
    read.bounded("num_hidden_layers", layers, MAX_LAYERS, f"layers{mtp}")
    n_routed_experts = read.integer("n_routed_experts")
    read.bounded(
        "n_routed_experts",
        n_routed_experts * layers,
        MAX_EXPERTS,
        f"routed experts in {layers:,} layers ({_show(n_routed_experts)} each)",
    )
    first_k_dense_replace = read.integer("first_k_dense_replace", minimum=0)
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

    moe_layer_freq = read.integer("moe_layer_freq", default=1)
    _check_mlp_layer_types(read, num_hidden_layers, first_k_dense_replace, moe_layer_freq)
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
        n_shared_experts=read.integer("n_shared_experts", minimum=0),
        num_experts_per_tok=num_experts_per_tok,
        first_k_dense_replace=first_k_dense_replace,
        moe_layer_freq=moe_layer_freq,
        router_bias=topk_method == _NOAUX,
        tie_word_embeddings=read.boolean("tie_word_embeddings", False),
        num_nextn_predict_layers=num_nextn_predict_layers,
        max_position_embeddings=read.integer("max_position_embeddings"),
        torch_dtype=_torch_dtype(read),
        quantization=_quantization(read),
        indexer=_indexer(read, model_type, num_hidden_layers),
    )


def _quantization(
    read: _Reader,
) -> Fp8Quantization | PackedQuantization | Fp4Quantization | OtherQuantization | None:
    raw = read.config.get("quantization_config")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise read.fail("quantization_config", f"expected an object, found {short_json(raw)}")
    sub = _Reader(raw, f"{read.where} quantization_config")
    method = sub.string("quant_method")
    if method == "compressed-tensors":
        if isinstance(fmt := sub.config.get("format"), str) and fmt in FP4_FORMATS:
            return _compressed_fp4(sub)
        return _packed_quantization(sub)
    if method == "modelopt":
        return _modelopt_quantization(sub)
    if method != "fp8":
        # Counting parameters and sizing caches do not depend on it; sizing weights and verifying do.
        return OtherQuantization(method)
    block = raw.get("weight_block_size")
    if not isinstance(block, list) or len(block) != 2 or not all(_is_positive_int(b) for b in block):
        raise sub.fail(
            "weight_block_size", f"expected two integers from 1 to 2^63 − 1, found {short_json(block)}"
        )
    fmt = sub.string("fmt", "e4m3")
    if fmt not in FP8_FORMATS:
        raise sub.fail("fmt", f"unknown FP8 format '{fmt}' (supported: {', '.join(FP8_FORMATS)})")
    return Fp8Quantization(fmt=fmt, block=(block[0], block[1]))


#: Integer widths compressed-tensors packs into int32.
_PACKED_BITS = (2, 4, 8)
#: compressed-tensors' FP4 formats (Kimi K3's routed experts are mxfp4-pack-quantized).
_FP4_FORMATS = ("mxfp4-pack-quantized", "nvfp4-pack-quantized")


def _packed_quantization(read: _Reader) -> PackedQuantization:
    """compressed-tensors' config: one config group whose `weights` are symmetric ints, group- or
    channel-wise, in the pack-quantized format."""
    fmt = read.string("format")
    if fmt != "pack-quantized":
        supported = ", ".join(("pack-quantized", *FP4_FORMATS))
        raise read.fail("format", f"unsupported compressed-tensors format '{fmt}' (supported: {supported})")
    group_name, group, weights = _config_group(read)
    num_bits = weights.integer("num_bits")
    if num_bits not in _PACKED_BITS:
        raise weights.fail("num_bits", f"{num_bits} cannot be packed into int32 (supported: 2, 4, 8)")
    if weights.string("type", "int") != "int" or not weights.boolean("symmetric", True):
        raise weights.fail("symmetric", "only symmetric integer weights are supported (no zero points)")
    strategy = weights.string("strategy", "group")
    if strategy not in ("group", "channel"):
        raise weights.fail("strategy", f"unsupported strategy '{strategy}' (supported: group, channel)")
    group_size = weights.integer("group_size") if strategy == "group" else None
    return PackedQuantization(
        num_bits=num_bits,
        group_size=group_size,
        targets=_patterns(_Reader(group, f"{read.where} config_groups.{group_name}"), "targets"),
        ignore=_patterns(read, "ignore"),
        where=read.where,
    )


def _config_group(read: _Reader) -> tuple[str, dict[str, Any], _Reader]:
    """compressed-tensors' one config group: its name, the group and a reader of its `weights`."""
    groups = read.config.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise read.fail("config_groups", "expected exactly one config group")
    ((group_name, group),) = groups.items()
    if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
        raise read.fail("config_groups", f"group '{group_name}' has no 'weights' object")
    return group_name, group, _Reader(group["weights"], f"{read.where} config_groups.{group_name}.weights")


# --- FP4: compressed-tensors' nvfp4/mxfp4-pack-quantized and NVIDIA ModelOpt's NVFP4 ---------------------

#: compressed-tensors' FP4 formats (CompressionFormat): scheme and the group size its compressor takes
#: (compressors/mxfp4 can_compress: group_size 32; NVFP4 is groups of 16).
FP4_FORMATS = {"nvfp4-pack-quantized": ("nvfp4", 16), "mxfp4-pack-quantized": ("mxfp4", 32)}
#: MXFP4's E8M0 scale dtypes (weights.scale_dtype; compressed-tensors' default is torch.uint8).
_MX_SCALE_DTYPES = {None: "U8", "torch.uint8": "U8", "torch.float8_e8m0fnu": "F8_E8M0"}


def _compressed_fp4(read: _Reader) -> Fp4Quantization:
    """compressed-tensors' FP4 config: one group of 4-bit float weights in groups of 16 (NVFP4, with a
    global scale) or 32 (MXFP4); a static input scale when `input_activations` is not dynamic (vLLM's
    CompressedTensorsW4A4Nvfp4 reads input_global_scale; compressors/mxfp4 compression_param_names adds
    it only then)."""
    fmt = read.string("format")
    scheme, size = FP4_FORMATS[fmt]
    group_name, group, weights = _config_group(read)
    if weights.integer("num_bits") != 4 or weights.string("type", "float") != "float":
        raise weights.fail("type", f"{fmt} stores 4-bit float weights (num_bits 4, type float)")
    if not weights.boolean("symmetric", True):
        raise weights.fail("symmetric", "only symmetric FP4 weights are supported (no zero points)")
    if (group_size := weights.integer("group_size")) != size:
        raise weights.fail("group_size", f"{group_size}, but {fmt} has groups of {size}")
    scale_dtype = "F8_E4M3"
    if scheme == "mxfp4":
        given = weights.config.get("scale_dtype")
        if not (given is None or isinstance(given, str)) or given not in _MX_SCALE_DTYPES:
            raise weights.fail(
                "scale_dtype", f"{short_json(given)}: expected torch.uint8 or torch.float8_e8m0fnu"
            )
        scale_dtype = _MX_SCALE_DTYPES[given]
    activations = group.get("input_activations")
    if activations is not None and not isinstance(activations, dict):
        raise read.fail(
            f"config_groups.{group_name}.input_activations",
            f"expected an object or null, found {short_json(activations)}",
        )
    static_input = activations is not None and not _Reader(activations, read.where).boolean("dynamic", False)
    return Fp4Quantization(
        scheme=scheme,
        producer="compressed-tensors",
        group_size=group_size,
        scale_dtype=scale_dtype,
        input_scale=static_input,
        targets=_patterns(_Reader(group, f"{read.where} config_groups.{group_name}"), "targets"),
        ignore=_patterns(read, "ignore"),
        where=read.where,
    )


def _modelopt_quantization(read: _Reader) -> Fp4Quantization | OtherQuantization:
    """NVIDIA ModelOpt's config, as a config.json `quantization_config` (`quant_algo`, `ignore`,
    `config_groups`) or as hf_quant_config.json's `quantization` object (`quant_algo`, `group_size`,
    `exclude_modules`), the two forms vLLM's modelopt.py ModelOptQuantConfigBase.from_config reads. Only
    NVFP4 is modelled: every Linear not excluded, in groups of 16 with an F8_E4M3 scale, a global F32
    scale and the static input scale vLLM's ModelOptNvFp4LinearMethod.create_weights loads."""
    inner = read.config.get("quantization")
    if isinstance(inner, dict):
        read = _Reader(inner, f"{read.where} quantization")
    algo = read.string("quant_algo")
    if algo != "NVFP4":
        return OtherQuantization(f"modelopt {algo}")
    group_size = read.integer("group_size", default=0) or _modelopt_group_size(read)
    key = "exclude_modules" if "exclude_modules" in read.config else "ignore"
    return Fp4Quantization(
        scheme="nvfp4",
        producer="modelopt",
        group_size=group_size,
        scale_dtype="F8_E4M3",
        input_scale=True,
        targets=("Linear",),
        ignore=_strings(read, key),
        where=f"{read.where}: key '{key}'",
    )


def _modelopt_group_size(read: _Reader) -> int:
    """config.json's form keeps the group size in its one config group's weights (16 by default)."""
    if not isinstance(read.config.get("config_groups"), dict):
        return 16
    _, _, weights = _config_group(read)
    return weights.integer("group_size", default=16)


def _strings(read: _Reader, key: str) -> tuple[str, ...]:
    value = read.config.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise read.fail(key, f"expected a list of strings, found {short_json(value)}")
    return tuple(value)


def _patterns(read: _Reader, key: str) -> tuple[str, ...]:
    """compressed-tensors' module names and `re:` patterns; each pattern must compile."""
    value = read.config.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise read.fail(key, f"expected a list of strings, found {short_json(value)}")
    for pattern in value:
        if pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except (re.error, RecursionError, OverflowError) as error:
                problem = f"{short_json(pattern)} is not a regular expression ({error})"
                raise read.fail(key, problem) from None
    return tuple(value)


_VISION_KEYS = (
    "vt_hidden_size",
    "vt_intermediate_size",
    "vt_num_hidden_layers",
    "patch_size",
    "init_pos_emb_height",
    "init_pos_emb_width",
    "mm_hidden_size",
)


def _vision(read: _Reader, text_hidden_size: int) -> VisionSpec:
    raw = read.config.get("vision_config")
    if not isinstance(raw, dict):
        raise read.fail("vision_config", f"expected an object, found {short_json(raw)}")
    vision = _Reader(raw, f"{read.where} vision_config")
    merge = raw.get("merge_kernel_size")
    if not isinstance(merge, list) or len(merge) != 2 or not all(_is_positive_int(m) for m in merge):
        raise vision.fail(
            "merge_kernel_size", f"expected two integers from 1 to 2^63 − 1, found {short_json(merge)}"
        )
    text_hidden = vision.integer("text_hidden_size", default=text_hidden_size)
    if text_hidden != text_hidden_size:
        raise vision.fail(
            "text_hidden_size", f"{text_hidden} is not text_config.hidden_size ({text_hidden_size})"
        )
    sizes = dict(zip(_VISION_KEYS, (vision.integer(key) for key in _VISION_KEYS)))
    vision.bounded("vt_num_hidden_layers", sizes["vt_num_hidden_layers"], MAX_LAYERS, "layers")
    return VisionSpec(*sizes.values(), merge_kernel=(merge[0], merge[1]), text_hidden_size=text_hidden)  # type: ignore[arg-type, misc]  # _VISION_KEYS in field order


def _is_positive_int(value: Any) -> bool:
    """A size: an integer from 1 to MAX_SIZE (JSON's true is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_SIZE


#: The weights' dtypes a config may declare (torch_dtype / dtype), and their safetensors names.
MODEL_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def _torch_dtype(read: _Reader) -> str:
    # transformers >= 4.56 writes "dtype"; older releases and the Hub originals "torch_dtype".
    key = "torch_dtype" if "torch_dtype" in read.config else "dtype"
    dtype = read.string(key, "bfloat16")
    if dtype not in MODEL_DTYPES:
        raise read.fail(key, f"unsupported dtype '{dtype}' (supported: {', '.join(MODEL_DTYPES)})")
    return dtype


def _indexer(read: _Reader, model_type: str, num_hidden_layers: int) -> Indexer | None:
    # DeepSeek-V3.2 and GLM-5 have a lightning indexer; their configs name the sizes.
    if model_type != "deepseek_v32" and "index_n_heads" not in read.config:
        return None
    if read.config.get("q_lora_rank") is None:
        raise read.fail(
            "q_lora_rank", "null is not supported with a lightning indexer (its wq_b reads the query latent)"
        )
    return Indexer(
        n_heads=read.integer("index_n_heads"),
        head_dim=read.integer("index_head_dim"),
        layers=_full_indexer_layers(read, num_hidden_layers),
    )


# --- GLM-5 (glm_moe_dsa): the per-layer lists of GLM-5.2's config ------------------------------------

#: indexer_types values (transformers' GlmMoeDsaConfig): "full" computes its own top-k, "shared" reuses
#: the last full layer's. The released GLM-5.2 checkpoint has indexer weights on the full layers only.
_INDEXER_TYPES = ("full", "shared")


def _full_indexer_layers(read: _Reader, num_hidden_layers: int) -> frozenset[int] | None:
    """The main layers whose `indexer_types` entry is "full"; None when the key is absent or null
    (every layer has its indexer: DeepSeek-V3.2, GLM-5, GLM-5.1). One entry per main layer, the first
    "full" (a shared layer reuses the top-k of a full layer before it)."""
    types = _layer_list(read, "indexer_types", num_hidden_layers, _INDEXER_TYPES)
    if types is None:
        return None
    if types[0] != "full":
        raise read.fail("indexer_types", "layer 0 is 'shared', but a shared layer reuses an earlier full one")
    full = frozenset(i for i, kind in enumerate(types) if kind == "full")
    return None if len(full) == num_hidden_layers else full


def _check_mlp_layer_types(read: _Reader, layers: int, first_dense: int, freq: int) -> None:
    """GLM-5.2's `mlp_layer_types` ("dense" / "sparse", one per main layer) must say what
    first_k_dense_replace and moe_layer_freq say: kimicount counts from those."""
    types = _layer_list(read, "mlp_layer_types", layers, ("dense", "sparse"))
    for layer, kind in enumerate(types or ()):
        moe = layer >= first_dense and layer % freq == 0
        if (kind == "sparse") != moe:
            expected = "sparse" if moe else "dense"
            raise read.fail(
                "mlp_layer_types",
                f"layer {layer} is '{kind}', but first_k_dense_replace {first_dense} and moe_layer_freq "
                f"{freq} make it '{expected}'",
            )


def _layer_list(read: _Reader, key: str, layers: int, values: tuple[str, ...]) -> list[str] | None:
    """A per-layer list of names, one of `values` each, num_hidden_layers long; None when absent."""
    value = read.config.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise read.fail(key, f"expected a list of strings, one per layer, found {short_json(value)}")
    if len(value) != layers:
        raise read.fail(key, f"{len(value):,} entries, expected one per layer (num_hidden_layers {layers:,})")
    for layer, kind in enumerate(value):
        if kind not in values:
            raise read.fail(key, f"layer {layer}: {short_json(kind)}, expected one of {', '.join(values)}")
    return value


#: A config.json is a few KB (Kimi K2.5's: 4.9 KB); a larger one than this is refused before it is read.
MAX_CONFIG_BYTES = 16 * 2**20


def load_config_file(path: Path) -> Any:
    """Read and parse a config.json file; errors name the file."""
    return parse_json(read_capped(path, MAX_CONFIG_BYTES, "config.json", ConfigError), str(path), ConfigError)


def spec_from_path(path: Path) -> ModelSpec:
    """The spec of a config.json file, or of the config.json inside a folder."""
    try:
        if path.is_dir():
            path = path / "config.json"
    except OSError as error:  # a name too long for the file system
        raise ConfigError(f"{shorten(str(path))}: cannot read: {error.strerror or error}") from None
    config = with_hf_quant_config(load_config_file(path), path.parent / HF_QUANT_CONFIG)
    # A model is named after its folder (…/Kimi-K2-Instruct/config.json), or a config file after itself.
    folder = path.resolve().parent.name
    name = folder if path.name == "config.json" and folder else path.stem
    return spec_from_config(config, name=name, where=str(path))


#: What the family modules share: the typed config reader whose errors name the file and key, and the
#: one parser of `quantization_config` every family calls.
ConfigReader = _Reader
quantization_of = _quantization
torch_dtype_of = _torch_dtype


#: ModelOpt's own quantization file beside config.json (vLLM's ModelOptQuantConfigBase.get_config_filenames).
HF_QUANT_CONFIG = "hf_quant_config.json"


def with_hf_quant_config(config: Any, quant_path: Path) -> Any:
    """The config with hf_quant_config.json's quantization when config.json declares none: vLLM reads
    that file only then (its get_quant_config takes the config's quantization_config first). A
    multimodal config (text_config) gets it at the top, where its spec looks too."""
    if not isinstance(config, dict) or "quantization_config" in config:
        return config
    text = config.get("text_config")
    if isinstance(text, dict) and "quantization_config" in text:
        return config
    try:
        if not quant_path.is_file():
            return config
    except OSError:
        return config
    quant = load_config_file(quant_path)
    if not isinstance(quant, dict):
        raise ConfigError(
            f"{quant_path}: expected a JSON object at the top level, found {type(quant).__name__}"
        )
    return {**config, "quantization_config": {"quant_method": "modelopt", **quant}}


def bundled_spec() -> ModelSpec:
    """moonshotai/Kimi-K2-Instruct, from the config.json shipped with kimicount."""
    # read beside this file: importlib.resources would cost more start-up than the whole count
    text = (Path(__file__).parent / "data" / _BUNDLED_CONFIG).read_text(encoding="utf-8")
    return deepseek_spec(json.loads(text), name=BUNDLED_MODEL, where=f"bundled {BUNDLED_MODEL} config.json")
