"""SGLang as the planner sees it: its KV-cache pool as its code sizes it, its default
mem_fraction_static by release, its flags (engines/sglang_flags.py) and what it prints.

The rule (python/sglang/srt/model_executor/model_runner.py, `profile_max_num_token` and
`init_memory_pool`; in newer trees `profile_available_bytes` in pool_configurator.py):

    total_gpu_memory = the free memory after the distributed init, before the weights load
                       (`init_torch_distributed` returns get_available_gpu_memory: the minimum over ranks)
    rest_memory      = free memory after the weights load − total_gpu_memory × (1 − mem_fraction_static)
    max_num_token    = int(rest_memory × 2^30) // cell_size
    max_total_num_tokens = max_num_token // page_size × page_size

so the pool is `free before load × mem_fraction_static − weights` and the share 1 − mem_fraction_static
of the free memory is left to activations and CUDA graphs. From 0.5.18 rest_memory also loses, for a
multimodal model, the multimodal pools SGLang allocates after sizing the pool (MM_RESERVE_RULE,
`mm_runtime_reservation_gb`). The weights SGLang loads also hold what its load makes beside the
checkpoint (`load_extras`): the INT4 MoE's indices on ROCm (INT4_MOE_RULE), Kimi K3's MXFP4 MoE biases
on SM100 GPUs (MXFP4_MOE_RULE). SGLang counts in GiB and prints them as "GB".

The cell (MLATokenToKVPool, mem_cache/memory_pool.py; `_compute_cell_size`): (kv_lora_rank +
qk_rope_head_dim) × layers × element size, 1,152 B per layer in bf16 and 576 B in fp8; DeepSeek-V3.2's
NSA pool (DSATokenToKVPool) adds the indexer's keys, index_head_dim fp8 bytes and one F32 scale per 128
per layer, and stores an fp8 cache as FlashMLA's 656-byte record. The per-token bytes are kvcache's
layouts, the same as vLLM's.

The default mem_fraction_static (python/sglang/srt/server_args.py, `_handle_gpu_memory_settings`,
called from ServerArgs.__post_init__: line 730 at v0.5.8.post1, whose line 1006 is inside it, as the
tracebacks of the published v0.5.8.post1 ROCm image show): the heuristic of PR #10975 (merged
2025-09-27, so from 0.5.3), then, for a multimodal model not run --language-only,
`adjust_mem_fraction_for_vlm` (the same file), a factor from the vision tower's size. kimicount knows
SGLang from 0.5.3 to 0.5.8.post1, the release of the published MI355X Kimi-K2.5 run.

What is an estimate here: the memory already in use before the weights load (the CUDA or HIP context,
NCCL/RCCL communicators, the custom all-reduce buffers), which decides the free memory SGLang
measures: 1.5 GiB on CUDA and 4.5 GiB on ROCm (PRELOAD_ESTIMATES, each from a published run);
`--reserve` replaces it and `--kv-memory` starts from the pool SGLang printed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import islice
from typing import TYPE_CHECKING, Any

from kimicount.deploy.engines import sglang_deepseek_v4
from kimicount.deploy.engines.base import MemoryRow, Ruled, ServerEngine, StaticFraction, Version, rule_for
from kimicount.deploy.engines.reserve import Reserve
from kimicount.deploy.engines.sglang_flags import (
    KV_CACHE_DTYPES,
    MTP_ALGORITHMS,
    SGLANG_FLAGS,
    UNMODELLED_KV_CACHE_DTYPES,
)
from kimicount.deploy.engines.sglang_mamba import DEFAULT_FULL_MEMORY_RATIO, SLOTS, sglang_state_pool
from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.placement import Kind, Parallel, PlacedComponent, Placement, parallel_layout
from kimicount.errors import UsageError
from kimicount.reading import shorten

if TYPE_CHECKING:
    from kimicount.anatomy import Anatomy
    from kimicount.deploy.groups import Packing, PoolGroup, StatePool
    from kimicount.deploy.plan import DeploymentOptions, PlanReport, StageMemory
    from kimicount.spec import ModelSpec

GIB = 2**30
MIB = 2**20
#: The first release whose defaults kimicount has not read (its mem_fraction_static heuristic, the
#: multimodal factor, ROCm's INT4 indices): from there a plan gives --mem-fraction-static itself.
NOT_READ = "0.5.9"
NOT_READ_SOURCE = "not read for releases from 0.5.9 (read at v0.5.8.post1 and, for the hybrid pool, v0.5.18)"
#: The first SGLang release that runs Kimi K3 (the cookbook's measured recipes: v0.5.18 @ 71de97b2).
K3_RELEASE = "0.5.18"


@dataclass(frozen=True)
class Preload:
    """The memory in use before the weights load on one platform, and the run it is read from."""

    bytes: int
    source: str


#: The memory in use before the weights load, by platform: an estimate. CUDA: SGLang's Kubernetes guide's
#: DeepSeek-R1 run on 2 × 8 × H20 implies 1.54 GiB. ROCm: the published GLM-5-FP8 run on 8 × MI355X
#: (SGLang v0.5.8.post1, TP8, AITER's custom all-reduce) had 283.48 GiB free on its fullest rank before
#: loading, of the 287.98 GiB HIP reports: 4.50 GiB in use.
PRELOAD_ESTIMATES = {
    "cuda": Preload(3 * GIB // 2, "1.5 GiB (an estimate: CUDA context, NCCL, custom all-reduce)"),
    "rocm": Preload(9 * GIB // 2, "4.5 GiB (an estimate: HIP context, RCCL, AITER's custom all-reduce)"),
}
#: The CUDA one, as before there were platforms.
PRELOAD_ESTIMATE = PRELOAD_ESTIMATES["cuda"].bytes
#: SGLang's default page size (--page-size); FlashMLA needs 64, CUTLASS MLA 128 (server_args.py).
DEFAULT_PAGE_SIZE = 1
#: The bounds of SGLang's default max_running_requests per DP rank (model_runner's max_num_reqs).
MIN_RUNNING_REQUESTS, MAX_RUNNING_REQUESTS = 2048, 4096
#: SGLang's row of the BF16 copies of an FP8 kv_b_proj (its w_kc, w_vc).
SGLANG_ABSORPTION_COPIES = "SGLang's BF16 w_kc, w_vc"
#: The row of the index buffers its INT4 MoE keeps on ROCm (load_extras).
INT4_MOE_INDICES = "SGLang's INT4 MoE g_idx buffers (ROCm)"

#: The default mem_fraction_static's heuristic, by release.
FRACTION_RULE: tuple[Ruled[str | None], ...] = (
    Ruled(
        "512 + max(chunked_prefill_size, 2048) × 1.5 + cuda_graph_max_bs × 2 + tp × pp ÷ 8 × 1,024 MiB reserved "
        "(+ DP-attention padding), at least 10,240 above 60 GiB, + 2,048 for EAGLE/MTP drafts",
        "python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings (PR #10975, merged "
        "2025-09-27; read at v0.5.8.post1, called from __post_init__ at line 730)",
        since="0.5.3",
        until=NOT_READ,
    ),
    Ruled(None, NOT_READ_SOURCE, since=NOT_READ),
)
#: The factor a multimodal model's fraction is multiplied by, by release.
VLM_RULE: tuple[Ruled[str | None], ...] = (
    Ruled(
        "× 0.95 × clamp(1 − 0.1 × (vision layers × vision hidden² ÷ (24 × 1,024²) − 1), 0.8, 1.05)",
        "python/sglang/srt/server_args.py ServerArgs.adjust_mem_fraction_for_vlm (v0.5.8.post1), applied "
        "when model_config.is_multimodal and not language_only",
        since="0.5.3",
        until=NOT_READ,
    ),
    Ruled(None, NOT_READ_SOURCE, since=NOT_READ),
)
#: The index buffers SGLang's INT4 MoE keeps on ROCm, by release.
INT4_MOE_RULE: tuple[Ruled[str | None], ...] = (
    Ruled(
        "2 × experts × (hidden + expert width) × 4 B per MoE layer on each GPU",
        "python/sglang/srt/layers/quantization/compressed_tensors/compressed_tensors_moe.py: "
        "CompressedTensorsWNA16MoE.create_weights allocates w13/w2 g_idx and g_idx_sort_indices (int32); "
        "CompressedTensorsWNA16TritonMoE, the ROCm path ('Using CompressedTensorsWNA16TritonMoE (ROCm)' in "
        "the v0.5.8.post1 MI355X log), converts the weights but keeps them, where the CUDA path empties them",
        since="0.5.3",
        until=NOT_READ,
    ),
    Ruled(None, NOT_READ_SOURCE, since=NOT_READ),
)
#: The row of what SGLang's MXFP4 MoE allocates for Kimi K3's routed experts beyond the checkpoint
#: (load_extras).
MXFP4_MOE_EXTRAS = "SGLang's MXFP4 MoE biases and scalars (FlashInfer)"
#: The GPUs of compute capability 10.x, where SGLang runs K3's MXFP4 experts on FlashInfer's trtllm-gen
#: kernel by default (the Kimi-K3 cookbook, §2 "MoE runner": "Leave --moe-runner-backend unset on
#: Blackwell: FlashInfer MXFP4 ... is selected"; mxfp4.py takes that path where is_sm100_supported).
SM100_GPUS = frozenset({"B200", "B300", "GB200", "GB300"})
#: What SGLang's Mxfp4MoEMethod allocates for Kimi K3's experts beyond the checkpoint, by release: the
#: alignment the FlashInfer path pads the expert's width and the latent hidden size to.
MXFP4_MOE_RULE: tuple[Ruled[int | None], ...] = (
    Ruled(None, "Kimi K3 runs from 0.5.18", until=K3_RELEASE),
    Ruled(
        128,
        "python/sglang/srt/models/kimi_k3.py KimiK3MoE.__init__ (sgl-project/sglang @ e44a41c1): a "
        "compressed-tensors mxfp4 config is replaced by Mxfp4Config(is_checkpoint_mxfp4_serialized=True) for "
        "the routed experts, so FusedMoE takes Mxfp4MoEMethod; python/sglang/srt/layers/quantization/"
        "mxfp4.py Mxfp4MoEMethod.create_weights (K3-era trees modal-projects/sglang @ 005cd043 and "
        "modal-labs/sglang @ 19759a81; bafa16ec and main of 2026-04-30 before K3 the same on CUDA): "
        "`create_bias = with_bias or not _is_hip`, so a bias-free checkpoint still gets bf16 w13_weight_bias "
        "[experts, 2 × width] and w2_weight_bias [experts, hidden] on CUDA, width and hidden rounded up to 128 "
        "on SM100 under flashinfer_mxfp4 ('256 ... causes 60GB/GPU waste for models like K3'); "
        "process_weights_after_loading (use_flashinfer) keeps them as fp32 shuffled copies "
        "(w13_bias = ....to(torch.float32); copy_or_rebind_param rebinds a parameter whose dtype differs) and "
        "adds fp32 gemm1_alpha, gemm1_beta, gemm1_clamp_limit [experts]; the weights and scales keep their bytes. "
        "The official mxfp4.py at v0.5.18 is not in the stored index: not read at the tag",
        since=K3_RELEASE,
    ),
)
#: What SGLang keeps from a multimodal model's KV budget for the multimodal pools it allocates only
#: after sizing the KV pool, by release: (SGLANG_VLM_CACHE_SIZE_MB, SGLANG_MM_FEATURE_CACHE_MB) in MiB,
#: the second only under a GPU feature transport (cuda_ipc, cuda_vmm).
MM_RESERVE_RULE: tuple[Ruled[tuple[int, int] | None], ...] = (
    Ruled(None, "none before PR #34141", until="0.5.18"),
    Ruled(
        (100, 1024),
        "python/sglang/srt/mem_cache/kv_cache_configurator.py mm_runtime_reservation_gb, subtracted in "
        "KVCacheConfigurator._profile_available_bytes (rest_memory = available − slack − reservation, "
        "before _handle_max_mamba_cache splits it), read at 003fca80; python/sglang/srt/environ.py "
        "SGLANG_VLM_CACHE_SIZE_MB EnvInt(100), SGLANG_MM_FEATURE_CACHE_MB EnvInt(1 * 1024). From PR #34141 "
        "(2026-08-09); v0.5.18 came out 2026-08-25, so kimicount takes it to be in 0.5.18 (not read at the tag)",
        since="0.5.18",
    ),
)
#: The GPUs of one node, where SGLang's --mm-feature-transport resolves to cuda_ipc for a multimodal
#: model on CUDA without disaggregation (the Kimi-K3 cookbook, §3.5 VLM feature transport: "Auto ·
#: single-node Unified CUDA → CUDA IPC"; other topologies CPU): kimicount takes a plan of at most 8
#: GPUs for one node.
MM_IPC_NODE_GPUS = 8
#: SGLang's mamba state pool beside the KV pool (engines/sglang_mamba.py), by release.
MAMBA_POOL_RULE = (
    Ruled(
        "rest_memory × r ÷ (1 + r) to the state (r = --mamba-full-memory-ratio, 0.9), max_mamba_cache_size = "
        "that ÷ mamba_cache_per_req, the KV pool the rest; max_running_requests ≤ max_mamba_cache_size ÷ the "
        "slots a request holds",
        "python/sglang/srt/model_executor/model_runner.py handle_max_mamba_cache (moved to "
        "model_runner_components/kv_cache_configurator.py _handle_max_mamba_cache, _resolve_max_num_reqs); "
        "configs/mamba_utils.py KimiLinearCacheParams.mamba_cache_per_req",
        since="0.5.3",
    ),
)
#: The state slots a request holds, by strategy and release: no_buffer's 3 alone before the extra
#: buffer's ratios (MAMBA_CACHE_V2_ADDITIONAL_RATIO_*, "from sglang v0.5.9").
MAMBA_SLOTS_RULE = (
    Ruled(
        {"no_buffer": 3},
        "model_runner.py MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3 (no extra buffer before v0.5.9)",
        since="0.5.3",
        until="0.5.9",
    ),
    Ruled(
        dict(SLOTS),
        "kv_cache_configurator.py _calculate_mamba_ratio: 3 + MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP 2 "
        "(extra_buffer), + _OVERLAP_LAZY 1 (extra_buffer_lazy), + 0 (no_buffer); 1 with the radix cache off",
        since="0.5.9",
    ),
)
#: The default --mamba-radix-cache-strategy (--mamba-scheduler-strategy before), by release: no_buffer
#: (server_args.py's default, as v0.5.x's logged server_args print it); auto → extra_buffer in the
#: v0.5.18 the Kimi-K3 cookbook ran (its calculator: "auto (and anything unrecognized) resolves to
#: extra_buffer"); the releases between are not read.
MAMBA_STRATEGY_RULE: tuple[Ruled[str | None], ...] = (
    Ruled(
        "no_buffer",
        "python/sglang/srt/server_args.py mamba_scheduler_strategy='no_buffer' (v0.5.x server_args dumps)",
        since="0.5.3",
        until="0.5.9",
    ),
    Ruled(
        None, "the default strategy of releases 0.5.9 to 0.5.17 is not read", since="0.5.9", until="0.5.18"
    ),
    Ruled(
        "extra_buffer",
        "docs/src/snippets/_kimi_k3_mamba_ratio_calculator.jsx (the Kimi-K3 cookbook, measured on v0.5.18 @ "
        "71de97b2): auto resolves to extra_buffer, mirroring kv_cache_configurator._calculate_mamba_ratio",
        since="0.5.18",
    ),
)
#: Decode-context parallelism (--dcp-size): each rank of a DCP group keeps 1 ÷ DCP of a request's latent
#: tokens, the KDA state whole on every rank, by release.
DCP_RULE: tuple[Ruled[str | None], ...] = (
    Ruled(None, "no --dcp-size in the releases read before 0.5.18", since="0.5.3", until="0.5.18"),
    Ruled(
        "the latent split by token over --dcp-size ranks; the state whole on each",
        "the Kimi-K3 cookbook (v0.5.18): 'DCP is the only axis that shards the TP-replicated MLA KV'; its "
        "calculator's mla_kv_bytes ÷ DCP per rank, the state never DCP-sharded",
        since="0.5.18",
    ),
)


def batch_defaults(gpu: Accelerator, tp_size: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks by the GPU's memory, nvidia-smi's total in
    MiB (server_args.py `_handle_gpu_memory_settings`, its get_device_memory_capacity).

    >>> from kimicount.deploy.hardware import ACCELERATORS
    >>> batch_defaults(ACCELERATORS["H200"], 8), batch_defaults(ACCELERATORS["H20"], 2)
    ((8192, 512), (8192, 256))
    """
    mib = gpu.memory_bytes // MIB
    if mib < 20 * 1024:
        return 2048, 8
    if mib < 35 * 1024:
        return 2048, 24 if tp_size < 4 else 80
    if mib < 60 * 1024:
        return 4096, 32 if tp_size < 4 else 160
    if mib < 160 * 1024:
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def default_mem_fraction_static(
    gpu: Accelerator,
    tp_size: int,
    pp_size: int = 1,
    dp_size: int = 1,
    *,
    dp_attention: bool = False,
    speculative: bool = False,
    vision: tuple[int, int] | None = None,
) -> StaticFraction:
    """SGLang's mem_fraction_static when none is given (server_args.py `_handle_gpu_memory_settings`):
    reserved MiB = 512 + max(chunked_prefill_size, 2048) × 1.5 + cuda_graph_max_bs × 2
    + tp_size × pp_size ÷ 8 × 1024 (+ cuda_graph_max_bs × dp_size × 3, and × 1.5 more past 300, under DP
    attention), at least 10,240 on GPUs over 60 GiB, + 2,048 for EAGLE/MTP drafts; then
    round((memory − reserved) ÷ memory, 3), memory in MiB as nvidia-smi reports it. A multimodal model
    (`vision`: its tower's layers and hidden size) then gets `adjust_mem_fraction_for_vlm`'s factor,
    0.95 × clamp(1 − 0.1 × (layers × hidden² ÷ (24 × 1024²) − 1), 0.8, 1.05), in SGLang's floats.

    >>> from kimicount.deploy.hardware import ACCELERATORS
    >>> float(default_mem_fraction_static(ACCELERATORS["H200"], 8).value)  # 1 − 14,848 ÷ 143,771
    0.897
    """
    chunk, graph_bs = batch_defaults(gpu, tp_size)
    mib = gpu.memory_bytes // MIB
    # (the term in SGLang's numbers, its MiB, what it is for)
    parts = [
        ("512", 512.0, "constant metadata"),
        (
            f"{max(chunk, 2048):,} × 1.5",
            max(chunk, 2048) * 1.5,
            f"the activations of {chunk:,}-token prefill chunks",
        ),
        (f"{graph_bs} × 2", graph_bs * 2.0, f"CUDA graphs up to batch {graph_bs}"),
        (f"{tp_size} × {pp_size} ÷ 8 × 1,024", tp_size * pp_size / 8 * 1024, f"TP{tp_size} × PP{pp_size}"),
    ]
    if dp_attention:
        parts.append(
            (f"{graph_bs} × {dp_size} × 3", graph_bs * dp_size * 3.0, f"DP{dp_size} attention's padding")
        )
        if graph_bs > 300:
            parts.append((f"{graph_bs} × {dp_size} × 1.5", graph_bs * dp_size * 1.5, "its large CUDA graphs"))
    reserved = sum(value for _, value, _ in parts)
    text = " + ".join(name for name, _, _ in parts)
    words = ", ".join(f"{value:,g} for {what}" for _, value, what in parts)
    if mib > 60 * 1024 and reserved < 10 * 1024:
        reserved, text = 10 * 1024.0, f"max({text}, 10,240)"
        words = f"10,240, its floor above 60 GiB (the terms, {words}, come to less)"
    if speculative:
        reserved += 2 * 1024
        text += " + 2,048 (MTP draft)"
        words += ", 2,048 for the MTP draft and its CUDA graphs"
    value = round((mib - reserved) / mib, 3)
    calculation = f"round(({mib:,} − ({text} = {reserved:,g})) ÷ {mib:,}, 3) MiB = {value:g}"
    why = [f"SGLang sets aside {reserved:,g} of the {mib:,} MiB the GPU reports: {words}"]
    printed = value
    if vision is not None:
        layers, hidden = vision
        ratio = layers * hidden**2 / (24 * 1024**2)
        dynamic = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
        printed = value * (0.95 * dynamic)  # SGLang: mem_fraction_static * final_overall_factor
        calculation += (
            f"; × 0.95 × (1 − 0.1 × ({layers} × {hidden:,}² ÷ (24 × 1,024²) − 1)) = {value:g} × 0.95 × "
            f"{dynamic!r} = {printed!r} (a multimodal model)"
        )
        why[0] += (
            f"; then, the model being multimodal, it multiplies the fraction by 0.95 × {dynamic!r} for the image "
            f"encoder's activations: its vision tower ({layers} layers of {hidden:,}) is {ratio:.3g}× a "
            "ViT-L/14's (adjust_mem_fraction_for_vlm)"
        )
    return StaticFraction(Fraction(repr(printed)), False, calculation, repr(printed), tuple(why))


