"""KV-cache formulas: bytes per token per layer for each layout an inference engine may use.

Multi-head latent attention caches one small latent per token for all heads; engines that expand it
back into per-head keys and values before caching ("naive", "flash") pay for every head. These
functions say exactly what each layout stores. `e` is the element size of the cache dtype in bytes.

    >>> [bytes_per_token_per_layer(k2, layout, 2) * 61 for layout in ("naive", "flash", "latent")]
    [2498560, 2998272, 70272]
"""

from __future__ import annotations

import math
from enum import Enum

from kimicount.errors import UsageError
from kimicount.spec import ModelSpec


class Layout(str, Enum):
    naive = "naive"
    flash = "flash"
    latent = "latent"
    flashmla_fp8 = "flashmla-fp8"


#: Cache dtypes and their element size in bytes.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}

#: torch_dtype values of config.json -> cache dtype names.
_CONFIG_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}

#: FP8 caches (FlashMLA, the V3.2 indexer) keep one F32 scale per this many values.
FP8_SCALE_GROUP = 128


def default_dtype(spec: ModelSpec) -> str:
    """The cache dtype an engine uses by default: the model's own (config `torch_dtype`).

    >>> default_dtype(k2)
    'bf16'
    """
    return _CONFIG_DTYPES.get(spec.torch_dtype, "bf16")


def element_bytes(dtype: str) -> int:
    """Bytes per cached element; a clear error for a dtype that is not a cache dtype."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise UsageError(f"unknown cache dtype '{dtype}' (expected one of: {', '.join(DTYPE_BYTES)})") from None


def naive_bytes(spec: ModelSpec, e: int) -> int:
    """Per head, the key (qk_nope_head_dim + qk_rope_head_dim) and the value (v_head_dim):
    H × (qk_nope + qk_rope + v) × e. [bytes/token/layer]

    >>> naive_bytes(k2, 2)  # 64 × (128 + 64 + 128) × 2
    40960
    """
    return spec.num_attention_heads * (spec.qk_head_dim + spec.v_head_dim) * e


def flash_bytes(spec: ModelSpec, e: int) -> int:
    """As naive, but each value padded to the key width first (flash-attention kernels want equal
    head dims): H × (qk_head_dim + max(qk_head_dim, v_head_dim)) × e. [bytes/token/layer]

    >>> flash_bytes(k2, 2)  # 64 × (192 + 192) × 2
    49152
    """
    return spec.num_attention_heads * (spec.qk_head_dim + max(spec.qk_head_dim, spec.v_head_dim)) * e


def latent_bytes(spec: ModelSpec, e: int) -> int:
    """The key–value latent (kv_lora_rank, one per token for all heads) and the shared rotary key
    (qk_rope_head_dim): (kv_lora_rank + qk_rope_head_dim) × e. [bytes/token/layer]

    >>> latent_bytes(k2, 2)  # (512 + 64) × 2
    1152
    """
    return (spec.kv_lora_rank + spec.qk_rope_head_dim) * e


def flashmla_fp8_bytes(spec: ModelSpec) -> int:
    """FlashMLA's FP8 cache: the latent in fp8 with one F32 scale per 128 values, the rotary key kept
    in bf16: kv_lora_rank × 1 + ceil(kv_lora_rank / 128) × 4 + qk_rope_head_dim × 2. [bytes/token/layer]

    >>> flashmla_fp8_bytes(k2)  # 512 + 4 × 4 + 64 × 2
    656
    """
    scales = math.ceil(spec.kv_lora_rank / FP8_SCALE_GROUP)
    return spec.kv_lora_rank + scales * 4 + spec.qk_rope_head_dim * 2


def indexer_key_bytes(spec: ModelSpec) -> int:
    """DeepSeek-V3.2's lightning indexer caches one key of index_head_dim per token, in fp8 with one F32
    scale per 128 values: index_head_dim + ceil(index_head_dim / 128) × 4; 0 without an indexer.
    [bytes/token/layer]
    """
    if spec.indexer is None:
        return 0
    dim = spec.indexer.head_dim
    return dim + math.ceil(dim / FP8_SCALE_GROUP) * 4


def bytes_per_token_per_layer(spec: ModelSpec, layout: Layout | str, e: int) -> int:
    """The attention cache of one layout (without the indexer keys), in bytes per token per layer."""
    layout = Layout(layout)
    if layout is Layout.naive:
        return naive_bytes(spec, e)
    if layout is Layout.flash:
        return flash_bytes(spec, e)
    if layout is Layout.latent:
        return latent_bytes(spec, e)
    return flashmla_fp8_bytes(spec)
