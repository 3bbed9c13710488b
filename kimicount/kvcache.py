"""KV-cache formulas: bytes per token per layer for each layout an inference engine may use.

Multi-head latent attention caches one small latent per token for all heads; engines that expand it
back into per-head keys and values before caching ("naive", "flash") pay for every head. FORMULAS
says exactly what each layout stores, in one entry per layout. `e` is the element size of the cache
dtype in bytes.

    >>> [bytes_per_token_per_layer(k2.mla, layout, 2) * 61 for layout in DEFAULT_LAYOUTS]  # DESIGN.md
    [2498560, 2998272, 70272]

The formulas read an MLA sub-spec (kimicount.spec.MlaSpec: a model's MLA sizes, whatever its family);
a report reads the model's cache groups (kimicount.cache_groups): the per-token MLA group in every
layout, and the per-sequence state of a hybrid model's KDA layers beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from kimicount.cache_groups import CONV, CacheGroup, StateTensor, per_token_group, state_groups
from kimicount.errors import ConfigError, UsageError, require_positive
from kimicount.options import parse_dtype
from kimicount.spec import MAX_SIZE, AttentionHeads, MlaSpec, ModelSpec


class Layout(str, Enum):
    naive = "naive"
    flash = "flash"
    latent = "latent"
    flashmla_fp8 = "flashmla-fp8"


#: Cache dtypes and their element size in bytes.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}

#: FP8 caches (FlashMLA, the V3.2 indexer) keep one F32 scale per this many values.
FP8_SCALE_GROUP = 128


def default_dtype(spec) -> str:
    """The cache dtype an engine uses by default: the model's own (config `torch_dtype`).

    >>> default_dtype(k2)
    'bf16'
    """
    return parse_dtype(spec.torch_dtype, "torch_dtype")  # spec refuses any other torch_dtype


def element_bytes(dtype: str, option: str = "--dtype") -> int:
    """Bytes per cached element; a clear error naming `option` for a dtype that is not a cache dtype."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        expected = ", ".join(DTYPE_BYTES)
        raise UsageError(f"{option} '{dtype}': unknown cache dtype (expected one of: {expected})") from None


# --- the formulas: what each layout stores, in config keys, in numbers and in bytes ----------------


@dataclass(frozen=True)
class Formula:
    """One thing cached per token per layer. `text` gives its size in config keys and `note` says in a
    few words why it is that big; `size(spec, e)` gives the same size with the model's numbers (the
    calculation) and in bytes, computed side by side from the same values (tests evaluate each
    calculation against its bytes)."""

    text: str
    note: str
    size: Callable[[MlaSpec, int], tuple[str, int]]


def _keys_and_values(spec: MlaSpec, e: int, value_width: int) -> tuple[str, int]:
    """Per head, a key of qk_nope_head_dim + qk_rope_head_dim and a value `value_width` wide."""
    heads, nope, rope = spec.num_attention_heads, spec.qk_nope_head_dim, spec.qk_rope_head_dim
    return f"{heads} × ({nope} + {rope} + {value_width}) × {e}", heads * (nope + rope + value_width) * e


def _fp8_with_scales(width: int) -> tuple[str, int]:
    """`width` fp8 values (1 byte each) and one F32 scale (4 bytes) per FP8_SCALE_GROUP of them."""
    scales = math.ceil(width / FP8_SCALE_GROUP)
    return f"{width} × 1 + {scales} × 4", width + scales * 4


def naive_size(spec: MlaSpec, e: int) -> tuple[str, int]:
    """Every head's key (qk_nope_head_dim + qk_rope_head_dim) and value (v_head_dim). [bytes/token/layer]

    >>> naive_size(k2.mla, 2)  # × 61 layers = 2,498,560 B per token (DESIGN.md)
    ('64 × (128 + 64 + 128) × 2', 40960)
    """
    return _keys_and_values(spec, e, spec.v_head_dim)


