"""Cache groups: what a model keeps in memory for each request, one group per kind of memory.

The words are vLLM's (vllm/v1/kv_cache_interface.py): a group is a set of layers with one kind of
cache spec. Full attention (FullAttentionSpec, MLAAttentionSpec) caches an entry for every position;
a compressed cache one per `ratio` positions; a sliding window at most `window` of them; a state
(MambaSpec) a constant per sequence, whatever its length. Families make the groups from their specs
(kimicount.families); the KV-cache report, the planner and the views read only the groups.

    >>> from kimicount.families import cache_groups
    >>> [(g.name, g.kind.value, len(g.layers)) for g in cache_groups(k2)]
    [('MLA', 'per_token', 61)]

A per-token MLA group sizes its entries by layout (kimicount.kvcache.FORMULAS, read from `mla`); a
per-sequence group by its state tensors, each the shape an engine allocates on one tensor-parallel rank;
any other group (DeepSeek V4's compressed, windowed and compressor-state groups) by its `entry`, the
bytes of one cached entry part by part, and `entries(tokens)`, how many one sequence holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from kimicount.errors import UsageError
from kimicount.spec import MlaSpec


class MemoryKind(str, Enum):
    """How a group's memory grows (vLLM's spec classes in parentheses)."""

    PER_TOKEN = "per_token"  # every cached position (FullAttentionSpec, MLAAttentionSpec)
    COMPRESSED = "per_token_compressed"  # one entry per `ratio` positions
    WINDOWED = "windowed"  # min(position, window) (SlidingWindowSpec)
    PER_SEQUENCE = "per_sequence"  # a constant per sequence (MambaSpec)


#: What holds a state tensor: the short-convolution windows (vLLM's --mamba-cache-dtype, SGLang's
#: bf16 conv state) or the recurrent state (fp32 by default in both engines).
CONV = "conv"
SSM = "ssm"


@dataclass(frozen=True)
class StateTensor:
    """One tensor of a per-sequence state in one layer: its whole shape (`dims`, on one GPU), which
    dimension tensor parallelism divides (`split`), its shape in config keys (`formula`), and whether
    the conv or the ssm dtype holds it."""

    name: str
    dims: tuple[int, ...]
    split: int
    formula: str
    holds: str  # CONV | SSM

    def shape(self, tp: int) -> tuple[int, ...]:
        """The shape on each of `tp` ranks: the split dimension divided by tp, exactly (vLLM's
        `divide`, which asserts it). [elements per dim]

        >>> StateTensor("recurrent", (96, 128, 128), 0, "", SSM).shape(8)
        (12, 128, 128)
        """
        size = self.dims[self.split]
        if size % tp:
            raise UsageError(
                f"--tp {tp}: does not divide the {self.name}'s {size:,} (its {self.formula.split(' × ')[0]})"
            )
        return tuple(d // tp if i == self.split else d for i, d in enumerate(self.dims))

    def elements(self, tp: int = 1) -> int:
        """Elements per rank. [elements]"""
        return math.prod(self.shape(tp))


#: What a group's entries are, for engines that page each by its own rule (vLLM's DeepSeek V4 specs:
#: the attention's compressed KV, the indexer's keys, a compressor's running state).
KV = "kv"
INDEX_KEYS = "index keys"
COMPRESSOR_STATE = "compressor state"


@dataclass(frozen=True)
class EntryPart:
    """One part of a cached entry: `count` values of `bytes_each` bytes (448 fp8 NoPE values), its
    count in config keys (`formula`) and what it is."""

    name: str
    count: int
    bytes_each: int
    formula: str

    @property
    def bytes(self) -> int:
        """[bytes/entry]"""
        return self.count * self.bytes_each


@dataclass(frozen=True)
class CacheGroup:
    """Layers (0-based indices) that keep one kind of memory per request. A per-token group of MLA
    layers carries the MLA sizes its layouts read; a per-sequence group its state tensors."""

    name: str
    kind: MemoryKind
    layers: tuple[int, ...]
    mla: MlaSpec | None = None
    state: tuple[StateTensor, ...] = ()
    #: A compressed group's positions per entry; a windowed group's window (tokens). A compressor's
    #: state keeps the ratio of the compressor it serves.
    ratio: int = 1
    window: int | None = None
    #: One entry's bytes, part by part, for a group that is neither an MLA latent nor a state.
    entry: tuple[EntryPart, ...] = ()
    content: str = KV  # KV | INDEX_KEYS | COMPRESSOR_STATE

    @property
    def entry_bytes(self) -> int:
        """[bytes/entry/layer]"""
        return sum(part.bytes for part in self.entry)

    def entries(self, tokens: int) -> int:
        """The entries one sequence of `tokens` positions holds in one layer: every position (per
        token), one per `ratio` positions a window has closed over (compressed), the last `window`
        positions at most (windowed). [entries/sequence/layer]

        >>> CacheGroup("HCA", MemoryKind.COMPRESSED, (3,), ratio=128).entries(1000)  # 7 windows closed
        7
        >>> CacheGroup("SWA", MemoryKind.WINDOWED, (0,), window=128).entries(1000)
        128
        """
        if self.kind is MemoryKind.COMPRESSED:
            return tokens // self.ratio
        if self.kind is MemoryKind.WINDOWED:
            assert self.window is not None  # a family built a windowed group without its window
            return min(tokens, self.window)
        if self.kind is MemoryKind.PER_TOKEN:
            return tokens
        return 0

    def state_bytes_per_layer(self, conv_bytes: int, ssm_bytes: int, tp: int = 1) -> int:
        """What one sequence's state takes in one layer on one of `tp` ranks, at the conv and ssm
        element sizes. [bytes/sequence/layer]

        >>> from kimicount.families import cache_groups
        >>> from kimicount.models import known_model
        >>> kda = cache_groups(known_model("kimi-k3").spec())[1]
        >>> kda.state_bytes_per_layer(2, 4)  # 3 × 3 × 12,288 × 2 + 96 × 128 × 128 × 4
        6512640
        """
        return sum(t.elements(tp) * (conv_bytes if t.holds == CONV else ssm_bytes) for t in self.state)


def per_token_group(groups: tuple[CacheGroup, ...]) -> CacheGroup:
    """The one per-token MLA group every supported model has (the KV-cache layouts size it)."""
    found = [g for g in groups if g.kind is MemoryKind.PER_TOKEN and g.mla is not None]
    if len(found) != 1:  # a family built its groups wrong: not the user's input
        raise ValueError(f"expected one per-token MLA cache group, found {len(found)}")
    return found[0]


def state_groups(groups: tuple[CacheGroup, ...]) -> tuple[CacheGroup, ...]:
    """The per-sequence groups (none for the DeepSeek-V3 family)."""
    return tuple(g for g in groups if g.kind is MemoryKind.PER_SEQUENCE)


def has_mla_group(groups: tuple[CacheGroup, ...]) -> bool:
    """Whether a model's cache has an MLA latent group (DeepSeek V4's has none: every group an entry)."""
    return any(g.mla is not None for g in groups)
