"""The DeepSeek V4 family: DeepSeek-V4-Flash (284B, 13B activated) and DeepSeek-V4-Pro (1.6T, 49B).

Every layer attends through one shared 512-wide key–value head (`head_dim: 512` is that head's width,
not a per-head width of 64 query heads' keys): queries through a low-rank pair (wq_a, wq_b), the
output through grouped low-rank projections (wo_a in `o_groups` groups of `o_lora_rank`, then wo_b),
with a learned sink per head. `compress_ratios` gives each layer's kind, one entry per layer and a
last one for the multi-token-prediction layer: 0, sliding-window attention only (SWA); 4, compressed
sparse attention (CSA: a compressor with overlapping windows and a lightning indexer picking
`index_topk` of its entries); 128, heavily compressed attention (HCA: a compressor, no indexer).
Every block sits between two manifold hyper-connections (`hc_*`: `hc_mult` residual streams mixed by
a learned projection); the first `num_hash_layers` MoE layers route by a token→expert hash table
(tid2eid), the rest by their learned gate and its bias.

Read from (read, never shipped):
- transformers 5.24.0 src/transformers/models/deepseek_v4/modeling_deepseek_v4.py: DeepseekV4Attention
  lines 796–806 (q_a_proj [q_lora, hidden], q_b_proj [heads·head_dim, q_lora], kv_proj [head_dim,
  hidden], o_a_proj [o_groups·o_lora, heads·head_dim / o_groups], o_b_proj [hidden, o_groups·o_lora],
  sinks [heads] F32), DeepseekV4CSACompressor 627–630 and DeepseekV4HCACompressor 399–402 (kv_proj
  and gate_proj [coff·head_dim, hidden], position_bias [ratio, coff·head_dim] F32, kv_norm
  [head_dim]; coff 2 with CSA's overlapping windows, 1 for HCA), DeepseekV4Indexer 511–515 and its
  scorer 465 (the same compressor at index_head_dim, q_b_proj [index_n_heads·index_head_dim,
  q_lora], weights_proj [index_n_heads, hidden]), DeepseekV4HyperConnection 947–950 (fn
  [(2 + hc_mult)·hc_mult, hc_mult·hidden], base, scale [3]), DeepseekV4HyperHead 1007–1009 (hc_fn
  [hc_mult, hc_mult·hidden], hc_base, hc_scale [1]), the routers 1083–1115 (gate [E, hidden]; the
  learned one's e_score_correction_bias [E], the hash one's tid2eid [vocab, top_k] int64 buffer);
  configuration_deepseek_v4.py (compress_ratios folded into layer_types, num_hash_layers into
  mlp_layer_types, expert_dtype into quantization_config); conversion_mapping.py lines 711–768 (the
  renames from DeepSeek's names to transformers', and the routed experts fused into gate_up_proj
  and down_proj);
- vLLM vllm/model_executor/models/deepseek_v4.py @ 023da1f (DeepseekV4FP8Config: FP8 Linears with
  E8M0 scales when expert_dtype is fp4, F32 scales with FP8 experts; MXFP4 routed experts);
- the real V4-Flash checkpoint (../shared/data/listings: its index's 82 key patterns, and the dtypes
  and shapes of layers 2 and 3 read from its shard headers), which the tests hold the tree to.

Names: the released checkpoints (deepseek-ai/DeepSeek-V4-Flash, -Pro) use DeepSeek's own names
(`layers.2.attn.wq_a.weight`, `ffn.experts.0.w1.weight`, `mtp.0.e_proj.weight`); transformers renames
them as it loads, and a checkpoint written by its save_pretrained carries its names
(`model.layers.2.self_attn.q_a_proj.weight`, the experts fused) and no MTP layer, which it drops.
`spec_for_names` picks the naming a checkpoint's tensor names use, so verify accepts either.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, ClassVar

from kimicount.anatomy import (
    Anatomy,
    Node,
    Role,
    TensorRef,
    check_tensor_sizes,
    group,
    index_runs,
    layer_span,
    leaf,
)
from kimicount.cache_groups import COMPRESSOR_STATE, INDEX_KEYS, CacheGroup, EntryPart, MemoryKind
from kimicount.errors import ConfigError, UsageError
from kimicount.reading import short_json
from kimicount.spec import (
    MAX_EXPERTS,
    MAX_LAYERS,
    ConfigReader,
    Fp8Quantization,
    Quantization,
    quantization_of,
    torch_dtype_of,
)

__all__ = ["DeepseekV4Spec", "build_anatomy", "cache_groups", "spec_for_names", "spec_from_config"]

#: The layer kinds, by compression ratio.
SWA, CSA, HCA = 0, 4, 128
KIND_NAMES = {SWA: "SWA", CSA: "CSA", HCA: "HCA"}
#: The two namings of the tensors (module docstring).
DEEPSEEK, TRANSFORMERS = "deepseek", "transformers"
#: transformers' layer_types values for each ratio (configuration_deepseek_v4.py).
_LAYER_TYPES = {
    "sliding_attention": SWA,
    "compressed_sparse_attention": CSA,
    "heavily_compressed_attention": HCA,
}


@dataclass(frozen=True)
class DeepseekV4Spec:
    """Every size of a DeepSeek V4 model, validated; field names are DeepSeek's config keys.
    `compress_ratios` has one entry per main layer, then one per MTP layer."""

    FAMILY: ClassVar[str] = "deepseek_v4"

    name: str
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    head_dim: int
    qk_rope_head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    moe_intermediate_size: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    num_hash_layers: int
    compress_ratios: tuple[int, ...]
    sliding_window: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    hc_mult: int
    num_nextn_predict_layers: int
    max_position_embeddings: int
    torch_dtype: str
    tie_word_embeddings: bool = False
    quantization: Quantization = None
    naming: str = DEEPSEEK
    weight_prefix: str = ""
    vision: None = None
    indexer: None = None  # the DeepSeek-V3.2 indexer of the MLA blocks: V4's is its own component

    @property
    def mtp_layers(self) -> tuple[int, ...]:
        """The MTP layers, numbered after the main ones (V4-Flash: 43); checkpoints name them mtp.0."""
        first = self.num_hidden_layers
        return tuple(range(first, first + self.num_nextn_predict_layers))

    def ratio(self, layer: int) -> int:
        """A layer's compression ratio (its kind): 0 SWA, 4 CSA, 128 HCA."""
        return self.compress_ratios[layer]

    def layers_of(self, ratio: int, include_mtp: bool = False) -> tuple[int, ...]:
        """The layers of one kind, 0-based (the MTP layers' numbers follow the main ones)."""
        count = self.num_hidden_layers + (self.num_nextn_predict_layers if include_mtp else 0)
        return tuple(i for i in range(count) if self.compress_ratios[i] == ratio)

    def is_hash_layer(self, layer: int) -> bool:
        """Hash-routed (tid2eid) in the first num_hash_layers layers; the MTP layers never are."""
        return layer < min(self.num_hash_layers, self.num_hidden_layers)

    @property
    def coff(self) -> dict[int, int]:
        """Each compressor's series per token: CSA's windows overlap, so it projects two (coff 2)."""
        return {CSA: 2, HCA: 1}


