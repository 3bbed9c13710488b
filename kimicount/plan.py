"""`kimicount plan`: one GPU's memory under a deployment, and how much KV cache is left for context.

Per GPU, as engines size it (vLLM's `determine_available_memory`, then its KV-cache config):

    pool   = floor(memory × gpu_memory_utilization) − weights − reserve          (or --kv-memory)
    tokens = floor(pool ÷ (block_size × KV bytes per token on this GPU)) × block_size
    context held by one replica = tokens × DCP;  by the deployment = × DP

Everything is exact but the reserve (the engine's activation peak, sampler buffers, CUDA graphs and
communication buffers), which is an estimate, labelled so, with its formula; `--reserve` replaces
it and `--kv-memory` skips the whole subtraction, starting from the figure an engine printed.
Under pipeline parallelism every stage is sized and the deployment holds what its fullest stage
allows, as vLLM takes the smallest block count of all its workers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

from kimicount.anatomy import Anatomy
from kimicount.errors import UsageError, require_positive
from kimicount.hardware import Accelerator
from kimicount.kvcache import Layout, LayoutCache, Workload, default_dtype, element_bytes, layout_cache
from kimicount.placement import Parallel, Placement, parallel_layout, place

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
    large = gpu.memory_bytes >= 70 * GIB and not gpu.name.startswith("A100")
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


def reserve_estimate(
    anatomy: Anatomy, parallel: Parallel, max_batched_tokens: int, max_num_seqs: int
) -> Reserve:
    """The reserve an engine takes, estimated from the largest transient buffers of its profile run.
    [bytes]

    >>> from kimicount.anatomy import build_anatomy
    >>> reserve = reserve_estimate(build_anatomy(k2), Parallel(tp=8), 8192, 1024)
    >>> [bytes_ for _, _, bytes_ in reserve.terms]  # 8,192 × 88,064 × 2; 1,024 × 163,840 × 16; 2 GiB
    [1442840576, 2684354560, 2147483648]
    """
    spec = anatomy.spec
    k, hidden = spec.num_experts_per_tok, spec.hidden_size
    width = spec.moe_intermediate_size // (1 if parallel.ep else parallel.moe_ranks)
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


# --- the KV cache ----------------------------------------------------------------------------------


def engine_layout(spec, dtype: str, layout: Layout | None) -> Layout:
    """The cache layout engines use for MLA: the latent; with an fp8 cache on DeepSeek-V3.2 (sparse
    FlashMLA), FlashMLA's 656-byte fp8 record (vLLM's fp8_ds_mla). Dense MLA models keep a plain fp8
    latent (vLLM's fp8_e4m3). `layout` overrides.

    >>> engine_layout(k2, "fp8", None).value
    'latent'
    """
    if layout is not None:
        return layout
    return Layout.flashmla_fp8 if dtype == "fp8" and spec.indexer is not None else Layout.latent


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
    utilization: Fraction
    reserve: Reserve | None  # None when --kv-memory gave the pool
    kv_memory: int | None
    layout: Layout
    dtype: str
    block_size: int
    max_model_len: int
    stages: tuple[StageMemory, ...]
    min_gpus: tuple[int, Parallel] | None = None
    min_gpus_asked: bool = False

    @property
    def spec(self):
        return self.anatomy.spec

    @property
    def usable(self) -> int:
        """floor(memory × gpu_memory_utilization). [bytes]"""
        return math.floor(self.gpu.memory_bytes * self.utilization)

    @property
    def tokens_per_gpu(self) -> int:
        """KV tokens on each GPU of the fullest stage (every stage must hold the same tokens). [tokens]"""
        return min(stage.tokens for stage in self.stages)

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
    def sequence_tokens(self) -> int:
        """One sequence of max_model_len, in whole pages across the DCP ranks. [tokens]"""
        page = self.block_size * self.parallel.dcp
        return -(-self.max_model_len // page) * page

    @property
    def max_concurrency(self) -> float:
        """tokens_per_replica ÷ max_model_len, as vLLM prints it ('2.73x')."""
        return self.tokens_per_replica / self.max_model_len

    @property
    def sequences_per_replica(self) -> int:
        """Whole sequences of max_model_len one replica holds at once. [sequences]"""
        return self.tokens_per_replica // self.sequence_tokens

    @property
    def fits(self) -> bool:
        """Every GPU holds its weights, the reserve and one sequence of max_model_len."""
        return self.short_by == 0

    @property
    def short_by(self) -> int:
        """The most bytes any GPU lacks for one sequence of max_model_len (0 when it fits). [bytes]"""
        one = self.sequence_tokens // self.parallel.dcp
        return max(0, *(one * stage.bytes_per_token - stage.pool for stage in self.stages))

    @property
    def fullest(self) -> StageMemory:
        """The stage with the least room: the one that decides."""
        return min(self.stages, key=lambda s: (s.tokens, s.pool))


def plan_memory(
    anatomy: Anatomy,
    gpu: Accelerator,
    parallel: Parallel,
    *,
    utilization: Fraction = Fraction(9, 10),
    reserve: int | None = None,
    max_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    kv_memory: int | None = None,
    kv_dtype: str | None = None,
    kv_layout: Layout | None = None,
    block_size: int = 64,
    max_model_len: int | None = None,
    mtp: bool = False,
    vision: bool = True,
) -> tuple[Placement, Reserve | None, tuple[StageMemory, ...], Layout, str]:
    """Place the weights and size every stage's KV pool; see `plan` for the options."""
    spec = anatomy.spec
    placement = place(anatomy, parallel, mtp=mtp, vision=vision)
    dtype = default_dtype(spec) if kv_dtype is None else kv_dtype
    e = element_bytes(dtype, "--kv-dtype")
    layout = engine_layout(spec, dtype, kv_layout)
    usable = math.floor(gpu.memory_bytes * utilization)
    if kv_memory is not None:
        taken = None
    elif reserve is not None:
        taken = Reserve(reserve, False)
    else:
        tokens_default, seqs_default = engine_batch_defaults(gpu)
        taken = reserve_estimate(
            anatomy, parallel, max_batched_tokens or tokens_default, max_num_seqs or seqs_default
        )
    stages = []
    for index, layers in enumerate(placement.stages):
        kv_layers = placement.kv_layers(index)
        workload = Workload(
            tokens=max_model_len or spec.max_position_embeddings, block_size=block_size, tp=parallel.tp
        )
        weights = placement.weight_bytes(index)
        pool = kv_memory if kv_memory is not None else usable - weights - taken.bytes
        stages.append(
            StageMemory(
                index, layers, kv_layers, weights, 0 if taken is None else taken.bytes, pool,
                layout_cache(spec, layout, e, kv_layers, workload),
            )
        )  # fmt: skip
    return placement, taken, tuple(stages), layout, dtype


def plan(
    anatomy: Anatomy,
    gpu: Accelerator,
    count: int,
    *,
    tp: int | None = None,
    pp: int = 1,
    dp: int = 1,
    ep: int | None = None,
    dcp: int = 1,
    utilization: Fraction = Fraction(9, 10),
    reserve: int | None = None,
    max_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    kv_memory: int | None = None,
    kv_dtype: str | None = None,
    kv_layout: Layout | None = None,
    block_size: int = 64,
    max_model_len: int | None = None,
    mtp: bool = False,
    vision: bool = True,
    min_gpus: bool = False,
) -> PlanReport:
    """Check the options, place the model on `count` GPUs and size its KV cache.

    `reserve`, `kv_memory` are bytes; `max_model_len` defaults to the config's max_position_embeddings.
    With `min_gpus`, also search the fewest GPUs of this type that hold the weights, the reserve and
    one sequence of max_model_len.
    """
    spec = anatomy.spec
    if not 0 < utilization <= 1:
        raise UsageError(f"--gpu-memory-utilization {float(utilization):g}: expected a fraction in (0, 1]")
    for option, value in (
        ("--block-size", block_size),
        ("--max-model-len", max_model_len),
        ("--max-batched-tokens", max_batched_tokens),
        ("--max-num-seqs", max_num_seqs),
        ("--reserve", reserve),
        ("--kv-memory", kv_memory),
    ):
        if value is not None:
            require_positive(option, value)
    if mtp and anatomy.mtp is None:
        raise UsageError(
            f"--mtp: {spec.name} has no multi-token-prediction layer (num_nextn_predict_layers 0)"
        )
    parallel = parallel_layout(spec, count, tp=tp, pp=pp, dp=dp, ep=ep, dcp=dcp)
    options = {
        "utilization": utilization,
        "reserve": reserve,
        "max_batched_tokens": max_batched_tokens,
        "max_num_seqs": max_num_seqs,
        "kv_dtype": kv_dtype,
        "kv_layout": kv_layout,
        "block_size": block_size,
        "max_model_len": max_model_len,
        "mtp": mtp,
        "vision": vision,
    }
    placement, taken, stages, layout, dtype = plan_memory(
        anatomy, gpu, parallel, kv_memory=kv_memory, **options
    )
    fewest = fewest_gpus(anatomy, gpu, **options) if min_gpus else None
    return PlanReport(
        anatomy=anatomy,
        gpu=gpu,
        count=count,
        parallel=parallel,
        placement=placement,
        utilization=utilization,
        reserve=taken,
        kv_memory=kv_memory,
        layout=layout,
        dtype=dtype,
        block_size=block_size,
        max_model_len=max_model_len or spec.max_position_embeddings,
        stages=stages,
        min_gpus=fewest,
        min_gpus_asked=min_gpus,
    )


# --- the fewest GPUs -------------------------------------------------------------------------------

#: The search gives up past this many GPUs.
MAX_SEARCH_GPUS = 4096


def candidate_layouts(spec, gpus: int) -> Iterator[Parallel]:
    """Layouts of `gpus` GPUs worth trying, simplest first: TP alone, TP with EP, DP attention with EP,
    then TP × PP with and without EP (fewer stages first). Layouts the model cannot run are skipped."""
    tried: list[dict] = [{"tp": gpus}, {"tp": gpus, "ep": gpus}, {"tp": 1, "dp": gpus, "ep": gpus}]
    for pp in range(2, min(gpus, spec.num_hidden_layers) + 1):
        if gpus % pp == 0:
            tried += [{"tp": gpus // pp, "pp": pp}, {"tp": gpus // pp, "pp": pp, "ep": gpus // pp}]
    for options in tried:
        try:
            yield parallel_layout(spec, gpus, **options)
        except UsageError:
            continue


def fewest_gpus(anatomy: Anatomy, gpu: Accelerator, **options) -> tuple[int, Parallel] | None:
    """The fewest GPUs of this type, and a layout, on which every GPU holds its weights, the reserve
    and one sequence of max_model_len; None when nothing up to MAX_SEARCH_GPUS does."""
    spec = anatomy.spec
    usable = math.floor(gpu.memory_bytes * options["utilization"])
    whole = sum(
        c.model_bytes
        for c in place(anatomy, Parallel(), mtp=options["mtp"], vision=options["vision"]).components
    )
    start = max(1, whole // usable)
    for gpus in range(start, MAX_SEARCH_GPUS + 1):
        for parallel in candidate_layouts(spec, gpus):
            try:
                _, _, stages, _, _ = plan_memory(anatomy, gpu, parallel, kv_memory=None, **options)
            except UsageError:  # a split an engine cannot make (FP8 blocks, INT4 groups)
                continue
            length = options["max_model_len"] or spec.max_position_embeddings
            page = options["block_size"] * parallel.dcp
            one = -(-length // page) * page // parallel.dcp
            if all(stage.pool >= one * stage.bytes_per_token for stage in stages):
                return gpus, parallel
    return None