def flash_size(spec: MlaSpec, e: int) -> tuple[str, int]:
    """As naive, but each value padded to the key width first (flash-attention kernels want equal head
    dims): values max(qk_head_dim, v_head_dim) wide. [bytes/token/layer]

    >>> flash_size(k2.mla, 2)  # × 61 layers = 2,998,272 B per token (DESIGN.md)
    ('64 × (128 + 64 + 192) × 2', 49152)
    """
    return _keys_and_values(spec, e, max(spec.qk_head_dim, spec.v_head_dim))


def latent_size(spec: MlaSpec, e: int) -> tuple[str, int]:
    """The key–value latent (kv_lora_rank, one per token for all heads) and the shared rotary key
    (qk_rope_head_dim). [bytes/token/layer]

    >>> latent_size(k2.mla, 2)  # × 61 layers = 70,272 B per token (DESIGN.md)
    ('(512 + 64) × 2', 1152)
    """
    rank, rope = spec.kv_lora_rank, spec.qk_rope_head_dim
    return f"({rank} + {rope}) × {e}", (rank + rope) * e


def flashmla_fp8_size(spec: MlaSpec, e: int) -> tuple[str, int]:
    """FlashMLA's FP8 cache: the latent in fp8 with one F32 scale per 128 values, the rotary key in bf16.
    A format of its own: `e` is not used. [bytes/token/layer]

    >>> flashmla_fp8_size(k2.mla, 2)  # DESIGN.md: 656 B per token per layer
    ('512 × 1 + 4 × 4 + 64 × 2', 656)
    """
    latent, latent_bytes = _fp8_with_scales(spec.kv_lora_rank)
    rope = spec.qk_rope_head_dim
    return f"{latent} + {rope} × 2", latent_bytes + rope * 2


def indexer_keys_size(spec: MlaSpec, e: int) -> tuple[str, int]:
    """DeepSeek-V3.2's lightning indexer caches one key of index_head_dim per token, in fp8 with one F32
    scale per 128 values, whatever `e` is; ('', 0) without an indexer. [bytes/token/layer]

    >>> indexer_keys_size(k2.mla, 2)  # Kimi K2 has no indexer; DeepSeek-V3.2: ('128 × 1 + 1 × 4', 132)
    ('', 0)
    """
    return ("", 0) if spec.indexer is None else _fp8_with_scales(spec.indexer.head_dim)


#: Every layout's formula in one table: in config keys, in a few words, and its calculation and bytes.
FORMULAS = {
    Layout.naive: Formula(
        "num_attention_heads × (qk_nope_head_dim + qk_rope_head_dim + v_head_dim) × e",
        "every head's key and value",
        naive_size,
    ),
    Layout.flash: Formula(
        "num_attention_heads × (qk_nope_head_dim + qk_rope_head_dim + max(qk_head_dim, v_head_dim)) × e",
        "each head's value padded to the key width",
        flash_size,
    ),
    Layout.latent: Formula(
        "(kv_lora_rank + qk_rope_head_dim) × e",
        "one latent and one rotary key for all heads",
        latent_size,
    ),
    Layout.flashmla_fp8: Formula(
        "kv_lora_rank × 1 + ceil(kv_lora_rank / 128) × 4 + qk_rope_head_dim × 2",
        "fp8 latent, one F32 scale per 128 values, bf16 rotary key (whatever --dtype)",
        flashmla_fp8_size,
    ),
}

#: The lightning indexer's keys (DeepSeek-V3.2): cached beside the attention cache in every layout.
INDEXER_KEYS = Formula(
    "index_head_dim × 1 + ceil(index_head_dim / 128) × 4",
    "fp8 keys, one F32 scale per 128; added to every layout",
    indexer_keys_size,
)


def bytes_per_token_per_layer(spec: MlaSpec, layout: Layout, e: int) -> int:
    """The attention cache of one layout (without the indexer keys), in bytes per token per layer."""
    return FORMULAS[layout].size(spec, e)[1]


def splits_across_ranks(layout: Layout) -> bool:
    """Whether tensor parallelism divides this layout's cache: per-head keys and values go with their
    heads; the latent (and FlashMLA's fp8 latent) belongs to no head, so every rank holds all of it."""
    return layout in (Layout.naive, Layout.flash)