# --- config -> spec --------------------------------------------------------------------------------

_REQUIRED = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "head_dim",
    "q_lora_rank",
    "o_groups",
    "o_lora_rank",
    "moe_intermediate_size",
    "n_routed_experts",
    "num_experts_per_tok",
    "sliding_window",
    "index_n_heads",
    "index_head_dim",
    "hc_mult",
)


def spec_from_config(config: dict[str, Any], *, name: str, where: str) -> DeepseekV4Spec:
    """The spec of a DeepSeek V4 config.json, as DeepSeek ships it (compress_ratios, num_hash_layers,
    qk_rope_head_dim, expert_dtype) or as transformers re-serializes it (layer_types with
    compress_rates, mlp_layer_types, partial_rotary_factor, expert_dtype in quantization_config).

    >>> from kimicount.models import known_model
    >>> flash = known_model("deepseek-v4-flash").spec()
    >>> [flash.ratio(i) for i in (0, 1, 2, 3, 42, 43)], flash.num_hash_layers
    ([0, 0, 4, 128, 4, 0], 3)
    """
    read = ConfigReader(config, where)
    model_type = read.string("model_type", "deepseek_v4")
    if model_type != "deepseek_v4":
        raise read.fail("model_type", f"expected 'deepseek_v4' (DeepSeek V4), found '{model_type}'")
    missing = [key for key in _REQUIRED if key not in config]
    if missing:
        raise ConfigError(f"{where}: missing required keys: {', '.join(missing)}")
    layers = read.integer("num_hidden_layers")
    mtp = read.integer("num_nextn_predict_layers", minimum=0, default=0)
    read.bounded("num_hidden_layers", layers + mtp, MAX_LAYERS, "layers with the MTP ones")
    heads = read.integer("num_attention_heads")
    if read.integer("num_key_value_heads", default=1) != 1:
        raise read.fail(
            "num_key_value_heads", f"{config['num_key_value_heads']}: DeepSeek V4 has one shared KV head"
        )
    head_dim = read.integer("head_dim")
    rope = _rope_width(read, head_dim)
    o_groups = read.integer("o_groups")
    if heads % o_groups:
        raise read.fail("o_groups", f"{o_groups} does not divide num_attention_heads ({heads})")
    experts = read.integer("n_routed_experts")
    read.bounded(
        "n_routed_experts",
        experts * (layers + mtp),
        MAX_EXPERTS,
        f"routed experts in {layers + mtp:,} layers",
    )
    per_token = read.integer("num_experts_per_tok")
    if per_token > experts:
        raise read.fail("num_experts_per_tok", f"{per_token} is more than n_routed_experts ({experts})")
    quantization = _quantization(read)
    hidden, width = read.integer("hidden_size"), read.integer("moe_intermediate_size")
    if isinstance(quantization, Fp8Quantization) and quantization.expert_dtype == "fp4":
        for key, size in (("hidden_size", hidden), ("moe_intermediate_size", width)):
            if size % 32:
                raise read.fail(
                    key, f"{size} is not a multiple of 32, as FP4 experts need (one scale per 32)"
                )
    return DeepseekV4Spec(
        name=name,
        model_type=model_type,
        vocab_size=read.integer("vocab_size"),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        head_dim=head_dim,
        qk_rope_head_dim=rope,
        q_lora_rank=read.integer("q_lora_rank"),
        o_groups=o_groups,
        o_lora_rank=read.integer("o_lora_rank"),
        moe_intermediate_size=width,
        n_routed_experts=experts,
        n_shared_experts=read.integer("n_shared_experts", minimum=0, default=1),
        num_experts_per_tok=per_token,
        num_hash_layers=_hash_layers(read, layers),
        compress_ratios=_compress_ratios(read, layers, mtp),
        sliding_window=read.integer("sliding_window"),
        index_n_heads=read.integer("index_n_heads"),
        index_head_dim=read.integer("index_head_dim"),
        index_topk=read.integer("index_topk", default=512),
        hc_mult=read.integer("hc_mult"),
        num_nextn_predict_layers=mtp,
        max_position_embeddings=read.integer("max_position_embeddings"),
        torch_dtype=torch_dtype_of(read),
        tie_word_embeddings=read.boolean("tie_word_embeddings", False),
        quantization=quantization,
    )


def _rope_width(read: ConfigReader, head_dim: int) -> int:
    """qk_rope_head_dim (DeepSeek's key), or partial_rotary_factor × head_dim (transformers')."""
    config = read.config
    if "qk_rope_head_dim" in config:
        rope = read.integer("qk_rope_head_dim")
    else:
        factor = config.get("partial_rotary_factor", 64 / 512)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
            raise read.fail(
                "partial_rotary_factor", f"expected a number in (0, 1], found {short_json(factor)}"
            )
        rope = int(head_dim * factor)
    if rope >= head_dim or rope % 2:
        raise read.fail("qk_rope_head_dim", f"{rope}: expected an even width below head_dim ({head_dim})")
    return rope


def _compress_ratios(read: ConfigReader, layers: int, mtp: int) -> tuple[int, ...]:
    """One ratio per main layer and one per MTP layer: compress_ratios, or transformers' layer_types
    (main layers only; the MTP layers, which it does not build, are SWA-only as in DeepSeek's configs)."""
    config = read.config
    if "compress_ratios" in config:
        ratios = config["compress_ratios"]
        if not isinstance(ratios, list) or not all(
            isinstance(r, int) and not isinstance(r, bool) and r in KIND_NAMES for r in ratios
        ):
            raise read.fail("compress_ratios", f"expected a list of 0, 4 or 128, found {short_json(ratios)}")
        if len(ratios) not in (layers, layers + mtp):
            raise read.fail(
                "compress_ratios",
                f"{len(ratios)} entries: expected num_hidden_layers ({layers}) + num_nextn_predict_layers ({mtp})",
            )
        return tuple(ratios) + (SWA,) * (layers + mtp - len(ratios))
    types = config.get("layer_types")
    if types is None:
        raise read.fail("compress_ratios", "missing (required, or transformers' layer_types)")
    rates = config.get("compress_rates") or {
        "compressed_sparse_attention": CSA,
        "heavily_compressed_attention": HCA,
    }
    if rates != {"compressed_sparse_attention": CSA, "heavily_compressed_attention": HCA}:
        raise read.fail(
            "compress_rates", f"only DeepSeek V4's ratios 4 and 128 are modelled, found {short_json(rates)}"
        )
    if not isinstance(types, list) or len(types) != layers or not all(t in _LAYER_TYPES for t in types):
        raise read.fail(
            "layer_types", f"expected {layers} of {', '.join(_LAYER_TYPES)}, found {short_json(types)}"
        )
    return tuple(_LAYER_TYPES[t] for t in types) + (SWA,) * mtp


