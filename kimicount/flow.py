"""The forward pass, component by component: activation shapes and FLOPs per token.

Read off the same component tree as the parameter counts. Shapes use named dimensions: B sequences,
T positions computed in this pass (a prompt of T tokens in prefill, T = 1 in a decode step whose cache
holds the L positions before it), P image patches for the vision tower.

FLOPs count matmuls: a Linear of in × out takes 2 × in × out FLOPs per token, so a component's FLOPs per
token are twice its matmul parameters, the routed experts' scaled by k of E. Norms, activation functions,
RoPE and softmax are not counted (each is a few FLOPs per element, well under 1 % of a layer). The
attention itself (scores and the weighted sum over the cache) has no parameters; its FLOPs depend on
how MLA is run:

- naive cache: per-head keys (qk_nope + qk_rope) and values (v_head_dim) cached;
  2 × H × (qk_nope + qk_rope + v) × L per token per layer.
- latent re-expanded: the latent cached and pushed through kv_b_proj again every step: the naive
  attention plus 2 × kv_lora_rank × H × (qk_nope + v) for each of the L − 1 cached positions (the new
  token's own expansion is kv_b_proj's row).
- absorbed latent: W_UK folded into the query, W_UV into the output (the two absorption matmuls have
  exactly kv_b_proj's FLOPs); attention over the 576-wide latent: 2 × H × (kv_lora + qk_rope + kv_lora) × L.

In prefill of T tokens a causal pass attends to 1 … T positions, T(T+1)/2 pairs: per token on average
the decode formula at L = (T + 1) / 2.

A hybrid model (Kimi Linear, Kimi K3) runs MLA on some layers only; the others run Kimi Delta Attention
(KDA), whose recurrent state S (heads × d_k × d_v per sequence) takes the place of a cache: a decode
step reads and overwrites it (recurrent, a constant cost per token, `kda_decode_flops`), a prefill runs
in chunks of 64 positions and writes it once at the end (`kda_chunk_flops`). The layers each kind runs
on come from the model's cache groups (kimicount.cache_groups), its sizes from the state's shape.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from functools import lru_cache

from kimicount.anatomy import Node, Role, TensorRef
from kimicount.cache_groups import SSM, CacheGroup, MemoryKind, state_groups
from kimicount.errors import require_positive
from kimicount.kvcache import Layout, bytes_per_token_per_layer
from kimicount.spec import ModelSpec
from kimicount.storage import fp4_quantized, fp8_quantized

#: Roles whose tensors are matmul weights [out, in] (the embedding is a lookup).
_MATMULS = (Role.LINEAR, Role.ROUTER, Role.HEAD, Role.UNQUANTIZED)


# --- shapes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dim:
    """One dimension: a size (an int, or a symbol such as 'B') and what it counts."""

    size: int | str
    label: str
    shown: str = ""  # how a shape prints it, when not its size: '64 × 128'

    @property
    def text(self) -> str:
        """'B', '7,168' or '64 × 128' as printed in a shape."""
        return self.shown or (f"{self.size:,}" if isinstance(self.size, int) else self.size)


@dataclass(frozen=True)
class Activation:
    """A named activation tensor: c_KV [B, T, 512]."""

    name: str
    dims: tuple[Dim, ...]

    @property
    def text(self) -> str:
        return f"{self.name} [{', '.join(d.text for d in self.dims)}]"


@dataclass(frozen=True)
class Flow:
    """What flows into a component, through it (`middle`: an MLP's hidden activation) and out of it;
    `reads`: what it reads besides its inputs (the attention's cache of L positions)."""

    inputs: tuple[Activation, ...]
    outputs: tuple[Activation, ...]
    middle: tuple[Activation, ...] = ()
    reads: tuple[Activation, ...] = ()

    @property
    def text(self) -> str:
        """'c_KV [B, T, 512] → k_C [B, T, 64 × 128]'."""
        stages = [self.inputs, self.middle, self.outputs] if self.middle else [self.inputs, self.outputs]
        text = " → ".join(", ".join(a.text for a in stage) for stage in stages)
        return text + (f"; reads {', '.join(a.text for a in self.reads)}" if self.reads else "")


B = Dim("B", "batch")
T = Dim("T", "positions")
P = Dim("P", "image patches")


def _heads(heads: int, width: int, what: str = "") -> Dim:
    return Dim(heads * width, f"{heads} heads × {width}" + (f" {what}" if what else ""), f"{heads} × {width}")


def _act(name: str, *features: Dim, tokens: tuple[Dim, ...] = (B, T)) -> Activation:
    return Activation(name, (*tokens, *features))


def component_flow(spec: ModelSpec, node: Node) -> Flow | None:
    """The activations into and out of a leaf component of the tree (None for a group).

    >>> from kimicount.anatomy import key_content_up_projection
    >>> component_flow(k2, key_content_up_projection(k2, [0])).text
    'c_KV [B, T, 512] → k_C [B, T, 64 × 128]'
    """
    return _flows(spec).get(node.name)


def flow_map(spec: ModelSpec, *roots: Node | None) -> dict[int, Flow]:
    """Every leaf component's Flow, keyed by id(node), for reports to read."""
    return {
        id(node): flow
        for root in roots
        if root is not None
        for node in root.walk()
        if (flow := component_flow(spec, node)) is not None
    }


@lru_cache(maxsize=16)
def _flows(spec: ModelSpec) -> dict[str, Flow]:
    from kimicount.families import family_flows

    own = family_flows(spec)  # a family whose blocks are not MLA's says what flows through them
    if own is not None:
        return own
    flows = _language_flows(spec)
    if getattr(spec, "kda", None) is not None:  # the Kimi Linear family: KDA blocks, gated MLA
        flows.update(_kda_flows(spec))
    if getattr(spec, "routed_expert_hidden_size", None) is not None:  # LatentMoE (Kimi K3)
        flows.update(_latent_moe_flows(spec))
    if spec.vision is not None:
        flows.update(_vision_flows(spec))
    return flows


def _language_flows(spec: ModelSpec) -> dict[str, Flow]:
    h = Dim(spec.hidden_size, "hidden")
    heads = spec.num_attention_heads
    hidden = _act("h", h)
    c_kv = _act("c_KV", Dim(spec.kv_lora_rank, "key–value latent"))
    query_in = _act("c_Q", Dim(spec.q_lora_rank, "query latent")) if spec.q_lora_rank else hidden
    moe_width = spec.moe_intermediate_size
    flows = {
        "Token embedding": Flow((Activation("tokens", (B, T)),), (hidden,)),
        "Attention RMSNorm": Flow((hidden,), (_act("x", h),)),
        "MLP RMSNorm": Flow((hidden,), (_act("x", h),)),
        "Final RMSNorm": Flow((hidden,), (_act("x", h),)),
        "Key–value compression": Flow((_act("x", h),), (c_kv,)),
        "Query heads": Flow((query_in,), (_act("q", _heads(heads, spec.qk_head_dim, "(content + rotary)")),)),
        "Key content up-projection": Flow((c_kv,), (_act("k_C", _heads(heads, spec.qk_nope_head_dim)),)),
        "Shared rotary key": Flow(
            (_act("x", h),), (_act("k_R", Dim(spec.qk_rope_head_dim, "rotary, all heads")),)
        ),
        "Value heads": Flow((c_kv,), (_act("v", _heads(heads, spec.v_head_dim)),)),
        "Causal attention": Flow((_act("o", _heads(heads, spec.v_head_dim)),), (hidden,)),
        "Router": Flow((_act("x", h),), (_act("scores", Dim(spec.n_routed_experts, "experts")),)),
        "Routed experts": Flow(
            (_act("x", h),),
            (_act("y", h),),
            middle=(
                Activation(
                    f"g·u, top {spec.num_experts_per_tok} of {spec.n_routed_experts}",
                    (Dim(f"B·T·{spec.num_experts_per_tok}", "routed copies"), Dim(moe_width, "expert width")),
                ),
            ),
        ),
        "Key heads": Flow(
            (c_kv, _act("x", h)), (_act("k", _heads(heads, spec.qk_head_dim, "(content + rotary)")),)
        ),
        "Latent attention": Flow(
            (_act("x", h),),
            (hidden,),
            reads=(
                Activation("c_KV", (B, Dim("L", "cached positions"), Dim(spec.kv_lora_rank, "latent"))),
                Activation("k_R", (B, Dim("L", "cached positions"), Dim(spec.qk_rope_head_dim, "rotary"))),
            ),
        ),
        "Mixture of experts": Flow((_act("x", h),), (_act("y", h),)),
        "Output head": Flow((_act("x", h),), (_act("logits", Dim(spec.vocab_size, "vocabulary")),)),
        "Hidden projection": Flow((_act("[x; e]", Dim(2 * spec.hidden_size, "2 × hidden")),), (hidden,)),
        "Input norms": Flow((hidden, _act("e", h)), (_act("x", h), _act("e", h))),
        "Embedding copy": Flow((Activation("tokens", (B, T)),), (_act("e", h),)),
        "Output norm": Flow((hidden,), (_act("x", h),)),
        "Output head copy": Flow((_act("x", h),), (_act("logits", Dim(spec.vocab_size, "vocabulary")),)),
    }
    if spec.q_lora_rank is not None:
        flows["Query compression"] = Flow((_act("x", h),), (query_in,))
    shared = Dim(spec.n_shared_experts * moe_width, "shared expert width")
    dense = Dim(spec.intermediate_size, "intermediate")
    flows["Dense MLP"] = Flow((_act("x", h),), (_act("y", h),), middle=(_act("g·u", dense),))
    flows["Shared expert"] = flows["Shared experts"] = Flow(
        (_act("x", h),), (_act("y", h),), middle=(_act("g·u", shared),)
    )
    if spec.indexer is not None:
        n, d = spec.indexer.n_heads, spec.indexer.head_dim
        flows["Lightning indexer"] = Flow(
            (query_in, _act("x", h)),
            (
                _act("q_I", _heads(n, d)),
                _act("k_I", Dim(d, "index key")),
                _act("w", Dim(n, "head weights")),
            ),
        )
    return flows


def _kda_flows(spec) -> dict[str, Flow]:
    """Kimi Delta Attention's components (the Kimi Linear family's KdaSpec), and the gate K3 puts on
    its MLA output: projections to q, k, v (heads × head_dim each), their short convolutions (which
    read the last kernel − 1 inputs of each, the convolution window), the decay's two projections and
    its rates (A_log, dt_bias), β, the output gate, the gated o_norm and o_proj; the layer reads its
    recurrent state S (heads × head_dim × head_dim)."""
    kda = spec.kda
    h, width = Dim(spec.hidden_size, "hidden"), _heads(kda.num_heads, kda.head_dim)
    x, out = _act("x", h), _act("h", h)
    rank = Dim(kda.head_dim, "head_dim (low rank)")
    window = Dim(kda.conv_kernel - 1, "past positions")
    state = Activation(
        "S",
        (B, Dim(kda.num_heads, "heads"), Dim(kda.head_dim, "key"), Dim(kda.head_dim, "value")),
    )
    convs = Activation("conv windows", (B, window, Dim(3 * kda.projection, "q, k, v channels")))
    flows = {
        "Query projection": Flow((x,), (_act("q", width),)),
        "Key projection": Flow((x,), (_act("k", width),)),
        "Value projection": Flow((x,), (_act("v", width),)),
        "Short convolutions": Flow(
            (_act("q", width), _act("k", width), _act("v", width)),
            (_act("q", width), _act("k", width), _act("v", width)),
            reads=(convs,),
        ),
        "Decay projection": Flow((x,), (_act("g", width),), middle=(_act("f", rank),)),
        "Decay rates": Flow((_act("g", width),), (_act("log α", width),)),
        "Update strength β": Flow((x,), (_act("β", Dim(kda.num_heads, "heads")),)),
        "Output norm": Flow((_act("o", width), _act("g_o", width)), (_act("o", width),)),
        "Output projection": Flow((_act("o", width),), (out,)),
        "Kimi Delta Attention": Flow((x,), (out,), reads=(state, convs)),
    }
    mla_gate = spec.num_attention_heads * spec.v_head_dim
    if not kda.full_rank_gate:
        flows["Output gate"] = Flow((x,), (_act("g_o", width),), middle=(_act("g_a", rank),))
    elif not spec.mla_use_output_gate or mla_gate == kda.projection:  # one flow serves both gates
        flows["Output gate"] = Flow((x,), (_act("g_o", width),))
    if not spec.mla_use_nope:
        return flows
    flows["Shared unrotated key"] = Flow(
        (x,), (_act("k_R", Dim(spec.qk_rope_head_dim, "unrotated, all heads")),)
    )
    return flows


def _latent_moe_flows(spec) -> dict[str, Flow]:
    """LatentMoE (Kimi K3): routed in the hidden space, down to routed_expert_hidden_size, the experts
    in that latent, their weighted sum normalised (routed_expert_norm) and back up; the shared experts
    stay in the hidden space (modeling_kimi_linear.py, KimiSparseMoeBlock.forward)."""
    h, z = Dim(spec.hidden_size, "hidden"), Dim(spec.routed_expert_hidden_size, "latent")
    k, e = spec.num_experts_per_tok, spec.n_routed_experts
    return {
        "Latent down-projection": Flow((_act("x", h),), (_act("z", z),)),
        "Latent RMSNorm": Flow((_act("y_z", z),), (_act("y_z", z),)),  # on the experts' sum, before the up
        "Routed experts": Flow(
            (_act("z", z),),
            (_act("y_z", z),),
            middle=(
                Activation(
                    f"g·u, top {k} of {e}",
                    (Dim(f"B·T·{k}", "routed copies"), Dim(spec.moe_intermediate_size, "expert width")),
                ),
            ),
        ),
        "Latent up-projection": Flow((_act("y_z", z),), (_act("y", h),)),
        "Latent mixture of experts": Flow((_act("x", h),), (_act("y", h),)),
    }


def _vision_flows(spec: ModelSpec) -> dict[str, Flow]:
    vision = spec.vision
    assert vision is not None
    width = Dim(vision.hidden_size, "vision hidden")
    merged = Dim(vision.merged_size, "merged patches")
    groups = Dim(f"P/{vision.merge_kernel[0] * vision.merge_kernel[1]}", "merged patches")
    patch = Dim(f"3 × {vision.patch_size} × {vision.patch_size}", "pixels")
    patches = Activation("z", (P, width))
    return {
        "Patch embedding": Flow((Activation("pixels", (P, patch)),), (patches,)),
        "Position embedding": Flow((patches,), (patches,)),
        "Attention LayerNorm": Flow((patches,), (patches,)),
        "Fused QKV": Flow((patches,), (Activation("qkv", (P, Dim(3 * vision.hidden_size, "q, k, v"))),)),
        "Attention output": Flow((patches,), (patches,)),
        "MLP LayerNorm": Flow((patches,), (patches,)),
        "MLP": Flow((patches,), (patches,)),
        "Final LayerNorm": Flow((patches,), (patches,)),
        "Pre-norm": Flow((patches,), (patches,)),
        "Merged patch projection": Flow(
            (Activation("m", (groups, merged)),), (Activation("m", (groups, merged)),)
        ),
        "Projection to the language model": Flow(
            (Activation("m", (groups, merged)),),
            (Activation("h", (groups, Dim(vision.text_hidden_size, "hidden"))),),
        ),
    }


# --- FLOPs per token ---------------------------------------------------------------------------------


def is_matmul(ref: TensorRef) -> bool:
    """A Linear weight [out, in] (norms, biases and the embedding are not matmuls)."""
    return ref.role in _MATMULS and len(ref.shape) == 2 and ref.pattern.endswith(".weight")


def is_short_convolution(ref: TensorRef) -> bool:
    """A depthwise causal convolution's weight [channels, 1, kernel] (KDA's q/k/v_conv1d): each output
    channel is a dot product of its `kernel` taps with the last inputs, 2 × kernel FLOPs per token, so
    2 × its parameters, as a matmul's."""
    return len(ref.shape) == 3 and ref.shape[1] == 1 and ref.pattern.endswith("conv1d.weight")


def is_kv_b_proj(ref: TensorRef) -> bool:
    """Part of kv_b_proj, the matrix whose halves are W_UK (key content) and W_UV (values)."""
    return ".kv_b_proj." in ref.pattern


def vllm_bf16_absorption(spec: ModelSpec) -> bool:
    """Whether vLLM keeps BF16 copies of W_UK and W_UV beside kv_b_proj: when kv_b_proj is quantized
    (FP8), its MLA layer dequantizes it at load time, having no quantized batched matmul for the two
    absorptions; an unquantized kv_b_proj is only viewed.

    >>> vllm_bf16_absorption(k2)
    True
    """
    return fp8_quantized(spec, Role.LINEAR)


def compute_dtype(spec: ModelSpec, ref: TensorRef, way: Mla | None = None) -> str:
    """The dtype a matmul runs in: 'fp8' for an FP8 checkpoint's Linears (W8A8), else 'bf16' (INT4
    weights are dequantized and multiply bf16 activations: W4A16). In the absorbed decode the two
    absorptions, kv_b_proj's FLOPs, run on vLLM's BF16 copies: 'bf16'.

    >>> from kimicount.anatomy import key_content_up_projection
    >>> ref = key_content_up_projection(k2, [1]).tensors[0]
    >>> compute_dtype(k2, ref), compute_dtype(k2, ref, Mla.absorbed)
    ('fp8', 'bf16')
    """
    if way is Mla.absorbed and is_kv_b_proj(ref):
        return "bf16"
    if fp4_quantized(spec, ref):  # DeepSeek V4's routed experts: FP4 weights (MXFP4 in vLLM)
        return "fp4"
    return "fp8" if fp8_quantized(spec, ref.role) else "bf16"


def ref_flops(spec: ModelSpec, ref: TensorRef) -> Fraction:
    """FLOPs per token of one matmul reference, every copy: 2 × in × out × copies, the routed experts'
    times k / E (each token runs k of them). [FLOPs/token]

    >>> from kimicount.anatomy import query_heads, routed_experts
    >>> ref_flops(k2, query_heads(k2, [0]).tensors[0])  # 2 × 1,536 × 12,288
    Fraction(37748736, 1)
    >>> ref_flops(k2, routed_experts(k2, [1]).tensors[0])  # gate_proj: 2 × 7,168 × 2,048 × 8 experts
    Fraction(234881024, 1)
    """
    if not (is_matmul(ref) or is_short_convolution(ref)):
        return Fraction(0)
    flops = Fraction(2 * ref.elements * ref.copies)
    if ref.experts:
        flops *= Fraction(spec.num_experts_per_tok, spec.n_routed_experts)
    return flops


def flops_map(spec: ModelSpec, *roots: Node | None) -> dict[int, int]:
    """Every component's matmul FLOPs per token, all its instances (activated experts only), keyed by
    id(node), computed once bottom-up. [FLOPs/token]

    >>> from kimicount.anatomy import build_anatomy
    >>> model = build_anatomy(k2).model
    >>> flops_map(k2, model)[id(model)]  # 2 × the activated parameters but the embedding,
    63372132352
    >>> 2 * (32_861_500_928 - 1_174_405_120 - 123 * 7_168 - 61 * (1_536 + 512) - 60 * 384)  # norms, bias
    63372132352
    """
    flops: dict[int, int] = {}

    def visit(node: Node) -> Fraction:
        total = sum((ref_flops(spec, ref) for ref in node.tensors), Fraction(0))
        for child in node.children:
            total += visit(child)
        flops[id(node)] = int(total)
        return total

    for root in roots:
        if root is not None:
            visit(root)
    return flops


def matmul_refs(node: Node) -> Iterator[TensorRef]:
    for n in node.walk():
        yield from (ref for ref in n.tensors if is_matmul(ref))


# --- the attention itself ------------------------------------------------------------------------------


class Mla(str, Enum):
    """The three ways engines run MLA in a decode step."""

    naive = "naive cache"
    reexpanded = "latent re-expanded"
    absorbed = "absorbed latent"


@dataclass(frozen=True)
class AttentionFlops:
    """FLOPs of the attention itself for one token in one layer, attending to `context` positions:
    `formula` in config keys, `calculation` in numbers."""

    way: Mla
    formula: str
    calculation: str
    flops: int


def attention_flops(spec: ModelSpec, way: Mla, context: int) -> AttentionFlops:
    """Scores and weighted sum for one token over `context` positions, in one layer. [FLOPs/token/layer]

    >>> attention_flops(k2, Mla.absorbed, 4096).flops == 2 * 64 * (576 + 512) * 4096
    True
    >>> attention_flops(k2, Mla.naive, 4096).calculation
    '2 × 64 × (128 + 64 + 128) × 4,096'
    """
    heads, nope, rope, value, rank = (
        spec.num_attention_heads,
        spec.qk_nope_head_dim,
        spec.qk_rope_head_dim,
        spec.v_head_dim,
        spec.kv_lora_rank,
    )
    naive = 2 * heads * (nope + rope + value) * context
    naive_calc = f"2 × {heads} × ({nope} + {rope} + {value}) × {context:,}"
    naive_formula = "2 × H × (qk_nope_head_dim + qk_rope_head_dim + v_head_dim) × L"
    if way is Mla.naive:
        return AttentionFlops(way, naive_formula, naive_calc, naive)
    if way is Mla.reexpanded:
        cached = context - 1
        expand = 2 * rank * heads * (nope + value) * cached
        return AttentionFlops(
            way,
            "naive + 2 × kv_lora_rank × H × (qk_nope_head_dim + v_head_dim) × (L − 1)",
            f"{naive:,} + 2 × {rank} × {heads} × ({nope} + {value}) × {cached:,}",
            naive + expand,
        )
    return AttentionFlops(
        way,
        "2 × H × (kv_lora_rank + qk_rope_head_dim + kv_lora_rank) × L",
        f"2 × {heads} × ({rank} + {rope} + {rank}) × {context:,}",
        2 * heads * (rank + rope + rank) * context,
    )


def prefill_attention_flops(spec: ModelSpec, way: Mla, tokens: int) -> Fraction:
    """Per token, on average, in a causal prefill of `tokens`: token t attends to t positions, so the
    sum over t = 1 … T is the decode formula's per-position cost × T(T + 1) / 2. Engines prefill with
    the expanded (naive) form. [FLOPs/token/layer]

    >>> prefill_attention_flops(k2, Mla.naive, 3) == 2 * 64 * 320 * (1 + 2 + 3) / 3
    True
    """
    per_position = attention_flops(spec, Mla.naive if way is not Mla.absorbed else way, 1).flops
    return Fraction(per_position * tokens * (tokens + 1), 2 * tokens)


def absorbed_crossover(spec: ModelSpec) -> int:
    """The shortest context at which the absorbed latent takes fewer FLOPs per decode token than
    re-expanding it, 0 if it never does. Both pay kv_b_proj's FLOPs once per token (the new token's
    expansion, or the two absorptions); beyond that absorbed costs a·L and re-expanded n·L + e·(L − 1),
    so absorbed is cheaper once L > e ÷ (n + e − a). [positions]

    >>> absorbed_crossover(k2)  # a = 2·64·1,088, n = 2·64·320, e = 2·512·64·256: L > 1.006
    2
    """
    a = attention_flops(spec, Mla.absorbed, 1).flops
    n = attention_flops(spec, Mla.naive, 1).flops
    e = attention_flops(spec, Mla.reexpanded, 2).flops - 2 * n  # one cached position's expansion
    if n + e - a <= 0:
        return 0
    return e // (n + e - a) + 1


# --- the recurrent state (KDA) --------------------------------------------------------------------------
# Read from fla (fla-org/flash-linear-attention @ bc3b101d), whose kernels vLLM carries
# (vllm/model_executor/layers/kda.py @ 01a7e5d, KimiDeltaAttention._forward: chunk_kda when the batch
# has a prefill, writing the final state into the cache once per sequence; fused_recurrent_kda in a
# decode step, reading and overwriting it in place), and fla's own layer (fla/layers/kda.py line 212:
# recurrent for at most 64 new tokens). Per head, with the state S of d_k × d_v, q and k of d_k, v of d_v:
# - recurrent (fla/ops/kda/fused_recurrent.py lines 178–200; naive.py lines 61–63): S ← S ⊙ exp(g)
#   (d_k·d_v), k^T S (2·d_k·d_v), S += k ⊗ β(v − k^T S) (2·d_k·d_v), o = q^T S (2·d_k·d_v);
# - chunked (fla/ops/kda/chunk_fwd.py chunk_kda_fwd, chunk_size=64 at line 33: chunk_kda_fwd_intra,
#   chunk_gated_delta_rule_fwd_h, chunk_gla_fwd_o_gk; their dense arithmetic is naive.py's
#   naive_chunk_kda, lines 127–163), per chunk of C positions: A_kk and A_qk (C × C from C × d_k each,
#   2·C²·d_k apiece), the forward substitution that inverts I + A_kk (lines 134–135, C²·(C − 1)),
#   w = A (e^g ⊙ k) (2·C²·d_k) and u = A v (2·C²·d_v), v' = u − w S (2·C·d_k·d_v), o = (q ⊙ e^g) S + A_qk v'
#   (2·C·d_k·d_v + 2·C²·d_v), S ← S ⊙ e^(g_last) + (e^(g_last − g) ⊙ k)^T v' (d_k·d_v + 2·C·d_k·d_v).
# The gates' activations, the L2 norms of q and k, β's sigmoid and the exponentials are not counted,
# as norms and activations are not elsewhere.

#: Positions per chunk of KDA's chunked prefill: fla's chunk_kda default, which vLLM calls it with.
KDA_CHUNK = 64


def kda_decode_flops(heads: int, key_dim: int, value_dim: int) -> int:
    """One decode token through one KDA layer's recurrence: 7 × heads × d_k × d_v (the decay, k^T S,
    the rank-1 update and q^T S), the same at any context. [FLOPs/token/layer]

    >>> kda_decode_flops(96, 128, 128)  # Kimi K3
    11010048
    """
    return 7 * heads * key_dim * value_dim


def kda_chunk_flops(heads: int, key_dim: int, value_dim: int, chunk: int = KDA_CHUNK) -> int:
    """One chunk of `chunk` positions through one KDA layer in a prefill: C²·(6·d_k + 4·d_v) within the
    chunk, C²·(C − 1) for the triangular solve, 6·C·d_k·d_v against the state and d_k·d_v to decay
    it, per head. [FLOPs/chunk/layer]

    >>> kda_chunk_flops(96, 128, 128)  # Kimi K3: 96 × (64² × 1,280 + 64² × 63 + 6 × 64 × 128² + 128²)
    1133641728
    """
    c, dk, dv = chunk, key_dim, value_dim
    return heads * (c * c * (6 * dk + 4 * dv) + c * c * (c - 1) + 6 * c * dk * dv + dk * dv)


def kda_prefill_flops(
    heads: int, key_dim: int, value_dim: int, tokens: int, chunk: int = KDA_CHUNK
) -> Fraction:
    """Per prompt token, averaged over a prefill of `tokens`: ceil(T / C) chunks (the last one padded,
    as the kernels' tiles are) ÷ T. [FLOPs/token/layer]

    >>> kda_prefill_flops(96, 128, 128, 4096)  # 64 chunks of 64: a chunk ÷ 64
    Fraction(17713152, 1)
    """
    require_positive("--tokens", tokens)
    return Fraction(-(-tokens // chunk) * kda_chunk_flops(heads, key_dim, value_dim, chunk), tokens)


@dataclass(frozen=True)
class StateFlops:
    """A per-sequence group's recurrence (KDA): its layers, heads and state sizes (read off the group's
    recurrent state, heads × d_k × d_v), and per token per layer what a decode step and a prefill of
    `tokens` cost, with their formulas."""

    name: str
    layers: int
    heads: int
    key_dim: int
    value_dim: int
    tokens: int
    chunk: int = KDA_CHUNK

    @property
    def decode(self) -> int:
        return kda_decode_flops(self.heads, self.key_dim, self.value_dim)

    @property
    def prefill(self) -> Fraction:
        return kda_prefill_flops(self.heads, self.key_dim, self.value_dim, self.tokens, self.chunk)

    @property
    def chunk_flops(self) -> int:
        return kda_chunk_flops(self.heads, self.key_dim, self.value_dim, self.chunk)

    @property
    def decode_formula(self) -> str:
        return "7 × H × d_k × d_v"

    @property
    def decode_calculation(self) -> str:
        return f"7 × {self.heads} × {self.key_dim} × {self.value_dim}"

    @property
    def prefill_formula(self) -> str:
        return "H × (C²·(6·d_k + 4·d_v) + C²·(C − 1) + 6·C·d_k·d_v + d_k·d_v) per chunk, × ceil(T / C) ÷ T"

    @property
    def prefill_calculation(self) -> str:
        c, dk, dv, h = self.chunk, self.key_dim, self.value_dim, self.heads
        chunks = -(-self.tokens // c)
        return (
            f"{h} × ({c}² × {6 * dk + 4 * dv:,} + {c}² × {c - 1} + 6 × {c} × {dk} × {dv} + {dk} × {dv}) "
            f"= {self.chunk_flops:,} per chunk, × {chunks:,} ÷ {self.tokens:,}"
        )


def state_flops(group: CacheGroup, tokens: int) -> StateFlops:
    """The recurrence of a per-sequence group, from its recurrent state tensor (heads × d_k × d_v).

    >>> from kimicount.families import cache_groups
    >>> from kimicount.models import known_model
    >>> kda = state_flops(cache_groups(known_model("kimi-k3").spec())[1], 4096)
    >>> kda.layers, kda.heads, kda.decode, kda.prefill
    (69, 96, 11010048, Fraction(17713152, 1))
    """
    (recurrent,) = (t for t in group.state if t.holds == SSM)
    heads, key_dim, value_dim = recurrent.dims
    return StateFlops(group.name, len(group.layers), heads, key_dim, value_dim, tokens)


#: Up to this many tokens the expected-experts power is exact (a fraction of numbers of about 7,000
#: digits at 4,096 tokens for Kimi K2's 47/48); past it, a double (expected_experts).
EXACT_EXPERT_TOKENS = 4096


def expected_experts(experts: int, chosen: int, tokens: int) -> Fraction:
    """Distinct experts, of `experts`, that `tokens` tokens touch when each picks `chosen` of them
    uniformly: E × (1 − (1 − k/E)^B). k for one token; tends to E. [experts]

    Exact (a Fraction) up to EXACT_EXPERT_TOKENS tokens, which covers every batch of the sweep at DP 8.
    Past it the exact power would take time and memory growing with B (minutes at B = 10^7, never
    ending at 10^18): (1 − k/E)^B is then exp(B · log1p(−k/E)) in double precision, which is below
    10^-35 there for any k/E of 1/48 or more, so the result is E to 30 significant digits and the
    rounding (relative error under 10^-12 of that remainder) never shows in a printed figure; it is
    exactly E once the double underflows. Constant time in B.

    >>> expected_experts(384, 8, 1), expected_experts(384, 8, 0), round(float(expected_experts(384, 8, 512)), 2)
    (Fraction(8, 1), Fraction(0, 1), 383.99)
    >>> expected_experts(384, 8, 10**18), expected_experts(384, 384, 10**7)
    (Fraction(384, 1), Fraction(384, 1))
    """
    if tokens <= EXACT_EXPERT_TOKENS:
        return experts * (1 - Fraction(experts - chosen, experts) ** tokens)
    if chosen >= experts:  # every token picks every expert
        return Fraction(experts)
    missed = math.exp(tokens * math.log1p(-chosen / experts))  # (1 − k/E)^B, rounded; 0.0 on underflow
    return experts * (1 - Fraction(missed))


# --- the report of `kimicount flops` ---------------------------------------------------------------


@dataclass(frozen=True)
class FlopsReport:
    """FLOPs per token of a model's forward pass: every component's matmuls (the same in prefill and
    decode), and the attention itself in a prefill of `tokens` and a decode step at `context`, each way."""

    spec: ModelSpec
    model: Node
    tokens: int
    context: int
    flops: dict[int, int]  # matmul FLOPs per token, by id(node)
    #: A family whose attention is not MLA (DeepSeek V4): its attention per layer kind, in place of the
    #: three MLA ways (kimicount.families.family_attention).
    kinds: tuple | None = None
    #: A hybrid model's MLA layers (its per-token MLA cache group's), and its recurrent layers' state.
    mla_layers: int | None = None
    state: StateFlops | None = None

    def kinds_total(self, decode: bool) -> Fraction:
        """matmuls + each kind's attention × its layers, a decode token or a prompt token. [FLOPs/token]"""
        assert self.kinds is not None
        return self.matmul_flops + sum(
            (Fraction(k.decode if decode else k.prefill) * k.layers for k in self.kinds), Fraction(0)
        )

    @property
    def layers(self) -> int:
        """Layers with an MLA attention: num_hidden_layers, or a hybrid model's MLA layers."""
        return self.spec.num_hidden_layers if self.mla_layers is None else self.mla_layers

    def state_total(self, decode: bool) -> Fraction:
        """The recurrent layers' state arithmetic, all of them, per decode or prompt token. [FLOPs/token]"""
        if self.state is None:
            return Fraction(0)
        return Fraction(self.state.decode if decode else self.state.prefill) * self.state.layers

    @property
    def matmul_flops(self) -> int:
        """Every matmul a token runs through, all layers. [FLOPs/token]"""
        return self.flops[id(self.model)]

    def decode(self, way: Mla) -> AttentionFlops:
        """The attention of one decode token at `context`, one layer."""
        return attention_flops(self.spec, way, self.context)

    def prefill(self, way: Mla) -> Fraction:
        """The attention per prompt token, averaged over a prefill of `tokens`, one layer."""
        return prefill_attention_flops(self.spec, way, self.tokens)

    def decode_total(self, way: Mla) -> int:
        """matmuls + attention × layers (+ the recurrent layers' state) for one decode token. [FLOPs/token]"""
        return self.matmul_flops + self.decode(way).flops * self.layers + int(self.state_total(True))

    def prefill_total(self, way: Mla) -> Fraction:
        """matmuls + attention × layers (+ the recurrent layers' chunks) per prompt token. [FLOPs/token]"""
        return self.matmul_flops + self.prefill(way) * self.layers + self.state_total(False)

    @property
    def crossover(self) -> int:
        return absorbed_crossover(self.spec)

    @property
    def naive_to_latent_bytes(self) -> float:
        """How many times the latent's cache bytes the naive cache reads per position (35.6 for Kimi K2)."""
        return bytes_per_token_per_layer(self.spec.mla, Layout.naive, 2) / bytes_per_token_per_layer(
            self.spec.mla, Layout.latent, 2
        )


def flops_report(spec: ModelSpec, model: Node, *, tokens: int, context: int) -> FlopsReport:
    """FLOPs per token of `model` (the language model's tree) for a prefill of `tokens` and a decode
    step at `context`."""
    require_positive("--tokens", tokens)
    require_positive("--context", context)
    from kimicount.families import family_attention

    kinds = family_attention(spec, tokens, context)
    mla_layers, state = hybrid_layers(spec, tokens)
    return FlopsReport(
        spec, model, tokens, context, flops_map(spec, model), kinds=kinds, mla_layers=mla_layers, state=state
    )


def hybrid_layers(spec: ModelSpec, tokens: int) -> tuple[int | None, StateFlops | None]:
    """A hybrid model's MLA layers and its recurrent state's arithmetic, from its cache groups (None,
    None for a model whose every layer is MLA).

    >>> from kimicount.models import known_model
    >>> mla, kda = hybrid_layers(known_model("kimi-linear").spec(), 4096)
    >>> mla, kda.layers, kda.heads, kda.decode  # 7 MLA layers; 20 KDA, 7 × 32 × 128 × 128
    (7, 20, 32, 3670016)
    """
    from kimicount.families import cache_groups

    groups = cache_groups(spec)
    states = state_groups(groups)
    if not states:
        return None, None
    mla = [g for g in groups if g.kind is MemoryKind.PER_TOKEN and g.mla is not None]
    return sum(len(g.layers) for g in mla), state_flops(states[0], tokens)


def node_calculation(spec: ModelSpec, node: Node) -> str:
    """A component's FLOPs per token for one instance, in numbers: '2 × 7,168 × 1,536',
    '2 × 3 × 7,168 × 2,048 × 8 of 384' for the routed experts; '' for a group or no matmul.

    >>> from kimicount.anatomy import query_compression, routed_experts
    >>> node_calculation(k2, query_compression(k2, [0])), node_calculation(k2, routed_experts(k2, [1]))
    ('2 × 7,168 × 1,536', '2 × 3 × 7,168 × 2,048 × 8 of 384')
    """
    matmuls = [ref for ref in node.tensors if is_matmul(ref) or is_short_convolution(ref)]
    if not matmuls:
        return ""
    if len(matmuls) == len(node.tensors) and " + " not in node.calculation:
        text = f"2 × {node.calculation}"
    else:
        parts = [ref.calculation for ref in matmuls]
        text = f"2 × {parts[0]}" if len(parts) == 1 else f"2 × ({' + '.join(parts)})"
    if any(ref.experts for ref in matmuls):
        text += f" × {spec.num_experts_per_tok} of {spec.n_routed_experts}"
    return text


def node_compute(spec: ModelSpec, node: Node) -> str:
    """The dtype a component's matmuls run in: 'fp8', 'bf16', 'mixed' for a group of both, ''."""
    dtypes = {
        compute_dtype(spec, ref)
        for n in node.walk()
        for ref in n.tensors
        if is_matmul(ref) or is_short_convolution(ref)
    }
    return "" if not dtypes else dtypes.pop() if len(dtypes) == 1 else "mixed"


def node_layers(spec: ModelSpec, node: Node) -> int:
    """How many times a leaf's per-instance calculation runs per token: its instances, and for the
    routed experts (one instance per expert) the layers they are in."""
    if any(ref.experts for ref in node.tensors):
        return node.instances // spec.n_routed_experts
    return node.instances
