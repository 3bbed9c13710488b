"""The model's cache, as the engines' memory rules read it: cache groups, in the words vLLM's
kv_cache_interface.py uses (DESIGN.md, "Cache groups").

A group is a set of layers with one kind of memory and its bytes; a PoolGroup is one as a GPU's pool
holds it (its layers there, its bytes a token there). Today's models (the DeepSeek-V3 family: MLA, with
the V3.2 indexer) have one group, per token, on every layer: `model_groups` builds it from kvcache's
layout. The next families bring others, their cache groups by MemoryKind (DESIGN.md), which
`model_groups` is where they are read (kimicount.cache_groups' MemoryKind):

| kind | grows with | engines pack it as |
|---|---|---|
| per token | every cached position | pages of block_size tokens (vLLM), of page_size (SGLang), cells (llama.cpp) |
| per token, compressed | one entry per `ratio` positions | DeepSeek V4's CSA and HCA records |
| windowed | min(position, window) | a sliding window's pages |
| per sequence | nothing: a constant per sequence | vLLM's MambaSpec pages in its hybrid manager; SGLang's mamba pool (mamba_full_memory_ratio); llama.cpp's recurrent cells |

Each engine packs the groups by its own rule (ServerEngine.pool_tokens for one per-token group; for a
family's own groups, DeepSeek V4's, ServerEngine.pack, which gives a Packing); until an engine's rule
for a kind is written, a model with such a group is refused by that engine in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kimicount.cache_groups import CacheGroup, MemoryKind, has_mla_group
from kimicount.errors import UsageError
from kimicount.kvcache import Layout, LayoutCache, Workload, layers_with_indexer, layout_cache
from kimicount.spec import ModelSpec


@dataclass(frozen=True)
class PoolGroup:
    """A cache group as one GPU's pool holds it: its kind, how many of its layers that GPU has, and what
    a token of it takes there (`cache`, kvcache's layout for per-token kinds); a family's own group
    (DeepSeek V4's: an entry per position, per `ratio` positions, or a window) keeps the family's
    CacheGroup (`group`) for the engine's rule to page."""

    kind: MemoryKind
    layers: int
    cache: LayoutCache | None = None
    group: CacheGroup | None = None

    @property
    def bytes_per_token(self) -> int:
        """What one token of this group takes on one GPU, all its layers (0 for a family's own group,
        whose bytes the engine's Packing gives). [bytes/token]"""
        return 0 if self.cache is None else self.cache.bytes_per_token_per_gpu


def model_groups(
    spec: ModelSpec, layout: Layout, element: int, layers: int, workload: Workload
) -> tuple[PoolGroup, ...]:
    """The cache groups of `layers` layers of a model on one GPU: for the DeepSeek-V3 family one
    per-token group, the layout's latent (and the V3.2 indexer's keys) on every layer; for a family
    without an MLA latent (DeepSeek V4) its own groups, all its layers (the engines' rules for them
    take no pipeline split), the MTP layer's with them when `layers` counts it.

    >>> from kimicount.kvcache import Workload
    >>> [(g.kind.value, g.layers, g.bytes_per_token) for g in model_groups(k2, Layout.latent, 2, 61, Workload(1))]
    [('per_token', 61, 70272)]
    """
    from kimicount.families import cache_groups

    own = cache_groups(spec, layers > spec.num_hidden_layers)  # the MTP layer's too when the GPU holds it
    if not has_mla_group(own):  # DeepSeek V4: its groups as the family gives them (fp8)
        return tuple(PoolGroup(g.kind, len(g.layers), group=g) for g in own)
    cache = layout_cache(spec.mla, layout, element, layers, workload, layers_with_indexer(spec, layers))
    return (PoolGroup(MemoryKind.PER_TOKEN, layers, cache),)


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
