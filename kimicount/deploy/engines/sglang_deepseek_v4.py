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

How many tokens each pool gets, SGLang's DSV4PoolConfigurator decides (`pack`, at the end), read at
python/sglang/srt/model_executor/pool_configurator.py @ 003fca8: bytes_per_full_token, a float, prices
one token of the full pool with every pool that scales with it (the SWA ring at
swa_full_tokens_ratio × the full tokens, the c4 and c128 entries at 1/4 and 1/128, the c4 indexer
keys at 1/4, the c4 compressor states at their ring per SWA page); the c128 compressor states are
sized by the requests instead (_get_c128_state_fixed_bytes: (max_running_requests + 1) × 128 ring
rows, + 129, rounded up to 128 rows, of 2 × head_dim F32 values on every HCA layer) and come off the
memory first; full_token = int((available − c128 states) / bytes_per_full_token), then whole pages.
python/sglang/srt/arg_groups/deepseek_v4_hook.py (apply_deepseek_v4_defaults) sets, for
DeepseekV4ForCausalLM, page_size 256 (whatever is given), max_running_requests 256 when none is,
the fp8_e4m3 cache, and swa_full_tokens_ratio 0.1 unless given. The release range: SGLang's releases
serve V4 from 0.5.14 (its release notes list it); kimicount knows SGLang's rules to 0.5.8.post1, so a
V4 plan applies this configurator (main's) to the pool of the release asked: labelled so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kimicount.cache_groups import COMPRESSOR_STATE, INDEX_KEYS, CacheGroup, MemoryKind
from kimicount.deploy.engines.base import Release, Ruled
from kimicount.deploy.groups import Packing, PoolGroup
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


# --- the planner's use of the rule: DSV4PoolConfigurator ------------------------------------------

#: What apply_deepseek_v4_defaults sets for DeepSeek V4: the page, the running requests when none are
#: given, and the SWA ring's share of the full pool.
PAGE_SIZE = 256
MAX_RUNNING_REQUESTS = 256
SWA_FULL_TOKENS_RATIO = 0.1
#: The pool configurator's rule, with where it was read and the releases it stands for.
DEEPSEEK_V4_RULE: tuple[Ruled[str], ...] = (
    Ruled(
        "full tokens = int((free memory × mem_fraction_static − weights − c128 compressor states) ÷ "
        "bytes_per_full_token), in pages of 256; the SWA ring 0.1 of them, c4 ¼, c128 1/128",
        "python/sglang/srt/model_executor/pool_configurator.py DSV4PoolConfigurator @ 003fca8 and "
        "arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults (main; SGLang releases serve V4 from "
        "0.5.14): applied at every release kimicount knows, an approximation for those before it",
    ),
)


def _group(groups: Sequence[CacheGroup], kind: MemoryKind, content: str, ratio: int) -> CacheGroup | None:
    for g in groups:
        if g.kind is kind and g.content == content and g.ratio == ratio:
            return g
    return None


def bytes_per_full_token(groups: Sequence[CacheGroup], speculative: bool = False) -> float:
    """_get_bytes_per_full_token, in SGLang's float arithmetic and order: the SWA ring's 584-B entries
    at swa_full_tokens_ratio on every layer, the c4 and c128 entries at 1/4 and 1/128, the c4 indexer
    keys (132 B) at 1/4, and the c4 compressor states (8,192 B, the indexer's 2,048 B) at their ring
    of 8 rows (16 speculating) per 128-token SWA page, at swa_full_tokens_ratio. [bytes/full token]

    >>> from kimicount.families import cache_groups
    >>> from kimicount.models import known_model
    >>> flash = cache_groups(known_model("deepseek-v4-flash").spec())
    >>> bytes_per_full_token(flash)  # 2,511.2 + 3,066 + 91.25 + 693 + 1,075.2 + 268.8, in floats
    7705.450000000001
    """
    swa = next(g for g in groups if g.kind is MemoryKind.WINDOWED and g.content != COMPRESSOR_STATE)
    c4 = _group(groups, MemoryKind.COMPRESSED, "kv", 4)
    c128 = _group(groups, MemoryKind.COMPRESSED, "kv", 128)
    keys = _group(groups, MemoryKind.COMPRESSED, INDEX_KEYS, 4)
    state = _group(groups, MemoryKind.WINDOWED, COMPRESSOR_STATE, 4)
    indexer_state = next(
        (g for g in groups if g.content == COMPRESSOR_STATE and g.ratio == 4 and g is not state), None
    )
    kv_bytes = swa.entry_bytes
    num_layers_total = len(swa.layers)
    num_layers_ca4 = 0 if c4 is None else len(c4.layers)
    num_layers_ca128 = 0 if c128 is None else len(c128.layers)
    indexer_bytes = 0 if keys is None else keys.entry_bytes
    c4_state_bytes = 0 if state is None else state.entry_bytes
    c4_indexer_state_bytes = 0 if indexer_state is None else indexer_state.entry_bytes
    swa_ratio = SWA_FULL_TOKENS_RATIO
    assert swa.window is not None  # the family's window
    c4_state_ratio = RINGS[4][1 if speculative else 0] / swa.window
    c128_state_ratio = 0
    c4_frac = 1 / (4 * 1)
    value = (
        swa_ratio * kv_bytes * num_layers_total
        + c4_frac * kv_bytes * num_layers_ca4
        + 1 / 128 * kv_bytes * num_layers_ca128
        + 1 / 4 * indexer_bytes * num_layers_ca4
        + swa_ratio * c4_state_ratio * c4_state_bytes * num_layers_ca4
        + c128_state_ratio * 0 * num_layers_ca128
        + swa_ratio * c4_state_ratio * c4_indexer_state_bytes * num_layers_ca4
    )
    if speculative:  # the draft worker's one layer: (target + draft) / target
        value *= (num_layers_total + 1) / num_layers_total
    return value


def c128_state_bytes(
    groups: Sequence[CacheGroup], max_running_requests: int, speculative: bool = False
) -> int:
    """_get_c128_state_fixed_bytes: the c128 compressor states of max_running_requests + 1 request
    slots, a ring of 128 rows each (256 speculating), + ring + 1, rounded up to 128 rows, of the HCA
    state's 2 × head_dim F32 values on every HCA layer. [bytes]

    >>> from kimicount.families import cache_groups
    >>> from kimicount.models import known_model
    >>> c128_state_bytes(cache_groups(known_model("deepseek-v4-flash").spec()), 256)  # 33,152 rows × 4,096 B × 20
    2715811840
    """
    state = _group(groups, MemoryKind.WINDOWED, COMPRESSOR_STATE, 128)
    if state is None:
        return 0
    ring = RINGS[128][1 if speculative else 0]
    rows = (max_running_requests + 1) * ring + ring + 1
    rows = -(-rows // 128) * 128
    return rows * state.entry_bytes * len(state.layers)


def pack(
    pool: int,
    groups: Sequence[PoolGroup],
    *,
    release: Release,
    max_model_len: int,
    max_running_requests: int | None,
    dp: int,
    page_size: int | None,
    speculative: bool,
    dtype_given: str | None,
) -> Packing:
    """One GPU's pool of `pool` bytes as SGLang's DSV4PoolConfigurator splits it: the c128 states of
    max_running_requests ÷ DP request slots off first (256 when none are given), the rest in full
    tokens of bytes_per_full_token, in pages of 256.

    >>> from kimicount.deploy.engines.base import Version
    >>> from kimicount.deploy.groups import model_groups
    >>> from kimicount.kvcache import Layout, Workload
    >>> from kimicount.models import known_model
    >>> groups = model_groups(known_model("deepseek-v4-flash").spec(), Layout.latent, 1, 43, Workload(1))
    >>> p = pack(40 * 2**30, groups, release=Release("SGLang", Version.parse("0.5.8")), max_model_len=65_536,
    ...          max_running_requests=None, dp=1, page_size=None, speculative=False, dtype_given=None)
    >>> p.tokens, p.pages  # int((40 GiB − 2,715,811,840) ÷ 7,705.45) = 5,221,481 → whole pages of 256
    (5221376, 20396)
    """
    if dtype_given not in (None, "fp8"):
        raise UsageError(
            f"--kv-dtype {dtype_given}: SGLang caches DeepSeek V4 in fp8_e4m3 only "
            "(apply_deepseek_v4_defaults asserts it)"
        )
    cache_groups = [g.group for g in groups if g.group is not None]
    for g in cache_groups:
        if g.kind is MemoryKind.COMPRESSED and PAGE_SIZE % g.ratio:
            raise UsageError(f"{g.name}: SGLang's pages of {PAGE_SIZE} hold no whole c{g.ratio} entries")
    requests = (MAX_RUNNING_REQUESTS if max_running_requests is None else max_running_requests) // dp
    per_token = bytes_per_full_token(cache_groups, speculative)
    states = c128_state_bytes(cache_groups, requests, speculative)
    available = max(pool, 0)
    full = int(max(available - states, 0) / per_token) // PAGE_SIZE * PAGE_SIZE
    swa = int(full * SWA_FULL_TOKENS_RATIO) // PAGE_SIZE * PAGE_SIZE
    ring = RINGS[4][1 if speculative else 0]
    window = next(g.window for g in cache_groups if g.kind is MemoryKind.WINDOWED and g.window)
    L = max_model_len
    request_pages = -(-L // PAGE_SIZE)
    needed = math.ceil(request_pages * PAGE_SIZE * per_token) + states
    summary = (
        f"KV cache: max_total_num_tokens {full:,} per GPU ({full // PAGE_SIZE:,} pages of {PAGE_SIZE}), "
        f"{per_token:,.2f} B per full token after {states:,} B of c128 compressor states for "
        f"{requests:,} request slots"
    )
    notes = [
        (
            f"SGLang's DeepSeek V4 pools: an SWA ring of {swa:,} tokens (0.1 of the full pool), {full // 4:,} c4 "
            f"and {full // 128:,} c128 entries per layer, {swa // window * ring:,} c4 compressor-state rows"
        ),
    ]
    if page_size not in (None, PAGE_SIZE):
        notes.append(f"--page-size {page_size}: SGLang sets {PAGE_SIZE} for DeepSeek V4 whatever is given")
    notes.append(
        f"{release}'s default mem_fraction_static is applied to this pool; SGLang serves V4 from 0.5.14, "
        "whose default kimicount has not read: --mem-fraction-static or --kv-memory makes it exact"
    )
    sizes = f"full={full}, swa={swa}, c4={full // 4}, c128={full // 128}, c4_state={swa // window * ring}, c128_state=0"
    printed = (
        (
            f"DSV4 memory calculation: bytes_per_full_token={per_token:.2f}, available_bytes="
            f"{available / 2**30:.2f} GB, c128_state_fixed={states / 2**30:.2f} GB, full_token={full}"
        ),
        f"DSV4 pool sizes: {sizes}",
    )
    rows = tuple((pool.name, _pool_words(pool)) for pool in sglang_pools(cache_groups, PAGE_SIZE))
    return Packing(
        rule=f"SGLang's DSV4PoolConfigurator (main @ 003fca8) on {release}'s pool",
        dtype="fp8",
        page=PAGE_SIZE,
        page_bytes=math.ceil(PAGE_SIZE * per_token),
        pages=full // PAGE_SIZE,
        request_pages=request_pages,
        request_bytes=needed,
        tokens=full,
        longest=full,
        used_bytes=math.ceil(full * per_token) + states if full else 0,
        summary=summary,
        calculation=(
            f"Full tokens: int(({available:,} B − {states:,} B) ÷ {per_token!r} B) in pages of {PAGE_SIZE} = "
            f"{full:,}; a {L:,}-token request: {request_pages:,} pages, {needed:,} B with the c128 states"
        ),
        cap=MAX_RUNNING_REQUESTS if max_running_requests is None else None,
        notes=tuple(notes),
        printed=printed,
        rows=rows,
        figures={
            "page_size": PAGE_SIZE,
            "swa_full_tokens_ratio": SWA_FULL_TOKENS_RATIO,
            "bytes_per_full_token": per_token,
            "c128_state_fixed_bytes": states,
            "request_slots": requests,
            "full_max_total_num_tokens": full,
            "swa_max_total_num_tokens": swa,
            "c4_max_total_num_tokens": full // 4,
            "c128_max_total_num_tokens": full // 128,
            "c4_state_pool_size": swa // window * ring,
        },
    )


def _pool_words(pool: Pool) -> str:
    if pool.page_bytes is not None:
        return f"{pool.layers} layers, pages of {pool.per_page} × {pool.entry_bytes:,} B → {pool.page_bytes:,} B a layer"
    assert pool.ring is not None
    return f"{pool.layers} layers, a ring of {pool.ring[0]} × {pool.entry_bytes:,} B a request a layer"
