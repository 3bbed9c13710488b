"""The Kimi Linear family: Kimi-Linear-48B-A3B and Kimi K3, whose layers interleave Kimi Delta
Attention (KDA, a gated linear attention with a constant-size state per sequence) with MLA.

Read from the engines' own code (read, never shipped):
- vLLM vllm/model_executor/models/kimi_linear.py @ 01d9958 (KimiMoE, KimiMLAAttention, KimiDecoderLayer,
  load_weights: experts w1/w2/w3 under block_sparse_moe, the dense first layer's mlp.{gate,up,down}_proj)
  and vllm/model_executor/layers/kda.py @ 01a7e5d (KimiDeltaAttention.__init__: q/k/v_proj
  [H·d, hidden], f_a_proj [d, hidden], f_b_proj [H·d, d], dt_bias [H·d] fp32, b_proj [H, hidden],
  q/k/v_conv1d [H·d, 1, K], A_log [1, 1, H, 1] fp32, g_a_proj [d, hidden], g_b_proj [H·d, d],
  o_norm [d], o_proj [hidden, H·d]);
- SGLang python/sglang/srt/models/kimi_k3.py @ 0000e9b (KimiK3DeltaAttention: the full-rank g_proj
  [H·d, hidden] under use_full_rank_gate, fp32 convolutions, A_log stored 1-D as [head_dim];
  KimiK3MLAAttention: g_proj [H·v_head_dim, hidden]; KimiK3MoE: routed_expert_down_proj [latent,
  hidden], routed_expert_norm [latent], routed_expert_up_proj [hidden, latent], experts in the latent,
  shared experts in the hidden space; KimiK3DecoderLayer: self_attention_res_{norm,proj},
  mlp_res_{norm,proj} [1, hidden]; KimiK3LinearModel: output_attn_res_{norm,proj}) and
  kimi_k3_vl.py @ 0c82983 (MoonViT3d: RMSNorm blocks, bias-free wqkv [3·qkv_hidden, vt_hidden],
  PatchMergerMLPV2 projector with a post RMSNorm);
- the configs' layer lists are 1-based: `is_kda_layer(i)` is `(i + 1) in kda_layers`
  (vLLM's KimiLinearConfig and SGLang's alike).

Storage, as the released checkpoints keep it: Kimi Linear keeps A_log and dt_bias in F32 and everything
else in BF16 (its index's total_size, 98,245,528,576 B, is 2 B per parameter plus 2 more for each of
those 82,560); K3 keeps its convolutions, A_log, dt_bias, o_norm and the router bias in F32 (a
public reader of the released K3 shard headers, batchgen-project/batchgen
batchgen/models/moonshotai/kimi_linear/k3/tensor_map.py @ 4c66576).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from kimicount.anatomy import (
    Anatomy,
    Node,
    Role,
    TensorRef,
    check_tensor_sizes,
    dense_mlp,
    embedding,
    final_norm,
    group,
    index_runs,
    latent_attention,
    layer_span,
    layer_tensor,
    leaf,
    output_head,
    rms_norm,
    routed_experts,
    router,
    shared_experts,
)
from kimicount.cache_groups import CONV, SSM, CacheGroup, MemoryKind, StateTensor
from kimicount.errors import ConfigError
from kimicount.reading import short_json
from kimicount.spec import (
    LANGUAGE_MODEL_PREFIX,
    MAX_EXPERTS,
    MAX_LAYERS,
    ConfigReader,
    MlaSpec,
    Quantization,
    quantization_of,
    torch_dtype_of,
)

__all__ = ["KimiLinearSpec", "build_anatomy", "cache_groups", "spec_from_config"]

#: The routed experts' projections as the checkpoints name them (gate w1, up w3, down w2).
EXPERT_NAMES = ("w1", "w3", "w2")
#: Where a MoE layer keeps its router and experts.
MOE_MODULE = "block_sparse_moe"


@dataclass(frozen=True)
class KdaSpec:
    """One KDA layer's sizes (config linear_attn_config)."""

    num_heads: int
    head_dim: int
    conv_kernel: int  # short_conv_kernel_size
    full_rank_gate: bool  # use_full_rank_gate: g_proj, else g_a_proj + g_b_proj
    #: gate_lower_bound (K3: −5): the decay's log is lower_bound · σ(…) instead of −exp(A_log) · softplus(…)
    gate_lower_bound: float | None = None

    @property
    def projection(self) -> int:
        """num_heads × head_dim: the width of q, k, v and the gates (12,288 for Kimi K3)."""
        return self.num_heads * self.head_dim