def preload_estimate(gpu: Accelerator) -> Preload:
    """The memory in use before the weights load on this GPU's platform: an estimate (PRELOAD_ESTIMATES)."""
    return PRELOAD_ESTIMATES[gpu.platform]


def mm_reservation(release: Version, platform: str, gpus: int) -> tuple[int, str] | None:
    """What SGLang keeps from a multimodal model's KV budget for its multimodal pools (MM_RESERVE_RULE):
    the embedding cache's SGLANG_VLM_CACHE_SIZE_MB, and SGLANG_MM_FEATURE_CACHE_MB when the feature
    transport is a GPU one, cuda_ipc on one CUDA node. [bytes]

    >>> [mm_reservation(Version.parse("0.5.18"), platform, 8)[0] for platform in ("cuda", "rocm")]
    [1178599424, 104857600]
    >>> mm_reservation(Version.parse("0.5.8.post1"), "cuda", 8) is None
    True
    """
    sizes = rule_for(MM_RESERVE_RULE, release).value
    if sizes is None:
        return None
    cache, feature = sizes
    if platform == "cuda" and gpus <= MM_IPC_NODE_GPUS:
        words = f"{cache:,} MiB embedding cache + {feature:,} MiB cuda_ipc feature pool (one CUDA node)"
        return (cache + feature) * MIB, words
    words = f"{cache:,} MiB embedding cache (the feature transport is cpu)"
    return cache * MIB, words


