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

Each engine packs the groups by its own rule (ServerEngine.pool_tokens); until an engine's rule for a
kind is written, a model with such a group is refused by that engine in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kimicount.cache_groups import MemoryKind
from kimicount.errors import UsageError
from kimicount.kvcache import Layout, LayoutCache, Workload, layers_with_indexer, layout_cache
from kimicount.spec import ModelSpec


@dataclass(frozen=True)
class PoolGroup:
    """A cache group as one GPU's pool holds it: its kind, how many of its layers that GPU has, and what
    a token of it takes there (`cache`, kvcache's layout for per-token kinds)."""

    kind: MemoryKind
    layers: int
    cache: LayoutCache

    @property
    def bytes_per_token(self) -> int:
        """What one token of this group takes on one GPU, all its layers. [bytes/token]"""
        return self.cache.bytes_per_token_per_gpu


def model_groups(
    spec: ModelSpec, layout: Layout, element: int, layers: int, workload: Workload
) -> tuple[PoolGroup, ...]:
    """The cache groups of `layers` layers of a model on one GPU: for the DeepSeek-V3 family one
    per-token group, the layout's latent (and the V3.2 indexer's keys) on every layer.

    >>> from kimicount.kvcache import Workload
    >>> [(g.kind.value, g.layers, g.bytes_per_token) for g in model_groups(k2, Layout.latent, 2, 61, Workload(1))]
    [('per_token', 61, 70272)]
    """
    cache = layout_cache(spec, layout, element, layers, workload, layers_with_indexer(spec, layers))
    return (PoolGroup(MemoryKind.PER_TOKEN, layers, cache),)


def single_per_token(groups: Sequence[PoolGroup], engine: str) -> PoolGroup:
    """The one per-token group a rule that knows only that kind packs; one line for any other model."""
    if len(groups) == 1 and groups[0].kind is MemoryKind.PER_TOKEN:
        return groups[0]
    kinds = ", ".join(sorted({group.kind.value for group in groups}))
    raise UsageError(f"{engine}'s memory rule for cache groups of kinds {kinds} is not modelled yet")