@dataclass(frozen=True)
class K3VisionSpec:
    """Kimi K3's MoonViT3d tower and PatchMergerMLPV2 projector (vision_config)."""

    hidden_size: int  # vt_hidden_size
    intermediate_size: int  # vt_intermediate_size
    num_layers: int  # vt_num_hidden_layers
    qkv_hidden_size: int
    patch_size: int
    pos_emb_height: int
    pos_emb_width: int
    mm_hidden_size: int
    merge_kernel: tuple[int, int]
    text_hidden_size: int
    patch_bias: bool  # patch_embed_proj_bias
    attn_bias: bool
    linear_bias: bool

    @property
    def merged_size(self) -> int:
        return self.mm_hidden_size * self.merge_kernel[0] * self.merge_kernel[1]


@dataclass(frozen=True)
class KimiLinearSpec:
    """Every size of a Kimi Linear / Kimi K3 language model, validated. MLA and MoE sizes carry the
    DeepSeek names the shared blocks read (n_routed_experts is the config's num_experts,
    num_experts_per_tok its num_experts_per_token, n_shared_experts its num_shared_experts)."""

    FAMILY: ClassVar[str] = "kimi_linear"

    name: str
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    max_position_embeddings: int
    torch_dtype: str
    tie_word_embeddings: bool
    #: The MLPs' activation: silu (Kimi Linear) or situ (K3, SituAndMul: β·tanh(g/β)·σ(g), the up
    #: projection clipped as lβ·tanh(u/lβ); activation_situ_beta, activation_situ_linear_beta).
    hidden_act: str
    # MLA layers
    num_attention_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    mla_use_nope: bool
    mla_use_output_gate: bool
    # MoE
    n_routed_experts: int
    num_experts_per_tok: int
    n_shared_experts: int
    moe_intermediate_size: int
    first_k_dense_replace: int
    moe_layer_freq: int
    routed_expert_hidden_size: int | None
    latent_moe_use_norm: bool
    # KDA layers, 0-based (the config's lists are 1-based)
    kda: KdaSpec
    kda_layers: tuple[int, ...]
    attn_res_block_size: int | None
    quantization: Quantization = None
    weight_prefix: str = ""
    vision: K3VisionSpec | None = None
    #: Kimi K3's checkpoint keeps more in F32 than Kimi Linear's (module docstring).
    k3_storage: bool = False
    indexer: None = None
    router_bias: bool = True  # vLLM's KimiMoE always makes gate.e_score_correction_bias
    num_nextn_predict_layers: int = 0

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def has_indexer(self, layer: int) -> bool:
        """No layer of the family has a lightning indexer."""
        return False

    @property
    def mtp_layers(self) -> tuple[int, ...]:
        return ()

    @property
    def mla_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_hidden_layers) if i not in set(self.kda_layers))

    @property
    def mla(self) -> MlaSpec:
        """The MLA layers' sizes: no rotary position (mla_use_nope), K3's output gate."""
        return MlaSpec(
            num_attention_heads=self.num_attention_heads,
            q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank,
            qk_nope_head_dim=self.qk_nope_head_dim,
            qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim,
            rotary=not self.mla_use_nope,
            output_gate=self.mla_use_output_gate,
            name=self.name,
        )

    def is_moe_layer(self, layer: int) -> bool:
        """vLLM's KimiDecoderLayer rule: MoE from first_k_dense_replace on, every moe_layer_freq-th."""
        return layer >= self.first_k_dense_replace and layer % self.moe_layer_freq == 0


# --- config -> spec --------------------------------------------------------------------------------

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
    "num_experts",
    "num_experts_per_token",
    "first_k_dense_replace",
    "linear_attn_config",
)


