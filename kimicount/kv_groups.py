"""The KV cache of a model whose cache groups carry their own entries (DeepSeek V4): per group, per
token and per sequence, and what each engine pages of it.

A group holds, per sequence of T tokens and per layer: T entries (per token), ⌊T / ratio⌋ (one per
`ratio` positions a compressor has closed a window over), min(T, window) (a window, a compressor's
running state). So the cache is T × a per-token rate (the compressed groups' entry ÷ ratio, exact
fractions: 584 ÷ 128 = 4.5625 B) plus, once T passes the windows, a constant per sequence; the report
gives both, each group's formula, and the exact bytes at T. The engines' pages of the same groups are
the engines' rules, in the planner's house (kimicount.deploy.engines.vllm_deepseek_v4: vLLM's layout
and pool; .sglang_deepseek_v4: SGLang's pools); `kimicount kv-cache` attaches them (`vllm`, `sglang`)
from above, so this model-layer module imports no engine.

    >>> from kimicount.models import known_model
    >>> report = group_cache_report(known_model("deepseek-v4-pro").spec(), tokens=1_000_000)
    >>> report.total_bytes, exact(report.bytes_per_token), report.bytes_per_sequence
    (5534698848, '5,511.4375', 23270400)
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kimicount.cache_groups import CacheGroup, MemoryKind
from kimicount.errors import UsageError, require_positive

#: The indexer keys' cache dtypes (fp4: SGLang's --enable-deepseek-v4-fp4-indexer, vLLM's
#: --attention-config.use_fp4_indexer_cache).
INDEXER_DTYPES = ("fp8", "fp4")


def exact(value: Fraction) -> str:
    """A byte rate exactly: an integer, or its finite decimal (every V4 ratio is a power of two).

    >>> exact(Fraction(584, 128)), exact(Fraction(179)), exact(Fraction(1, 3))
    ('4.5625', '179', '1/3')
    """
    if value.denominator == 1:
        return f"{value.numerator:,}"
    denominator, twos, fives = value.denominator, 0, 0
    while denominator % 2 == 0:
        denominator, twos = denominator // 2, twos + 1
    while denominator % 5 == 0:
        denominator, fives = denominator // 5, fives + 1
    if denominator != 1:
        return str(value)
    places = max(twos, fives)
    scaled = value * 10**places
    whole, fraction = divmod(scaled.numerator // scaled.denominator, 10**places)
    return f"{whole:,}.{fraction:0{places}d}".rstrip("0")


@dataclass(frozen=True)
class GroupLine:
    """One cache group for a sequence of `tokens`: its entries per layer, their bytes, its share."""

    group: CacheGroup
    tokens: int

    @property
    def layers(self) -> int:
        return len(self.group.layers)

    @property
    def entries(self) -> int:
        """Entries per layer for the sequence. [entries/sequence/layer]"""
        return self.group.entries(self.tokens)

    @property
    def bytes_per_sequence(self) -> int:
        """layers × entries × entry bytes. [bytes/sequence]"""
        return self.layers * self.entries * self.group.entry_bytes

    @property
    def per_token(self) -> Fraction:
        """What each further token adds, all layers: entry × layers, ÷ ratio when compressed; 0 for a
        window or a state, which stop growing at their window. [bytes/token]"""
        kind = self.group.kind
        if kind is MemoryKind.PER_TOKEN:
            return Fraction(self.group.entry_bytes * self.layers)
        if kind is MemoryKind.COMPRESSED:
            return Fraction(self.group.entry_bytes * self.layers, self.group.ratio)
        return Fraction(0)

    @property
    def per_sequence(self) -> int:
        """What a windowed group holds once the sequence fills its window, all layers. [bytes/sequence]"""
        if self.group.kind is MemoryKind.WINDOWED:
            assert self.group.window is not None
            return self.group.window * self.group.entry_bytes * self.layers
        return 0

    @property
    def formula(self) -> str:
        """The bytes for T tokens in words: 'layers × ⌊T / 4⌋ × 584'."""
        kind, g = self.group.kind, self.group
        count = {
            MemoryKind.PER_TOKEN: "T",
            MemoryKind.COMPRESSED: f"⌊T / {g.ratio}⌋",
            MemoryKind.WINDOWED: f"min(T, {g.window})",
        }.get(kind, "1")
        return f"{self.layers} × {count} × {g.entry_bytes:,} B"

    @property
    def entry_formula(self) -> str:
        """The entry part by part: '448 fp8 NoPE values + 64 bf16 RoPE values × 2 B + ...'."""
        return " + ".join(
            f"{p.count:,} {p.name}" + (f" × {p.bytes_each} B" if p.bytes_each != 1 else "")
            for p in self.group.entry
        )


@dataclass(frozen=True)
class GroupCacheReport:
    """The cache of `batch` sequences of `tokens` each, group by group; `vllm` and `sglang` the engines'
    pages of it, attached from the planner's house (None until then, and for a cache neither engine
    keeps: bf16)."""

    spec: Any
    dtype: str
    indexer: str
    tokens: int
    batch: int
    include_mtp: bool
    lines: tuple[GroupLine, ...]
    budget: int | None = None
    block_size: int = 256
    max_num_batched_tokens: int = 8192
    vllm: Any = None
    sglang: Any = None

    @property
    def layers(self) -> int:
        """Layers with an attention: every one keeps a window."""
        return max(line.layers for line in self.lines)

    @property
    def bytes_per_token(self) -> Fraction:
        """Σ per-token rates. [bytes/token]"""
        return sum((line.per_token for line in self.lines), Fraction(0))

    @property
    def bytes_per_sequence(self) -> int:
        """Σ the windows' and states' constants. [bytes/sequence]"""
        return sum(line.per_sequence for line in self.lines)

    @property
    def sequence_bytes(self) -> int:
        """One sequence of `tokens`, exactly. [bytes]"""
        return sum(line.bytes_per_sequence for line in self.lines)

    @property
    def total_bytes(self) -> int:
        """`batch` sequences of `tokens`. [bytes]"""
        return self.sequence_bytes * self.batch

    @property
    def mtp_layers(self) -> int:
        return len(self.spec.mtp_layers)


def group_cache_report(
    spec: Any,
    *,
    tokens: int | None = None,
    batch: int = 1,
    dtype: str | None = None,
    indexer: str = "fp8",
    include_mtp: bool = False,
    block_size: int | None = None,
    max_num_batched_tokens: int = 8192,
    budget: int | None = None,
) -> GroupCacheReport:
    """The cache of a model without an MLA group, by its groups; `block_size` (vLLM's 256 by default)
    and `max_num_batched_tokens` are kept for the engines' pages, which the caller attaches
    (kimicount.deploy.engines.deepseek_v4.engine_pages)."""
    from kimicount.families import cache_groups

    tokens = spec.max_position_embeddings if tokens is None else tokens
    for option, value in (
        ("--tokens", tokens),
        ("--batch", batch),
        ("--max-num-batched-tokens", max_num_batched_tokens),
    ):
        require_positive(option, value)
    if budget is not None:
        require_positive("--budget", budget)
    if indexer not in INDEXER_DTYPES:
        raise UsageError(f"--indexer-cache {indexer}: expected one of: {', '.join(INDEXER_DTYPES)}")
    dtype = "fp8" if dtype is None else dtype
    groups = cache_groups(spec, include_mtp, dtype=dtype, indexer=indexer)
    block = 256 if block_size is None else require_positive("--block-size", block_size)
    return GroupCacheReport(
        spec=spec,
        dtype=dtype,
        indexer=indexer,
        tokens=tokens,
        batch=batch,
        include_mtp=include_mtp,
        lines=tuple(GroupLine(g, tokens) for g in groups),
        budget=budget,
        block_size=block,
        max_num_batched_tokens=max_num_batched_tokens,
    )


def ratio_to(report: GroupCacheReport, other_total: int) -> Fraction:
    """This cache's bytes over another's (DeepSeek-V4-Pro's over DeepSeek-V3.2's at 1M tokens)."""
    return Fraction(report.total_bytes, other_total)
