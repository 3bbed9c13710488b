"""llama.cpp and ik_llama.cpp as the local planner sees them: which cache a build (or -mla mode) gives a
deepseek2 GGUF, and the llama-server command it runs with.

llama.cpp's releases are its builds (b5137, b7832: deploy/local/builds.py gives the builds where the
cache changed, each with its PR and merge commit); a plan names the build it follows, the newest by
default. ik_llama.cpp has no build numbers: its cache follows `-mla` (0–3, 3 by default).
"""

from __future__ import annotations

from kimicount.deploy.engines.base import LocalEngine, Release, Version
from kimicount.deploy.local.builds import (
    FA_DEFAULT_BUILD,
    IK_DEFAULT_MLA,
    MLA_BUILD,
    PAD_256_BUILD,
    ROWS_BUILD,
    V_LESS_BUILD,
    CacheChoice,
    CacheLayout,
    parse_build,
)
from kimicount.errors import UsageError


class LlamaCpp(LocalEngine):
    name = "llama.cpp"
    label = "llama.cpp"
    oldest = "b1"
    newest = f"b{V_LESS_BUILD}"
    releases_source = (
        "its builds, numbered by commit on master; the cache's changes are deploy/local/builds.py's"
    )

    def release(self, text: str | None, option: str = "--build") -> Release:
        """A build: its tag (b5331) or number; None is the newest build.

        >>> str(LlamaCpp().release("b5331")), str(LlamaCpp().release(None))
        ('llama.cpp b5331', 'llama.cpp newest build')
        """
        if text is None:
            return Release(self.label, Version((V_LESS_BUILD,)), "newest build")
        build = parse_build(text, option)
        return Release(self.label, Version((build,)), f"b{build}")

    def describe(self, build: int | None) -> str:
        return "llama.cpp " + ("(newest build)" if build is None else f"b{build}")

    def cache_layout(
        self,
        build: int | None = None,
        *,
        mla_gguf: bool,
        mla: int | None = None,
        flash_attn: bool = True,
        layout: CacheLayout | None = None,
    ) -> CacheChoice:
        """The cache layout at `build` (None: the newest) on a GGUF written with (`mla_gguf`) or without MLA
        tensors, unless `layout` names it directly.

        >>> LlamaCpp().cache_layout(5000, mla_gguf=True).layout.value, LlamaCpp().cache_layout(5331, mla_gguf=True).layout.value
        ('per-head', 'latent+v')
        >>> LlamaCpp().cache_layout(None, mla_gguf=False).layout.value
        'per-head'
        """
        if mla is not None:
            raise UsageError("--mla: an ik_llama.cpp option (give --engine ik_llama.cpp)")
        newest = build is None
        number = V_LESS_BUILD if build is None else build
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

    def mode_flags(self, mla: int | None) -> list[str]:
        """The flags that choose its cache mode: none (the build decides)."""
        return []

    @property
    def keeps_2d_by_head(self) -> bool:
        """Whether its per-head K cache is 2-D by head and its V^T 1-D (ik_llama.cpp's), not by row."""
        return False

    @property
    def computes_missing_attention(self) -> bool:
        """Whether it computes attn_kv_b (or attn_k_b, attn_v_b) a file lacks at load (ik_llama.cpp)."""
        return False


class IkLlamaCpp(LlamaCpp):
    name = "ik_llama.cpp"
    label = "ik_llama.cpp"
    oldest = newest = "any"
    releases_source = "no build numbers: its cache follows -mla"

    def release(self, text: str | None, option: str = "--build") -> Release:
        if text is not None:
            raise UsageError(f"{option}: ik_llama.cpp's cache follows -mla, not a build number (give --mla)")
        return Release(self.label, Version((0,)), "")

    def describe(self, build: int | None) -> str:
        return "ik_llama.cpp"

    def cache_layout(
        self,
        build: int | None = None,
        *,
        mla_gguf: bool,
        mla: int | None = None,
        flash_attn: bool = True,
        layout: CacheLayout | None = None,
    ) -> CacheChoice:
        """ik_llama.cpp chooses with `-mla` (src/llama.cpp, llama_kv_cache_init): 0 per-head K and V, 1
        the latent and a transposed V (the latent alone with -fa), 2 and 3 the latent alone. It runs MLA
        on any GGUF: llm_prepare_mla computes attn_k_b/attn_v_b from attn_kv_b (or the reverse) at load,
        so the file's layout does not choose the cache.

        >>> IkLlamaCpp().cache_layout(mla=1, mla_gguf=True, flash_attn=False).layout.value
        'latent+v'
        >>> IkLlamaCpp().cache_layout(mla=3, mla_gguf=False).layout.value
        'latent'
        """
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

    def mode_flags(self, mla: int | None) -> list[str]:
        """-mla, its default 3 (common/common.h `mla_attn = 3`) unless given."""
        return ["-mla", str(IK_DEFAULT_MLA if mla is None else mla)]

    @property
    def keeps_2d_by_head(self) -> bool:
        return True

    @property
    def computes_missing_attention(self) -> bool:
        return True


LLAMA_CPP = LlamaCpp()
IK_LLAMA_CPP = IkLlamaCpp()