# --- a cache for a workload -----------------------------------------------------------------------

#: What `kimicount kv-cache` shows unless --layout names others: the three layouts of DESIGN.md.
DEFAULT_LAYOUTS = (Layout.naive, Layout.flash, Layout.latent)


@dataclass(frozen=True)
class Workload:
    """What is cached: `batch` sequences of `tokens` each, in pages of `block_size` tokens (an engine
    allocates whole pages per sequence), over `tp` tensor-parallel ranks."""

    tokens: int
    batch: int = 1
    block_size: int = 1
    tp: int = 1

    @property
    def tokens_per_sequence(self) -> int:
        """Allocated per sequence: ceil(tokens / block_size) × block_size. [tokens]

        >>> Workload(tokens=1000, block_size=64).tokens_per_sequence  # 16 pages of 64
        1024
        """
        return -(-self.tokens // self.block_size) * self.block_size

    @property
    def allocated_tokens(self) -> int:
        """tokens_per_sequence × batch. [tokens]"""
        return self.tokens_per_sequence * self.batch

    @property
    def wasted_tokens(self) -> int:
        """Allocated but holding no token: the unused tail of each sequence's last page. [tokens]"""
        return (self.tokens_per_sequence - self.tokens) * self.batch


@dataclass(frozen=True)
class CacheLine:
    """One thing cached per token in every layer: a layout's keys and values, or the indexer's keys.

    `ranks` is how many tensor-parallel ranks divide it: tp for per-head caches, 1 for a cache every
    rank holds whole. `formula` gives bytes_per_token_per_layer in config keys, `calculation` in numbers,
    `note` why it is that big (from its Formula).
    """

    bytes_per_token_per_layer: int
    layers: int
    ranks: int = 1
    formula: str = ""
    calculation: str = ""
    note: str = ""

    @property
    def bytes_per_token(self) -> int:
        """bytes_per_token_per_layer × layers. [bytes/token]"""
        return self.bytes_per_token_per_layer * self.layers

    @property
    def bytes_per_token_per_gpu(self) -> int:
        """What one rank holds per token; exact, since tp divides the heads. [bytes/token]"""
        return self.bytes_per_token // self.ranks


@dataclass(frozen=True)
class LayoutCache:
    """A layout's whole cache for a workload: its attention keys and values, plus the lightning
    indexer's keys on models that have one (they are cached whatever the layout)."""

    layout: Layout
    workload: Workload
    attention: CacheLine
    indexer: CacheLine | None = None

    @property
    def lines(self) -> tuple[CacheLine, ...]:
        return (self.attention,) if self.indexer is None else (self.attention, self.indexer)

    @property
    def bytes_per_token_per_layer(self) -> int:
        """[bytes/token/layer], the indexer keys included."""
        return sum(line.bytes_per_token_per_layer for line in self.lines)

    @property
    def bytes_per_token(self) -> int:
        """[bytes/token] over all layers, the indexer keys included."""
        return sum(line.bytes_per_token for line in self.lines)

    @property
    def bytes_per_token_per_gpu(self) -> int:
        """[bytes/token] on each tensor-parallel rank."""
        return sum(line.bytes_per_token_per_gpu for line in self.lines)

    @property
    def total_bytes(self) -> int:
        """One copy of the cache: bytes_per_token × allocated tokens (pages, all sequences). [bytes]"""
        return self.bytes_per_token * self.workload.allocated_tokens

    @property
    def wasted_bytes(self) -> int:
        """The part of total_bytes in unused page tails. [bytes]"""
        return self.bytes_per_token * self.workload.wasted_tokens

    @property
    def bytes_per_gpu(self) -> int:
        """What each tensor-parallel rank holds: bytes_per_token_per_gpu × allocated tokens. [bytes]"""
        return self.bytes_per_token_per_gpu * self.workload.allocated_tokens

    @property
    def bytes_all_gpus(self) -> int:
        """bytes_per_gpu × tp: a replicated cache is paid for on every rank. [bytes]"""
        return self.bytes_per_gpu * self.workload.tp

    def at(self, tokens: int, batch: int | None = None) -> LayoutCache:
        """The same layout for another number of tokens (and sequences)."""
        batch = self.workload.batch if batch is None else batch
        return replace(self, workload=replace(self.workload, tokens=tokens, batch=batch))

    def max_tokens(self, budget: int) -> int:
        """The most tokens whose pages fit in `budget` bytes per GPU, in whole pages:
        budget // (bytes_per_token_per_gpu × block_size) × block_size. [tokens]"""
        page = self.bytes_per_token_per_gpu * self.workload.block_size
        return budget // page * self.workload.block_size

    def max_sequences(self, budget: int) -> int:
        """The most sequences of the workload's tokens (each rounded up to whole pages) that fit in
        `budget` bytes per GPU. [sequences]"""
        return budget // (self.bytes_per_token_per_gpu * self.workload.tokens_per_sequence)


#: The state dtypes vLLM's --mamba-cache-dtype and --mamba-ssm-cache-dtype take (vllm/config/cache.py
#: @ 002f10e, line 61: MambaDType = Literal["auto", "float32", "float16", "bfloat16"]), as cache dtypes.
MAMBA_DTYPES = {"auto": None, "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def parse_mamba_dtype(name: str, option: str) -> str | None:
    """A state dtype as the engines spell it (auto, float32, float16, bfloat16; bf16 and the like too),
    as a cache dtype; None for auto.

    >>> parse_mamba_dtype("float32", "--mamba-ssm-dtype"), parse_mamba_dtype("auto", "--mamba-cache-dtype")
    ('fp32', None)
    """
    if name in MAMBA_DTYPES:
        return MAMBA_DTYPES[name]
    if name in DTYPE_BYTES and name != "fp8":
        return name
    expected = ", ".join(MAMBA_DTYPES)
    raise UsageError(f"{option} '{name}': unknown state dtype (expected one of: {expected})")


@dataclass(frozen=True)
class StatePart:
    """One state tensor of one layer on one rank: its shape, dtype and bytes."""

    tensor: StateTensor
    shape: tuple[int, ...]
    dtype: str

    @property
    def bytes(self) -> int:
        """[bytes/sequence/layer]"""
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]

    @property
    def calculation(self) -> str:
        """The shape and element size in numbers: '3 × 12,288 × 2'."""
        return " × ".join(f"{d:,}" for d in (*self.shape, DTYPE_BYTES[self.dtype]))


@dataclass(frozen=True)
class StateCache:
    """A per-sequence group's state for a workload: the same bytes for every sequence, whatever its
    length; each tensor divided over the tensor-parallel ranks as the engines shard it (the KDA heads
    and the convolution channels go with the attention's heads)."""

    group: CacheGroup
    conv_dtype: str
    ssm_dtype: str
    workload: Workload

    def parts(self, tp: int | None = None) -> tuple[StatePart, ...]:
        """Each state tensor on one of `tp` ranks (the workload's tp by default)."""
        tp = self.workload.tp if tp is None else tp
        return tuple(
            StatePart(t, t.shape(tp), self.conv_dtype if t.holds == CONV else self.ssm_dtype)
            for t in self.group.state
        )

    @property
    def layers(self) -> int:
        return len(self.group.layers)

    @property
    def bytes_per_sequence_per_layer(self) -> int:
        """The whole state of one layer (on one GPU, tp = 1). [bytes/sequence/layer]"""
        return sum(part.bytes for part in self.parts(1))

    @property
    def bytes_per_sequence(self) -> int:
        """[bytes/sequence] over the group's layers."""
        return self.bytes_per_sequence_per_layer * self.layers

    @property
    def bytes_per_sequence_per_gpu(self) -> int:
        """What one tensor-parallel rank holds per sequence. [bytes/sequence]"""
        return sum(part.bytes for part in self.parts()) * self.layers

    @property
    def total_bytes(self) -> int:
        """bytes_per_sequence × batch. [bytes]"""
        return self.bytes_per_sequence * self.workload.batch

    @property
    def bytes_per_gpu(self) -> int:
        """bytes_per_sequence_per_gpu × batch. [bytes]"""
        return self.bytes_per_sequence_per_gpu * self.workload.batch


@dataclass(frozen=True)
class KvCacheReport:
    """The KV cache of one model for one workload, in each layout asked for.

    `latent` is always computed: every layout is compared with it. `mtp_layers` is the number of
    multi-token-prediction layers counted in `layers` (0 unless asked for and the model has them).
    `layers` are the per-token (MLA) group's; a hybrid model's per-sequence state is in `states`.
    """

    spec: ModelSpec
    dtype: str
    workload: Workload
    layers: int
    mtp_layers: int
    include_mtp: bool
    caches: tuple[LayoutCache, ...]
    latent: LayoutCache
    budget: int | None = None
    states: tuple[StateCache, ...] = ()

    @property
    def state_total_bytes(self) -> int:
        """Every sequence's state, all per-sequence groups: tp = 1. [bytes]"""
        return sum(state.total_bytes for state in self.states)

    @property
    def state_bytes_per_sequence(self) -> int:
        """[bytes/sequence]"""
        return sum(state.bytes_per_sequence for state in self.states)

    @property
    def state_bytes_per_sequence_per_gpu(self) -> int:
        """[bytes/sequence] on one tensor-parallel rank."""
        return sum(state.bytes_per_sequence_per_gpu for state in self.states)

    def total_with_state(self, cache: LayoutCache) -> int:
        """A layout's per-token cache of every sequence plus every sequence's state:
        tokens × bytes per token + sequences × state per sequence. [bytes]"""
        return cache.total_bytes + self.state_total_bytes

    def break_even_tokens(self, cache: LayoutCache) -> float | None:
        """The context at which one sequence's per-token cache in this layout equals its state:
        state per sequence ÷ bytes per token. None without a state. [tokens]"""
        if not self.states:
            return None
        return self.state_bytes_per_sequence / cache.bytes_per_token

    @property
    def indexer(self) -> CacheLine | None:
        """The indexer keys' line (the same in every layout); None without an indexer."""
        return self.latent.indexer

    @property
    def indexer_total_bytes(self) -> int:
        """The indexer keys' share of every layout's total_bytes; 0 without an indexer. [bytes]"""
        return 0 if self.indexer is None else self.indexer.bytes_per_token * self.workload.allocated_tokens

    @property
    def element_bytes(self) -> int:
        """e: bytes per cached element of `dtype`."""
        return element_bytes(self.dtype)

    def ratio_to_latent(self, cache: LayoutCache) -> float:
        """How many times the latent's bytes this layout takes (naive, Kimi K2: 2,498,560 / 70,272)."""
        return cache.bytes_per_token / self.latent.bytes_per_token

    def ratio_to_latent_per_gpu(self, cache: LayoutCache) -> float:
        """The same on one tensor-parallel rank, where only per-head caches are divided by tp."""
        return cache.bytes_per_token_per_gpu / self.latent.bytes_per_token_per_gpu


def cache_line(formula: Formula, spec: MlaSpec, e: int, layers: int, ranks: int) -> CacheLine:
    """What `formula` caches for `spec` at element size `e`, over `layers` layers and `ranks` ranks."""
    calculation, size = formula.size(spec, e)
    return CacheLine(size, layers, ranks, formula.text, calculation, formula.note)


def layout_cache(
    spec: MlaSpec,
    layout: Layout,
    e: int,
    layers: int,
    workload: Workload,
    indexer_layers: int | None = None,
) -> LayoutCache:
    """One layout of `spec` at element size `e` over `layers` layers, with the indexer keys if any:
    on `indexer_layers` of them (every one by default; GLM-5.2's shared layers have none, see
    layers_with_indexer)."""
    ranks = workload.tp if splits_across_ranks(layout) else 1
    attention = cache_line(FORMULAS[layout], spec, e, layers, ranks)
    if indexer_layers is None:
        indexer_layers = layers
    indexer = None if spec.indexer is None else cache_line(INDEXER_KEYS, spec, e, indexer_layers, 1)
    return LayoutCache(layout, workload, attention, indexer)


def layers_with_indexer(spec: ModelSpec, layers: int) -> int:
    """How many of the first `layers` layers (main layers, then MTP) cache indexer keys: every layer of
    DeepSeek-V3.2, GLM-5 and 5.1; GLM-5.2's "full" layers and its MTP layer, as vLLM (deepseek_v2.py at
    002d607: a skip_topk layer builds no Indexer, so no DeepseekV32IndexerCache of 128 + 4 bytes) and
    llama.cpp (PR #26474) and ik_llama.cpp (PR #2093) allocate it. SGLang's NSATokenToKVPool
    (mem_cache/memory_pool.py: index_k_with_scale_buffer `for _ in range(layer_num)`) keeps one indexer
    buffer per layer, shared ones too (its NPU pool compacts them, PR #38250). [layers]

    >>> layers_with_indexer(k2, 61)  # no indexer
    0
    """
    if spec.indexer is None:
        return 0
    if spec.indexer.layers is None:
        return layers
    main = min(layers, spec.num_hidden_layers)
    return sum(1 for layer in spec.indexer.layers if layer < main) + layers - main


def kv_cache_report(
    spec: ModelSpec,
    *,
    tokens: int | None = None,
    batch: int = 1,
    dtype: str | None = None,
    layouts: Sequence[Layout] = (),
    block_size: int = 1,
    tp: int = 1,
    include_mtp: bool = False,
    budget: int | None = None,
    conv_dtype: str | None = None,
    ssm_dtype: str | None = None,
) -> KvCacheReport:
    """Validate the options and size the cache in each layout (DEFAULT_LAYOUTS when none is named).

    `tokens` defaults to the config's max_position_embeddings, `dtype` to its torch_dtype; `budget` is
    the memory per GPU in bytes. Bad values raise UsageError naming the option. The CLI turns its text
    into these values with `parse_layout` and kimicount.options. A hybrid model's state is held in
    `conv_dtype` (its short-convolution windows; default the model's dtype, as vLLM's
    --mamba-cache-dtype auto) and `ssm_dtype` (its recurrent state; default fp32: vLLM's
    MambaStateDtypeCalculator.kda_state_dtype always, SGLang's --mamba-ssm-dtype by default).

    >>> report = kv_cache_report(k2, tokens=1000, batch=2)
    >>> [(c.layout.value, c.bytes_per_token, c.total_bytes) for c in report.caches]
    [('naive', 2498560, 4997120000), ('flash', 2998272, 5996544000), ('latent', 70272, 140544000)]
    """
    tokens = spec.max_position_embeddings if tokens is None else tokens
    for option, value in (
        ("--tokens", tokens),
        ("--batch", batch),
        ("--block-size", block_size),
        ("--tp", tp),
    ):
        require_positive(option, value)
    if budget is not None:
        require_positive("--budget", budget)
    from kimicount.families import cache_groups

    groups = cache_groups(spec, include_mtp)
    mla_group = per_token_group(groups)
    mla = mla_group.mla
    assert mla is not None  # per_token_group returns MLA groups only
    check_tp(mla, tp)
    check_cache_widths(mla)
    dtype = default_dtype(spec) if dtype is None else dtype
    e = element_bytes(dtype)
    chosen = list(layouts) or list(DEFAULT_LAYOUTS)
    layers = len(mla_group.layers)
    mtp_layers = sum(1 for layer in mla_group.layers if layer >= spec.num_hidden_layers)
    indexed = layers_with_indexer(spec, layers)
    workload = Workload(tokens=tokens, batch=batch, block_size=block_size, tp=tp)
    conv = default_dtype(spec) if conv_dtype is None else conv_dtype
    states = tuple(StateCache(g, conv, ssm_dtype or "fp32", workload) for g in state_groups(groups))
    for state in states:
        state.parts()  # tp must divide each state's split dimension: refused here, naming it
    return KvCacheReport(
        spec=spec,
        dtype=dtype,
        workload=workload,
        layers=layers,
        mtp_layers=mtp_layers,
        include_mtp=include_mtp,
        caches=tuple(
            layout_cache(mla, layout, e, layers, workload, indexed) for layout in dict.fromkeys(chosen)
        ),
        latent=layout_cache(mla, Layout.latent, e, layers, workload, indexed),
        budget=budget,
        states=states,
    )


def context_sweep(report: KvCacheReport, points: int = 5) -> list[tuple[int, tuple[LayoutCache, ...]]]:
    """Each layout's cache at up to `points` context lengths, a factor of 4 apart, ending at the
    report's tokens (for Kimi K2's 131,072: 512, 2,048, 8,192, 32,768, 131,072); for the chart.
    Contexts shorter than a page are left out: they would all take one page.

    >>> [tokens for tokens, _ in context_sweep(kv_cache_report(k2))]
    [512, 2048, 8192, 32768, 131072]
    >>> [tokens for tokens, _ in context_sweep(kv_cache_report(k2, tokens=1000, block_size=64))]
    [250, 1000]
    """
    workload = report.workload
    shortest = min(workload.block_size, workload.tokens)
    contexts = sorted({c for k in range(points) if (c := workload.tokens // 4**k) >= shortest})
    return [(context, tuple(cache.at(context) for cache in report.caches)) for context in contexts]


# --- option values --------------------------------------------------------------------------------

# parse_layout turns the CLI's text into the Layout values kv_cache_report takes (counts, sizes and
# dtypes: kimicount.options); its errors name the option, since the text is what the user typed.


def check_cache_widths(spec: MlaSpec) -> None:
    """What one token caches in one layer is a tensor (heads × their widths, or the latent): its element
    count at most MAX_SIZE (2^63 − 1). The spec bounds each config size alone; their products are
    bounded here, where they are made. Flash's is the widest per-head layout, so naive's is bounded too.

    >>> check_cache_widths(replace(k2.mla, num_attention_heads=2**62))
    Traceback (most recent call last):
    kimicount.errors.ConfigError: moonshotai/Kimi-K2-Instruct: num_attention_heads × (qk_nope_head_dim + \
qk_rope_head_dim + max(qk_head_dim, v_head_dim)) is 4611686018427387904 × (128 + 64 + 192) values per token \
and layer, over 9,223,372,036,854,775,807 (2^63 − 1), more than a tensor holds
    """
    for layout in (Layout.flash, Layout.latent):
        formula = FORMULAS[layout]
        calculation, elements = formula.size(spec, 1)  # at 1 byte per element, its bytes are its elements
        if elements > MAX_SIZE:
            raise ConfigError(
                f"{spec.name}: {formula.text.removesuffix(' × e')} is {calculation.removesuffix(' × 1')} "
                f"values per token and layer, over {MAX_SIZE:,} (2^63 − 1), more than a tensor holds"
            )


def check_tp(spec: AttentionHeads, tp: int) -> None:
    """Tensor parallelism gives each rank num_attention_heads / tp whole heads; refuse any other tp,
    naming the values that work.

    >>> check_tp(k2.mla, 6)
    Traceback (most recent call last):
    kimicount.errors.UsageError: --tp 6: does not divide the 64 attention heads of moonshotai/Kimi-K2-Instruct (num_attention_heads); use 1, 2, 4, 8, 16, 32 or 64
    """
    heads = spec.num_attention_heads
    if heads % tp:
        if heads <= 2**16:  # the choices, listed; beyond, the search alone would hang
            divisors = [str(d) for d in range(1, heads + 1) if heads % d == 0]
            choices = divisors[0] if len(divisors) == 1 else f"{', '.join(divisors[:-1])} or {divisors[-1]}"
        else:
            choices = f"a divisor of {heads:,}"
        noun = "attention head" if heads == 1 else "attention heads"
        raise UsageError(
            f"--tp {tp}: does not divide the {heads} {noun} of {spec.name} (num_attention_heads); use {choices}"
        )


def parse_layout(name: str, option: str = "--layout") -> Layout:
    """A Layout from its name; a clear error naming `option` and the choices otherwise."""
    try:
        return Layout(name)
    except ValueError:
        expected = ", ".join(layout.value for layout in Layout)
        raise UsageError(f"{option} '{name}': unknown layout (expected one of: {expected})") from None
