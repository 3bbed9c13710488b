"""The DeepSeek-V3 family: DeepSeek-V2-Lite, V3, V3.1, V3.2, R1, Kimi K2 / K2.5 / K2.6 / K2.7, Moonlight,
GLM-5 / 5.1 / 5.2.

Every layer is one MLA block; the first `first_k_dense_replace` have a dense MLP, the rest (every
`moe_layer_freq`-th) a DeepSeek MoE; DeepSeek-V3's multi-token-prediction layers follow the main ones;
Kimi K2.5 wraps the language model with a MoonViT vision tower. The spec is kimicount.spec's
`ModelSpec`; the blocks are kimicount.anatomy's; the cache is one per-token MLA group.

    >>> [(g.name, g.kind, len(g.layers)) for g in build_anatomy(k2).model.find("61 transformer blocks").children]
    [('1 dense block (layer 0)', 'dense', 1), ('60 MoE blocks (layers 1–60)', 'moe', 60)]
"""

from __future__ import annotations

from collections.abc import Sequence

from kimicount.anatomy import (
    Anatomy,
    Node,
    Role,
    check_tensor_sizes,
    dense_mlp,
    embedding,
    final_norm,
    group,
    latent_attention,
    layer_span,
    layer_tensor,
    leaf,
    mixture_of_experts,
    output_head,
    projector,
    rms_norm,
    vision_tower,
)
from kimicount.cache_groups import CacheGroup, MemoryKind
from kimicount.spec import ModelSpec
from kimicount.spec import deepseek_spec as spec_from_config

__all__ = ["build_anatomy", "cache_groups", "spec_from_config"]


def transformer_block(spec: ModelSpec, layers: Sequence[int], moe: bool) -> list[Node]:
    """The parts of one block: attention with its norm, then the MLP (dense or MoE) with its norm."""
    return [
        rms_norm(spec, layers, "Attention RMSNorm", "input_layernorm.weight"),
        latent_attention(spec, layers),
        rms_norm(spec, layers, "MLP RMSNorm", "post_attention_layernorm.weight"),
        mixture_of_experts(spec, layers) if moe else dense_mlp(spec, layers),
    ]


def block_groups(spec: ModelSpec, layers: Sequence[int]) -> list[Node]:
    """The given layers, grouped into one node for the dense blocks and one for the MoE blocks; and where
    only some layers have their own lightning indexer (GLM-5.2), the blocks sharing one apart."""
    groups = []
    for kind, moe, label in (("dense", False, "dense block"), ("moe", True, "MoE block")):
        members = tuple(i for i in layers if spec.is_moe_layer(i) == moe)
        for own, part in _by_indexer(spec, members):
            n = len(part)
            blocks = f"{label}{'s' if n > 1 else ''}" + ("" if own else " sharing an indexer")
            name = f"{n} {blocks} ({layer_span(part)})"
            groups.append(group(name, transformer_block(spec, part, moe), n, layers=part, kind=kind))
    return groups


def _by_indexer(spec: ModelSpec, layers: tuple[int, ...]) -> list[tuple[bool, tuple[int, ...]]]:
    """The layers with an indexer of their own, then those that share one (GLM-5.2's "shared" layers
    reuse the top-k of the last full layer and carry no indexer weights); one part when all are alike."""
    if spec.indexer is None or spec.indexer.layers is None:
        return [(True, layers)] if layers else []
    own = tuple(i for i in layers if spec.has_indexer(i))
    shared = tuple(i for i in layers if not spec.has_indexer(i))
    return [(True, own)] * bool(own) + [(False, shared)] * bool(shared)


def language_model(spec: ModelSpec) -> Node:
    """The main model: embedding, every transformer block, final norm and (unless tied) the head.

    >>> language_model(k2).params
    1026408232448
    """
    layers = range(spec.num_hidden_layers)
    parts = [
        embedding(spec, "Token embedding", "model.embed_tokens.weight"),
        group(f"{spec.num_hidden_layers} transformer blocks", block_groups(spec, layers)),
        final_norm(spec, "Final RMSNorm", "model.norm.weight"),
    ]
    if not spec.tie_word_embeddings:  # tied: the head reuses the embedding matrix
        parts.append(output_head(spec, "Output head", "lm_head.weight"))
    return group(spec.name.rsplit("/", 1)[-1], parts)


