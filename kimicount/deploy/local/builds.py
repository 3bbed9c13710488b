"""Which llama.cpp or ik_llama.cpp build does what with a DeepSeek-V3-family GGUF (arch `deepseek2`).

llama.cpp's build number is its commit count on master (cmake/build-info.cmake: `git rev-list --count
HEAD`), and its releases are tagged `b<build>`, so a PR's merge commit gives the first build that has
it. Counted on a full clone of llama.cpp's history:

| change | PR | merge commit | build |
|---|---|---|---|
| MLA: the latent (576) and its own V (512) per layer, for GGUFs that carry `key_length_mla` | #12801, 2025-04-15 | daa4228 | b5137 |
| cache tensors 2-D (one row per cell: CUDA pads a quantized row of 576 to 1,024) | #13194, 2025-05-20 | e298d2f | b5429 |
| flash attention on and every layer offloaded by default (`-fa on|off|auto`) | #15434, 2025-08-30 | e81b8e4 | b6325 |
| the cache padded to 256 cells always (32 without flash attention before) | #17046, 2025-11-07 | 16bcc12 | b6975 |
| V-less cache: the latent alone (576), V read from it | #19067, 2026-01-25 | d9c6ce4 | b7832 |

ik_llama.cpp chooses with `-mla`: 0 per-head K and V, 1 the latent and a transposed V (the latent
alone with `-fa`), 2 and 3 the latent alone (src/llama.cpp, llama_kv_cache_init; 3 is the default,
common/common.h `mla_attn = 3`), and its cache tensors are 2-D.

Which of them a run gets is each engine's rule (deploy/engines/llama_cpp.py: `cache_layout`).

    >>> parse_build("b5331") >= MLA_BUILD > parse_build("5000")
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from kimicount.errors import UsageError


class CacheLayout(str, Enum):
    """What a deepseek2 KV cache holds per token per layer."""

    per_head = "per-head"  # every head's key (nope + rope) and value
    latent_v = "latent+v"  # the latent + rotary key (576), and a V of kv_lora_rank (512)
    latent = "latent"  # the latent + rotary key alone


#: llama.cpp builds where the cache changed (see the module docstring).
MLA_BUILD = 5137  # PR #12801
ROWS_BUILD = 5429  # PR #13194
FA_DEFAULT_BUILD = 6325  # PR #15434
PAD_256_BUILD = 6975  # PR #17046
V_LESS_BUILD = 7832  # PR #19067

#: ik_llama.cpp's default -mla (common/common.h).
IK_DEFAULT_MLA = 3

_BUILD = re.compile(r"\s*b?(\d{1,6})\s*", re.IGNORECASE)


def parse_build(text: str, option: str = "--build") -> int:
    """A llama.cpp build: its release tag (b5331) or number (5331).

    >>> parse_build("b5331"), parse_build("7832")
    (5331, 7832)
    """
    match = _BUILD.fullmatch(text)
    if match is None:
        raise UsageError(f"{option} '{text}': expected a llama.cpp release tag such as b5331, or its number")
    return int(match[1])


@dataclass(frozen=True)
class CacheChoice:
    """The layout a run gets, and why (the build, -mla, or the file)."""

    layout: CacheLayout
    reason: str
    rows: bool  # cache tensors are 2-D, one row per cell (CUDA pads quantized rows)
    pad: int  # the cache size is a multiple of this many cells
    fa_flag: str  # how this build turns flash attention on