def _hash_layers(read: ConfigReader, layers: int) -> int:
    """num_hash_layers, or the leading hash_moe entries of transformers' mlp_layer_types."""
    types = read.config.get("mlp_layer_types")
    if "num_hash_layers" in read.config or types is None:
        count = read.integer("num_hash_layers", minimum=0, default=3)
    else:
        if not isinstance(types, list) or not all(t in ("hash_moe", "moe") for t in types):
            raise read.fail(
                "mlp_layer_types", f"expected hash_moe and moe entries, found {short_json(types)}"
            )
        count = next((i for i, t in enumerate(types) if t != "hash_moe"), len(types))
        if "hash_moe" in types[count:]:
            raise read.fail("mlp_layer_types", "hash_moe layers must come first (num_hash_layers)")
    if count > layers:
        raise read.fail("num_hash_layers", f"{count} is beyond num_hidden_layers ({layers})")
    return count


def _quantization(read: ConfigReader) -> Quantization:
    """quantization_config, with V4's storage: `.scale` names; F8_E8M0 scales and FP4 routed experts
    under expert_dtype fp4 (the released V4-Flash and -Pro), F32 scales and FP8 experts under fp8
    (V4-Flash-Base), as vLLM's DeepseekV4FP8Config reads it."""
    quantization = quantization_of(read)
    if not isinstance(quantization, Fp8Quantization):
        return quantization
    raw = read.config["quantization_config"]
    value = raw.get("expert_dtype", read.config.get("expert_dtype", "fp4"))
    if value not in ("fp4", "fp8"):
        raise read.fail(
            "expert_dtype", f"expected fp4 or fp8 (DeepSeek V4's experts), found {short_json(value)}"
        )
    fp4 = value == "fp4"
    return replace(
        quantization,
        scale_dtype="F8_E8M0" if fp4 else "F32",
        scale_suffix=".scale",
        expert_dtype="fp4" if fp4 else None,
    )


# --- spec -> tree ------------------------------------------------------------------------------
# Builders take the spec and the layers they are built for and return one node of len(layers)
# instances, as kimicount.anatomy's do. Tensors are named as the spec's naming says (_name).

#: DeepSeek's in-layer names -> transformers' (conversion_mapping.py lines 711–768, the renames applied).
_RENAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "hc_attn_fn": "attn_hc.fn",
    "hc_attn_base": "attn_hc.base",
    "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn",
    "hc_ffn_base": "ffn_hc.base",
    "hc_ffn_scale": "ffn_hc.scale",
    "attn.wq_a.weight": "self_attn.q_a_proj.weight",
    "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.wq_b.weight": "self_attn.q_b_proj.weight",
    "attn.wkv.weight": "self_attn.kv_proj.weight",
    "attn.kv_norm.weight": "self_attn.kv_norm.weight",
    "attn.wo_a.weight": "self_attn.o_a_proj.weight",
    "attn.wo_b.weight": "self_attn.o_b_proj.weight",
    "attn.attn_sink": "self_attn.sinks",
    "attn.compressor.wkv.weight": "self_attn.compressor.kv_proj.weight",
    "attn.compressor.wgate.weight": "self_attn.compressor.gate_proj.weight",
    "attn.compressor.ape": "self_attn.compressor.position_bias",
    "attn.compressor.norm.weight": "self_attn.compressor.kv_norm.weight",
    "attn.indexer.wq_b.weight": "self_attn.compressor.indexer.q_b_proj.weight",
    "attn.indexer.weights_proj.weight": "self_attn.compressor.indexer.scorer.weights_proj.weight",
    "attn.indexer.compressor.wkv.weight": "self_attn.compressor.indexer.kv_proj.weight",
    "attn.indexer.compressor.wgate.weight": "self_attn.compressor.indexer.gate_proj.weight",
    "attn.indexer.compressor.ape": "self_attn.compressor.indexer.position_bias",
    "attn.indexer.compressor.norm.weight": "self_attn.compressor.indexer.kv_norm.weight",
    "ffn.gate.weight": "mlp.gate.weight",
    "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.gate.tid2eid": "mlp.gate.tid2eid",
    "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
    "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
}
_TOP_RENAMES = {
    "embed.weight": "model.embed_tokens.weight",
    "head.weight": "lm_head.weight",
    "norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
}


def _name(spec: DeepseekV4Spec, layers: Sequence[int], suffix: str) -> str:
    """A tensor's name pattern: layers.{layer}.<suffix> (DeepSeek's), model.layers.{layer}.<renamed>
    (transformers'), mtp.<i>.<suffix> for an MTP layer; a top-level tensor's without `layers`."""
    if not layers:
        return _TOP_RENAMES[suffix] if spec.naming == TRANSFORMERS else suffix
    if layers[0] >= spec.num_hidden_layers:  # an MTP layer (built one at a time)
        return f"mtp.{layers[0] - spec.num_hidden_layers}.{suffix}"
    if spec.naming == TRANSFORMERS:
        return f"model.layers.{{layer}}.{_RENAMES[suffix]}"
    return f"layers.{{layer}}.{suffix}"


def _tensor(spec: DeepseekV4Spec, layers: Sequence[int], suffix: str, shape, role: Role, **kw) -> TensorRef:
    if role is Role.NORM and spec.naming == TRANSFORMERS:
        # transformers keeps every norm in F32 (modeling_deepseek_v4.py lines 1241–1253,
        # _keep_in_fp32_modules_strict), so its save stores them so
        role = Role.F32
    return TensorRef(_name(spec, layers, suffix), tuple(shape), role, tuple(layers), **kw)


