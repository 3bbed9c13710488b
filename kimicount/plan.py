"""`kimicount plan`: one GPU's memory under a deployment, and how much KV cache is left for context.

Per GPU, as vLLM sizes it (its worker's `determine_available_memory`, then its KV-cache config):

    pool   = ceil(CUDA's total × gpu_memory_utilization) − weights − reserve      (or --kv-memory)
    pages  = floor(pool ÷ (block_size × KV bytes per token on this GPU));  tokens = pages × block_size
    context held by one replica = tokens × DCP;  by the deployment = × DP
    one sequence of max_model_len takes ceil(max_model_len ÷ (block_size × DCP)) pages on each GPU;
    maximum concurrency = pages ÷ that, as vLLM prints it

CUDA's total is what `torch.cuda.mem_get_info()` reports, a few hundred MiB under nvidia-smi's (vLLM's
MemorySnapshot, then its request_memory rounds the product up). The
pool and all that follows from it are exact given the reserve (the engine's activation peak, sampler
buffers, CUDA graphs and communication buffers), which is an estimate, labelled so, with its formula;
so is the CUDA total of a GPU no public log gives. `--reserve` replaces the one, `--gpu-memory` the
other, and `--kv-memory` skips the whole subtraction, starting from the figure an engine printed.
Under pipeline parallelism every stage is sized and the deployment holds what its fullest stage
allows, as vLLM takes the smallest block count of all its workers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from fractions import Fraction

from kimicount.anatomy import Anatomy
from kimicount.errors import UsageError, require_positive
from kimicount.hardware import Accelerator
from kimicount.kvcache import (
    Layout,
    LayoutCache,
    Workload,
    bytes_per_token_per_layer,
    default_dtype,
    element_bytes,
    layout_cache,
)
from kimicount.placement import Parallel, Placement, expert_width_per_gpu, parallel_layout, place
from kimicount.spec import ModelSpec

GIB = 2**30

#: vLLM's defaults for the API server: --max-num-batched-tokens and --max-num-seqs on GPUs of at least
#: 70 GiB other than the A100 (its EngineArgs batch defaults); smaller GPUs and the A100 get 2,048 and 256.
LARGE_GPU_DEFAULTS = (8192, 1024)
SMALL_GPU_DEFAULTS = (2048, 256)
#: The reserve's fixed part: CUDA graphs, NCCL and custom all-reduce buffers, cuBLAS workspaces.
RUNTIME_ALLOWANCE = 2 * GIB
#: fp32 copies of the logits the sampler holds at once: logits, probabilities, sorted values and their
#: int64 indices (two fp32-sized halves).
SAMPLER_COPIES = 4


def engine_batch_defaults(gpu: Accelerator) -> tuple[int, int]:
    """(max batched tokens, max sequences) that vLLM picks for this GPU when the user does not.

    >>> from kimicount.hardware import ACCELERATORS
    >>> engine_batch_defaults(ACCELERATORS["H200"]), engine_batch_defaults(ACCELERATORS["A100-80GB"])
    ((8192, 1024), (2048, 256))
    """
    large = gpu.cuda_memory_bytes >= 70 * GIB and not gpu.name.startswith("A100")
    return LARGE_GPU_DEFAULTS if large else SMALL_GPU_DEFAULTS


# --- the reserve ---------------------------------------------------------------------------------


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
    " + min(max_num_seqs, max_batched_tokens) × vocab_size × 4 B × 4 + 2 GiB"
)
#: The same in a line, for the terminal.
RESERVE_ASSUMES_SHORT = (
    "vLLM V1's start-up profile: one pass of max_batched_tokens tokens, the sampler over max_num_seqs "
    "rows, CUDA graphs and communication buffers"
)
RESERVE_ASSUMES = (
    "vLLM V1's start-up profile: one pass of max_batched_tokens tokens (the fused-MoE kernel's workspaces "
    "for k = num_experts_per_tok copies of each token, I = an expert's width on one GPU, and four "
    "hidden-size buffers, in bf16), the sampler's fp32 logits, probabilities and sort over max_num_seqs "
    "rows, and 2 GiB for CUDA graphs, NCCL and all-reduce buffers and cuBLAS workspaces"
)


def reserve_estimate(spec: ModelSpec, width: int, max_batched_tokens: int, max_num_seqs: int) -> Reserve:
    """The reserve an engine takes, estimated from the largest transient buffers of its profile run,
    with experts `width` wide on each GPU (placement.expert_width_per_gpu). [bytes]

    >>> reserve = reserve_estimate(k2, 256, 8192, 1024)
    >>> [bytes_ for _, _, bytes_ in reserve.terms]  # 8,192 × 88,064 × 2; 1,024 × 163,840 × 16; 2 GiB
    [1442840576, 2684354560, 2147483648]
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
            f"{rows:,} × {spec.vocab_size:,} × 4 B × {SAMPLER_COPIES}",
            rows * spec.vocab_size * 4 * SAMPLER_COPIES,
        ),
        ("runtime", "2 GiB", RUNTIME_ALLOWANCE),
    )
    return Reserve(
        sum(t[2] for t in terms), True, RESERVE_FORMULA, terms, RESERVE_ASSUMES, RESERVE_ASSUMES_SHORT
    )