def spec_from_config(config: dict[str, Any], *, name: str, where: str) -> KimiLinearSpec:
    """The spec of a Kimi Linear config (`kimi_linear`) or a Kimi K3 one (`kimi_k3`: the language
    model under text_config, its tensors under `language_model.`, a vision tower)."""
    read = ConfigReader(config, where)
    model_type = read.string("model_type")
    if model_type != "kimi_k3":
        return _language_spec(read, name)
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise read.fail(
            "text_config", f"expected an object (the language model's config), found {short_json(text)}"
        )
    language = _language_spec(ConfigReader(text, f"{where} text_config"), name)
    return replace(
        language,
        model_type=model_type,
        weight_prefix=LANGUAGE_MODEL_PREFIX,
        vision=_vision(read, language.hidden_size),
        k3_storage=True,
    )


def _language_spec(read: ConfigReader, name: str) -> KimiLinearSpec:
    config, where = read.config, read.where
    model_type = read.string("model_type")
    if model_type != "kimi_linear":
        raise read.fail(
            "model_type", f"expected 'kimi_linear' (the Kimi Linear language model), found '{model_type}'"
        )
    missing = [key for key in _REQUIRED if key not in config]
    if missing:
        raise ConfigError(f"{where}: missing required keys: {', '.join(missing)}")
    layers = read.bounded("num_hidden_layers", read.integer("num_hidden_layers"), MAX_LAYERS, "layers")
    if read.integer("num_nextn_predict_layers", minimum=0, default=0):
        raise read.fail(
            "num_nextn_predict_layers", "multi-token-prediction layers of Kimi Linear models are not modelled"
        )
    experts = read.integer("num_experts")
    read.bounded("num_experts", experts * layers, MAX_EXPERTS, f"routed experts in {layers:,} layers")
    per_token = read.integer("num_experts_per_token")
    if per_token > experts:
        raise read.fail("num_experts_per_token", f"{per_token} is more than num_experts ({experts})")
    first_dense = read.integer("first_k_dense_replace", minimum=0)
    if first_dense > layers:
        raise read.fail("first_k_dense_replace", f"{first_dense} is beyond num_hidden_layers ({layers})")
    kda, kda_layers = _linear_attention(read, layers)
    latent = config.get("routed_expert_hidden_size")
    block = config.get("attn_res_block_size")
    # The released Kimi Linear config names its context model_max_length; K3's max_position_embeddings.
    context_key = "max_position_embeddings" if "max_position_embeddings" in config else "model_max_length"
    return KimiLinearSpec(
        name=name,
        model_type=model_type,
        vocab_size=read.integer("vocab_size"),
        hidden_size=read.integer("hidden_size"),
        intermediate_size=read.integer("intermediate_size"),
        num_hidden_layers=layers,
        max_position_embeddings=read.integer(context_key),
        torch_dtype=torch_dtype_of(read),
        tie_word_embeddings=read.boolean("tie_word_embeddings", False),
        hidden_act=read.string("hidden_act", "silu"),
        num_attention_heads=read.integer("num_attention_heads"),
        q_lora_rank=read.optional_integer("q_lora_rank"),
        kv_lora_rank=read.integer("kv_lora_rank"),
        qk_nope_head_dim=read.integer("qk_nope_head_dim"),
        qk_rope_head_dim=read.integer("qk_rope_head_dim"),
        v_head_dim=read.integer("v_head_dim"),
        mla_use_nope=read.boolean("mla_use_nope", False),
        mla_use_output_gate=read.boolean("mla_use_output_gate", False),
        n_routed_experts=experts,
        num_experts_per_tok=per_token,
        n_shared_experts=read.integer("num_shared_experts", minimum=0, default=0),
        moe_intermediate_size=read.integer("moe_intermediate_size"),
        first_k_dense_replace=first_dense,
        moe_layer_freq=read.integer("moe_layer_freq", default=1),
        routed_expert_hidden_size=None if latent is None else read.integer("routed_expert_hidden_size"),
        latent_moe_use_norm=read.boolean("latent_moe_use_norm", False),
        kda=kda,
        kda_layers=kda_layers,
        attn_res_block_size=None if block is None else read.integer("attn_res_block_size"),
        quantization=quantization_of(read),
    )


