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
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from functools import lru_cache

from kimicount.anatomy import Node, Role, TensorRef
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
    if not is_matmul(ref):
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

    def kinds_total(self, decode: bool) -> Fraction:
        """matmuls + each kind's attention × its layers, a decode token or a prompt token. [FLOPs/token]"""
        assert self.kinds is not None
        return self.matmul_flops + sum(
            (Fraction(k.decode if decode else k.prefill) * k.layers for k in self.kinds), Fraction(0)
        )

    @property
    def layers(self) -> int:
        """Layers with an attention: num_hidden_layers."""
        return self.spec.num_hidden_layers

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
        """matmuls + attention × layers for one decode token. [FLOPs/token]"""
        return self.matmul_flops + self.decode(way).flops * self.layers

    def prefill_total(self, way: Mla) -> Fraction:
        """matmuls + attention × layers per prompt token. [FLOPs/token]"""
        return self.matmul_flops + self.prefill(way) * self.layers

    @property
    def crossover(self) -> int:
        return absorbed_crossover(self.spec)

    @property
    def naive_to_latent_bytes(self) -> float:
        """How many times the latent's cache bytes the naive cache reads per position (35.6 for Kimi K2)."""
        return bytes_per_token_per_layer(self.spec, Layout.naive, 2) / bytes_per_token_per_layer(
            self.spec, Layout.latent, 2
        )


def flops_report(spec: ModelSpec, model: Node, *, tokens: int, context: int) -> FlopsReport:
    """FLOPs per token of `model` (the language model's tree) for a prefill of `tokens` and a decode
    step at `context`."""
    require_positive("--tokens", tokens)
    require_positive("--context", context)
    from kimicount.families import family_attention

    kinds = family_attention(spec, tokens, context)
    return FlopsReport(spec, model, tokens, context, flops_map(spec, model), kinds)


def node_calculation(spec: ModelSpec, node: Node) -> str:
    """A component's FLOPs per token for one instance, in numbers: '2 × 7,168 × 1,536',
    '2 × 3 × 7,168 × 2,048 × 8 of 384' for the routed experts; '' for a group or no matmul.

    >>> from kimicount.anatomy import query_compression, routed_experts
    >>> node_calculation(k2, query_compression(k2, [0])), node_calculation(k2, routed_experts(k2, [1]))
    ('2 × 7,168 × 1,536', '2 × 3 × 7,168 × 2,048 × 8 of 384')
    """
    matmuls = [ref for ref in node.tensors if is_matmul(ref)]
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
    dtypes = {compute_dtype(spec, ref) for n in node.walk() for ref in n.tensors if is_matmul(ref)}
    return "" if not dtypes else dtypes.pop() if len(dtypes) == 1 else "mixed"


def node_layers(spec: ModelSpec, node: Node) -> int:
    """How many times a leaf's per-instance calculation runs per token: its instances, and for the
    routed experts (one instance per expert) the layers they are in."""
    if any(ref.experts for ref in node.tensors):
        return node.instances // spec.n_routed_experts
    return node.instances
