"""The model's cache, as the engines' memory rules read it: cache groups, in the words vLLM's
kv_cache_interface.py uses (DESIGN.md, "Cache groups").

A group is a set of layers with one kind of memory and its bytes; a PoolGroup is one as a GPU's pool
holds it (its layers there, its bytes a token or a sequence there). The DeepSeek-V3 family has one
group, per token, on every layer; the Kimi Linear family (Kimi Linear, Kimi K3) a per-token group on
its MLA layers and a per-sequence group, the KDA state, on the others. `model_groups` reads them from
the family's cache groups (kimicount.cache_groups' MemoryKind):

| kind | grows with | engines pack it as |
|---|---|---|
| per token | every cached position | pages of block_size tokens (vLLM), of page_size (SGLang), cells (llama.cpp) |
| per token, compressed | one entry per `ratio` positions | DeepSeek V4's CSA and HCA records |
| windowed | min(position, window) | a sliding window's pages |
| per sequence | nothing: a constant per sequence | vLLM's MambaSpec pages in its hybrid manager (engines/vllm_hybrid.py); SGLang's mamba pool, split by mamba_full_memory_ratio (engines/sglang_mamba.py); llama.cpp's recurrent cells |

Each engine packs the groups by its own rule (ServerEngine.pool_tokens for one per-token group,
ServerEngine.pack_state for a per-sequence group beside it; for a family's own groups, DeepSeek V4's,
ServerEngine.pack, which gives a Packing); a kind whose rule an engine lacks is refused by that engine
in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kimicount.cache_groups import CacheGroup, MemoryKind, has_mla_group, per_token_group, state_groups
from kimicount.errors import UsageError
from kimicount.kvcache import Layout, LayoutCache, StateCache, Workload, layout_cache
from kimicount.spec import ModelSpec


@dataclass(frozen=True)
class PoolGroup:
    """A cache group as one GPU's pool holds it: its kind, how many of its layers that GPU has (and which,
    `indices`, with the whole model's `model_layers` of the group), and what a token of it takes there
    (`cache`, kvcache's layout, for per-token kinds) or a sequence (`state`, for a per-sequence kind); a
    family's own group (DeepSeek V4's: an entry per position, per `ratio` positions, or a window) keeps
    the family's CacheGroup (`group`) for the engine's rule to page."""

    kind: MemoryKind
    layers: int
    cache: LayoutCache | None = None
    state: StateCache | None = None
    indices: tuple[int, ...] = ()
    model_layers: tuple[int, ...] = ()
    name: str = ""
    group: CacheGroup | None = None

    @property
    def bytes_per_token(self) -> int:
        """What one token of this group takes on one GPU, all its layers; 0 for a state and for a family's
        own group, whose bytes the engine's Packing gives. [bytes/token]"""
        return 0 if self.cache is None else self.cache.bytes_per_token_per_gpu

    @property
    def bytes_per_sequence(self) -> int:
        """What one sequence's state takes on one GPU, all its layers here; 0 for a per-token group.
        [bytes/sequence]"""
        if self.state is None:
            return 0
        return sum(part.bytes for part in self.state.parts()) * self.layers

    @property
    def bytes_per_layer(self) -> int:
        """One layer's state of one sequence on one GPU (a MambaSpec page before padding). [bytes]"""
        return 0 if self.state is None else sum(part.bytes for part in self.state.parts())


def model_groups(
    spec: ModelSpec,
    layout: Layout,
    element: int,
    layers: int,
    workload: Workload,
    *,
    stage_layers: Sequence[int] | None = None,
    indexer_every_layer: bool = False,
    state_dtypes: tuple[str, str] | None = None,
) -> tuple[PoolGroup, ...]:
    """The cache groups of `layers` layers of a model on one GPU (`stage_layers`, the stage's main
    layers; any beyond them are MTP layers; None: the first `layers`): the per-token MLA group, the
    layout's latent and, with the V3.2 indexer, its keys on the layers that keep them (every layer
    under `indexer_every_layer`, SGLang's NSA pool; else as kvcache.layers_with_indexer counts them);
    and each per-sequence group (the KDA state) on the stage's layers of it, in `state_dtypes`
    (conv, ssm). A family without an MLA latent (DeepSeek V4) has its own groups, all its layers (the
    engines' rules for them take no pipeline split), the MTP layer's with them when `layers` counts it.

    >>> from kimicount.kvcache import Workload
    >>> [(g.kind.value, g.layers, g.bytes_per_token) for g in model_groups(k2, Layout.latent, 2, 61, Workload(1))]
    [('per_token', 61, 70272)]
    """
    from kimicount.families import cache_groups

    groups = cache_groups(spec)
    if not has_mla_group(groups):  # DeepSeek V4: its groups as the family gives them (fp8), the MTP
        own = cache_groups(spec, layers > spec.num_hidden_layers)  # layer's too when the GPU holds it
        return tuple(PoolGroup(g.kind, len(g.layers), group=g) for g in own)
    mla_group = per_token_group(groups)
    mla = mla_group.mla
    assert mla is not None  # per_token_group returns MLA groups only
    held = tuple(range(min(layers, spec.num_hidden_layers))) if stage_layers is None else tuple(stage_layers)
    mtp = layers - len(held)  # MTP layers past the main ones (the last stage's)
    in_group = set(mla_group.layers)
    mla_held = tuple(i for i in held if i in in_group)
    count = len(mla_held) + mtp
    indexed = indexer_layers(spec, mla_held, mtp, indexer_every_layer)
    cache = layout_cache(mla, layout, element, count, workload, indexed)
    pool = [PoolGroup(MemoryKind.PER_TOKEN, count, cache, None, mla_held, mla_group.layers, mla_group.name)]
    conv, ssm = state_dtypes or ("bf16", "fp32")
    for group in state_groups(groups):
        members = set(group.layers)
        kept = tuple(i for i in held if i in members)
        state = StateCache(group, conv, ssm, workload)
        state.parts()  # TP must divide the state's heads: refused here, naming them
        pool.append(
            PoolGroup(MemoryKind.PER_SEQUENCE, len(kept), None, state, kept, group.layers, group.name)
        )
    return tuple(pool)