def _linear_attention(read: ConfigReader, layers: int) -> tuple[KdaSpec, tuple[int, ...]]:
    """linear_attn_config: the KDA sizes, and the KDA layers as 0-based indices. Its lists count from 1
    (`is_kda_layer(i)` is `(i + 1) in kda_layers`); full_attn_layers, when given, must be the rest."""
    raw = read.config["linear_attn_config"]
    if not isinstance(raw, dict):
        raise read.fail("linear_attn_config", f"expected an object, found {short_json(raw)}")
    sub = ConfigReader(raw, f"{read.where} linear_attn_config")
    lists = {}
    for key in ("kda_layers", "full_attn_layers"):
        value = raw.get(key)
        if value is None and key == "full_attn_layers":
            continue
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= layers for v in value
        ):
            raise sub.fail(
                key,
                f"expected a list of layer numbers from 1 to {layers} (1-based), found {short_json(value)}",
            )
        if len(set(value)) != len(value):
            raise sub.fail(key, "names a layer twice")
        lists[key] = set(value)
    kda = lists["kda_layers"]
    full = lists.get("full_attn_layers")
    if full is not None and (kda & full or kda | full != set(range(1, layers + 1))):
        both = sorted(kda & full)
        problem = (
            f"both list layer {both[0]}"
            if both
            else f"together they miss layer {min(set(range(1, layers + 1)) - kda - full)}"
        )
        raise sub.fail(
            "full_attn_layers",
            f"kda_layers and full_attn_layers must split layers 1–{layers} (1-based): {problem}",
        )
    spec = KdaSpec(
        num_heads=sub.integer("num_heads"),
        head_dim=sub.integer("head_dim"),
        conv_kernel=sub.integer("short_conv_kernel_size"),
        full_rank_gate=sub.boolean("use_full_rank_gate", False),
        gate_lower_bound=_lower_bound(sub),
    )
    return spec, tuple(sorted(n - 1 for n in kda))


def _lower_bound(read: ConfigReader) -> float | None:
    """linear_attn_config.gate_lower_bound: a negative number, or absent."""
    value = read.config.get("gate_lower_bound")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value < 0:
        raise read.fail("gate_lower_bound", f"expected a negative number, found {short_json(value)}")
    return float(value)


_VISION_KEYS = (
    "vt_hidden_size",
    "vt_intermediate_size",
    "vt_num_hidden_layers",
    "qkv_hidden_size",
    "patch_size",
    "init_pos_emb_height",
    "init_pos_emb_width",
    "mm_hidden_size",
)


def _vision(read: ConfigReader, text_hidden_size: int) -> K3VisionSpec:
    """K3's vision_config: the RMSNorm MoonViT3d and the patchmergerv2 projector (the only vision
    layout of this family; another is refused naming its key)."""
    raw = read.config.get("vision_config")
    if not isinstance(raw, dict):
        raise read.fail("vision_config", f"expected an object, found {short_json(raw)}")
    vision = ConfigReader(raw, f"{read.where} vision_config")
    for key, expected in (
        ("norm_type", "rmsnorm"),
        ("mm_projector_type", "patchmergerv2"),
        ("mlp_type", "mlp2"),
    ):
        if vision.string(key) != expected:
            raise vision.fail(key, f"'{raw[key]}' is not modelled (Kimi K3's vision tower has '{expected}')")
    merge = raw.get("merge_kernel_size")
    if (
        not isinstance(merge, list)
        or len(merge) != 2
        or not all(isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in merge)
    ):
        raise vision.fail("merge_kernel_size", f"expected two positive integers, found {short_json(merge)}")
    text_hidden = vision.integer("text_hidden_size", default=text_hidden_size)
    if text_hidden != text_hidden_size:
        raise vision.fail(
            "text_hidden_size", f"{text_hidden} is not text_config.hidden_size ({text_hidden_size})"
        )
    hidden, intermediate, layers, qkv, patch, height, width, mm_hidden = (
        vision.integer(key) for key in _VISION_KEYS
    )
    vision.bounded("vt_num_hidden_layers", layers, MAX_LAYERS, "layers")
    return K3VisionSpec(
        hidden,
        intermediate,
        layers,
        qkv,
        patch,
        height,
        width,
        mm_hidden,
        merge_kernel=(merge[0], merge[1]),
        text_hidden_size=text_hidden,
        patch_bias=vision.boolean("patch_embed_proj_bias", True),
        attn_bias=vision.boolean("attn_bias", True),
        linear_bias=vision.boolean("linear_bias", True),
    )


