"""vLLM as the planner sees it: its memory rule (V1's), its defaults by release, its flags, and what it
prints.

The rule, vLLM V1's worker (vllm/v1/worker/gpu_worker.py, `Worker.determine_available_memory`):
request_memory = ceil(CUDA's total × gpu_memory_utilization) (its MemorySnapshot's total, from
torch.cuda.mem_get_info), less the weights and what the start-up profile adds (engines/reserve.py);
pages of --block-size tokens. V1 is vLLM's engine by default from 0.8.0 (and its only one from 0.11.0,
which removed V0); V0's rule (vllm/worker/worker.py, `determine_num_available_blocks`) is not modelled,
so kimicount knows vLLM from 0.8.0. The pool was checked against the published Kimi-K2.5 run on 8 × H100
(a setup log of 2026-02-09, vLLM 0.15.0) whose reserve tests/test_reserve.py reproduces; the newest
release kimicount knows is 0.22.0, the release of issue #44376 (DeepSeek-V4-Flash on 2 × GH200), whose
KV-cache figures engines/vllm_deepseek_v4.py reproduces. A DeepSeek V4 model's groups (windows,
compressed entries, compressor states) are packed by that module's rule (`pack`).

What it prints (and the plan prints in its words): "Available KV cache memory: 46.80 GiB"
(gpu_worker.py), "GPU KV cache size: 715,072 tokens" and "Maximum concurrency for 262,144 tokens per
request: 2.73x" (vllm/v1/core/kv_cache_utils.py); under DCP the size is per replica (× DCP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from kimicount.deploy.engines import vllm_deepseek_v4
from kimicount.deploy.engines.base import MemoryRow, Release, Ruled, ServerEngine, rule_for
from kimicount.deploy.engines.reserve import Reserve, large_gpu, reserve_estimate
from kimicount.deploy.engines.vllm_flags import (
    KV_CACHE_DTYPES,
    MTP_METHODS,
    UNMODELLED_KV_CACHE_DTYPES,
    VLLM_FLAGS,
)
from kimicount.deploy.engines.vllm_hybrid import vllm_state_pool
from kimicount.deploy.placement import ABSORPTION_COPIES, Parallel, expert_width_per_gpu, parallel_layout
from kimicount.errors import UsageError

if TYPE_CHECKING:
    from kimicount.anatomy import Anatomy
    from kimicount.deploy.groups import Packing, PoolGroup, StatePool
    from kimicount.deploy.hardware import Accelerator
    from kimicount.deploy.plan import DeploymentOptions, PlanReport, StageMemory
    from kimicount.spec import ModelSpec

GIB = 2**30

#: What vLLM's pool is, by release: V1's rule from 0.8.0, the first release with V1 by default.
POOL_RULE = (
    Ruled(
        "request_memory − weights − the profile pass's peak (activations, sampler, memory outside torch); "
        "CUDA graphs are captured after the pool is sized",
        "vllm/v1/worker/gpu_worker.py Worker.determine_available_memory (V1, the default engine from v0.8.0); "
        "graphs left out unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (vllm/envs.py, default 0, "
        "PR #30515); checked on v0.15.0's K2.5 run",
        since="0.8.0",
    ),
)
#: --block-size when none is given, for MLA: FlashMLA's 64 (vllm/platforms/cuda.py forces 64 for the
#: FlashMLA backend on Hopper). Blackwell's CUTLASS MLA backend takes 128: give --block-size 128 there.
BLOCK_SIZE = (Ruled(64, "vllm/platforms/cuda.py: FlashMLA needs a block size of 64 (Hopper)", since="0.8.0"),)
#: --max-num-batched-tokens and --max-num-seqs by default, on a GPU of at least 70 GiB other than the
#: A100 and on the others (vllm/engine/arg_utils.py, EngineArgs._set_default_args for the API server).
BATCH_DEFAULTS = (
    Ruled(
        ((8192, 1024), (2048, 256)),
        "vllm/engine/arg_utils.py EngineArgs._set_default_args (UsageContext.OPENAI_API_SERVER)",
        since="0.8.0",
    ),
)


#: The hybrid KV-cache manager for a per-sequence state beside an MLA cache (engines/vllm_hybrid.py), by
#: release: the automatic attention block of hybrid V1 models (PR #20016, V1 for hybrid models, merged
#: 2025-06; the block sized by vLLM itself after PR #20499, 2025-07), first released in v0.10.0.
HYBRID_RULE: tuple[Ruled[str | None], ...] = (
    Ruled(
        None,
        "hybrid models ran on V1 with a block size the user picked before the automatic one (PR #20016, "
        "2025-06; PR #20499, 2025-07); not modelled",
        until="0.10.0",
    ),
    Ruled(
        "a MambaSpec page per sequence per KDA layer, the attention block raised to hold one, groups of the "
        "fewest layers of a kind, num_blocks = pool // page // group_size; mamba_cache_mode none (prefix "
        "caching off for KDA) unless --mamba-cache-mode align",
        "vllm/model_executor/models/config.py HybridAttentionMambaModelConfig.verify_and_update_config and "
        "MambaModelConfig (prefix caching disabled for models without mamba prefix caching); "
        "vllm/v1/core/kv_cache_utils.py @ 001cabc _get_kv_cache_groups_uniform_page_size, "
        "get_kv_cache_config_from_groups, get_max_concurrency_for_kv_cache_config, _report_kv_cache_config; "
        "vllm/v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes",
        since="0.10.0",
    ),
)
#: The KV cache dtype vLLM picks for a model when --kv-cache-dtype is auto, by release: the model's
#: own in every release kimicount knows. PR #53138 ("Default quantized GLM KV cache to FP8 on NVIDIA":
#: GlmMoeDsaForCausalLM checkpoints quantized fp8 or modelopt_fp4, on NVIDIA, --kv-cache-dtype auto →
#: fp8) was open when read (2026-08-20): in no release.
KV_DTYPE_RULE = (
    Ruled(
        "the model's (torch_dtype)",
        "vllm/config/cache.py CacheConfig.cache_dtype 'auto'; PR #53138 (fp8 for GLM-5 fp8 and NVFP4 checkpoints "
        "on NVIDIA) open on 2026-08-20, in no release",
    ),
)


class VLLM(ServerEngine):
    name = "vllm"
    label = "vLLM"
    oldest = "0.8.0"
    newest = "0.22.0"
    releases_source = (
        "V1's memory rule, the default engine from 0.8.0; checked against runs up to 0.22.0; V0 not modelled"
    )
    sequence_cap = ("max_num_seqs", "--max-num-seqs")
    usable_words = ("usable", "reserve")
    #: vLLM's published Kimi-K2-Thinking run on 8 × H200 (vllm-project/recipes, moonshotai/Kimi-K2-Think.md)
    #: ran at --gpu-memory-utilization 0.95: the ways out try it before more GPUs.
    memory_share = ("utilization", Fraction(19, 20), "vLLM's Kimi-K2 recipe runs at it")
    absorption_copies = ABSORPTION_COPIES
    absorption_note = (
        "vLLM's BF16 W_UK, W_UV: vLLM's MLA layer keeps BF16 copies of an FP8 kv_b_proj's two halves for "
        "the absorbed decode (it has no FP8 batched matmul for them); not in the checkpoint."
    )
    reserve_input = "reserve"
    flags: dict[str, Any] = VLLM_FLAGS
    kv_cache_dtypes = KV_CACHE_DTYPES
    unmodelled_kv_cache_dtypes = UNMODELLED_KV_CACHE_DTYPES
    mtp_methods = MTP_METHODS
    #: `vllm serve MODEL` takes the model first, its positional model_tag (vllm/entrypoints/cli/serve.py);
    #: the API servers are started as modules.
    modules = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
    positional_model = True
    model_flag = "first (vllm serve MODEL) or from --model"
    #: Its images: vllm/vllm-openai runs `vllm serve` with the arguments after the image (its docs'
    #: `docker run … vllm/vllm-openai:latest --model …`); ROCm's images take the command after them.
    images = ("vllm/vllm-openai", "rocm/vllm", "rocm/vllm-dev")
    image_entrypoint = "vllm serve"

    def rules(self) -> dict[str, Sequence[Ruled[Any]]]:
        return {
            "pool": POOL_RULE,
            "block_size": BLOCK_SIZE,
            "batch_defaults": BATCH_DEFAULTS,
            "deepseek_v4": vllm_deepseek_v4.DEEPSEEK_V4_RULE,
            "hybrid_kv_cache_manager": HYBRID_RULE,
            "default_kv_cache_dtype": KV_DTYPE_RULE,
        }

    # --- the options -------------------------------------------------------------------------------

    def check(self, options: DeploymentOptions) -> None:
        """Refuse SGLang's options, naming vLLM's."""
        for option, given, instead in (
            ("--mem-fraction-static", options.mem_fraction_static is not None, "--gpu-memory-utilization"),
            ("--page-size", options.page_size is not None, "--block-size"),
            ("--max-running-requests", options.max_running_requests is not None, "--max-num-seqs"),
            ("--enable-dp-attention", options.dp_attention, "--dp (always data-parallel attention)"),
            (
                "--mamba-full-memory-ratio",
                options.mamba_full_memory_ratio is not None,
                "its hybrid KV-cache manager",
            ),
            (
                "--max-mamba-cache-size",
                options.max_mamba_cache_size is not None,
                "its hybrid KV-cache manager",
            ),
            ("--mamba-radix-cache-strategy", options.mamba_strategy is not None, "--mamba-cache-mode"),
            ("--disable-radix-cache", not options.radix_cache, "--mamba-cache-mode"),
        ):
            if given:
                raise UsageError(f"{option} is SGLang's (--engine sglang); vLLM's is {instead}")

    def parallel(self, options: DeploymentOptions, spec: ModelSpec, gpus: int) -> Parallel:
        """vLLM's terms: `tp` GPUs per attention group, `dp` groups, EP over all TP × DP GPUs.

        >>> from kimicount.deploy.plan import DeploymentOptions
        >>> VLLM().parallel(DeploymentOptions(dp=8, ep=8), k2, 8).label
        'DP8 + EP8'
        """
        return parallel_layout(
            spec,
            gpus,
            tp=options.tp,
            pp=options.pp,
            dp=options.dp,
            ep=options.ep,
            dcp=options.dcp,
            redundant=options.redundant_experts,
        )

    def page(self, options: DeploymentOptions) -> int:
        """--block-size (64 unless given: FlashMLA's)."""
        return (
            rule_for(BLOCK_SIZE, options.engine_release.version).value
            if options.block_size is None
            else options.block_size
        )

    # --- the memory rule ---------------------------------------------------------------------------

    def usable(self, gpu: Accelerator, options: DeploymentOptions) -> int:
        """vLLM's request_memory: ceil(CUDA's total × gpu_memory_utilization). [bytes]

        >>> from kimicount.deploy.hardware import ACCELERATORS
        >>> from kimicount.deploy.plan import DeploymentOptions
        >>> VLLM().usable(ACCELERATORS["H200"], DeploymentOptions())  # ceil(143,156 MiB × 0.9)
        135098951271
        """
        return math.ceil(gpu.cuda_memory_bytes * options.utilization)

    def batch_defaults(self, gpu: Accelerator, release: Release) -> tuple[int, int]:
        """(max batched tokens, max sequences) vLLM picks for this GPU when the user does not."""
        large, small = rule_for(BATCH_DEFAULTS, release.version).value
        return large if large_gpu(gpu) else small

    def reserve(
        self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator, parallel: Parallel
    ) -> Reserve:
        """The given --reserve, or the estimate of V1's profile pass (engines/reserve.py)."""
        if options.reserve is not None:
            return Reserve(options.reserve, False)
        tokens, sequences = self.batch_defaults(gpu, options.engine_release)
        return reserve_estimate(
            anatomy.spec,
            expert_width_per_gpu(anatomy.spec, parallel),
            options.max_batched_tokens or tokens,
            options.max_num_seqs or sequences,
        )

    def least_reserve(self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator) -> int:
        """The reserve with the narrowest experts (width 0 in the estimate), or the given one. [bytes]"""
        if options.reserve is not None:
            return options.reserve
        tokens, sequences = self.batch_defaults(gpu, options.engine_release)
        floor = reserve_estimate(
            anatomy.spec, 0, options.max_batched_tokens or tokens, options.max_num_seqs or sequences
        )
        return floor.bytes

    def pack_state(
        self,
        pool: int,
        groups: Sequence[PoolGroup],
        options: DeploymentOptions,
        context: int,
        parallel: Parallel,
    ) -> StatePool:
        """Its hybrid KV-cache manager (HYBRID_RULE, engines/vllm_hybrid.py): one block pool for the
        latent and the KDA state, the attention block raised to hold a state page."""
        release = options.engine_release
        if rule_for(HYBRID_RULE, release.version).value is None:
            raise UsageError(
                f"{release}: vLLM's hybrid KV-cache manager for a KDA state is modelled from 0.10.0 "
                "(--engine vllm==0.10.0 or later)"
            )
        if options.mamba_ssm_dtype is not None:
            raise UsageError(
                "--mamba-ssm-cache-dtype: vLLM keeps the KDA recurrent state in float32 whatever it says "
                "(kda_state_dtype); --mamba-cache-dtype sets the convolution windows"
            )
        return vllm_state_pool(
            pool, groups, self.page(options), context, parallel.dcp, options.mamba_cache_mode or "none"
        )

    def state_dtypes(self, options: DeploymentOptions, spec: ModelSpec) -> tuple[str, str]:
        """kda_state_dtype: the convolutions in --mamba-cache-dtype (auto: the model's), the recurrent
        state in float32."""
        from kimicount.kvcache import default_dtype

        return options.mamba_cache_dtype or default_dtype(spec), "fp32"

    def default_kv_dtype(self, spec: ModelSpec, release: Release) -> str | None:
        """The model's dtype in every release kimicount knows (KV_DTYPE_RULE: PR #53138 unreleased)."""
        rule_for(KV_DTYPE_RULE, release.version)
        return None

    def model_note(self, spec: ModelSpec) -> str | None:
        """Kimi K3 runs on vLLM's main branch only (no release kimicount knows)."""
        if spec.model_type == "kimi_k3":
            return (
                "vLLM runs Kimi K3 from its main branch (the Kimi-K3 DSpark speculator's card, 2026-08: "
                "'use vLLM latest main'); the plan applies the hybrid rule of the releases kimicount knows"
            )
        return None

    def flag_name(self, typed: str) -> str:
        """vLLM's FlexibleArgumentParser reads --max_model_len as --max-model-len."""
        return "--" + typed[2:].replace("_", "-") if typed.startswith("--") else typed

    def count_note(self, setting: str, text: str) -> str | None:
        """How vLLM reads a token count with a lower-case suffix (256k is 256,000: options.vllm_reading)."""
        from kimicount.options import vllm_reading

        return vllm_reading(text) if setting in ("max_model_len", "max_batched_tokens") else None

    def serve_settings(
        self, values: dict[str, object], flags: dict[str, str], memory: list[str]
    ) -> dict[str, object]:
        """vLLM's terms are kimicount's: --enable-expert-parallel is EP over TP × DP."""
        settings = dict(values)
        tp, dp = settings.get("tp", 1), settings.get("dp", 1)
        assert isinstance(tp, int) and isinstance(dp, int)
        settings.setdefault("tp", 1)
        settings.setdefault("pp", 1)
        settings.setdefault("dp", 1)
        if settings.pop("expert_parallel", False):
            settings["ep"] = tp * dp  # vLLM sizes EP as TP × DP
            flags["ep"] = flags["expert_parallel"]
        flags.pop("expert_parallel", None)
        return settings

    def pack(
        self,
        pool: int,
        groups: Sequence[PoolGroup],
        options: DeploymentOptions,
        spec: Any,
        gpu: Accelerator,
        parallel: Parallel,
    ) -> Packing | None:
        """DeepSeek V4's groups by vLLM's rule for them (engines/vllm_deepseek_v4.py), one stage, no DCP;
        None for any other model."""
        from kimicount.deploy.groups import compressed

        if not compressed(groups):
            return None
        for option, size, what in (
            ("--pp", parallel.pp, "its groups per pipeline stage"),
            ("--dcp", parallel.dcp, "decode-context parallelism"),
        ):
            if size > 1:
                raise UsageError(f"{option} {size}: vLLM's DeepSeek V4 rule with {what} is not modelled")
        if spec.o_groups % parallel.tp:
            raise UsageError(
                f"--tp {parallel.tp}: vLLM gives each rank o_groups ÷ tp of {spec.name}'s {spec.o_groups} output "
                "groups (n_local_groups); use a TP size that divides them"
            )
        tokens, _ = self.batch_defaults(gpu, options.engine_release)
        return vllm_deepseek_v4.pack(
            pool,
            groups,
            release=options.engine_release,
            block_size=options.block_size,
            max_model_len=options.context(spec),
            max_num_batched_tokens=options.max_batched_tokens or tokens,
            batched_given=options.max_batched_tokens is not None,
            dtype_given=options.kv_dtype,
        )

    # --- what it prints and how the plan words it ----------------------------------------------------

    def max_sequences(self, report: PlanReport) -> int:
        """--max-num-seqs, or vLLM's default for the GPU."""
        return report.options.max_num_seqs or self.batch_defaults(report.gpu, report.release)[1]

    def memory_rows(self, report: PlanReport, stage: StageMemory) -> list[MemoryRow]:
        utilization = f"{float(report.utilization):g}"
        reserve = report.reserve
        assert reserve is not None  # the plan has one unless --kv-memory gave the pool
        return [
            MemoryRow(f"Usable: × {utilization} (--gpu-memory-utilization)", report.usable),
            MemoryRow("− weights", stage.weights),
            MemoryRow(
                "− reserve (an estimate, below)" if reserve.estimate else "− reserve (--reserve)",
                stage.reserve,
            ),
            MemoryRow(
                "= KV cache pool (an estimate)" if report.estimate else "= KV cache pool", stage.pool, True
            ),
        ]

    def reserve_lines(self, report: PlanReport) -> tuple[list[str], bool]:
        reserve = report.reserve
        if reserve is None or not reserve.estimate:
            return [], False
        return [
            f"Reserve, an estimate of {reserve.assumes_short}:",
            "--reserve SIZE replaces it; --kv-memory SIZE starts from the pool an engine printed.",
        ], True

    def printed_lines(self, report: PlanReport) -> list[str]:
        """vLLM's start-up lines for this plan, and its maximum concurrency in words."""
        packing = report.fullest.packing
        if packing is not None:  # DeepSeek V4: its lines, or the error it stops with
            return [f"{report.release} would print: " + "; ".join(packing.printed)]
        if report.states:
            return self._hybrid_lines(report)
        parallel, page = report.parallel, report.block_size
        whole = f"{report.sequences_per_replica:,} whole sequence" + (
            "" if report.sequences_per_replica == 1 else "s"
        )
        everywhere = f", {report.sequences_per_replica * parallel.dp:,} in all" if parallel.dp > 1 else ""
        split = f" ÷ ({page} × DCP {parallel.dcp})" if parallel.dcp > 1 else f" ÷ {page}"
        pool = report.fullest.pool
        concurrency = (
            f"Maximum concurrency for {report.max_model_len:,} tokens per request: {report.pages_per_gpu:,} "
            f"pages ÷ {report.sequence_pages:,} (ceil({report.max_model_len:,}{split})) = "
            f"{report.max_concurrency:.2f}× ({whole} per replica{everywhere})"
        )
        lines = [concurrency]
        if pool > 0:
            lines.append(
                f"{report.release} would print: Available KV cache memory: {pool / GIB:.2f} GiB; GPU KV cache "
                f"size: {report.tokens_per_replica:,} tokens; Maximum concurrency for {report.max_model_len:,} "
                f"tokens per request: {report.max_concurrency:.2f}x"
            )
        return lines

    def _hybrid_lines(self, report: PlanReport) -> list[str]:
        """A hybrid model's: the hybrid manager's arithmetic, then what vLLM prints."""
        stage = report.fullest
        state = stage.state
        assert state is not None
        figures = state.figures
        parallel = report.parallel
        whole = f"{report.sequences_per_replica:,} whole request" + (
            "" if report.sequences_per_replica == 1 else "s"
        )
        lines = list(state.lines)
        lines.append(
            f"Maximum concurrency for {report.max_model_len:,} tokens per request: {figures['num_blocks']:,} blocks ÷ "
            f"{figures['pages_per_request']:,} pages = {report.max_concurrency:.2f}× ({whole} per replica"
            + (f", {report.sequences_per_replica * parallel.dp:,} in all" if parallel.dp > 1 else "")
            + f"); GPU KV cache size = {figures['num_blocks']:,} // {len(figures['groups'])} groups × "
            f"{state.block_size:,}" + (f" × DCP {parallel.dcp}" if parallel.dcp > 1 else "")
        )
        if stage.pool > 0:
            lines.append(
                f"{report.release} would print: Setting attention block size to {state.block_size} tokens to ensure "
                f"that attention page size is >= mamba page size; Available KV cache memory: {stage.pool / GIB:.2f} "
                f"GiB; GPU KV cache size: {report.tokens_per_replica:,} tokens; Maximum concurrency for "
                f"{report.max_model_len:,} tokens per request: {report.max_concurrency:.2f}x"
            )
        return lines