def sglang_reserve(
    gpu: Accelerator,
    fraction: Fraction,
    preload: int,
    preload_given: bool,
    preload_words: str = "",
    multimodal: tuple[int, str] | None = None,
) -> Reserve:
    """What SGLang keeps from the KV pool besides the weights: the memory in use before the weights load,
    the share 1 − mem_fraction_static of the free memory then, and for a multimodal model from 0.5.18 its
    multimodal pools (`multimodal`, mm_reservation). [bytes]

    The pool is then CUDA's total − weights − this = floor(free before load × mem_fraction_static) −
    weights − the multimodal pools, SGLang's rest_memory (its int() of a GiB float rounds the same way
    to the byte).

    >>> from kimicount.deploy.hardware import ACCELERATORS
    >>> [b for _, _, b in sglang_reserve(ACCELERATORS["H20"], Fraction(93, 100), PRELOAD_ESTIMATE, False).terms]
    [1610612736, 7028007240]
    """
    free = gpu.cuda_memory_bytes - preload
    kept = free - math.floor(free * fraction)
    before = (
        f"{preload / GIB:g} GiB (as given by --reserve)"
        if preload_given
        else preload_words or PRELOAD_ESTIMATES["cuda"].source
    )
    terms: tuple[tuple[str, str, int], ...] = (
        ("before load", before, preload),
        ("static share", f"{free:,} B free × (1 − {float(fraction):g})", kept),
    )
    formula = "memory in use before the weights load + free memory then × (1 − mem_fraction_static)"
    if multimodal is not None:
        terms += (("multimodal pools", multimodal[1], multimodal[0]),)
        formula += " + the multimodal pools"
    return Reserve(
        preload + kept + (multimodal[0] if multimodal is not None else 0),
        not preload_given,
        formula,
        terms,
        "SGLang's profile_max_num_token: the memory in use before the weights load (CUDA context, NCCL "
        "communicators, custom all-reduce buffers; an estimate unless --reserve gives it), the share "
        "1 − mem_fraction_static of the memory free then, left to activations and CUDA graphs, and for a "
        "multimodal model from 0.5.18 the multimodal pools it allocates after sizing the pool",
        "SGLang's rule: memory in use before the weights load, and 1 − mem_fraction_static of what is free then",
    )