# --- spec -> tree ----------------------------------------------------------------------------------
# Builders take the spec and the layers they are built for and return one node of len(layers)
# instances, as kimicount.anatomy's do.


def _f32_or(spec: KimiLinearSpec, role: Role) -> Role:
    """F32 in Kimi K3's checkpoint (its convolutions, o_norm, router bias), `role` in Kimi Linear's."""
    return Role.F32 if spec.k3_storage else role


def kda_attention(spec: KimiLinearSpec, layers: Sequence[int]) -> Node:
    """Kimi Delta Attention of one layer: projections to q, k, v (each num_heads·head_dim wide), their
    short causal convolutions, the per-channel decay (f_a_proj → f_b_proj, with A_log and dt_bias),
    the update strength β (b_proj), the output gate, o_norm and o_proj. [params]

    Kimi K3 (93 layers, 96 heads of 128, hidden 7,168), in numbers: 4 × 12,288 × 7,168 for q, k, v and
    the full-rank gate, 12,288 × 7,168 for o_proj, 3 × 12,288 × 4 for the convolutions, ...
    """
    n, kda, hidden = len(layers), spec.kda, spec.hidden_size
    p, d, heads, k = kda.projection, kda.head_dim, kda.num_heads, kda.conv_kernel

    def tensor(suffix, shape, role=Role.LINEAR):
        return layer_tensor(spec, f"self_attn.{suffix}", shape, role, layers)

    conv = _f32_or(spec, Role.UNQUANTIZED)
    if spec.k3_storage:  # stored 1-D, [head_dim]: the heads' rates, zero-padded (SGLang kimi_k3.py)
        a_log, a_formula = tensor("A_log", (d,), Role.F32), "head_dim"
    else:
        a_log, a_formula = tensor("A_log", (1, 1, heads, 1), Role.F32), "num_heads"
    if kda.full_rank_gate:
        gate = leaf(
            "Output gate", n, [tensor("g_proj.weight", (p, hidden))], "hidden_size × num_heads·head_dim"
        )
    else:
        gate = leaf(
            "Output gate",
            n,
            [tensor("g_a_proj.weight", (d, hidden)), tensor("g_b_proj.weight", (p, d))],
            "hidden_size × head_dim + head_dim × num_heads·head_dim",
        )
    parts = [
        leaf(
            "Query projection", n, [tensor("q_proj.weight", (p, hidden))], "hidden_size × num_heads·head_dim"
        ),
        leaf("Key projection", n, [tensor("k_proj.weight", (p, hidden))], "hidden_size × num_heads·head_dim"),
        leaf(
            "Value projection", n, [tensor("v_proj.weight", (p, hidden))], "hidden_size × num_heads·head_dim"
        ),
        leaf(
            "Short convolutions",
            n,
            [tensor(f"{x}_conv1d.weight", (p, 1, k), conv) for x in "qkv"],
            "3 × num_heads·head_dim × short_conv_kernel_size",
        ),
        leaf(
            "Decay projection",
            n,
            [tensor("f_a_proj.weight", (d, hidden)), tensor("f_b_proj.weight", (p, d))],
            "hidden_size × head_dim + head_dim × num_heads·head_dim",
        ),
        leaf(
            "Decay rates",
            n,
            [a_log, tensor("dt_bias", (p,), Role.F32)],
            f"{a_formula} + num_heads·head_dim",
        ),
        leaf("Update strength β", n, [tensor("b_proj.weight", (heads, hidden))], "hidden_size × num_heads"),
        gate,
        leaf("Output norm", n, [tensor("o_norm.weight", (d,), _f32_or(spec, Role.NORM))], "head_dim"),
        leaf(
            "Output projection", n, [tensor("o_proj.weight", (hidden, p))], "num_heads·head_dim × hidden_size"
        ),
    ]
    return group("Kimi Delta Attention", parts, n)


