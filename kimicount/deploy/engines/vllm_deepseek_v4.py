"""vLLM's KV-cache rules for DeepSeek V4, as pure functions over a model's cache groups.

This is vLLM's rule, not a model's: how vLLM (the hybrid KV-cache manager of its DeepSeek V4 support,
as in v0.22, the release of issue #44376) pages the cache groups of kimicount.families.deepseek_v4,
packs them into one pool, and decides whether max_model_len fits. Read from vllm-project/vllm (read,
never shipped):

- vllm/v1/kv_cache_interface.py, MLAAttentionSpec and SlidingWindowMLASpec: storage_block_size =
  block_size // compress_ratio; real_page_size_bytes = storage_block_size × 584 for the fp8_ds_mla
  cache of model_version deepseek_v4, storage_block_size × head_size × dtype bytes otherwise;
  _apply_alignment_padding rounds a page up to a multiple of `alignment`. FullAttentionSpec
  .max_memory_usage_bytes = cdiv(max_model_len, block_size) × page; SlidingWindowSpec's = (cdiv(min(
  sliding_window − 1 + max_num_batched_tokens, max_model_len), block_size) + 1) × page (later releases
  name the budget max_in_flight_tokens). UniformTypeKVCacheSpecs.get_page_sizes, get_num_layer_tuples
  (the largest number of its layers of one page size), max_memory_usage_pages (the max of
  cdiv(max_memory_usage_bytes, page) over its layers);
- vllm/model_executor/layers/deepseek_v4_attention.py @ 0a291a2: a CSA or HCA layer's compressed KV is
  an MLAAttentionSpec(block_size = --block-size, compress_ratio, alignment 576); the CSA indexer's keys
  one of head_size 128 + 4 (uint8, alignment 576), whatever the indexer cache's dtype;
- vllm/v1/attention/backends/mla/sparse_swa.py @ 03dc564, DeepseekV4SWACache: every layer's window a
  SlidingWindowMLASpec(block_size 64, sliding_window, alignment 576);
- vllm/model_executor/layers/deepseek_compressor.py @ 0de10a2, CompressorStateCache: each compressor's
  state a SlidingWindowMLASpec(block_size 4 for ratio 4, 8 for ratio 128; sliding_window coff × ratio;
  head_size 2 × coff × head_dim in F32; alignment 576);
- vllm/v1/core/kv_cache_utils.py (v0.22's; its DeepSeek V4 functions read in a copy of that file
  and checked against vllm/v1/core/kv_cache_planning.py @ 4253bd4, where later trees moved them):
  group_and_unify_kv_cache_specs (the MLA specs one group; the sliding ones grouped by (block_size,
  sliding_window)), _get_kv_cache_groups_uniform_groups (each sliding layer's page padded to the
  nearest full-MLA page size at least as large; `num_layer_tuples` chosen by _approximate_gcd with
  the full-MLA group's tuples as lower bound; each sliding group split into cdiv(tuples,
  num_layer_tuples) groups), _max_memory_usage_bytes_from_groups ("Special case (only DeepseekV4 for
  now)": Σ over groups of num_layer_tuples × max_memory_usage_pages × Σ page sizes),
  _estimate_max_model_len_from_groups (binary search in [1, max_model_len]),
  _check_enough_kv_cache_memory (the "... GiB KV cache is needed" error, against the available
  memory itself: get_kv_cache_configs passes it unchanged; from 4253bd4 it plans against the
  available memory less one block id, the null block BlockPool holds back, which this rule, v0.22's,
  does not), _pool_bytes_per_block (num_blocks = memory // (Σ page sizes × num_layer_tuples)),
  get_max_concurrency_for_kv_cache_config and _report_kv_cache_config ("GPU KV cache size" =
  int(max_concurrency × max_model_len): "the total tokens of context the pool can hold at peak
  utilization", its comment says, because a window's blocks per request are capped).

vLLM caches V4 in fp8 only (DeepseekV4MLAAttention asserts "DeepseekV4 only supports fp8 kv-cache
format for now, got auto" when --kv-cache-dtype is not fp8): these rules take the fp8 groups
(kimicount.families.cache_groups(spec), the default). The planner's use of the rule (`pack`, a
Packing of one GPU's pool) and the releases it holds for (DEEPSEEK_V4_RULE) are at the end.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kimicount.cache_groups import COMPRESSOR_STATE, INDEX_KEYS, CacheGroup, MemoryKind
from kimicount.deploy.engines.base import Release, Ruled, rule_for
from kimicount.deploy.groups import Packing, PoolGroup
from kimicount.errors import UsageError, require_positive

#: FlashMLA needs every DeepSeek V4 page to be a multiple of 576 bytes (the alignment of every spec above).
ALIGNMENT = 576
#: The SWA window's block (DeepseekV4SWACache: 256 // 4, so that its page matches a C4 page).
SWA_BLOCK = 64
#: The compressor states' blocks, by ratio (CompressorStateCache).
STATE_BLOCKS = {4: 4, 128: 8}
#: vLLM's --block-size for DeepSeek V4 (DeepseekSparseSWABackend.get_preferred_block_size).
DEFAULT_BLOCK = 256
GIB = 2**30


def round_up(value: int, multiple: int) -> int:
    """vLLM's round_up: the least multiple of `multiple` at least `value`.

    >>> round_up(1168, 576)  # an HCA page: 2 entries of 584 B
    1728
    """
    return -(-value // multiple) * multiple


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LayerSpec:
    """One layer's KV-cache spec as vLLM makes it for DeepSeek V4: a full MLA spec (a compressed KV or
    the indexer's keys) or a sliding-window one (the window, a compressor's state)."""

    group: str  # the kimicount cache group it stands for
    layer: int
    sliding: bool
    block_size: int  # tokens per block
    storage_block: int  # entries per block: block_size // ratio for a compressed spec
    entry_bytes: int
    window: int | None = None
    #: Set when the grouping pads the page up to a full-MLA page size.
    padded_to: int | None = None

    @property
    def real_page(self) -> int:
        """storage_block × entry bytes. [bytes/page]"""
        return self.storage_block * self.entry_bytes

    @property
    def page(self) -> int:
        """The page as allocated: rounded up to 576 B, then (sliding specs) to a full-MLA page size.
        [bytes/page]

        >>> LayerSpec("CSA compressed KV", 2, False, 256, 64, 584).page  # 64 × 584 = 37,376 → 65 × 576
        37440
        """
        return self.padded_to if self.padded_to is not None else round_up(self.real_page, ALIGNMENT)

    def pages(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """The pages one request of max_model_len holds: every block of it (full), or the blocks of
        its window while a chunk of max_num_batched_tokens is computed, one more for a window that
        straddles a block (sliding). [pages/request]

        >>> LayerSpec("SWA window", 0, True, 64, 64, 584, window=128).pages(30_000, 16_384)  # cdiv(16,511, 64) + 1
        259
        """
        if not self.sliding:
            return cdiv(max_model_len, self.block_size)
        assert self.window is not None
        return cdiv(min(self.window - 1 + max_num_batched_tokens, max_model_len), self.block_size) + 1


def layer_specs(groups: Sequence[CacheGroup], block_size: int = DEFAULT_BLOCK) -> list[LayerSpec]:
    """Every layer's specs, from the cache groups (fp8): compressed KV and indexer keys as MLA specs of
    `block_size`, windows and compressor states as sliding ones of their own blocks.

    >>> from kimicount.families import cache_groups
    >>> from kimicount.models import known_model
    >>> specs = layer_specs(cache_groups(known_model("deepseek-v4-flash").spec()))
    >>> sorted({(s.group, s.block_size, s.storage_block, s.page) for s in specs})  # doctest: +NORMALIZE_WHITESPACE
    [('CSA compressed KV', 256, 64, 37440), ('CSA compressor state', 4, 4, 32832),
     ('CSA indexer compressor state', 4, 4, 8640), ('CSA indexer keys', 256, 64, 8640),
     ('HCA compressed KV', 256, 2, 1728), ('HCA compressor state', 8, 8, 32832),
     ('SWA window', 64, 64, 37440)]
    """
    require_positive("--block-size", block_size)
    specs = []
    for g in groups:
        if g.kind is MemoryKind.COMPRESSED:
            if block_size % g.ratio:
                raise UsageError(
                    f"--block-size {block_size}: vLLM stores block_size // {g.ratio} {g.name} entries "
                    f"a block; use a multiple of {g.ratio}"
                )
            entry = g.entry_bytes
            if g.content == INDEX_KEYS and entry < 132:  # vLLM allocates the fp8 keys for an fp4 cache too
                raise UsageError("vLLM's rule takes the fp8 indexer keys (it allocates them for fp4 as well)")
            specs += [LayerSpec(g.name, i, False, block_size, block_size // g.ratio, entry) for i in g.layers]
        elif g.kind is MemoryKind.WINDOWED:
            block = STATE_BLOCKS[g.ratio] if g.content == COMPRESSOR_STATE else SWA_BLOCK
            specs += [LayerSpec(g.name, i, True, block, block, g.entry_bytes, g.window) for i in g.layers]
        else:
            raise UsageError(f"{g.name}: a {g.kind.value} group is not one of DeepSeek V4's")
    return specs


@dataclass(frozen=True)
class VllmGroup:
    """One of vLLM's KV-cache groups: a block table shared by its layers' specs."""

    specs: tuple[LayerSpec, ...]

    @property
    def sliding(self) -> bool:
        return self.specs[0].sliding

    @property
    def layer_tuples(self) -> int:
        """get_num_layer_tuples: its most layers of one page size."""
        return Counter(s.page for s in self.specs).most_common(1)[0][1]

    def pages(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """max_memory_usage_pages: the most pages one request holds in any of its layers."""
        return max(s.pages(max_model_len, max_num_batched_tokens) for s in self.specs)

    @property
    def names(self) -> str:
        return " + ".join(dict.fromkeys(s.group for s in self.specs))


def approximate_gcd(values: Sequence[int], lower_bound: int) -> int:
    """vLLM's _approximate_gcd: the chunk d in [lower_bound, max(values)] that rounds the values up to
    multiples with the least padding, ties to the larger d.

    >>> approximate_gcd([21, 43, 21, 20], 21)  # V4-Flash: 5 of padding with 22 (21 with 21)
    22
    """
    best_d, best_pad = max(1, lower_bound), None
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_d, best_pad = d, pad
    return best_d


@dataclass(frozen=True)
class VllmLayout:
    """vLLM's groups of a DeepSeek V4 model and the shared pool they draw from: `page_sizes` the
    full-MLA group's (one block id costs their sum in each of `layer_tuples` tensors)."""

    groups: tuple[VllmGroup, ...]
    page_sizes: tuple[int, ...]
    layer_tuples: int

    @property
    def tuple_bytes(self) -> int:
        """Σ page sizes: one block id of one layer tuple. [bytes]"""
        return sum(self.page_sizes)

    @property
    def block_bytes(self) -> int:
        """_pool_bytes_per_block: what one block id costs in the pool. [bytes/block]"""
        return self.tuple_bytes * self.layer_tuples

    def pages(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Block ids one request of max_model_len takes, over every group. [blocks/request]"""
        return sum(g.pages(max_model_len, max_num_batched_tokens) for g in self.groups)

    def groups_json(self, max_model_len: int, max_num_batched_tokens: int) -> list[dict[str, Any]]:
        """The groups for --json (kv-cache's and plan's): what each holds, its block, layers, layer
        tuples, page sizes and the pages one request of max_model_len takes in it."""
        return [
            {
                "holds": g.names,
                "sliding": g.sliding,
                "block_size": g.specs[0].block_size,
                "layers": len(g.specs),
                "layer_tuples": g.layer_tuples,
                "page_bytes": sorted({s.page for s in g.specs}, reverse=True),
                "pages_per_request": g.pages(max_model_len, max_num_batched_tokens),
            }
            for g in self.groups
        ]

    def memory_for(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """_max_memory_usage_bytes_from_groups: the KV-cache memory one request of max_model_len needs
        ("… GiB KV cache is needed"). [bytes]"""
        return self.block_bytes * self.pages(max_model_len, max_num_batched_tokens)

    def estimate_max_model_len(self, available: int, max_model_len: int, max_num_batched_tokens: int) -> int:
        """_estimate_max_model_len_from_groups: the longest length in [1, max_model_len] whose memory
        fits `available` bytes, by vLLM's binary search; 0 when one token does not fit. [tokens]"""
        if self.memory_for(1, max_num_batched_tokens) > available:
            return 0
        left, right, result = 1, max_model_len, 1
        while left <= right:
            mid = (left + right) // 2
            if self.memory_for(mid, max_num_batched_tokens) <= available:
                result, left = mid, mid + 1
            else:
                right = mid - 1
        return result

    def num_blocks(self, available: int) -> int:
        """Block ids the pool holds: memory // (Σ page sizes × layer tuples). [blocks]"""
        return available // self.block_bytes

    def max_concurrency(self, available: int, max_model_len: int, max_num_batched_tokens: int) -> float:
        """get_max_concurrency_for_kv_cache_config: block ids ÷ those one request of max_model_len
        takes. [requests]"""
        return self.num_blocks(available) / self.pages(max_model_len, max_num_batched_tokens)

    def kv_cache_size_tokens(self, available: int, max_model_len: int, max_num_batched_tokens: int) -> int:
        """What vLLM prints as "GPU KV cache size: N tokens": int(max_concurrency × max_model_len), not
        the pool ÷ bytes per token (issue #51041): most of a V4 request's pages do not grow with its
        length (windows and states), so N changes with max_model_len for the same pool. [tokens]"""
        return int(self.max_concurrency(available, max_model_len, max_num_batched_tokens) * max_model_len)


def vllm_layout(groups: Sequence[CacheGroup], block_size: int = DEFAULT_BLOCK) -> VllmLayout:
    """vLLM's grouping of DeepSeek V4's layers: one full-MLA group, and each (block, window) kind of
    sliding layer padded to the full-MLA page sizes and split to `layer_tuples` tuples.

    >>> from kimicount.families import cache_groups
    >>> from kimicount.models import known_model
    >>> layout = vllm_layout(cache_groups(known_model("deepseek-v4-flash").spec()))
    >>> [(g.names, g.layer_tuples) for g in layout.groups]  # doctest: +NORMALIZE_WHITESPACE
    [('CSA compressed KV + CSA indexer keys + HCA compressed KV', 21), ('SWA window', 22),
     ('SWA window', 21), ('CSA compressor state + CSA indexer compressor state', 21),
     ('HCA compressor state', 20)]
    >>> layout.page_sizes, layout.layer_tuples, layout.block_bytes
    ((37440, 8640, 1728), 22, 1051776)
    """
    specs = layer_specs(groups, block_size)
    full = [s for s in specs if not s.sliding]
    if not full:
        raise UsageError("vLLM's DeepSeek V4 layout needs compressed layers (its full-MLA group)")
    page_sizes = tuple(sorted({s.page for s in full}, reverse=True))
    sliding: dict[tuple[int, int | None], list[LayerSpec]] = defaultdict(list)
    for s in specs:
        if s.sliding:
            sliding[s.block_size, s.window].append(s)
    full_group = VllmGroup(tuple(full))
    padded_groups = []
    for members in sliding.values():
        padded = []
        for s in members:
            candidates = [p for p in page_sizes if p >= s.page]
            if not candidates:
                raise UsageError(f"{s.group}: a {s.page:,}-B page is larger than every full-MLA page")
            padded.append(LayerSpec(**{**s.__dict__, "padded_to": min(candidates)}))
        padded_groups.append(padded)
    tuples = [full_group.layer_tuples] + [
        Counter(s.page for s in p).most_common(1)[0][1] for p in padded_groups
    ]
    layer_tuples = approximate_gcd(tuples, tuples[0])
    result = [full_group]
    for padded in padded_groups:
        by_size: dict[int, list[LayerSpec]] = defaultdict(list)
        for s in padded:
            by_size[s.page].append(s)
        per_size = {len(v) for v in by_size.values()}
        if len(per_size) != 1:  # vLLM asserts each page size has as many layers
            raise UsageError(f"{padded[0].group}: vLLM needs as many layers of each page size")
        count = per_size.pop()
        rows = list(zip(*by_size.values()))
        splits = cdiv(count, layer_tuples)
        result += [VllmGroup(tuple(s for row in rows[i::splits] for s in row)) for i in range(splits)]
    return VllmLayout(tuple(result), page_sizes, max(g.layer_tuples for g in result))


def format_gib(value: int) -> str:
    """A size as vLLM's format_gib prints it: GiB to two decimals.

    >>> format_gib(7_152_076_800)
    '6.66'
    """
    return f"{value / GIB:.2f}"


def not_enough_memory_line(
    layout: VllmLayout, available: int, max_model_len: int, max_num_batched_tokens: int
) -> str | None:
    """The line _check_enough_kv_cache_memory raises when one request of max_model_len does not fit,
    None when it does."""
    needed = layout.memory_for(max_model_len, max_num_batched_tokens)
    if needed <= available:
        return None
    estimate = layout.estimate_max_model_len(available, max_model_len, max_num_batched_tokens)
    return (
        f"To serve at least one request with the model's max seq len ({max_model_len}), "
        f"({format_gib(needed)} GiB KV cache is needed, which is larger than the available KV cache "
        f"memory ({format_gib(available)} GiB). Based on the available memory, the estimated maximum "
        f"model length is {estimate}."
    )


# --- the planner's use of the rule ---------------------------------------------------------------

#: vLLM's DeepSeek V4 rule, by release: read as in v0.22, the release of issue #44376 whose two
#: printed figures it reproduces (tests/test_vllm_deepseek_v4.py); vLLM served V4 from 0.20-dev
#: builds, whose rule kimicount has not read, and after 0.22 the check keeps a null block back.
DEEPSEEK_V4_RULE: tuple[Ruled[str | None], ...] = (
    Ruled(None, "no DeepSeek V4 rule read before v0.22 (issue #44376's release)", until="0.22.0"),
    Ruled(
        "block ids of --block-size tokens shared by every group: the compressed KV and indexer keys in "
        "block_size ÷ ratio entries a page, the windows in 64-token and the compressor states in 4- and "
        "8-token blocks, every page padded to 576 B and then to a full-MLA page size; one request takes "
        "each group's most pages over its layers",
        "vllm/v1/core/kv_cache_utils.py (v0.22) _get_kv_cache_groups_uniform_groups, "
        "_max_memory_usage_bytes_from_groups, _estimate_max_model_len_from_groups, _report_kv_cache_config; "
        "vllm/model_executor/layers/deepseek_v4_attention.py @ 0a291a2; checked on issue #44376's run",
        since="0.22.0",
    ),
)


def pack(
    pool: int,
    groups: Sequence[PoolGroup],
    *,
    release: Release,
    block_size: int | None,
    max_model_len: int,
    max_num_batched_tokens: int,
    batched_given: bool,
    dtype_given: str | None,
) -> Packing:
    """One GPU's pool of `pool` bytes under vLLM's DeepSeek V4 rule at `release`: block ids of
    `block_size` tokens (256, the backend's preferred size, unless given), those one request of
    max_model_len takes with chunks of max_num_batched_tokens, and what vLLM reports of them.

    >>> from kimicount.deploy.engines.base import Version
    >>> from kimicount.deploy.groups import model_groups
    >>> from kimicount.kvcache import Layout, Workload
    >>> from kimicount.models import known_model
    >>> flash = known_model("deepseek-v4-flash").spec()
    >>> groups = model_groups(flash, Layout.latent, 1, 43, Workload(30_000))
    >>> p = pack(5_554 * 1_051_776, groups, release=Release("vLLM", Version.parse("0.22.0")), block_size=256,
    ...          max_model_len=30_000, max_num_batched_tokens=16_384, batched_given=True, dtype_given="fp8")
    >>> p.pages, p.request_pages, p.request_bytes, p.longest  # "6.66 GiB ... is 13528"
    (5554, 6800, 7152076800, 13528)
    """
    if rule_for(DEEPSEEK_V4_RULE, release.version).value is None:
        raise UsageError(
            f"{release}: kimicount reads vLLM's DeepSeek V4 KV-cache rule from 0.22.0 (the release of issue "
            "#44376); plan it with --engine vllm==0.22.0"
        )
    if dtype_given not in (None, "fp8"):
        raise UsageError(
            f"--kv-dtype {dtype_given}: vLLM caches DeepSeek V4 in fp8 only (its attention asserts "
            '"DeepseekV4 only supports fp8 kv-cache format for now"); use --kv-cache-dtype fp8'
        )
    block = DEFAULT_BLOCK if block_size is None else block_size
    cache_groups = [g.group for g in groups if g.group is not None]
    layout = vllm_layout(cache_groups, block)
    L, B = max_model_len, max_num_batched_tokens
    usable = max(pool, 0)
    blocks = layout.num_blocks(usable)
    request = layout.pages(L, B)
    needed = layout.memory_for(L, B)
    longest = layout.estimate_max_model_len(usable, L, B)
    tokens = layout.kv_cache_size_tokens(usable, L, B) if blocks else 0
    full = layout.groups[0].pages(L, B)
    summary = (
        f"KV cache: {blocks:,} block ids of {layout.block_bytes:,} B per GPU ({block} tokens in {len(layout.groups)} "
        f"groups, {layout.layer_tuples} layer tuples); a {L:,}-token request takes {request:,}: {full:,} of "
        f"compressed entries, {request - full:,} of windows and compressor states"
    )
    why = (
        f'vLLM\'s "GPU KV cache size" is {tokens:,} tokens: max concurrency × max-model-len ({blocks:,} ÷ '
        f"{request:,} × {L:,}; issue #51041), not the pool ÷ bytes per token, since windows and states take "
        f"as many block ids at any length from {B + 127:,} tokens on"
    )
    line = not_enough_memory_line(layout, usable, L, B)
    notes = [why] if line is None else []  # vLLM prints its "GPU KV cache size" only when it starts
    printed = (
        [line]
        if line is not None
        else [
            f"Available KV cache memory: {format_gib(usable)} GiB",
            f"GPU KV cache size: {tokens:,} tokens",
            f"Maximum concurrency for {L:,} tokens per request: {layout.max_concurrency(usable, L, B):.2f}x",
        ]
    )
    if line is not None and pool > 0:
        notes.insert(0, f'{release} would stop: "{line}"')
    if not batched_given:
        notes.append(
            f"--max-num-batched-tokens {B:,} (vllm serve's default here; the LLM class's is 16,384) sizes the "
            "windows' and states' blocks: give the one you run"
        )
    if dtype_given is None:
        notes.append('vLLM needs --kv-cache-dtype fp8 for DeepSeek V4 ("auto" fails its fp8 assertion)')
    rows = tuple(
        (
            group.names,
            (f"sliding window {group.specs[0].window}" if group.sliding else "compressed, full-MLA")
            + f": blocks of {group.specs[0].block_size} tokens, pages "
            + " + ".join(f"{p:,}" for p in sorted({s.page for s in group.specs}, reverse=True))
            + f" B, {group.layer_tuples} layer tuples, {group.pages(L, B):,} block ids a request",
        )
        for group in layout.groups
    )
    return Packing(
        rule=f"vLLM's DeepSeek V4 KV-cache rule ({release})",
        dtype="fp8",
        page=block,
        page_bytes=layout.block_bytes,
        pages=blocks,
        request_pages=request,
        request_bytes=needed,
        tokens=tokens,
        longest=longest,
        used_bytes=blocks * layout.block_bytes,
        summary=summary,
        calculation=(
            f"Block ids: floor({usable:,} B ÷ {layout.block_bytes:,} B) = {blocks:,}; a {L:,}-token request: "
            f"{request:,} × {layout.block_bytes:,} B = {needed:,} B"
        ),
        notes=tuple(notes),
        printed=tuple(printed),
        rows=rows,
        figures={
            "block_size": block,
            "max_num_batched_tokens": B,
            "page_sizes": list(layout.page_sizes),
            "layer_tuples": layout.layer_tuples,
            "block_bytes": layout.block_bytes,
            "num_blocks": blocks,
            "pages_per_request": request,
            "memory_bytes": needed,
            "estimated_max_model_len": longest,
            "kv_cache_size_tokens": tokens,
            "groups": layout.groups_json(L, B),
        },
    )
