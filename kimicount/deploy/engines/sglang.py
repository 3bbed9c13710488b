"""SGLang's KV-cache pool, as its code sizes it.

The rule (python/sglang/srt/model_executor/model_runner.py, `profile_max_num_token` and
`init_memory_pool`; in newer trees `profile_available_bytes` in pool_configurator.py):

    total_gpu_memory = the free memory after the distributed init, before the weights load
                       (`init_torch_distributed` returns get_available_gpu_memory: the minimum over ranks)
    rest_memory      = free memory after the weights load − total_gpu_memory × (1 − mem_fraction_static)
    max_num_token    = int(rest_memory × 2^30) // cell_size
    max_total_num_tokens = max_num_token // page_size × page_size

so the pool is `free before load × mem_fraction_static − weights` and the share 1 − mem_fraction_static
of the free memory is left to activations and CUDA graphs. SGLang counts in GiB and prints them as "GB".

The cell (MLATokenToKVPool, mem_cache/memory_pool.py; `_compute_cell_size`): (kv_lora_rank +
qk_rope_head_dim) × layers × element size, 1,152 B per layer in bf16 and 576 B in fp8; DeepSeek-V3.2's
NSA pool (DSATokenToKVPool) adds the indexer's keys, index_head_dim fp8 bytes and one F32 scale per 128
per layer, and stores an fp8 cache as FlashMLA's 656-byte record. The per-token bytes are kvcache's
layouts, the same as vLLM's.

What is an estimate here: the memory already in use before the weights load (the CUDA context, NCCL
communicators, the custom all-reduce buffers), which decides the free memory SGLang measures. kimicount
takes 1.5 GiB for it (PRELOAD_ESTIMATE); `--reserve` replaces the figure and `--kv-memory` starts from
the pool SGLang printed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from kimicount.deploy.engines.reserve import Reserve
from kimicount.deploy.hardware import Accelerator

GIB = 2**30
MIB = 2**20

#: The memory in use before the weights load: CUDA context, NCCL communicators, custom all-reduce
#: buffers. An estimate; SGLang's Kubernetes guide's DeepSeek-R1 run on 2 × 8 × H20 implies 1.54 GiB.
PRELOAD_ESTIMATE = 3 * GIB // 2
#: SGLang's default page size (--page-size); FlashMLA needs 64, CUTLASS MLA 128 (server_args.py).
DEFAULT_PAGE_SIZE = 1
#: The bounds of SGLang's default max_running_requests per DP rank (model_runner's max_num_reqs).
MIN_RUNNING_REQUESTS, MAX_RUNNING_REQUESTS = 2048, 4096


@dataclass(frozen=True)
class StaticFraction:
    """mem_fraction_static, given or as SGLang picks it, with the calculation in words."""

    value: Fraction
    given: bool
    calculation: str = ""


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
) -> StaticFraction:
    """SGLang's mem_fraction_static when none is given (server_args.py `_handle_gpu_memory_settings`):
    reserved MiB = 512 + max(chunked_prefill_size, 2048) × 1.5 + cuda_graph_max_bs × 2
    + tp_size × pp_size ÷ 8 × 1024 (+ cuda_graph_max_bs × dp_size × 3, and × 1.5 more past 300, under DP
    attention), at least 10,240 on GPUs over 60 GiB, + 2,048 for EAGLE/MTP drafts; then
    round((memory − reserved) ÷ memory, 3), memory in MiB as nvidia-smi reports it.

    >>> from kimicount.deploy.hardware import ACCELERATORS
    >>> float(default_mem_fraction_static(ACCELERATORS["H200"], 8).value)  # 1 − 14,848 ÷ 143,771
    0.897
    """
    chunk, graph_bs = batch_defaults(gpu, tp_size)
    mib = gpu.memory_bytes // MIB
    parts = [("512", 512.0), (f"{max(chunk, 2048):,} × 1.5", max(chunk, 2048) * 1.5)]
    parts.append((f"{graph_bs} × 2", graph_bs * 2.0))
    parts.append((f"{tp_size} × {pp_size} ÷ 8 × 1,024", tp_size * pp_size / 8 * 1024))
    if dp_attention:
        parts.append((f"{graph_bs} × {dp_size} × 3", graph_bs * dp_size * 3.0))
        if graph_bs > 300:
            parts.append((f"{graph_bs} × {dp_size} × 1.5", graph_bs * dp_size * 1.5))
    reserved = sum(value for _, value in parts)
    text = " + ".join(name for name, _ in parts)
    if mib > 60 * 1024 and reserved < 10 * 1024:
        reserved, text = 10 * 1024.0, f"max({text}, 10,240)"
    if speculative:
        reserved += 2 * 1024
        text += " + 2,048 (MTP draft)"
    value = round((mib - reserved) / mib, 3)
    calculation = f"round(({mib:,} − ({text} = {reserved:,g})) ÷ {mib:,}, 3) MiB = {value:g}"
    return StaticFraction(Fraction(str(value)), False, calculation)


def sglang_reserve(gpu: Accelerator, fraction: Fraction, preload: int, preload_given: bool) -> Reserve:
    """What SGLang keeps from the KV pool besides the weights: the memory in use before the weights load
    and the share 1 − mem_fraction_static of the free memory then. [bytes]

    The pool is then CUDA's total − weights − this = floor(free before load × mem_fraction_static) −
    weights, SGLang's rest_memory (its int() of a GiB float rounds the same way to the byte).

    >>> from kimicount.deploy.hardware import ACCELERATORS
    >>> [b for _, _, b in sglang_reserve(ACCELERATORS["H20"], Fraction(93, 100), PRELOAD_ESTIMATE, False).terms]
    [1610612736, 7028007240]
    """
    free = gpu.cuda_memory_bytes - preload
    kept = free - math.floor(free * fraction)
    before = (
        "as given by --reserve" if preload_given else "an estimate: CUDA context, NCCL, custom all-reduce"
    )
    terms = (
        ("before load", f"{preload / GIB:g} GiB ({before})", preload),
        ("static share", f"{free:,} B free × (1 − {float(fraction):g})", kept),
    )
    return Reserve(
        preload + kept,
        not preload_given,
        "memory in use before the weights load + free memory then × (1 − mem_fraction_static)",
        terms,
        "SGLang's profile_max_num_token: the memory in use before the weights load (CUDA context, NCCL "
        "communicators, custom all-reduce buffers; an estimate of 1.5 GiB unless --reserve gives it), and "
        "the share 1 − mem_fraction_static of the memory free then, left to activations and CUDA graphs",
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