def multi_token_prediction(spec: ModelSpec) -> Node | None:
    """DeepSeek-V3's MTP module (layer 61): its own norms, projection and block, plus the copies of
    the embedding and head that the checkpoint stores with it. Outside the main total. [params]
    """
    layers = spec.mtp_layers
    if not layers:
        return None
    n = len(layers)
    hidden = spec.hidden_size
    # DeepSeek's FP8 checkpoints (V3, R1, V3.1, V3.2) keep eh_proj in BF16 with no block scale, and
    # engines load it as a plain Linear; the layer's attention and experts are FP8 like the main ones.
    eh_proj = layer_tensor(spec, "eh_proj.weight", (hidden, 2 * hidden), Role.UNQUANTIZED, layers)
    copies = mtp_stores_copies(spec)
    embedding_copy = embedding(
        spec, "Embedding copy", "model.layers.{layer}.embed_tokens.weight", layers, copy=True
    )
    head_copy = output_head(
        spec, "Output head copy", "model.layers.{layer}.shared_head.head.weight", layers, copy=True
    )
    parts = [
        *[embedding_copy] * copies,
        leaf(
            "Input norms",
            n,
            [
                layer_tensor(spec, f"{norm}.weight", (hidden,), Role.NORM, layers)
                for norm in ("enorm", "hnorm")
            ],
            "2 × hidden_size",
        ),
        leaf("Hidden projection", n, [eh_proj], "2·hidden_size × hidden_size"),
        *block_groups(spec, layers),
        final_norm(spec, "Output norm", "model.layers.{layer}.shared_head.norm.weight", layers),
        *[head_copy] * copies,
    ]
    return group("Multi-token prediction", parts)


#: Model types whose MTP layer stores no copy of the embedding and head, using the main model's: GLM-5's
#: checkpoints have no model.layers.78.embed_tokens or shared_head.head (the GLM-5.1 BF16 GGUF, whose
#: converter writes nextn.embed_tokens and nextn.shared_head_head when they are there, has neither).
_MTP_SHARES_EMBEDDING_AND_HEAD = ("glm_moe_dsa",)


def mtp_stores_copies(spec: ModelSpec) -> bool:
    """Whether the checkpoint's MTP layer holds its own copies of the embedding and the output head
    (DeepSeek-V3, R1, V3.1, V3.2 do; GLM-5 does not).

    >>> mtp_stores_copies(k2)
    True
    """
    return spec.model_type not in _MTP_SHARES_EMBEDDING_AND_HEAD


def vision_model(spec: ModelSpec) -> Node | None:
    """The vision tower and projector of a multimodal model; None for a language model alone."""
    if spec.vision is None:
        return None
    return group("Vision", [vision_tower(spec.vision), projector(spec.vision)])


def build_anatomy(spec: ModelSpec) -> Anatomy:
    """The component trees of the model the spec describes."""
    anatomy = Anatomy(
        spec=spec, model=language_model(spec), mtp=multi_token_prediction(spec), vision=vision_model(spec)
    )
    check_tensor_sizes(anatomy)
    return anatomy


def cache_groups(spec: ModelSpec, include_mtp: bool = False) -> tuple[CacheGroup, ...]:
    """One per-token group: every layer's MLA cache (with the MTP layers' when asked for).

    >>> [(g.name, len(g.layers), g.mla.kv_lora_rank) for g in cache_groups(k2)]
    [('MLA', 61, 512)]
    """
    layers = tuple(range(spec.num_hidden_layers)) + (spec.mtp_layers if include_mtp else ())
    return (CacheGroup("MLA", MemoryKind.PER_TOKEN, layers, mla=spec.mla),)