def hyper_connection(spec: DeepseekV4Spec, layers: Sequence[int], site: str) -> Node:
    """One manifold hyper-connection (before the attention, `site` attn, or the MLP, ffn): a
    projection of the hc_mult streams to the pre, post and comb mixing weights, fn [(2 + m)·m, m·hidden],
    its bias [(2 + m)·m] and three scales, all F32. [params]

    >>> from kimicount.models import known_model
    >>> hyper_connection(known_model("deepseek-v4-flash").spec(), [2], "attn").params_per_instance
    393243
    """
    m, hidden = spec.hc_mult, spec.hidden_size
    mix = (2 + m) * m
    tensors = [
        _tensor(spec, layers, f"hc_{site}_fn", (mix, m * hidden), Role.F32),
        _tensor(spec, layers, f"hc_{site}_base", (mix,), Role.F32),
        _tensor(spec, layers, f"hc_{site}_scale", (3,), Role.F32),
    ]
    name = "Attention hyper-connection" if site == "attn" else "MLP hyper-connection"
    return leaf(name, len(layers), tensors, "(2 + hc_mult)·hc_mult × (hc_mult·hidden_size + 1) + 3")


def _norm(
    spec: DeepseekV4Spec, layers: Sequence[int], name: str, suffix: str, width: int, formula: str
) -> Node:
    return leaf(name, len(layers), [_tensor(spec, layers, suffix, (width,), Role.NORM)], formula)


def compressor(spec: DeepseekV4Spec, layers: Sequence[int], ratio: int, prefix: str, width: int) -> Node:
    """A compressor (`prefix` attn.compressor, or the indexer's): kv and gate projections [coff·width,
    hidden] in BF16, the position bias ape [ratio, coff·width] in F32 and an RMSNorm [width]; every
    `ratio` tokens it pools into one entry `width` wide (CSA's windows overlap: two series, coff 2). [params]

    >>> from kimicount.models import known_model
    >>> flash = known_model("deepseek-v4-flash").spec()
    >>> compressor(flash, [2], 4, "attn.compressor", 512).params_per_instance  # 2 × 1,024 × 4,096 + 4 × 1,024 + 512
    8393216
    """
    series = spec.coff[ratio] * width
    tensors = [
        _tensor(spec, layers, f"{prefix}.wkv.weight", (series, spec.hidden_size), Role.UNQUANTIZED),
        _tensor(spec, layers, f"{prefix}.wgate.weight", (series, spec.hidden_size), Role.UNQUANTIZED),
        _tensor(spec, layers, f"{prefix}.ape", (ratio, series), Role.F32),
        _tensor(spec, layers, f"{prefix}.norm.weight", (width,), Role.NORM),
    ]
    coff = f"{spec.coff[ratio]}·" if spec.coff[ratio] > 1 else ""
    dim = "head_dim" if prefix == "attn.compressor" else "index_head_dim"
    name = "KV compressor" if prefix == "attn.compressor" else "Key compressor"
    return leaf(
        name,
        len(layers),
        tensors,
        f"2 × hidden_size × {coff}{dim} + ratio × {coff}{dim} + {dim}",
    )


def lightning_indexer(spec: DeepseekV4Spec, layers: Sequence[int]) -> Node:
    """CSA's lightning indexer: query heads from the query latent (wq_b [index_n_heads·index_head_dim,
    q_lora_rank], FP8), per-head weights from the hidden state (weights_proj [index_n_heads, hidden],
    BF16), and its own compressor of index_head_dim-wide keys. [params]"""
    n, d, q = spec.index_n_heads, spec.index_head_dim, spec.q_lora_rank
    count = len(layers)
    parts = [
        leaf(
            "Indexer query heads",
            count,
            [_tensor(spec, layers, "attn.indexer.wq_b.weight", (n * d, q), Role.LINEAR)],
            "q_lora_rank × index_n_heads·index_head_dim",
        ),
        leaf(
            "Indexer head weights",
            count,
            [
                _tensor(
                    spec, layers, "attn.indexer.weights_proj.weight", (n, spec.hidden_size), Role.UNQUANTIZED
                )
            ],
            "hidden_size × index_n_heads",
        ),
        compressor(spec, layers, CSA, "attn.indexer.compressor", d),
    ]
    return group("Lightning indexer", parts, count)