def usable_memory(gpu: Accelerator, utilization: Fraction) -> int:
    """What vLLM lets itself use of one GPU, its request_memory: ceil(CUDA's total ×
    gpu_memory_utilization). [bytes]

    >>> from kimicount.hardware import ACCELERATORS
    >>> usable_memory(ACCELERATORS["H200"], Fraction(9, 10))  # ceil(143,156 MiB × 0.9)
    135098951271
    """
    return math.ceil(gpu.cuda_memory_bytes * utilization)


# --- the KV cache ----------------------------------------------------------------------------------


def engine_layout(spec: ModelSpec, dtype: str, layout: Layout | None) -> Layout:
    """The cache layout engines use for MLA: the latent; with an fp8 cache on DeepSeek-V3.2 (sparse
    FlashMLA), FlashMLA's 656-byte fp8 record (vLLM's fp8_ds_mla). Dense MLA models keep a plain fp8
    latent (vLLM's fp8_e4m3). `layout` overrides.

    >>> engine_layout(k2, "fp8", None).value
    'latent'
    """
    if layout is not None:
        return layout
    return Layout.flashmla_fp8 if dtype == "fp8" and spec.indexer is not None else Layout.latent


def sequence_pages(tokens: int, block_size: int, dcp: int = 1) -> int:
    """Pages one sequence of `tokens` takes on each GPU, its tokens split by DCP: vLLM's
    cdiv(cdiv(tokens, dcp), block_size), which is ceil(tokens ÷ (block_size × dcp)). [pages]

    >>> sequence_pages(262_144, 64), sequence_pages(1000, 64), sequence_pages(262_144, 64, 8)
    (4096, 16, 512)
    """
    return -(-tokens // (block_size * dcp))


@dataclass(frozen=True)
class DeploymentOptions:
    """What an engine is told: the parallel layout as typed (`tp` None: what pp and dp leave; `ep`
    None or 1: off), the share of memory it may use, what it keeps back (`reserve`, or the defaults
    the estimate reads), or the KV pool it printed (`kv_memory`), the cache's dtype, layout and page
    size, the longest sequence, and what it loads besides the language model. Sizes in bytes; None:
    the engine's default or the config's."""

    tp: int | None = None
    pp: int = 1
    dp: int = 1
    ep: int | None = None
    dcp: int = 1
    utilization: Fraction = Fraction(9, 10)
    reserve: int | None = None
    max_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_memory: int | None = None
    kv_dtype: str | None = None
    kv_layout: Layout | None = None
    block_size: int = 64
    max_model_len: int | None = None
    mtp: bool = False
    vision: bool = True

    def check(self, anatomy: Anatomy) -> None:
        """Refuse, in one line, an option no engine takes."""
        if not 0 < self.utilization <= 1:
            raise UsageError(
                f"--gpu-memory-utilization {float(self.utilization):g}: expected a fraction in (0, 1]"
            )
        for option, value in (
            ("--block-size", self.block_size),
            ("--max-model-len", self.max_model_len),
            ("--max-batched-tokens", self.max_batched_tokens),
            ("--max-num-seqs", self.max_num_seqs),
            ("--reserve", self.reserve),
            ("--kv-memory", self.kv_memory),
        ):
            if value is not None:
                require_positive(option, value)
        if self.mtp and anatomy.mtp is None:
            raise UsageError(
                f"--mtp: {anatomy.spec.name} has no multi-token-prediction layer (num_nextn_predict_layers 0)"
            )
        element_bytes(self.dtype(anatomy.spec), "--kv-dtype")

    def parallel(self, spec: ModelSpec, gpus: int) -> Parallel:
        """The layout of `gpus` GPUs these options describe, checked (placement.parallel_layout).

        >>> DeploymentOptions(dp=8, ep=8).parallel(k2, 8).label
        'DP8 + EP8'
        """
        return parallel_layout(spec, gpus, tp=self.tp, pp=self.pp, dp=self.dp, ep=self.ep, dcp=self.dcp)

    def context(self, spec: ModelSpec) -> int:
        """max_model_len, or the config's max_position_embeddings. [tokens]"""
        return self.max_model_len or spec.max_position_embeddings

    def dtype(self, spec: ModelSpec) -> str:
        """The cache dtype: --kv-dtype, or the model's."""
        return default_dtype(spec) if self.kv_dtype is None else self.kv_dtype

    def reserve_for(self, anatomy: Anatomy, gpu: Accelerator, parallel: Parallel) -> Reserve | None:
        """What is kept back: None under --kv-memory, the given --reserve, or the estimate."""
        if self.kv_memory is not None:
            return None
        if self.reserve is not None:
            return Reserve(self.reserve, False)
        tokens, sequences = engine_batch_defaults(gpu)
        return reserve_estimate(
            anatomy.spec,
            expert_width_per_gpu(anatomy.spec, parallel),
            self.max_batched_tokens or tokens,
            self.max_num_seqs or sequences,
        )


@dataclass(frozen=True)
class StageMemory:
    """One GPU of a stage: its weights, the reserve, the KV pool and what it holds, and what is left.

    `pool` is negative when the weights and reserve do not fit in the usable memory."""

    stage: int
    layers: tuple[int, ...]
    kv_layers: int
    weights: int
    reserve: int
    pool: int
    cache: LayoutCache  # bytes per token on this GPU, for its kv_layers

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token held on this GPU (all its layers). [bytes/token]"""
        return self.cache.bytes_per_token_per_gpu

    @property
    def tokens(self) -> int:
        """Tokens whose KV fits in the pool, in whole pages:
        floor(pool ÷ (block_size × bytes_per_token)) × block_size. [tokens]"""
        return self.cache.max_tokens(self.pool) if self.pool > 0 else 0

    @property
    def kv_bytes(self) -> int:
        """What those tokens take: tokens × bytes_per_token. [bytes]"""
        return self.tokens * self.bytes_per_token


@dataclass(frozen=True)
class PlanReport:
    """A deployment of one model on `count` GPUs: where the weights go, what the KV cache holds."""

    anatomy: Anatomy
    gpu: Accelerator
    count: int
    parallel: Parallel
    placement: Placement
    options: DeploymentOptions
    reserve: Reserve | None  # None when --kv-memory gave the pool
    layout: Layout
    dtype: str
    stages: tuple[StageMemory, ...]
    min_gpus: tuple[int, Parallel] | None = None
    min_gpus_asked: bool = False

    @property
    def spec(self) -> ModelSpec:
        return self.anatomy.spec

    @property
    def utilization(self) -> Fraction:
        return self.options.utilization

    @property
    def kv_memory(self) -> int | None:
        return self.options.kv_memory

    @property
    def block_size(self) -> int:
        return self.options.block_size

    @property
    def max_model_len(self) -> int:
        return self.options.context(self.spec)

    @property
    def usable(self) -> int:
        """usable_memory: ceil(CUDA's total × gpu_memory_utilization). [bytes]"""
        return usable_memory(self.gpu, self.utilization)

    @property
    def estimated_inputs(self) -> tuple[str, ...]:
        """The estimates the pool rests on, and so every figure that follows from it (tokens, concurrency,
        the verdict, the fewest GPUs): 'reserve', 'cuda_memory'; none under --kv-memory."""
        if self.kv_memory is not None:
            return ()
        reserve = ("reserve",) if self.reserve is not None and self.reserve.estimate else ()
        return reserve + (("cuda_memory",) if self.gpu.cuda_memory_estimated else ())

    @property
    def search_estimated_inputs(self) -> tuple[str, ...]:
        """The estimates the --min-gpus search rests on: it sizes every layout from usable memory less
        the reserve (never from --kv-memory), so the reserve unless --reserve gave it, and an estimated
        CUDA total."""
        reserve = ("reserve",) if self.options.reserve is None else ()
        return reserve + (("cuda_memory",) if self.gpu.cuda_memory_estimated else ())

    @property
    def estimate(self) -> bool:
        """Whether the pool and what follows from it are estimates."""
        return bool(self.estimated_inputs)

    @property
    def pages_per_gpu(self) -> int:
        """KV pages on each GPU of the fullest stage (every stage must hold the same tokens). [pages]"""
        return min(stage.tokens for stage in self.stages) // self.block_size

    @property
    def tokens_per_gpu(self) -> int:
        """pages_per_gpu × block_size. [tokens]"""
        return self.pages_per_gpu * self.block_size

    @property
    def tokens_per_replica(self) -> int:
        """Context one attention replica holds: tokens_per_gpu × DCP (decode-context parallelism splits
        the latent by token over DCP ranks). [tokens]"""
        return self.tokens_per_gpu * self.parallel.dcp

    @property
    def tokens_total(self) -> int:
        """tokens_per_replica × DP: each DP rank keeps its own sequences. [tokens]"""
        return self.tokens_per_replica * self.parallel.dp

    @property
    def sequence_pages(self) -> int:
        """Pages one sequence of max_model_len takes on each GPU. [pages]"""
        return sequence_pages(self.max_model_len, self.block_size, self.parallel.dcp)

    @property
    def max_concurrency(self) -> float:
        """pages_per_gpu ÷ sequence_pages, as vLLM prints it ('2.73x'; its num_blocks ÷
        cdiv(max_model_len, block_size), DCP splitting max_model_len first)."""
        return self.pages_per_gpu / self.sequence_pages

    @property
    def sequences_per_replica(self) -> int:
        """Whole sequences of max_model_len one replica holds at once. [sequences]"""
        return self.pages_per_gpu // self.sequence_pages

    @property
    def fits(self) -> bool:
        """Every GPU holds its weights, the reserve and one sequence of max_model_len."""
        return self.short_by == 0

    @property
    def short_by(self) -> int:
        """The most bytes any GPU lacks for one sequence of max_model_len (0 when it fits). [bytes]"""
        one = self.sequence_pages * self.block_size
        return max(0, *(one * stage.bytes_per_token - stage.pool for stage in self.stages))

    @property
    def fullest(self) -> StageMemory:
        """The stage with the least room: the one that decides."""
        return min(self.stages, key=lambda s: (s.tokens, s.pool))


def plan_memory(
    anatomy: Anatomy, gpu: Accelerator, parallel: Parallel, options: DeploymentOptions
) -> PlanReport:
    """Place the weights on `parallel.gpus` GPUs and size every stage's KV pool (options checked)."""
    spec = anatomy.spec
    placement = place(anatomy, parallel, mtp=options.mtp, vision=options.vision)
    dtype = options.dtype(spec)
    layout = engine_layout(spec, dtype, options.kv_layout)
    reserve = options.reserve_for(anatomy, gpu, parallel)
    usable = usable_memory(gpu, options.utilization)
    workload = Workload(tokens=options.context(spec), block_size=options.block_size, tp=parallel.tp)
    stages = []
    for index, layers in enumerate(placement.stages):
        kv_layers = placement.kv_layers(index)
        weights = placement.weight_bytes(index)
        kept = 0 if reserve is None else reserve.bytes
        pool = options.kv_memory if options.kv_memory is not None else usable - weights - kept
        cache = layout_cache(spec, layout, element_bytes(dtype, "--kv-dtype"), kv_layers, workload)
        stages.append(StageMemory(index, layers, kv_layers, weights, kept, pool, cache))
    return PlanReport(
        anatomy, gpu, parallel.gpus, parallel, placement, options, reserve, layout, dtype, tuple(stages)
    )


def plan(
    anatomy: Anatomy,
    gpu: Accelerator,
    count: int,
    options: DeploymentOptions = DeploymentOptions(),
    *,
    min_gpus: bool = False,
) -> PlanReport:
    """Check the options, place the model on `count` GPUs and size its KV cache. With `min_gpus`, also
    search the fewest GPUs of this type that hold the weights, the reserve and one sequence of
    max_model_len (in layouts of its own: the search ignores the options' layout).

    >>> from kimicount.anatomy import build_anatomy
    >>> from kimicount.hardware import ACCELERATORS
    >>> report = plan(build_anatomy(k2), ACCELERATORS["H200"], 16, DeploymentOptions(kv_memory=40 * 2**30))
    >>> report.parallel.label, report.tokens_per_gpu  # floor(40 GiB ÷ (64 × 70,272 B)) × 64
    ('TP16', 611136)
    """
    options.check(anatomy)
    report = plan_memory(anatomy, gpu, options.parallel(anatomy.spec, count), options)
    if not min_gpus:
        return report
    return replace(report, min_gpus=fewest_gpus(anatomy, gpu, options), min_gpus_asked=True)


# --- the fewest GPUs -------------------------------------------------------------------------------

#: The search gives up past this many GPUs.
MAX_SEARCH_GPUS = 4096


def candidate_layouts(spec: ModelSpec, gpus: int) -> Iterator[Parallel]:
    """Layouts of `gpus` GPUs worth trying, simplest first: TP alone, TP with EP, DP attention with EP,
    then TP × PP with and without EP (fewer stages first). Layouts the model cannot run are skipped."""
    tried: list[dict[str, int]] = [{"tp": gpus}, {"tp": gpus, "ep": gpus}, {"tp": 1, "dp": gpus, "ep": gpus}]
    for pp in range(2, min(gpus, spec.num_hidden_layers) + 1):
        if gpus % pp == 0:
            tried += [{"tp": gpus // pp, "pp": pp}, {"tp": gpus // pp, "pp": pp, "ep": gpus // pp}]
    for options in tried:
        try:
            yield parallel_layout(spec, gpus, **options)
        except UsageError:
            continue


def search_limit(spec: ModelSpec) -> int:
    """The most GPUs worth trying: past H × layers no TP × PP layout exists (TP divides the heads, PP
    at most one layer a stage) and past E experts DP + EP holds one expert per GPU, as at E; so no
    larger count puts less on its fullest GPU. At most MAX_SEARCH_GPUS. [GPUs]

    >>> search_limit(k2)  # 64 heads × 61 layers
    3904
    """
    return min(MAX_SEARCH_GPUS, max(spec.num_attention_heads * spec.num_hidden_layers, spec.n_routed_experts))


def least_need(anatomy: Anatomy, gpu: Accelerator, options: DeploymentOptions) -> int:
    """Bytes every layout needs on its fullest GPU, however many GPUs: one layer's KV of one sequence
    (a stage holds at least one layer; the search tries no DCP) and the reserve with the narrowest
    experts (width 0 in the estimate). [bytes]"""
    spec = anatomy.spec
    dtype = options.dtype(spec)
    layout = engine_layout(spec, dtype, options.kv_layout)
    kv = bytes_per_token_per_layer(spec, layout, element_bytes(dtype, "--kv-dtype"))
    one = sequence_pages(options.context(spec), options.block_size) * options.block_size * kv
    if options.reserve is not None:
        return one + options.reserve
    tokens, sequences = engine_batch_defaults(gpu)
    floor = reserve_estimate(spec, 0, options.max_batched_tokens or tokens, options.max_num_seqs or sequences)
    return one + floor.bytes


def fewest_gpus(
    anatomy: Anatomy, gpu: Accelerator, options: DeploymentOptions
) -> tuple[int, Parallel] | None:
    """The fewest GPUs of this type, and a layout, on which every GPU holds its weights, the reserve
    and one sequence of max_model_len; None when no count up to search_limit does, or at once when
    even least_need exceeds a GPU's usable memory."""
    spec = anatomy.spec
    usable = usable_memory(gpu, options.utilization)
    if least_need(anatomy, gpu, options) > usable:
        return None
    search = replace(options, kv_memory=None)
    whole = sum(
        c.model_bytes for c in place(anatomy, Parallel(), mtp=options.mtp, vision=options.vision).components
    )
    for gpus in range(max(1, whole // usable), search_limit(spec) + 1):
        for parallel in candidate_layouts(spec, gpus):
            try:
                if plan_memory(anatomy, gpu, parallel, search).fits:
                    return gpus, parallel
            except UsageError:  # a split an engine cannot make (FP8 blocks, INT4 groups)
                continue
    return None