def indexer_layers(spec: Any, held: Sequence[int], mtp: int, every_layer: bool) -> int:
    """How many of the stage's MLA layers `held` (and its `mtp` MTP layers) cache indexer keys: none
    without an indexer; all of them under `every_layer` (SGLang's NSATokenToKVPool keeps one indexer
    buffer per layer, mem_cache/memory_pool.py `index_k_with_scale_buffer` over `range(layer_num)`,
    GLM-5.2's shared layers too); else the layers the model gives an indexer (GLM-5.2's `indexer_types`
    "full" layers, vLLM's rule: a skip_topk layer builds no Indexer) and the MTP layers. [layers]

    >>> indexer_layers(k2, range(61), 0, False)
    0
    """
    if getattr(spec, "indexer", None) is None:
        return 0
    if every_layer or spec.indexer.layers is None:
        return len(held) + mtp
    kept = set(spec.indexer.layers)
    return sum(1 for layer in held if layer in kept) + mtp


def single_per_token(groups: Sequence[PoolGroup], engine: str) -> PoolGroup:
    """The one per-token group a rule that knows only that kind packs; one line for any other model."""
    if len(groups) == 1 and groups[0].kind is MemoryKind.PER_TOKEN and groups[0].cache is not None:
        return groups[0]
    kinds = ", ".join(sorted({group.kind.value for group in groups}))
    raise UsageError(f"{engine}'s memory rule for cache groups of kinds {kinds} is not modelled yet")


def compressed(groups: Sequence[PoolGroup]) -> bool:
    """Whether the groups are a family's own with compressed entries (DeepSeek V4's), which an engine
    packs by its own rule into a Packing."""
    return any(g.kind is MemoryKind.COMPRESSED and g.group is not None for g in groups)


@dataclass(frozen=True)
class Packing:
    """One GPU's pool as an engine packs a model's own groups into it (DeepSeek V4's windows, compressed
    entries and compressor states): block ids of `page` tokens, each costing `page_bytes` over all its
    layers; `pages` of them in the pool, `request_pages` for one request of max_model_len
    (`request_bytes`); the tokens the engine reports for the pool (vLLM: max concurrency ×
    max_model_len; SGLang: max_total_num_tokens), the longest max_model_len that fits, and what the
    pages hold (`used_bytes`). `rule` names the engine's rule and the release it holds for; `cap`
    the running requests the engine sets itself for the model (SGLang's 256 for DeepSeek V4);
    `summary`, `notes` and `printed` are the answer's lines and the engine's own, in its words
    (`calculation` how the pool became its pages);
    `rows` the engine's groups (name, how it pages them); `figures` its own numbers for --json."""

    rule: str
    dtype: str
    page: int
    page_bytes: int
    pages: int
    request_pages: int
    request_bytes: int
    tokens: int
    longest: int
    used_bytes: int
    summary: str
    calculation: str = ""
    cap: int | None = None
    notes: tuple[str, ...] = ()
    printed: tuple[str, ...] = ()
    rows: tuple[tuple[str, str], ...] = ()
    figures: dict[str, Any] = field(default_factory=dict)


def per_token(groups: Sequence[PoolGroup]) -> PoolGroup:
    """The per-token group among a GPU's groups (every model kimicount plans has one, first)."""
    return next(group for group in groups if group.kind is MemoryKind.PER_TOKEN)


def per_sequence(groups: Sequence[PoolGroup]) -> tuple[PoolGroup, ...]:
    """The per-sequence groups (a hybrid model's state; none for the DeepSeek-V3 family)."""
    return tuple(group for group in groups if group.kind is MemoryKind.PER_SEQUENCE)


@dataclass(frozen=True)
class StatePool:
    """How an engine packed one GPU's pool for a model with a per-sequence state beside its per-token
    cache (engines/vllm_hybrid.py, engines/sglang_mamba.py): the per-token cache's tokens and page, the
    requests of max_model_len the GPU serves at once and which pool runs out first, the bytes each
    pool holds, the states a request keeps, and the engine's arithmetic in lines.

    `limit` is "state" when the per-sequence pool bounds the requests before the per-token one, "kv"
    otherwise; `short_by` the bytes the GPU lacks to hold one request of max_model_len (0: it holds
    one)."""

    tokens: int
    block_size: int
    requests: int
    concurrency: float
    limit: str
    state_bytes: int
    kv_bytes: int
    slots: int  # the states the pool holds (SGLang's max_mamba_cache_size; vLLM: its blocks' worth)
    slots_per_request: int
    request_state_bytes: int  # what one request's states take on the GPU
    short_by: int = 0
    lines: tuple[str, ...] = ()
    figures: dict[str, Any] = field(default_factory=dict, compare=False)