def attention(spec: DeepseekV4Spec, layers: Sequence[int], ratio: int) -> Node:
    """The attention of one layer kind: the query pair, the one shared key–value head (kv_norm), the
    sinks, the grouped output projections, and for CSA and HCA the compressor (CSA: and the indexer).
    [params]

    >>> from kimicount.models import known_model
    >>> attention(known_model("deepseek-v4-flash").spec(), [0], 0).params_per_instance
    106956352
    """
    n, hidden, heads, d = len(layers), spec.hidden_size, spec.num_attention_heads, spec.head_dim
    q, groups, rank = spec.q_lora_rank, spec.o_groups, spec.o_lora_rank
    parts = [
        leaf(
            "Query compression",
            n,
            [
                _tensor(spec, layers, "attn.wq_a.weight", (q, hidden), Role.LINEAR),
                _tensor(spec, layers, "attn.q_norm.weight", (q,), Role.NORM),
            ],
            "hidden_size × q_lora_rank + q_lora_rank",
        ),
        leaf(
            "Query heads",
            n,
            [_tensor(spec, layers, "attn.wq_b.weight", (heads * d, q), Role.LINEAR)],
            "q_lora_rank × num_attention_heads·head_dim",
        ),
        leaf(
            "Shared key–value head",
            n,
            [
                _tensor(spec, layers, "attn.wkv.weight", (d, hidden), Role.LINEAR),
                _tensor(spec, layers, "attn.kv_norm.weight", (d,), Role.NORM),
            ],
            "hidden_size × head_dim + head_dim (one head, read as key and value)",
        ),
        leaf(
            "Attention sinks",
            n,
            [_tensor(spec, layers, "attn.attn_sink", (heads,), Role.F32)],
            "num_attention_heads",
        ),
        leaf(
            "Grouped output projection",
            n,
            [_tensor(spec, layers, "attn.wo_a.weight", (groups * rank, heads * d // groups), Role.LINEAR)],
            "num_attention_heads·head_dim / o_groups × o_groups·o_lora_rank",
        ),
        leaf(
            "Output projection",
            n,
            [_tensor(spec, layers, "attn.wo_b.weight", (hidden, groups * rank), Role.LINEAR)],
            "o_groups·o_lora_rank × hidden_size",
        ),
    ]
    if ratio != SWA:
        parts.append(compressor(spec, layers, ratio, "attn.compressor", d))
    if ratio == CSA:
        parts.append(lightning_indexer(spec, layers))
    name = {
        SWA: "Sliding-window attention",
        CSA: "Compressed sparse attention",
        HCA: "Heavily compressed attention",
    }
    return group(name[ratio], parts, n)


def routed_experts(spec: DeepseekV4Spec, layers: Sequence[int]) -> Node:
    """n_routed_experts SwiGLU experts (w1 gate, w3 up [width, hidden], w2 down [hidden, width]) per
    layer, num_experts_per_tok of them run per token. transformers fuses each layer's into gate_up_proj
    [E, 2·width, hidden] and down_proj [E, hidden, width]: one instance per layer then. [params]"""
    n, hidden, width, experts = (
        len(layers),
        spec.hidden_size,
        spec.moe_intermediate_size,
        spec.n_routed_experts,
    )
    per_expert = 3 * hidden * width
    activated = n * spec.num_experts_per_tok * per_expert
    if spec.naming == TRANSFORMERS:
        fused = [
            TensorRef(
                "model.layers.{layer}.mlp.experts.gate_up_proj",
                (experts, 2 * width, hidden),
                Role.LINEAR,
                tuple(layers),
            ),
            TensorRef(
                "model.layers.{layer}.mlp.experts.down_proj",
                (experts, hidden, width),
                Role.LINEAR,
                tuple(layers),
            ),
        ]
        return leaf(
            "Routed experts",
            n,
            fused,
            "n_routed_experts × 3 × hidden_size × moe_intermediate_size (fused)",
            activated=activated,
        )
    pattern = _name(spec, layers, "ffn.experts.{expert}.")
    tensors = [
        TensorRef(pattern + "w1.weight", (width, hidden), Role.LINEAR, tuple(layers), experts=experts),
        TensorRef(pattern + "w3.weight", (width, hidden), Role.LINEAR, tuple(layers), experts=experts),
        TensorRef(pattern + "w2.weight", (hidden, width), Role.LINEAR, tuple(layers), experts=experts),
    ]
    return leaf(
        "Routed experts",
        n * experts,
        tensors,
        "3 × hidden_size × moe_intermediate_size",
        calculation=f"3 × {hidden:,} × {width:,}",
        activated=activated,
    )


def mixture_of_experts(spec: DeepseekV4Spec, layers: Sequence[int], hashed: bool) -> Node:
    """The router (gate [E, hidden] in the model dtype; its F32 bias in learned-routed layers), the
    hash routing table of the first layers (tid2eid [vocab, top_k], int64: each token's experts,
    looked up, not learned), the routed experts and the shared expert. [params]"""
    n, hidden, experts = len(layers), spec.hidden_size, spec.n_routed_experts
    gate = [_tensor(spec, layers, "ffn.gate.weight", (experts, hidden), Role.ROUTER)]
    formula = "hidden_size × n_routed_experts"
    if not hashed:
        gate.append(_tensor(spec, layers, "ffn.gate.bias", (experts,), Role.ROUTER_BIAS))
        formula += " + n_routed_experts"
    parts = [leaf("Router", n, gate, formula)]
    if hashed:
        table = _tensor(
            spec, layers, "ffn.gate.tid2eid", (spec.vocab_size, spec.num_experts_per_tok), Role.INDEX
        )
        parts.append(leaf("Hash routing table", n, [table], "vocab_size × num_experts_per_tok (int64)"))
    parts.append(routed_experts(spec, layers))
    if spec.n_shared_experts:
        width = spec.n_shared_experts * spec.moe_intermediate_size
        shared = [
            _tensor(spec, layers, "ffn.shared_experts.w1.weight", (width, hidden), Role.LINEAR),
            _tensor(spec, layers, "ffn.shared_experts.w3.weight", (width, hidden), Role.LINEAR),
            _tensor(spec, layers, "ffn.shared_experts.w2.weight", (hidden, width), Role.LINEAR),
        ]
        parts.append(
            leaf(
                "Shared expert" if spec.n_shared_experts == 1 else "Shared experts",
                n,
                shared,
                "3 × hidden_size × n_shared_experts·moe_intermediate_size",
                calculation=f"3 × {hidden:,} × {width:,}",
            )
        )
    return group("Hash-routed mixture of experts" if hashed else "Mixture of experts", parts, n)


def transformer_block(spec: DeepseekV4Spec, layers: Sequence[int], ratio: int, hashed: bool) -> list[Node]:
    """One block: the attention between its hyper-connection and RMSNorm, then the MoE between its own."""
    return [
        hyper_connection(spec, layers, "attn"),
        _norm(spec, layers, "Attention RMSNorm", "attn_norm.weight", spec.hidden_size, "hidden_size"),
        attention(spec, layers, ratio),
        hyper_connection(spec, layers, "ffn"),
        _norm(spec, layers, "MLP RMSNorm", "ffn_norm.weight", spec.hidden_size, "hidden_size"),
        mixture_of_experts(spec, layers, hashed),
    ]


#: The block kinds, attention kind × routing, in the order the tree lists them.
BLOCK_KINDS = tuple((ratio, hashed) for hashed in (True, False) for ratio in (SWA, CSA, HCA))


def block_kind(ratio: int, hashed: bool) -> str:
    """'csa-hash', 'hca-moe': how the tree and the per-layer reports name a block kind."""
    return f"{KIND_NAMES[ratio].lower()}-{'hash' if hashed else 'moe'}"


def block_groups(spec: DeepseekV4Spec, layers: Iterable[int]) -> list[Node]:
    """The layers grouped by kind: "2 SWA hash-MoE blocks (layers 0–1)", "20 CSA MoE blocks" (a group's
    layers are spelled out when they run in at most two spans), in the order of their first layers."""
    layers = tuple(layers)
    groups = []
    kinds = [
        tuple(i for i in layers if spec.ratio(i) == ratio and spec.is_hash_layer(i) == hashed)
        for ratio, hashed in BLOCK_KINDS
    ]
    for (ratio, hashed), members in sorted(zip(BLOCK_KINDS, kinds), key=lambda kind: kind[1][:1]):
        if members:
            count = len(members)
            label = f"{KIND_NAMES[ratio]} {'hash-MoE' if hashed else 'MoE'} block{'s' if count > 1 else ''}"
            name = f"{count} {label}"
            if members[0] >= spec.num_hidden_layers:
                name += f" (MTP layer {members[0] - spec.num_hidden_layers})"
            elif len(index_runs(members)) <= 2:
                name += f" ({layer_span(members)})"
            kind = "mtp" if members[0] >= spec.num_hidden_layers else block_kind(ratio, hashed)
            groups.append(
                group(name, transformer_block(spec, members, ratio, hashed), count, layers=members, kind=kind)
            )
    return groups


def _top(spec: DeepseekV4Spec, name: str, suffix: str, shape, role: Role, formula: str, at=()) -> Node:
    return leaf(name, 1, [_tensor(spec, at, suffix, shape, role)], formula)


def output_hyper_connection(spec: DeepseekV4Spec, at: Sequence[int] = ()) -> Node:
    """The last collapse of the hc_mult streams into one: hc_head_fn [m, m·hidden], hc_head_base [m],
    hc_head_scale [1], F32 (the MTP layer has its own). [params]"""
    m, hidden = spec.hc_mult, spec.hidden_size
    tensors = [
        _tensor(spec, at, "hc_head_fn", (m, m * hidden), Role.F32),
        _tensor(spec, at, "hc_head_base", (m,), Role.F32),
        _tensor(spec, at, "hc_head_scale", (1,), Role.F32),
    ]
    return leaf("Output hyper-connection", 1, tensors, "hc_mult × (hc_mult·hidden_size + 1) + 1")


def language_model(spec: DeepseekV4Spec) -> Node:
    """Embedding, every block, the output hyper-connection, the final norm and the head.

    >>> from kimicount.models import known_model
    >>> language_model(known_model("deepseek-v4-flash").spec()).params  # 284B
    284334567511
    """
    shape = (spec.vocab_size, spec.hidden_size)
    parts = [
        _top(spec, "Token embedding", "embed.weight", shape, Role.EMBEDDING, "vocab_size × hidden_size"),
        group(
            f"{spec.num_hidden_layers} transformer blocks", block_groups(spec, range(spec.num_hidden_layers))
        ),
        output_hyper_connection(spec),
        _top(spec, "Final RMSNorm", "norm.weight", (spec.hidden_size,), Role.NORM, "hidden_size"),
    ]
    if not spec.tie_word_embeddings:
        parts.append(_top(spec, "Output head", "head.weight", shape, Role.HEAD, "hidden_size × vocab_size"))
    return group(spec.name.rsplit("/", 1)[-1], parts)


def multi_token_prediction(spec: DeepseekV4Spec) -> Node | None:
    """The MTP layers (mtp.0): norms of the embedding and of the hidden state, their projections
    e_proj and h_proj [hidden, hidden] (FP8), one SWA MoE block, its own output hyper-connection and
    norm. They share the main model's embedding and head (the checkpoint stores no copy). [params]"""
    if not spec.mtp_layers or spec.naming == TRANSFORMERS:  # transformers drops mtp.* as it loads
        return None
    hidden, parts = spec.hidden_size, []
    for layer in spec.mtp_layers:
        at = (layer,)
        parts += [
            leaf(
                "Input norms",
                1,
                [_tensor(spec, at, f"{n}.weight", (hidden,), Role.NORM) for n in ("enorm", "hnorm")],
                "2 × hidden_size",
            ),
            leaf(
                "Embedding and hidden projections",
                1,
                [
                    _tensor(spec, at, f"{p}.weight", (hidden, hidden), Role.LINEAR)
                    for p in ("e_proj", "h_proj")
                ],
                "2 × hidden_size × hidden_size",
            ),
            *block_groups(spec, at),
            output_hyper_connection(spec, at),
            _top(spec, "Output norm", "norm.weight", (hidden,), Role.NORM, "hidden_size", at),
        ]
    return group("Multi-token prediction", parts)


#: What a reader of these trees needs told.
NOTES = (
    (
        "The hash routing tables (tid2eid, int64) are counted as elements of the tree, not learned "
        "parameters; the headline table gives the totals with and without them."
    ),
)


def build_anatomy(spec: DeepseekV4Spec) -> Anatomy:
    """The language model's tree and the MTP module's."""
    # Anatomy.spec is typed as the DeepSeek-V3 family's ModelSpec: every command asks the family
    # registry (kimicount.families) what a spec of another family serves before it reads family fields.
    anatomy = Anatomy(
        spec=spec,  # type: ignore[arg-type]
        model=language_model(spec),
        mtp=multi_token_prediction(spec),
        notes=NOTES,
    )
    check_tensor_sizes(anatomy)
    return anatomy


def spec_for_names(spec: DeepseekV4Spec, names: Iterable[str]) -> DeepseekV4Spec:
    """The spec whose tree names tensors as this checkpoint does: transformers' names when they begin
    with `model.` (its save_pretrained), DeepSeek's otherwise. A transformers checkpoint is verified
    unquantized: its save has no form for FP4 experts fused per layer."""
    if not any(name.startswith("model.layers.") for name in names):
        return spec
    if spec.quantization is not None:
        raise UsageError(
            f"{spec.name}: the checkpoint has transformers' tensor names (model.layers.N.self_attn...), "
            "which kimicount checks only for an unquantized save (no quantization_config): transformers "
            "fuses the routed experts and has no FP4 form for them"
        )
    return replace(spec, naming=TRANSFORMERS)


# --- what flows through each component (kimicount.flow's words) ----------------------------------


def component_flows(spec: DeepseekV4Spec) -> dict[str, Any]:
    """The activations into and out of each component, by name: the hc_mult residual streams H
    collapse into x before each block and expand after it; one key–value head kv is read as key and
    value; a compressor emits one entry per `ratio` positions (T/4, T/128).

    >>> from kimicount.models import known_model
    >>> component_flows(known_model("deepseek-v4-flash").spec())["Shared key–value head"].text
    'x [B, T, 4,096] → kv [B, T, 512]'
    """
    from kimicount.flow import Activation, B, Dim, Flow, T

    def act(name, *dims, tokens=(B, T)):
        return Activation(name, (*tokens, *dims))

    h = Dim(spec.hidden_size, "hidden")
    heads, d, m = spec.num_attention_heads, spec.head_dim, spec.hc_mult
    streams = act("H", Dim(m * spec.hidden_size, f"{m} streams × hidden", f"{m} × {spec.hidden_size:,}"))
    x, hidden = act("x", h), act("h", h)
    mix = act("pre, post, comb", Dim((2 + m) * m, "mixing weights"))
    c_q = act("c_Q", Dim(spec.q_lora_rank, "query latent"))
    per_head = Dim(heads * d, f"{heads} heads × {d}", f"{heads} × {d}")
    tokens = Activation("tokens", (B, T))
    moe = spec.moe_intermediate_size
    shared = Dim(spec.n_shared_experts * moe, "shared expert width")
    k = spec.num_experts_per_tok
    compressed = {ratio: Dim(f"T/{ratio}", "compressed entries") for ratio in (CSA, HCA)}
    flows = {
        "Token embedding": Flow((tokens,), (hidden,)),
        "Attention hyper-connection": Flow((streams,), (x,), middle=(mix,)),
        "MLP hyper-connection": Flow((streams,), (x,), middle=(mix,)),
        "Attention RMSNorm": Flow((x,), (x,)),
        "MLP RMSNorm": Flow((x,), (x,)),
        "Query compression": Flow((x,), (c_q,)),
        "Query heads": Flow((c_q,), (act("q", per_head),)),
        "Shared key–value head": Flow((x,), (act("kv", Dim(d, "one head, key and value")),)),
        "Grouped output projection": Flow(
            (act("o", per_head),), (act("z", Dim(spec.o_groups * spec.o_lora_rank, "groups × rank")),)
        ),
        "Output projection": Flow(
            (act("z", Dim(spec.o_groups * spec.o_lora_rank, "groups × rank")),), (hidden,)
        ),
        "KV compressor": Flow((x,), (Activation("kv_C", (B, compressed[HCA], Dim(d, "entry"))),)),
        "Indexer query heads": Flow(
            (c_q,), (act("q_I", Dim(spec.index_n_heads * spec.index_head_dim, "index heads")),)
        ),
        "Indexer head weights": Flow((x,), (act("w", Dim(spec.index_n_heads, "head weights")),)),
        "Key compressor": Flow(
            (x,), (Activation("k_I", (B, compressed[CSA], Dim(spec.index_head_dim, "index key"))),)
        ),
        "Router": Flow((x,), (act("scores", Dim(spec.n_routed_experts, "experts")),)),
        "Hash routing table": Flow((tokens,), (act("experts", Dim(k, "chosen experts")),)),
        "Routed experts": Flow(
            (x,),
            (act("y", h),),
            middle=(
                Activation(
                    f"g·u, top {k} of {spec.n_routed_experts}",
                    (Dim(f"B·T·{k}", "routed copies"), Dim(moe, "expert width")),
                ),
            ),
        ),
        "Output hyper-connection": Flow((streams,), (hidden,)),
        "Final RMSNorm": Flow((hidden,), (x,)),
        "Output head": Flow((x,), (act("logits", Dim(spec.vocab_size, "vocabulary")),)),
        "Input norms": Flow((hidden, act("e", h)), (x, act("e", h))),
        "Embedding and hidden projections": Flow((x, act("e", h)), (hidden,)),
        "Output norm": Flow((hidden,), (x,)),
    }
    flows["Shared expert"] = flows["Shared experts"] = Flow(
        (x,), (act("y", h),), middle=(act("g·u", shared),)
    )
    return flows


# --- the attention's own FLOPs (kimicount flops) ----------------------------------------------------


@dataclass(frozen=True)
class KindAttention:
    """The attention itself (no parameters) of one layer kind, per token per layer: in a decode step
    over `context` positions, and averaged over a causal prefill of `tokens`."""

    kind: str
    layers: int
    formula: str
    calculation: str
    decode: int
    prefill: Fraction


def _sum_min(tokens: int, cap: int) -> int:
    """Σ_{t=1}^{T} min(t, cap)."""
    if tokens <= cap:
        return tokens * (tokens + 1) // 2
    return cap * (cap + 1) // 2 + (tokens - cap) * cap


def _sum_entries(tokens: int, ratio: int, cap: int | None = None) -> int:
    """Σ_{t=1}^{T} min(⌊t / ratio⌋, cap): the compressed entries each position of a prefill sees (all
    of them, or the indexer's top `cap`)."""
    whole = sum_floor(tokens, ratio)
    if cap is None or tokens < ratio * cap:
        return whole
    below = sum_floor(ratio * cap - 1, ratio)  # positions whose entries are fewer than cap
    return below + (tokens - ratio * cap + 1) * cap


def sum_floor(tokens: int, ratio: int) -> int:
    """Σ_{t=1}^{T} ⌊t / ratio⌋ in closed form.

    >>> sum_floor(10, 4), sum(t // 4 for t in range(1, 11))
    (10, 10)
    """
    q, rem = divmod(tokens, ratio)
    return ratio * q * (q - 1) // 2 + q * (rem + 1)


def attention_flops(spec: DeepseekV4Spec, tokens: int, context: int) -> tuple[KindAttention, ...]:
    """Scores and weighted sums of each layer kind, per token per layer: one query of num_attention_heads
    heads of head_dim against the shared key–value head, 2 × H × head_dim FLOPs a position for the
    scores and as many for the sum (4 × H × head_dim), over the window's min(L, sliding_window)
    positions and: CSA, the indexer's top min(index_topk, ⌊L / 4⌋) compressed entries, and the indexer's
    own scores over every compressed key (2 × index_n_heads × index_head_dim × ⌊L / 4⌋); HCA, every
    ⌊L / 128⌋ compressed entry. [FLOPs/token/layer]

    >>> from kimicount.models import known_model
    >>> [(k.kind, k.decode) for k in attention_flops(known_model("deepseek-v4-flash").spec(), 4096, 4096)]
    [('SWA', 16777216), ('CSA', 100663296), ('HCA', 20971520)]
    """
    h, d, w = spec.num_attention_heads, spec.head_dim, spec.sliding_window
    per = 4 * h * d  # scores and sum, one position
    n, di, top = spec.index_n_heads, spec.index_head_dim, spec.index_topk
    L = context
    window = min(L, w)
    rows = []
    for ratio in (SWA, CSA, HCA):
        count = len(spec.layers_of(ratio))
        if not count:
            continue
        if ratio == SWA:
            decode = per * window
            formula = "4 × H × head_dim × min(L, sliding_window)"
            calc = f"4 × {h} × {d} × {window:,}"
            positions = _sum_min(tokens, w)
            prefill = Fraction(per * positions, tokens)
        elif ratio == CSA:
            entries, chosen = L // CSA, min(top, L // CSA)
            decode = per * (window + chosen) + 2 * n * di * entries
            formula = (
                "4 × H × head_dim × (min(L, sliding_window) + min(index_topk, ⌊L / 4⌋))"
                " + 2 × index_n_heads × index_head_dim × ⌊L / 4⌋"
            )
            calc = f"4 × {h} × {d} × ({window:,} + {chosen:,}) + 2 × {n} × {di} × {entries:,}"
            total = per * (_sum_min(tokens, w) + _sum_entries(tokens, CSA, top)) + 2 * n * di * sum_floor(
                tokens, CSA
            )
            prefill = Fraction(total, tokens)
        else:
            entries = L // HCA
            decode = per * (window + entries)
            formula = "4 × H × head_dim × (min(L, sliding_window) + ⌊L / 128⌋)"
            calc = f"4 × {h} × {d} × ({window:,} + {entries:,})"
            prefill = Fraction(per * (_sum_min(tokens, w) + sum_floor(tokens, HCA)), tokens)
        rows.append(KindAttention(KIND_NAMES[ratio], count, formula, calc, decode, prefill))
    return tuple(rows)


# --- spec -> cache groups --------------------------------------------------------------------------

#: FlashMLA's MODEL1 record (deepseek-ai/FlashMLA @ 9241ae3 tests/quant.py lines 14 and 55–58:
#: d_nope 448 fp8 values, d_rope 64 bf16, 7 E8M0 scales, one per 64 NoPE values, and a byte of pad);
#: vLLM (vllm/model_executor/layers/deepseek_v4_attention.py @ 0a291a2, head_bytes) and SGLang
#: (python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py @ 007bddd, get_bytes_per_token) size it alike.
FP8_NOPE_TILE = 64


def kv_entry(spec: DeepseekV4Spec, dtype: str) -> tuple[EntryPart, ...]:
    """One cached key–value entry (a position of the window, or a compressed entry): in fp8, FlashMLA's
    584-B record; in bf16 (an unquantized cache, transformers'), the head_dim values. [bytes/entry]

    >>> from kimicount.models import known_model
    >>> sum(p.bytes for p in kv_entry(known_model("deepseek-v4-flash").spec(), "fp8"))
    584
    """
    d, rope = spec.head_dim, spec.qk_rope_head_dim
    if dtype == "bf16":
        return (EntryPart("bf16 values", d, 2, "head_dim bf16"),)
    nope = d - rope
    tiles = -(-nope // FP8_NOPE_TILE)
    return (
        EntryPart("fp8 NoPE values", nope, 1, "head_dim − qk_rope_head_dim, fp8"),
        EntryPart("bf16 RoPE values", rope, 2, "qk_rope_head_dim, bf16"),
        EntryPart("E8M0 scales", tiles, 1, "one E8M0 per 64 NoPE values"),
        EntryPart("pad byte", 1, 1, "a byte"),
    )


def indexer_entry(spec: DeepseekV4Spec, dtype: str) -> tuple[EntryPart, ...]:
    """One indexer key: fp8 with one F32 scale per 128 values (DeepSeek-V3.2's layout: 132 B), or FP4
    two to a byte with one E8M0 scale per 32 (68 B; SGLang's get_dsv4_indexer_bytes_per_token @
    007bddd; vLLM's --attention-config.use_fp4_indexer_cache still allocates the fp8 132 B and uses
    the first half, deepseek_v4_attention.py @ 0a291a2). [bytes/entry]"""
    d = spec.index_head_dim
    if dtype == "fp4":
        return (
            EntryPart("bytes of fp4 key values, two a byte", d // 2, 1, "index_head_dim fp4, two a byte"),
            EntryPart("E8M0 scales", -(-d // 32), 1, "one E8M0 per 32 values"),
        )
    return (
        EntryPart("fp8 key values", d, 1, "index_head_dim fp8"),
        EntryPart("F32 scale", -(-d // 128), 4, "one F32 per 128 values"),
    )


def state_entry(spec: DeepseekV4Spec, ratio: int, width: int, formula: str) -> tuple[EntryPart, ...]:
    """A compressor's running state per position of its window: the kv and gate-score series,
    2 × coff × width F32 values (vLLM deepseek_compressor.py @ 0de10a2, CompressorStateCache
    state_dim; SGLang deepseek_v4_compress_state.py @ 067c8c8, last_dim). [bytes/entry]"""
    return (EntryPart("F32 kv and score values", 2 * spec.coff[ratio] * width, 4, formula),)


def _state_group(
    spec: DeepseekV4Spec, name: str, layers: tuple[int, ...], ratio: int, width: int, formula: str
) -> CacheGroup:
    """A compressor's state: windowed over its coff × ratio positions."""
    return CacheGroup(
        name,
        MemoryKind.WINDOWED,
        layers,
        ratio=ratio,
        window=spec.coff[ratio] * ratio,
        entry=state_entry(spec, ratio, width, formula),
        content=COMPRESSOR_STATE,
    )


def cache_groups(
    spec: DeepseekV4Spec, include_mtp: bool = False, dtype: str = "fp8", indexer: str = "fp8"
) -> tuple[CacheGroup, ...]:
    """What each layer kind keeps per request: every layer a window of its last `sliding_window`
    positions; CSA layers one compressed entry per 4 positions and one indexer key per 4; HCA layers
    one entry per 128; every compressor the state of its window (coff × ratio positions: 8 for CSA,
    128 for HCA), which vLLM pages as a sliding window and SGLang as a ring per request.

    >>> from kimicount.models import known_model
    >>> [(g.name, g.kind.value, len(g.layers), g.entry_bytes) for g in cache_groups(known_model("deepseek-v4-flash").spec())]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('SWA window', 'windowed', 43, 584), ('CSA compressed KV', 'per_token_compressed', 21, 584),
     ('CSA indexer keys', 'per_token_compressed', 21, 132), ('HCA compressed KV', 'per_token_compressed', 20, 584),
     ('CSA compressor state', 'windowed', 21, 8192), ('CSA indexer compressor state', 'windowed', 21, 2048),
     ('HCA compressor state', 'windowed', 20, 4096)]
    """
    if dtype not in ("fp8", "bf16"):
        raise UsageError(f"--dtype {dtype}: DeepSeek V4's cache is fp8 (FlashMLA's record) or bf16")
    every = tuple(range(spec.num_hidden_layers + (spec.num_nextn_predict_layers if include_mtp else 0)))
    csa, hca = spec.layers_of(CSA, include_mtp), spec.layers_of(HCA, include_mtp)
    kv = kv_entry(spec, dtype)
    d, di = spec.head_dim, spec.index_head_dim
    groups = [
        CacheGroup("SWA window", MemoryKind.WINDOWED, every, window=spec.sliding_window, entry=kv),
        CacheGroup("CSA compressed KV", MemoryKind.COMPRESSED, csa, ratio=CSA, entry=kv),
        CacheGroup(
            "CSA indexer keys",
            MemoryKind.COMPRESSED,
            csa,
            ratio=CSA,
            entry=indexer_entry(spec, indexer),
            content=INDEX_KEYS,
        ),
        CacheGroup("HCA compressed KV", MemoryKind.COMPRESSED, hca, ratio=HCA, entry=kv),
        _state_group(spec, "CSA compressor state", csa, CSA, d, "2 × 2 × head_dim, F32"),
        _state_group(spec, "CSA indexer compressor state", csa, CSA, di, "2 × 2 × index_head_dim, F32"),
        _state_group(spec, "HCA compressor state", hca, HCA, d, "2 × head_dim, F32"),
    ]
    return tuple(g for g in groups if g.layers)
