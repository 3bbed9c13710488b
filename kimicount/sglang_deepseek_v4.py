"""SGLang's KV-cache pools for DeepSeek V4, as pure functions over a model's cache groups.

This is SGLang's rule, not a model's: the pools of DeepSeekV4TokenToKVPool (the separate-KV layout
of CUDA GPUs), read from sgl-project/sglang (read, never shipped):

- python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py @ 007bddd: DeepSeekV4SingleKVPool
  (get_bytes_per_token: qk_nope fp8 + qk_rope × 2 + qk_nope // 64 scales + 1 pad = 584; create_buffer:
  a page of page_size tokens padded to ceil(page_size × 584 / 576) × 576 bytes), one for the SWA ring
  (pages of swa_page_size) and one per compression ratio (pages of page_size // ratio entries);
  DeepSeekV4IndexerPool (get_dsv4_indexer_bytes_per_token: index_head_dim + index_head_dim // 128 × 4
  in fp8, index_head_dim // 2 + index_head_dim // 32 with the FP4 indexer; pages of page_size // 4
  entries, not padded); get_compress_state_ring_size (each request's compressor state: a ring of 8
  positions for ratio 4 and 128 for ratio 128, 16 and 256 under speculative decoding, 1 for the online
  C128 compressor) and get_swa_ring_size (sliding_window, + draft tokens − 1 when speculating);
- python/sglang/srt/mem_cache/deepseek_v4_compress_state.py @ 067c8c8, CompressStatePool: a state
  entry of 2 × (1 + overlap) × head_dim values (kv and score), the online C128's 3 × head_dim.

How many tokens each pool gets is SGLang's memory profiler's choice, not stated here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kimicount.cache_groups import COMPRESSOR_STATE, INDEX_KEYS, CacheGroup, MemoryKind
from kimicount.errors import UsageError

#: SGLang pads every FlashMLA page to a multiple of 576 bytes (create_buffer).
ALIGNMENT = 576
#: The state rings per request, by ratio: (plain, speculative).
RINGS = {4: (8, 16), 128: (128, 256)}


@dataclass(frozen=True)
class Pool:
    """One of SGLang's pools of a DeepSeek V4 model: what it holds, its layers, entries a page (or a
    ring per request) and the bytes of each."""

    name: str
    layers: int
    entry_bytes: int
    per_page: int | None  # entries a page (page_size // ratio); None for a state ring
    padded: bool
    ring: tuple[int, int] | None = None  # a state's ring per request (plain, speculative)

    @property
    def page_bytes(self) -> int | None:
        """A page of one layer, padded to 576 B when FlashMLA reads it. [bytes/page/layer]

        >>> Pool("c128 KV", 31, 584, 2, True).page_bytes  # 256 // 128 entries of 584 B
        1728
        """
        if self.per_page is None:
            return None
        raw = self.per_page * self.entry_bytes
        return -(-raw // ALIGNMENT) * ALIGNMENT if self.padded else raw

    @property
    def ring_bytes(self) -> int | None:
        """One request's state ring over all the pool's layers, not speculating. [bytes/request]"""
        return None if self.ring is None else self.ring[0] * self.entry_bytes * self.layers


def sglang_pools(groups: Sequence[CacheGroup], page_size: int) -> tuple[Pool, ...]:
    """SGLang's pools for DeepSeek V4's groups, with pages of `page_size` tokens (--page-size).

    >>> from kimicount.families import cache_groups
    >>> from kimicount.models import known_model
    >>> [(p.name, p.page_bytes, p.ring_bytes) for p in sglang_pools(cache_groups(known_model("deepseek-v4-flash").spec()), 256)]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('c4 KV', 37440, None), ('c4 indexer keys', 8448, None), ('c128 KV', 1728, None),
     ('c4 compressor states', None, 1376256), ('c4 indexer compressor states', None, 344064),
     ('c128 compressor states', None, 10485760)]
    """
    pools = []
    for g in groups:
        if g.kind is MemoryKind.COMPRESSED:
            if page_size % g.ratio:
                raise UsageError(
                    f"--block-size {page_size}: SGLang's c{g.ratio} pages hold page_size // {g.ratio} entries"
                )
            what = "indexer keys" if g.content == INDEX_KEYS else "KV"
            pools.append(
                Pool(
                    f"c{g.ratio} {what}",
                    len(g.layers),
                    g.entry_bytes,
                    page_size // g.ratio,
                    g.content != INDEX_KEYS,
                )
            )
        elif g.content == COMPRESSOR_STATE:
            what = "indexer compressor states" if "indexer" in g.name else "compressor states"
            pools.append(
                Pool(f"c{g.ratio} {what}", len(g.layers), g.entry_bytes, None, False, RINGS[g.ratio])
            )
    return tuple(pools)
