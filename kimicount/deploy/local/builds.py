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

    >>> cache_layout(Engine.llama_cpp, parse_build("b5331"), mla_gguf=True).layout.value
    'latent+v'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from kimicount.errors import UsageError


class Engine(str, Enum):
    llama_cpp = "llama.cpp"
    ik_llama_cpp = "ik_llama.cpp"


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


def cache_layout(
    engine: Engine,
    build: int | None = None,
    *,
    mla_gguf: bool,
    mla: int | None = None,
    flash_attn: bool = True,
    layout: CacheLayout | None = None,
) -> CacheChoice:
    """The cache layout of `engine` at `build` (None: the newest) with `-mla` (ik_llama.cpp) on a GGUF
    written with (`mla_gguf`) or without MLA tensors, unless `layout` names it directly.

    >>> cache_layout(Engine.llama_cpp, 5000, mla_gguf=True).layout.value
    'per-head'
    >>> cache_layout(Engine.llama_cpp, None, mla_gguf=False).layout.value
    'per-head'
    >>> cache_layout(Engine.ik_llama_cpp, mla=1, mla_gguf=True, flash_attn=False).layout.value
    'latent+v'
    >>> cache_layout(Engine.ik_llama_cpp, mla=3, mla_gguf=False).layout.value
    'latent'
    """
    if engine is Engine.ik_llama_cpp:
        # ik_llama.cpp runs MLA on any GGUF: llm_prepare_mla computes attn_k_b/attn_v_b from attn_kv_b
        # (or the reverse) at load, so the file's layout does not choose the cache
        if build is not None:
            raise UsageError("--build: ik_llama.cpp's cache follows -mla, not a build number (give --mla)")
        mode = IK_DEFAULT_MLA if mla is None else mla
        if mode not in (0, 1, 2, 3):
            raise UsageError(f"--mla {mode}: expected 0, 1, 2 or 3 (ik_llama.cpp's modes)")
        pad = 256 if flash_attn else 32
        if layout is not None:
            return CacheChoice(layout, "--cache-layout", True, pad, "-fa")
        if mode == 0:
            chosen, reason = CacheLayout.per_head, "-mla 0"
        elif mode == 1 and not flash_attn:
            chosen, reason = CacheLayout.latent_v, "-mla 1 without -fa: the latent and a transposed V"
        else:
            chosen, reason = CacheLayout.latent, f"-mla {mode}" + (" -fa" if mode == 1 else "")
        return CacheChoice(chosen, reason, True, pad, "-fa")
    if mla is not None:
        raise UsageError("--mla: an ik_llama.cpp option (give --engine ik_llama.cpp)")
    newest = build is None
    number = V_LESS_BUILD if newest else build
    rows = number >= ROWS_BUILD
    pad = 256 if (flash_attn or number >= PAD_256_BUILD) else 32
    fa_flag = "-fa on" if number >= FA_DEFAULT_BUILD else "-fa"
    tag = "the newest build" if newest else f"b{number}"
    if layout is not None:
        return CacheChoice(layout, "--cache-layout", rows, pad, fa_flag)
    if not mla_gguf:
        reason = "a GGUF written without MLA (no attention.key_length_mla: key_length is the head's 192)"
        return CacheChoice(CacheLayout.per_head, reason, rows, pad, fa_flag)
    if number < MLA_BUILD:
        return CacheChoice(
            CacheLayout.per_head, f"{tag}: before MLA (#12801, b{MLA_BUILD})", rows, pad, fa_flag
        )
    if number < V_LESS_BUILD:
        reason = f"{tag}: MLA (#12801, b{MLA_BUILD}), before the V-less cache (#19067, b{V_LESS_BUILD})"
        return CacheChoice(CacheLayout.latent_v, reason, rows, pad, fa_flag)
    return CacheChoice(
        CacheLayout.latent, f"{tag}: V-less cache (#19067, b{V_LESS_BUILD})", rows, pad, fa_flag
    )