def max_running_requests(tokens: int, context_len: int, given: int | None, dp: int = 1) -> int:
    """max_running_requests per DP rank as SGLang prints it (model_runner's max_num_reqs): given ÷ DP,
    or int(tokens ÷ context_len × 512) within [2,048, 4,096]; at most tokens ÷ 2 either way.

    >>> max_running_requests(712_400, 163_840, None), max_running_requests(712_400, 163_840, 64)
    (2226, 64)
    """
    if given is not None:
        wanted = given // dp
    else:
        wanted = min(max(int(tokens / context_len * 512), MIN_RUNNING_REQUESTS), MAX_RUNNING_REQUESTS)
    return min(wanted, tokens // 2)


def int4_moe_indices(spec: ModelSpec, placement: Placement) -> tuple[int, ...]:
    """The int32 index buffers of SGLang's INT4 MoE on one GPU of each stage, as the ROCm path keeps
    them: 2 × (w13 g_idx + sort indices over the hidden size, w2's over the expert's width on the GPU)
    per expert slot per MoE layer. [bytes]

    >>> from kimicount.anatomy import build_anatomy
    >>> from kimicount.deploy.placement import place
    >>> int4_moe_indices(k2, place(build_anatomy(k2), Parallel(tp=8)))  # 60 × 384 × 2 × (7,168 + 256) × 4
    (1368391680,)
    """
    from kimicount.deploy.placement import expert_width_per_gpu, experts_per_gpu

    parallel = placement.parallel
    experts = experts_per_gpu(spec, parallel) if parallel.ep else spec.n_routed_experts
    width = expert_width_per_gpu(spec, parallel)
    return tuple(
        sum(1 for layer in layers if spec.is_moe_layer(layer)) * 2 * experts * (spec.hidden_size + width) * 4
        for layers in placement.stages
    )


def mxfp4_moe_layer_extras(experts: int, width: int, hidden: int, align: int) -> int:
    """What SGLang's Mxfp4MoEMethod keeps for one MoE layer's experts on a GPU beyond the checkpoint,
    on the FlashInfer path (MXFP4_MOE_RULE): per expert fp32 biases over the padded gate-up and hidden
    widths, (2 × width' + hidden') × 4 B, three fp32 scalars (gemm1_alpha, gemm1_beta, gemm1_clamp_limit),
    and the padding of w13 and w2 to width' and hidden' (multiples of `align`): U8 E2M1 pairs and a U8
    scale per 32, 17/32 B a weight. [bytes]

    >>> mxfp4_moe_layer_extras(896, 384, 3_584, 128)  # K3 at TP8: 896 × ((2 × 384 + 3,584) × 4 + 3 × 4)
    15608320
    >>> mxfp4_moe_layer_extras(896, 192, 3_584, 128)  # TP16: 896 × ((2 × 256 + 3,584) × 4 + 12 + 365,568)
    342239744
    """
    padded_width, padded_hidden = -(-width // align) * align, -(-hidden // align) * align
    biases = (2 * padded_width + padded_hidden) * 4
    scalars = 3 * 4
    padding = 3 * (padded_width * padded_hidden - width * hidden) * 17 // 32
    return experts * (biases + scalars + padding)


def mxfp4_moe_extras(spec: ModelSpec, placement: Placement, align: int) -> tuple[int, ...]:
    """mxfp4_moe_layer_extras over the MoE layers of each stage, the experts in the latent width
    (routed_expert_hidden_size) where the model has one. [bytes]"""
    from kimicount.deploy.placement import expert_width_per_gpu, experts_per_gpu

    parallel = placement.parallel
    experts = experts_per_gpu(spec, parallel) if parallel.ep else spec.n_routed_experts
    hidden = getattr(spec, "routed_expert_hidden_size", None) or spec.hidden_size
    layer = mxfp4_moe_layer_extras(experts, expert_width_per_gpu(spec, parallel), hidden, align)
    return tuple(sum(1 for i in layers if spec.is_moe_layer(i)) * layer for layers in placement.stages)


def k3_mxfp4_experts(spec: ModelSpec) -> bool:
    """Whether the model is Kimi K3 with its experts in MXFP4: the case kimi_k3.py hands to Mxfp4Config."""
    from kimicount.spec import Fp4Quantization

    quantization = spec.quantization
    return (
        spec.model_type == "kimi_k3"
        and isinstance(quantization, Fp4Quantization)
        and quantization.scheme == "mxfp4"
    )


def packed_experts(anatomy: Anatomy) -> bool:
    """Whether the routed experts are stored pack-quantized (compressed-tensors INT4, Kimi K2.5's)."""
    from kimicount.spec import PackedQuantization
    from kimicount.storage import config_packed

    if not isinstance(anatomy.spec.quantization, PackedQuantization):
        return False
    refs = (ref for node in anatomy.model.walk() for ref in node.tensors if ref.experts)
    first = next(refs, None)
    return first is not None and config_packed(anatomy.spec, islice(first.names(), 1)) > 0


class SGLang(ServerEngine):
    name = "sglang"
    label = "SGLang"
    oldest = "0.5.3"
    newest = "0.5.18"
    default = "0.5.8.post1"
    releases_source = (
        "its default mem_fraction_static from PR #10975 (0.5.3); read at v0.5.8.post1, the release of the "
        "published MI355X Kimi-K2.5 run"
    )
    sequence_cap = ("max_running_requests", "--max-running-requests")
    usable_words = ("CUDA total", "kept back")
    absorption_copies = SGLANG_ABSORPTION_COPIES
    absorption_note = (
        "SGLang's BF16 w_kc, w_vc: its DeepSeek model dequantizes an FP8 kv_b_proj into BF16 copies of its "
        "two halves for the absorbed decode (post_load_weights); not in the checkpoint."
    )
    reserve_input = "preload"
    # layouts are written back as vLLM's (tp per attention group); SGLang's --tp is every GPU of a
    # stage, so other layouts are offered for vLLM's plans only
    layouts_as_options = False
    dense_over_dp = True
    indexer_every_layer = True  # NSATokenToKVPool: index_k_with_scale_buffer for every layer
    flags: dict[str, Any] = SGLANG_FLAGS
    kv_cache_dtypes = KV_CACHE_DTYPES
    unmodelled_kv_cache_dtypes = UNMODELLED_KV_CACHE_DTYPES
    mtp_methods = MTP_ALGORITHMS
    #: Its launchers' modules (`python -m sglang.launch_server`); `sglang serve` too.
    modules = ("sglang.launch_server", "sglang_router.launch_server")
    model_flag = "from --model-path"
    #: Its images take the launcher after them (`docker run … lmsysorg/sglang:… python3 -m sglang.launch_server …`).
    images = ("lmsysorg/sglang", "rocm/sgl-dev")

    def rules(self) -> dict[str, Sequence[Ruled[Any]]]:
        return {
            "mem_fraction_static": FRACTION_RULE,
            "multimodal": VLM_RULE,
            "multimodal_pools": MM_RESERVE_RULE,
            "int4_moe_rocm": INT4_MOE_RULE,
            "deepseek_v4": sglang_deepseek_v4.DEEPSEEK_V4_RULE,
            "mamba_pool": MAMBA_POOL_RULE,
            "mamba_slots": MAMBA_SLOTS_RULE,
            "mamba_strategy": MAMBA_STRATEGY_RULE,
            "dcp": DCP_RULE,
        }

    # --- the options -------------------------------------------------------------------------------

    def check(self, options: DeploymentOptions) -> None:
        """Refuse vLLM's options, naming SGLang's; DCP; DP without DP attention."""
        for option, given, instead in (
            ("--gpu-memory-utilization", options.utilization != Fraction(9, 10), "--mem-fraction-static"),
            ("--block-size", options.block_size is not None, "--page-size"),
            ("--max-num-seqs", options.max_num_seqs is not None, "--max-running-requests"),
            (
                "--max-batched-tokens",
                options.max_batched_tokens is not None,
                "--chunked-prefill-size (not modelled)",
            ),
        ):
            if given:
                raise UsageError(f"{option} is vLLM's; with --engine sglang use SGLang's {instead}")
        if options.dcp > 1 and rule_for(DCP_RULE, options.engine_release.version).value is None:
            raise UsageError(
                f"--dcp {options.dcp}: SGLang's decode-context parallelism is modelled from {K3_RELEASE} "
                f"(--engine sglang=={K3_RELEASE})"
            )
        if options.mamba_cache_mode is not None:
            raise UsageError("--mamba-cache-mode is vLLM's; SGLang's is --mamba-radix-cache-strategy")
        if options.mamba_cache_dtype is not None:
            raise UsageError("--mamba-cache-dtype is vLLM's; SGLang's state dtype is --mamba-ssm-dtype")
        if options.mamba_strategy is not None and options.mamba_strategy not in SLOTS:
            raise UsageError(
                f"--mamba-radix-cache-strategy {shorten(options.mamba_strategy, 40)}: expected one of "
                f"{', '.join(SLOTS)}"
            )
        if options.dp > 1 and not options.dp_attention:
            raise UsageError(
                f"--dp {options.dp} without --enable-dp-attention: SGLang runs {options.dp} independent servers "
                "behind its router; plan one of them (its share of --gpus), or add --enable-dp-attention"
            )

    def parallel(self, options: DeploymentOptions, spec: ModelSpec, gpus: int) -> Parallel:
        """SGLang's terms: under DP attention `tp` is its --tp, all the GPUs of a pipeline stage, and the
        attention TP group is tp ÷ dp.

        >>> from kimicount.deploy.plan import DeploymentOptions
        >>> SGLang().parallel(DeploymentOptions(engine="sglang", tp=8, dp=8, ep=8, dp_attention=True), k2, 8).label
        'TP8 + DP8 attention + EP8'
        """
        tp = options.tp
        if options.dp_attention:
            tp_size = gpus // options.pp if tp is None else tp
            if tp_size % options.dp:
                raise UsageError(
                    f"--dp {options.dp}: SGLang's DP attention splits --tp {tp_size} into DP groups; it must divide"
                )
            tp = tp_size // options.dp
        return parallel_layout(
            spec,
            gpus,
            tp=tp,
            pp=options.pp,
            dp=options.dp,
            ep=options.ep,
            dcp=options.dcp,
            redundant=options.redundant_experts,
            sglang_dp=options.dp_attention,
        )

    def page(self, options: DeploymentOptions) -> int:
        """--page-size (1 unless given)."""
        return DEFAULT_PAGE_SIZE if options.page_size is None else options.page_size

    # --- the memory rule ---------------------------------------------------------------------------

    def usable(self, gpu: Accelerator, options: DeploymentOptions) -> int:
        """SGLang sizes against CUDA's whole total (its share is in the reserve). [bytes]"""
        return gpu.cuda_memory_bytes

    def static_fraction(
        self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator, parallel: Parallel
    ) -> StaticFraction:
        """--mem-fraction-static, or SGLang's default for this GPU, layout and model at the release."""
        if options.mem_fraction_static is not None:
            return StaticFraction(
                options.mem_fraction_static, True, printed=f"{float(options.mem_fraction_static)!r}"
            )
        release = options.engine_release.version
        if rule_for(FRACTION_RULE, release).value is None:
            raise UsageError(
                f"{options.engine_release}: SGLang's default mem_fraction_static is read up to 0.5.8.post1; give "
                "--mem-fraction-static"
            )
        vision = anatomy.spec.vision if options.vision else None
        if vision is not None:
            rule_for(VLM_RULE, release)
        return default_mem_fraction_static(
            gpu,
            parallel.tp * parallel.dp if parallel.sglang_dp else parallel.tp,
            parallel.pp,
            parallel.dp,
            dp_attention=parallel.sglang_dp,
            speculative=options.mtp,
            vision=None if vision is None else (vision.num_layers, vision.hidden_size),
        )

    def _preload(self, options: DeploymentOptions, gpu: Accelerator) -> tuple[int, bool, str]:
        if options.reserve is not None:
            return options.reserve, True, ""
        estimate = preload_estimate(gpu)
        return estimate.bytes, False, estimate.source

    def reserve(
        self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator, parallel: Parallel
    ) -> Reserve:
        """The memory in use before the weights load (--reserve, or the platform's estimate) and the
        static share of what is free then."""
        fraction = self.static_fraction(options, anatomy, gpu, parallel)
        preload, given, words = self._preload(options, gpu)
        multimodal = self._multimodal(options, anatomy, gpu, parallel.gpus)
        return sglang_reserve(gpu, fraction.value, preload, given, words, multimodal)

    def _multimodal(
        self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator, gpus: int
    ) -> tuple[int, str] | None:
        """The multimodal pools for a model with a vision tower, unless planned --text-only (kimicount
        takes a text-only server to have none; how SGLang's --language-only sets is_multimodal is not read)."""
        if not options.vision or anatomy.spec.vision is None:
            return None
        return mm_reservation(options.engine_release.version, gpu.platform, gpus)

    def least_reserve(self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator) -> int:
        """Its reserve does not depend on the layout but through the fraction: the largest fraction any
        layout gets (TP1's). [bytes]"""
        fraction = self.static_fraction(options, anatomy, gpu, Parallel()).value
        preload, given, words = self._preload(options, gpu)
        return sglang_reserve(
            gpu, fraction, preload, given, words, self._multimodal(options, anatomy, gpu, 1)
        ).bytes

    def load_extras(
        self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator, placement: Placement
    ) -> tuple[PlacedComponent, ...]:
        """On ROCm, the index buffers its INT4 (compressed-tensors pack-quantized) MoE keeps (INT4_MOE_RULE);
        on SM100 GPUs, what its MXFP4 MoE adds to Kimi K3's experts (MXFP4_MOE_RULE)."""
        spec = anatomy.spec
        if gpu.platform == "cuda" and gpu.name in SM100_GPUS and k3_mxfp4_experts(spec):
            align = rule_for(MXFP4_MOE_RULE, options.engine_release.version).value
            if align is None:
                return ()
            rule = f"fp32 per expert, widths padded to {align}"
            per_gpu = mxfp4_moe_extras(spec, placement, align)
            return (PlacedComponent(MXFP4_MOE_EXTRAS, rule, 0, per_gpu, Kind.weights, False),)
        if gpu.platform != "rocm" or not packed_experts(anatomy):
            return ()
        if rule_for(INT4_MOE_RULE, options.engine_release.version).value is None:
            raise UsageError(
                f"{options.engine_release}: SGLang's INT4 MoE buffers on ROCm are read up to 0.5.8.post1; "
                "plan --engine sglang==0.5.8.post1"
            )
        per_stage = int4_moe_indices(spec, placement)
        rule = "int32 indices, kept on ROCm"
        return (PlacedComponent(INT4_MOE_INDICES, rule, 0, per_stage, Kind.weights, False),)

    def pack(
        self,
        pool: int,
        groups: Sequence[PoolGroup],
        options: DeploymentOptions,
        spec: Any,
        gpu: Accelerator,
        parallel: Parallel,
    ) -> Packing | None:
        """DeepSeek V4's groups as SGLang's DSV4PoolConfigurator splits the pool (engines/sglang_deepseek_v4.py),
        one stage; None for any other model."""
        from kimicount.deploy.groups import compressed

        if not compressed(groups):
            return None
        if parallel.pp > 1:
            raise UsageError(
                f"--pp {parallel.pp}: SGLang's DeepSeek V4 pools per pipeline stage are not modelled"
            )
        return sglang_deepseek_v4.pack(
            pool,
            groups,
            release=options.engine_release,
            max_model_len=options.context(spec),
            max_running_requests=options.max_running_requests,
            dp=parallel.dp,
            page_size=options.page_size,
            speculative=options.mtp,
            dtype_given=options.kv_dtype,
        )

    def pack_state(
        self,
        pool: int,
        groups: Sequence[PoolGroup],
        options: DeploymentOptions,
        context: int,
        parallel: Parallel,
    ) -> StatePool:
        """Its mamba state pool beside the KV pool (MAMBA_POOL_RULE, engines/sglang_mamba.py): the share
        r ÷ (1 + r) of rest_memory in whole state slots, the KV pool the rest."""
        release = options.engine_release.version
        rule_for(MAMBA_POOL_RULE, release)
        strategy = options.mamba_strategy or rule_for(MAMBA_STRATEGY_RULE, release).value
        if strategy is None:
            raise UsageError(
                f"{options.engine_release}: SGLang's default --mamba-radix-cache-strategy for these releases is "
                "not read; give it (no_buffer, extra_buffer, extra_buffer_lazy)"
            )
        slots = rule_for(MAMBA_SLOTS_RULE, release).value
        if strategy not in slots:
            raise UsageError(
                f"--mamba-radix-cache-strategy {strategy}: {options.engine_release} has {', '.join(slots)} only"
            )
        return sglang_state_pool(
            pool,
            groups,
            self.page(options),
            context,
            ratio=options.mamba_full_memory_ratio or DEFAULT_FULL_MEMORY_RATIO,
            slots=slots[strategy] if options.radix_cache else 1,
            max_mamba_cache_size=options.max_mamba_cache_size,
            max_running_requests=options.max_running_requests,
            radix_cache=options.radix_cache,
            attention_dp=parallel.dp if parallel.sglang_dp else 1,
            dcp=parallel.dcp,
        )

    def state_dtypes(self, options: DeploymentOptions, spec: ModelSpec) -> tuple[str, str]:
        """mamba2_state_dtype: the convolution windows in the model's dtype, the recurrent state in
        --mamba-ssm-dtype (float32 by default)."""
        from kimicount.kvcache import default_dtype

        return default_dtype(spec), options.mamba_ssm_dtype or "fp32"

    def floor_release(self, spec: ModelSpec) -> str | None:
        """Kimi K3 runs from 0.5.18 (the cookbook's measured recipes)."""
        return K3_RELEASE if spec.model_type == "kimi_k3" else None

    def loaded(self, weights: Sequence[int]) -> list[int]:
        """SGLang measures the free memory after loading as the minimum over all ranks
        (get_available_gpu_memory with distributed=True): every stage sizes from the fullest one's."""
        return [max(weights)] * len(weights)

    def serve_settings(
        self, values: dict[str, object], flags: dict[str, str], memory: list[str]
    ) -> dict[str, object]:
        """SGLang's --tp-size stays all the GPUs of a stage under DP attention (its rule splits it by
        dp); --dp-size without DP attention is that many independent servers: one is planned."""
        settings = dict(values)
        tp, dp = settings.get("tp", 1), settings.get("dp", 1)
        assert isinstance(tp, int) and isinstance(dp, int)
        settings.setdefault("tp", 1)
        settings.setdefault("pp", 1)
        settings.setdefault("dp", 1)
        settings["engine"] = self.name
        if settings.get("dp_attention"):
            if tp % dp:
                raise UsageError(
                    f"the serve command's {flags['dp']} with {flags.get('tp', '--tp-size 1')}: DP attention needs "
                    "--dp-size to divide --tp-size"
                )
        elif dp > 1:
            memory.append(
                f"{flags['dp']} without --enable-dp-attention ({dp} independent copies; planned: one)"
            )
            settings["dp"] = 1
        return settings

    # --- what it prints and how the plan words it ----------------------------------------------------

    def max_running(self, report: PlanReport) -> int:
        """max_running_requests per DP rank, as it prints it: for a hybrid model at most the state slots
        ÷ the slots a request holds (_resolve_max_num_reqs)."""
        given = report.options.max_running_requests
        packing = report.fullest.packing
        if given is None and packing is not None:  # the model's own default (DeepSeek V4: 256)
            given = packing.cap
        running = max_running_requests(report.tokens_per_gpu, report.max_model_len, given, report.parallel.dp)
        for state in report.states:
            running = min(running, state.slots // state.slots_per_request)
        return running

    def max_sequences(self, report: PlanReport) -> int:
        return self.max_running(report)

    def memory_rows(self, report: PlanReport, stage: StageMemory) -> list[MemoryRow]:
        return [
            MemoryRow("− weights", stage.weights),
            MemoryRow("− kept back (SGLang's rule, below)", stage.reserve),
            MemoryRow(
                "= KV cache pool (an estimate)" if report.estimate else "= KV cache pool", stage.pool, True
            ),
        ]

    def reserve_lines(self, report: PlanReport) -> tuple[list[str], bool]:
        fraction = report.static_fraction
        if report.reserve is None or fraction is None:
            return [], False
        value = fraction.printed or f"{float(fraction.value):g}"
        if fraction.given:
            first = f"mem_fraction_static {value} (--mem-fraction-static)."
        else:
            first = f"mem_fraction_static {value}, {report.release}'s default here: {fraction.calculation}."
        lines = [first, *(f"{sentence}." for sentence in fraction.why)]
        multimodal = any(name == "multimodal pools" for name, _, _ in report.reserve.terms)
        lines.append(
            "Kept back, SGLang's rule: pool = free memory before the weights load × mem_fraction_static − weights"
            + (" − the multimodal pools:" if multimodal else ":")
        )
        lines.append(
            "--reserve SIZE replaces the memory in use before load; --kv-memory SIZE starts from the pool."
        )
        return lines, True

    def printed_lines(self, report: PlanReport) -> list[str]:
        """What SGLang prints at start-up, per DP rank (it prints GiB as "GB")."""
        per_rank = " (each DP rank's scheduler prints its own)" if report.parallel.dp > 1 else ""
        tokens = report.tokens_per_gpu
        packing = report.fullest.packing
        if packing is not None:  # DeepSeek V4: the configurator's own lines, then the scheduler's
            return [
                f"{report.release} would print: "
                + "; ".join(packing.printed)
                + f"; max_total_num_tokens={tokens}, max_running_requests={report.max_running_requests}, "
                f"context_len={report.max_model_len}{per_rank}"
            ]
        kv = tokens * report.fullest.bytes_per_token / GIB
        fraction = report.static_fraction
        printed = "" if fraction is None else f"mem_fraction_static={fraction.printed}; "
        state = report.fullest.state
        if state is not None:
            printed += f"Mamba Cache is allocated. max_mamba_cache_size: {state.slots}; "
        line = (
            f"{report.release} would print: {printed}max_total_num_tokens={tokens}, "
            f"max_running_requests={report.max_running_requests}, context_len={report.max_model_len}; KV Cache "
            f"is allocated. #tokens: {tokens}, KV size: {kv:.2f} GB{per_rank}; its memory figures are GiB "
            'though it writes "GB".'
        )
        return ([] if state is None else list(state.lines)) + [line]

    def json_figures(self, report: PlanReport) -> tuple[str, dict[str, Any] | None]:
        """mem_fraction_static (given or its default, with the calculation) and what it prints at
        start-up per DP rank (max_total_num_tokens, max_running_requests, context_len, in GiB that it
        writes "GB")."""
        fraction = report.static_fraction
        return "sglang", {
            "mem_fraction_static": None if fraction is None else float(fraction.value),
            "mem_fraction_static_given": None if fraction is None else fraction.given,
            "mem_fraction_static_calculation": None if fraction is None else fraction.calculation,
            "mem_fraction_static_printed": None if fraction is None else fraction.printed,
            "mem_fraction_static_why": None if fraction is None else list(fraction.why),
            "page_size": report.block_size,
            "max_total_num_tokens": report.tokens_per_gpu,
            "max_running_requests": report.max_running_requests,
            "context_len": report.max_model_len,
            "kv_size_gib": round(
                (
                    report.tokens_per_gpu * report.fullest.bytes_per_token
                    if report.fullest.packing is None
                    else report.fullest.packing.used_bytes
                )
                / GIB,
                2,
            ),
            "estimate": report.estimate,
        }