def latent_moe(spec: KimiLinearSpec, layers: Sequence[int]) -> list[Node]:
    """LatentMoE's projections around the routed experts: down to routed_expert_hidden_size (and its
    RMSNorm, with latent_moe_use_norm), back up to hidden_size. Every token runs them. [params]"""
    n, hidden, latent = len(layers), spec.hidden_size, spec.routed_expert_hidden_size
    assert latent is not None

    def tensor(suffix, shape, role=Role.UNQUANTIZED):  # loaded unquantized (quant_config=None)
        return layer_tensor(spec, f"{MOE_MODULE}.{suffix}", shape, role, layers)

    down = leaf(
        "Latent down-projection",
        n,
        [tensor("routed_expert_down_proj.weight", (latent, hidden))],
        "hidden_size × routed_expert_hidden_size",
    )
    up = leaf(
        "Latent up-projection",
        n,
        [tensor("routed_expert_up_proj.weight", (hidden, latent))],
        "routed_expert_hidden_size × hidden_size",
    )
    norm = None
    if spec.latent_moe_use_norm:
        norm = leaf(
            "Latent RMSNorm",
            n,
            [tensor("routed_expert_norm.weight", (latent,), Role.NORM)],
            "routed_expert_hidden_size",
        )
    return [down, *(() if norm is None else (norm,)), up]


def mixture_of_experts(spec: KimiLinearSpec, layers: Sequence[int]) -> Node:
    """The router in the hidden space; the routed experts (in the latent, with LatentMoE, between its
    down- and up-projections); the shared experts in the hidden space. [params]"""
    bias = _f32_or(spec, Role.UNQUANTIZED)
    parts = [router(spec, layers, MOE_MODULE, bias)]
    latent = spec.routed_expert_hidden_size
    experts = routed_experts(spec, layers, MOE_MODULE, EXPERT_NAMES, latent)
    if latent is None:
        parts.append(experts)
    else:
        down, *rest = latent_moe(spec, layers)
        parts += [down, *rest[:-1], experts, rest[-1]]
    if spec.n_shared_experts:
        parts.append(shared_experts(spec, layers, MOE_MODULE))
    name = "Latent mixture of experts" if latent is not None else "Mixture of experts"
    return group(name, parts, len(layers))


def attention_residuals(spec: KimiLinearSpec, layers: Sequence[int]) -> Node:
    """Kimi K3's block attention residuals: before the attention and before the MLP, an RMSNorm
    [hidden] and a [1, hidden] projection that weigh the earlier blocks' outputs
    (attn_res_block_size layers a block). [params]"""
    hidden = spec.hidden_size
    tensors = []
    for site in ("self_attention_res", "mlp_res"):
        tensors += [
            layer_tensor(spec, f"{site}_norm.weight", (hidden,), Role.NORM, layers),
            layer_tensor(spec, f"{site}_proj.weight", (1, hidden), Role.UNQUANTIZED, layers),
        ]
    return leaf("Attention residuals", len(layers), tensors, "4 × hidden_size")


def transformer_block(spec: KimiLinearSpec, layers: Sequence[int], kda: bool, moe: bool) -> list[Node]:
    """One block: attention (KDA or MLA) with its norm, the MLP (dense or MoE) with its norm, and
    K3's attention residuals."""
    parts = [
        rms_norm(spec, layers, "Attention RMSNorm", "input_layernorm.weight"),
        kda_attention(spec, layers) if kda else latent_attention(spec, layers),
        rms_norm(spec, layers, "MLP RMSNorm", "post_attention_layernorm.weight"),
        mixture_of_experts(spec, layers) if moe else dense_mlp(spec, layers),
    ]
    if spec.attn_res_block_size is not None:
        parts.append(attention_residuals(spec, layers))
    return parts


#: The block kinds, attention kind × MLP kind, in the order the tree lists them.
BLOCK_KINDS = (
    ("kda-dense", True, False, "dense KDA block"),
    ("mla-dense", False, False, "dense MLA block"),
    ("kda-moe", True, True, "KDA MoE block"),
    ("mla-moe", False, True, "MLA MoE block"),
)


