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
from typing import Any, ClassVar

from kimicount.errors import ConfigError
from kimicount.reading import parse_json, read_capped, short_json, shorten

#: model_type values of the DeepSeek-V3 family (MLA attention + DeepSeek MoE).
SUPPORTED_MODEL_TYPES = ("kimi_k2", "deepseek_v3", "deepseek_v32", "deepseek_v2")
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
    """DeepSeek-V3.2's lightning indexer: a small extra attention per layer that picks the keys to attend."""

    n_heads: int
    head_dim: int


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
    quantization: Fp8Quantization | PackedQuantization | OtherQuantization | None = None
    indexer: Indexer | None = None
    #: Prepended to every checkpoint tensor name (multimodal checkpoints nest the language model).
    weight_prefix: str = ""
    vision: VisionSpec | None = None

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: content part plus rotary part (192 for Kimi K2)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

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
        moe_layer_freq=read.integer("moe_layer_freq", default=1),
        router_bias=topk_method == _NOAUX,
        tie_word_embeddings=read.boolean("tie_word_embeddings", False),
        num_nextn_predict_layers=num_nextn_predict_layers,
        max_position_embeddings=read.integer("max_position_embeddings"),
        torch_dtype=_torch_dtype(read),
        quantization=_quantization(read),
        indexer=_indexer(read, model_type),
    )


def _quantization(read: _Reader) -> Fp8Quantization | PackedQuantization | OtherQuantization | None:
    raw = read.config.get("quantization_config")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise read.fail("quantization_config", f"expected an object, found {short_json(raw)}")
    sub = _Reader(raw, f"{read.where} quantization_config")
    method = sub.string("quant_method")
    if method == "compressed-tensors" and raw.get("format") in _FP4_FORMATS:
        # Parameters and caches are counted all the same; how FP4 weights are stored is not modelled.
        return OtherQuantization(f"compressed-tensors {raw['format']}")
    if method == "compressed-tensors":
        return _packed_quantization(sub)
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
        raise read.fail(
            "format", f"unsupported compressed-tensors format '{fmt}' (supported: pack-quantized)"
        )
    groups = read.config.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise read.fail("config_groups", "expected exactly one config group")
    ((group_name, group),) = groups.items()
    if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
        raise read.fail("config_groups", f"group '{group_name}' has no 'weights' object")
    weights = _Reader(group["weights"], f"{read.where} config_groups.{group_name}.weights")
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
    return VisionSpec(*sizes.values(), merge_kernel=(merge[0], merge[1]), text_hidden_size=text_hidden)


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


def _indexer(read: _Reader, model_type: str) -> Indexer | None:
    # DeepSeek-V3.2 is the only family member with a lightning indexer; its config names the sizes.
    if model_type != "deepseek_v32" and "index_n_heads" not in read.config:
        return None
    if read.config.get("q_lora_rank") is None:
        raise read.fail(
            "q_lora_rank", "null is not supported with a lightning indexer (its wq_b reads the query latent)"
        )
    return Indexer(n_heads=read.integer("index_n_heads"), head_dim=read.integer("index_head_dim"))


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
    config = load_config_file(path)
    # A model is named after its folder (…/Kimi-K2-Instruct/config.json), or a config file after itself.
    folder = path.resolve().parent.name
    name = folder if path.name == "config.json" and folder else path.stem
    return spec_from_config(config, name=name, where=str(path))


#: What the family modules share: the typed config reader whose errors name the file and key, and the
#: one parser of `quantization_config` every family calls.
ConfigReader = _Reader
quantization_of = _quantization
torch_dtype_of = _torch_dtype


def bundled_spec() -> ModelSpec:
    """moonshotai/Kimi-K2-Instruct, from the config.json shipped with kimicount."""
    # read beside this file: importlib.resources would cost more start-up than the whole count
    text = (Path(__file__).parent / "data" / _BUNDLED_CONFIG).read_text(encoding="utf-8")
    return deepseek_spec(json.loads(text), name=BUNDLED_MODEL, where=f"bundled {BUNDLED_MODEL} config.json")
