"""vLLM's reserve: what it keeps back from the KV pool besides the weights, estimated term by term.

vLLM V1 sizes the pool in its worker's `determine_available_memory` (vllm/v1/worker/gpu_worker.py):
request_memory (CUDA's total × gpu_memory_utilization) less non_kv_cache_memory, which is the weights
plus what a profile pass adds: the torch peak of `GPUModelRunner.profile_run` (a dummy forward of
max_num_batched_tokens tokens, then `_dummy_sampler_run` over min(max_num_seqs, max_num_batched_tokens)
rows) and the memory allocated outside torch (NCCL communicators, custom all-reduce buffers, cuBLAS
workspaces). CUDA graphs are captured later, in `compile_or_warm_up_model`, after the pool is allocated;
they are subtracted only when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (its default is 0, vllm/envs.py),
so by default they live in the headroom that gpu_memory_utilization leaves, not in the reserve.

The terms, each a formula over the spec and the engine's batch limits:

- activations: the fused-MoE workspaces of one pass of max_batched_tokens tokens (k = num_experts_per_tok
  copies of each token, I = an expert's width on one GPU, and four hidden-size buffers), in bf16;
- sampler: the buffers alive together at the peak of vLLM's sampler dummy run over `rows` rows of the
  vocabulary (vllm/v1/sample/sampler.py, ops/topk_topp_sampler.py's sort path, which the dummy run takes
  since it sets both top-k and top-p). The peak is the sort itself: the bf16 logits the runner holds
  (2 B), their fp32 copy (4 B), the int64 iota PyTorch's stable sort allocates as its input values
  (8 B; aten/src/ATen/native/cuda/SortStable.cu, segmented_sort_pairs), the sorted values (4 B) and
  int64 indices (8 B), and CUB's SortPairs temporary storage, an alternate key and value buffer
  (4 + 8 B): 38 B per row per vocabulary entry. (After the sort the top-k/top-p masks, softmax and
  scatter need less: 28 B.) Later vLLMs that sort with Triton or FlashInfer need less;
- non-torch memory: NCCL communicators (vLLM opens one per process group), the custom all-reduce
  buffers, cuBLAS and attention workspaces: an allowance of 1.5 GiB, the one figure not derived.

Against the published runs (kimicount's tests and docs/engines.md): Kimi-K2-Thinking on 8 × H200, TP8,
defaults (8,192 batched tokens, 1,024 sequences): 8.07 GiB kept back, 8.78 GiB estimated; Kimi-K2.5 on
8 × H100, TP8, --max-num-seqs 64: 2.57 GiB kept back, 3.21 GiB estimated. The two runs differ by
5.50 GiB, the estimate by 5.57 GiB: the sampler's rows are what moves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimicount.deploy.hardware import Accelerator
from kimicount.spec import ModelSpec

GIB = 2**30

#: vLLM's defaults for the API server: --max-num-batched-tokens and --max-num-seqs on GPUs of at least
#: 70 GiB other than the A100 (its EngineArgs batch defaults); smaller GPUs and the A100 get 2,048 and 256.
LARGE_GPU_DEFAULTS = (8192, 1024)
SMALL_GPU_DEFAULTS = (2048, 256)
#: Bytes per row per vocabulary entry alive at the sampler's peak (the module docstring lists them).
SAMPLER_BYTES = 2 + 4 + 8 + (4 + 8) + (4 + 8)
#: The reserve's one allowance: memory allocated outside torch (NCCL, custom all-reduce, workspaces).
NON_TORCH_ALLOWANCE = 3 * GIB // 2


def engine_batch_defaults(gpu: Accelerator) -> tuple[int, int]:
    """(max batched tokens, max sequences) that vLLM picks for this GPU when the user does not.

    >>> from kimicount.deploy.hardware import ACCELERATORS
    >>> engine_batch_defaults(ACCELERATORS["H200"]), engine_batch_defaults(ACCELERATORS["A100-80GB"])
    ((8192, 1024), (2048, 256))
    """
    return LARGE_GPU_DEFAULTS if large_gpu(gpu) else SMALL_GPU_DEFAULTS


def large_gpu(gpu: Accelerator) -> bool:
    """Whether vLLM gives this GPU its larger batch defaults: at least 70 GiB, and not an A100."""
    return gpu.cuda_memory_bytes >= 70 * GIB and not gpu.name.startswith("A100")


@dataclass(frozen=True)
class Reserve:
    """What the engine keeps back from the KV pool besides the weights. `estimate` is False when the
    user gave the figure; `terms` are (name, calculation, bytes) of the estimate."""

    bytes: int
    estimate: bool
    formula: str = ""
    terms: tuple[tuple[str, str, int], ...] = ()
    assumes: str = ""
    assumes_short: str = ""


RESERVE_FORMULA = (
    "max_batched_tokens × (k × max(2 × I, H) + k × I + 4 × H) × 2 B"
    f" + min(max_num_seqs, max_batched_tokens) × vocab_size × {SAMPLER_BYTES} B + 1.5 GiB"
)
#: The same in a line, for the terminal.
RESERVE_ASSUMES_SHORT = (
    "vLLM V1's start-up profile: one pass of max_batched_tokens tokens, the sampler over max_num_seqs "
    "rows, and memory outside torch; CUDA graphs come after the pool is sized"
)
RESERVE_ASSUMES = (
    "vLLM V1's start-up profile (gpu_worker.determine_available_memory): one pass of max_batched_tokens "
    "tokens (the fused-MoE kernel's workspaces for k = num_experts_per_tok copies of each token, I = an "
    "expert's width on one GPU, and four hidden-size buffers, in bf16); the sampler's dummy run over "
    "min(max_num_seqs, max_batched_tokens) rows, 38 B per vocabulary entry alive at its peak, the sort of "
    "the top-k/top-p path (bf16 logits, their fp32 copy, PyTorch's int64 iota, the sorted values and int64 "
    "indices, CUB's alternate key and value buffers); and 1.5 GiB allowed for memory outside torch (NCCL "
    "communicators, custom "
    "all-reduce buffers, cuBLAS and attention workspaces). CUDA graphs are captured after the pool is "
    "sized (unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1) and take the headroom instead"
)


def reserve_estimate(spec: ModelSpec, width: int, max_batched_tokens: int, max_num_seqs: int) -> Reserve:
    """The reserve vLLM takes, estimated from its profile pass, with experts `width` wide on each GPU
    (placement.expert_width_per_gpu). [bytes]

    >>> reserve = reserve_estimate(k2, 256, 8192, 1024)
    >>> [bytes_ for _, _, bytes_ in reserve.terms]  # 8,192 × 88,064 × 2; 1,024 × 163,840 × 38; 1.5 GiB
    [1442840576, 6375342080, 1610612736]
    """
    k, hidden = spec.num_experts_per_tok, spec.hidden_size
    per_token = k * max(2 * width, hidden) + k * width + 4 * hidden
    rows = min(max_num_seqs, max_batched_tokens)
    terms = (
        (
            "activations",
            f"{max_batched_tokens:,} × ({k} × max(2 × {width:,}, {hidden:,}) + {k} × {width:,} + 4 × {hidden:,}) × 2 B",
            max_batched_tokens * per_token * 2,
        ),
        (
            "sampler",
            f"{rows:,} × {spec.vocab_size:,} × {SAMPLER_BYTES} B",
            rows * spec.vocab_size * SAMPLER_BYTES,
        ),
        ("non-torch", "1.5 GiB (NCCL, custom all-reduce, workspaces)", NON_TORCH_ALLOWANCE),
    )
    return Reserve(
        sum(t[2] for t in terms), True, RESERVE_FORMULA, terms, RESERVE_ASSUMES, RESERVE_ASSUMES_SHORT
    )