def block_groups(spec: KimiLinearSpec) -> list[Node]:
    """The layers grouped by kind: "1 dense KDA block (layer 0)", "68 KDA MoE blocks", "24 MLA MoE
    blocks" (a group's layers are spelled out in its name when they run in at most two spans)."""
    kda_layers = set(spec.kda_layers)
    groups = []
    for kind, kda, moe, label in BLOCK_KINDS:
        members = tuple(
            i
            for i in range(spec.num_hidden_layers)
            if (i in kda_layers) == kda and spec.is_moe_layer(i) == moe
        )
        if members:
            n = len(members)
            name = f"{n} {label}{'s' if n > 1 else ''}"
            if len(index_runs(members)) <= 2:
                name += f" ({layer_span(members)})"
            groups.append(
                group(name, transformer_block(spec, members, kda, moe), n, layers=members, kind=kind)
            )
    return groups


def language_model(spec: KimiLinearSpec) -> Node:
    """Embedding, the blocks, the final norm (and K3's output attention residual), the head."""
    parts = [
        embedding(spec, "Token embedding", "model.embed_tokens.weight"),
        group(f"{spec.num_hidden_layers} transformer blocks", block_groups(spec)),
        final_norm(spec, "Final RMSNorm", "model.norm.weight"),
    ]
    if spec.attn_res_block_size is not None:
        hidden, prefix = spec.hidden_size, spec.weight_prefix
        parts.append(
            leaf(
                "Output attention residual",
                1,
                [
                    TensorRef(f"{prefix}model.output_attn_res_norm.weight", (hidden,), Role.NORM),
                    TensorRef(f"{prefix}model.output_attn_res_proj.weight", (1, hidden), Role.UNQUANTIZED),
                ],
                "2 × hidden_size",
            )
        )
    if not spec.tie_word_embeddings:
        parts.append(output_head(spec, "Output head", "lm_head.weight"))
    return group(spec.name.rsplit("/", 1)[-1], parts)


def _weight(
    pattern: str, shape: tuple[int, ...], bias: bool, layers: tuple[int, ...] = ()
) -> list[TensorRef]:
    """A vision Linear (or conv) weight, with its bias when the config says it has one."""
    refs = [TensorRef(f"{pattern}.weight", shape, Role.UNQUANTIZED, layers)]
    if bias:
        refs.append(TensorRef(f"{pattern}.bias", shape[:1], Role.UNQUANTIZED, layers))
    return refs


def vision_model(spec: KimiLinearSpec) -> Node | None:
    """Kimi K3's MoonViT3d (patch embedding, learned 2-D position embedding, RMSNorm blocks with a
    qkv_hidden_size-wide attention, final RMSNorm) and its PatchMergerMLPV2 projector (proj.0 [m, m],
    proj.2 [text_hidden, m], post_norm [text_hidden], m = mm_hidden_size × merge area). [params]"""
    v = spec.vision
    if v is None:
        return None
    h, q, inner, n = v.hidden_size, v.qkv_hidden_size, v.intermediate_size, v.num_layers
    layers = tuple(range(n))
    block = "vision_tower.encoder.blocks.{layer}"

    def norm(pattern, width, at=()):
        return TensorRef(f"{pattern}.weight", (width,), Role.NORM, at)

    blocks = group(
        f"{n} vision blocks",
        [
            leaf("Attention RMSNorm", n, [norm(f"{block}.norm0", h, layers)], "vt_hidden_size"),
            leaf(
                "Fused QKV",
                n,
                _weight(f"{block}.wqkv", (3 * q, h), v.attn_bias, layers),
                "vt_hidden_size × 3·qkv_hidden_size",
            ),
            leaf(
                "Attention output",
                n,
                _weight(f"{block}.wo", (h, q), v.attn_bias, layers),
                "qkv_hidden_size × vt_hidden_size",
            ),
            leaf("MLP RMSNorm", n, [norm(f"{block}.norm1", h, layers)], "vt_hidden_size"),
            leaf(
                "MLP",
                n,
                _weight(f"{block}.mlp.fc0", (inner, h), v.linear_bias, layers)
                + _weight(f"{block}.mlp.fc1", (h, inner), v.linear_bias, layers),
                "2 × vt_hidden_size × vt_intermediate_size",
            ),
        ],
        n,
    )
    tower = group(
        "Vision tower",
        [
            leaf(
                "Patch embedding",
                1,
                _weight("vision_tower.patch_embed.proj", (h, 3, v.patch_size, v.patch_size), v.patch_bias),
                "vt_hidden_size × 3 × patch_size²",
            ),
            leaf(
                "Position embedding",
                1,
                [
                    TensorRef(
                        "vision_tower.patch_embed.pos_emb.weight",
                        (v.pos_emb_height, v.pos_emb_width, h),
                        Role.UNQUANTIZED,
                    )
                ],
                "init_pos_emb_height × init_pos_emb_width × vt_hidden_size",
            ),
            blocks,
            leaf("Final RMSNorm", 1, [norm("vision_tower.encoder.final_layernorm", h)], "vt_hidden_size"),
        ],
    )
    m, text = v.merged_size, v.text_hidden_size
    projector = group(
        "Projector",
        [
            leaf("Merged patch projection", 1, _weight("mm_projector.proj.0", (m, m), False), "m × m"),
            leaf(
                "Projection to the language model",
                1,
                _weight("mm_projector.proj.2", (text, m), False),
                "m × text_hidden_size",
            ),
            leaf("Post-norm", 1, [norm("mm_projector.post_norm", text)], "text_hidden_size"),
        ],
    )
    return group("Vision", [tower, projector])


#: What a reader of these trees needs told: the configs count layers from 1, the trees from 0.
LAYER_NOTE = (
    "Layers are numbered from 0, as the checkpoint's tensor names number them; linear_attn_config's "
    "kda_layers and full_attn_layers count from 1 (its layer 4 is layer 3 here)."
)


def build_anatomy(spec: KimiLinearSpec) -> Anatomy:
    """The language model's tree and, for Kimi K3, the vision side's."""
    # Anatomy.spec is typed as the DeepSeek-V3 family's ModelSpec: every command asks the family
    # registry (kimicount.families) what a spec of another family serves before it reads family fields.
    anatomy = Anatomy(
        spec=spec,  # type: ignore[arg-type]
        model=language_model(spec),
        vision=vision_model(spec),
        notes=(LAYER_NOTE,),
    )
    check_tensor_sizes(anatomy)
    return anatomy


# --- spec -> cache groups --------------------------------------------------------------------------


def kda_state(spec: KimiLinearSpec) -> tuple[StateTensor, ...]:
    """One KDA layer's state per sequence, as vLLM allocates it
    (vllm/model_executor/layers/mamba/mamba_utils.py @ 02d7108, MambaStateShapeCalculator.kda_state_shape):
    the short convolutions' last K − 1 inputs of q, k and v, (K − 1) × 3·num_heads·head_dim / tp, in the
    conv dtype; the recurrent state, num_heads / tp × head_dim × head_dim, in fp32
    (MambaStateDtypeCalculator.kda_state_dtype). SGLang's KimiLinearCacheParams holds the same shapes."""
    kda = spec.kda
    return (
        StateTensor(
            "convolution windows",
            (kda.conv_kernel - 1, 3 * kda.projection),
            1,
            "(short_conv_kernel_size − 1) × 3·num_heads·head_dim",
            CONV,
        ),
        StateTensor(
            "recurrent state",
            (kda.num_heads, kda.head_dim, kda.head_dim),
            0,
            "num_heads × head_dim × head_dim",
            SSM,
        ),
    )


def cache_groups(spec: KimiLinearSpec, include_mtp: bool = False) -> tuple[CacheGroup, ...]:
    """The MLA layers' per-token latent cache, and the KDA layers' per-sequence state.

    >>> from kimicount.models import known_model
    >>> [(g.name, g.kind.value, len(g.layers)) for g in cache_groups(known_model("kimi-k3").spec())]
    [('MLA', 'per_token', 24), ('KDA', 'per_sequence', 69)]
    """
    return (
        CacheGroup("MLA", MemoryKind.PER_TOKEN, spec.mla_layers, mla=spec.mla),
        CacheGroup("KDA", MemoryKind.PER_SEQUENCE, spec.kda_layers, state=kda_state(spec)),
    )
