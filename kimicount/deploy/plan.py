"""`kimicount plan`: one GPU's memory under a deployment, and how much KV cache is left for context.

Per GPU, as vLLM sizes it (its worker's `determine_available_memory`, then its KV-cache config):

    pool   = ceil(CUDA's total × gpu_memory_utilization) − weights − reserve      (or --kv-memory)
    pages  = floor(pool ÷ (block_size × KV bytes per token on this GPU));  tokens = pages × block_size
    context held by one replica = tokens × DCP;  by the deployment = × DP
    one sequence of max_model_len takes ceil(max_model_len ÷ (block_size × DCP)) pages on each GPU;
    maximum concurrency = pages ÷ that, as vLLM prints it

CUDA's total is what `torch.cuda.mem_get_info()` reports, a few hundred MiB under nvidia-smi's (vLLM's
MemorySnapshot, then its request_memory rounds the product up). The
pool and all that follows from it are exact given the reserve (the profile pass's activation peak, the
sampler's buffers, memory outside torch: engines/reserve.py), an estimate, labelled so, with its formula;
so is the CUDA total of a GPU no public log gives. `--reserve` replaces the one, `--gpu-memory` the
other, and `--kv-memory` skips the whole subtraction, starting from the figure an engine printed.
Under pipeline parallelism every stage is sized and the deployment holds what its fullest stage
allows, as vLLM takes the smallest block count of all its workers.

Each engine's own rule sizes the pool (deploy/engines: one interface, looked up by name): vLLM's above
(engines/vllm.py, its reserve estimate engines/reserve.py); SGLang's (engines/sglang.py): the memory
free before the weights load × mem_fraction_static − weights, in pages of --page-size (1 by default),
with its own default mem_fraction_static by release, its DP attention (dense MLP, shared expert and
head over all TP × DP ranks) and its max_running_requests. The plan follows one release of its engine,
the newest kimicount knows unless `release` names another, and says which.

DeepSeek V4 caches no latent per token but windows, compressed entries and compressor states: its
engine's `pack` gives each stage a Packing (block ids, those one request takes, the tokens the engine
reports, the longest max_model_len that fits), which PlanReport reads in place of the pages above.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from fractions import Fraction

from kimicount.anatomy import Anatomy
from kimicount.cache_groups import has_mla_group, state_groups
from kimicount.deploy.engines import DEFAULT_SERVER, server_engine
from kimicount.deploy.engines.base import Release, ServerEngine, StaticFraction, Version
from kimicount.deploy.engines.deepep import DeepEPBuffer, low_latency_buffer
from kimicount.deploy.engines.reserve import Reserve
from kimicount.deploy.groups import Packing, PoolGroup, StatePool, model_groups, per_sequence
from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.placement import Parallel, Placement, parallel_layout, place
from kimicount.errors import UsageError, require_positive
from kimicount.families import cache_groups
from kimicount.kvcache import (
    Layout,
    LayoutCache,
    Workload,
    bytes_per_token_per_layer,
    default_dtype,
    element_bytes,
)
from kimicount.spec import ModelSpec

GIB = 2**30

# --- the KV cache ----------------------------------------------------------------------------------


def per_sequence_state(spec: ModelSpec) -> bool:
    """Whether the model keeps a per-sequence state (a hybrid model's KDA layers)."""
    return bool(state_groups(cache_groups(spec)))


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
    the engine's default or the config's.

    `engine` "sglang" reads SGLang's own options: `mem_fraction_static`, `page_size` (vLLM keeps
    `block_size`), `dp_attention` (then `tp` is SGLang's --tp, all the GPUs of a stage, and the attention
    TP group is tp ÷ dp), `max_running_requests`; `reserve` is then the memory in use before the
    weights load. `redundant_experts` are EPLB's extra expert slots under either engine."""

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
    block_size: int | None = None  # vLLM's --block-size; None: its default (64, FlashMLA's; 256 for V4)
    max_model_len: int | None = None
    mtp: bool = False
    vision: bool = True
    engine: str = DEFAULT_SERVER
    release: str | None = None  # the engine's release whose rules apply; None: the newest kimicount knows
    mem_fraction_static: Fraction | None = None  # SGLang's; None: its default for the GPU and layout
    page_size: int | None = None  # SGLang's page (vLLM keeps block_size); None: 1
    dp_attention: bool = False  # SGLang's --enable-dp-attention
    redundant_experts: int = 0  # vLLM --num-redundant-experts, SGLang --ep-num-redundant-experts
    max_running_requests: int | None = None  # SGLang's; None: its default from the pool
    # a hybrid model's state (the Kimi Linear family's KDA layers), in the engines' own flags' terms
    mamba_ssm_dtype: str | None = None  # the recurrent state's dtype (SGLang --mamba-ssm-dtype); None: fp32
    mamba_cache_dtype: str | None = (
        None  # vLLM --mamba-cache-dtype: the state's dtype (KDA: its convolutions)
    )
    mamba_full_memory_ratio: Fraction | None = None  # SGLang's state ÷ KV split; None: 0.9
    max_mamba_cache_size: int | None = None  # SGLang's state slots, given
    mamba_strategy: str | None = None  # SGLang --mamba-radix-cache-strategy; None: the release's default
    radix_cache: bool = True  # SGLang --disable-radix-cache turns it off (one state slot a request)
    mamba_cache_mode: str | None = None  # vLLM --mamba-cache-mode (none, align); None: none

    @property
    def rules(self) -> ServerEngine:
        """The engine whose memory rule sizes the pool (deploy/engines)."""
        return server_engine(self.engine)

    @property
    def engine_release(self) -> Release:
        """The release of the engine whose rules the plan follows: `release`, or the newest known."""
        return self.rules.release(self.release)

    def check(self, anatomy: Anatomy) -> None:
        """Refuse, in one line, an option no engine takes, or one the engine asked for does not."""
        self.rules.release(self.release)  # an engine and a release kimicount knows
        if not 0 < self.utilization <= 1:
            raise UsageError(
                f"--gpu-memory-utilization {float(self.utilization):g}: expected a fraction in (0, 1]"
            )
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static <= 1:
            raise UsageError(
                f"--mem-fraction-static {float(self.mem_fraction_static):g}: expected a fraction in (0, 1]"
            )
        for option, value in (
            ("--block-size", self.block_size),
            ("--page-size", self.page_size),
            ("--max-model-len", self.max_model_len),
            ("--max-batched-tokens", self.max_batched_tokens),
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-running-requests", self.max_running_requests),
            ("--max-mamba-cache-size", self.max_mamba_cache_size),
            ("--reserve", self.reserve),
            ("--kv-memory", self.kv_memory),
        ):
            if value is not None:
                require_positive(option, value)
        self.rules.check(self)
        if not per_sequence_state(anatomy.spec):
            for option, given in (
                ("--mamba-ssm-dtype", self.mamba_ssm_dtype is not None),
                ("--mamba-cache-dtype", self.mamba_cache_dtype is not None),
                ("--mamba-full-memory-ratio", self.mamba_full_memory_ratio is not None),
                ("--max-mamba-cache-size", self.max_mamba_cache_size is not None),
                ("--mamba-radix-cache-strategy", self.mamba_strategy is not None),
                ("--mamba-cache-mode", self.mamba_cache_mode is not None),
            ):
                if given:
                    raise UsageError(
                        f"{option}: {anatomy.spec.name} keeps no per-sequence state (no KDA or mamba layers)"
                    )
        if self.mtp and anatomy.mtp is None:
            raise UsageError(
                f"--mtp: {anatomy.spec.name} has no multi-token-prediction layer (num_nextn_predict_layers 0)"
            )
        element_bytes(self.dtype(anatomy.spec), "--kv-dtype")

    def parallel(self, spec: ModelSpec, gpus: int) -> Parallel:
        """The layout of `gpus` GPUs these options describe, checked, in the engine's terms
        (placement.parallel_layout; under SGLang's DP attention `tp` is its --tp, all the GPUs of a
        stage, and the attention TP group is tp ÷ dp).

        >>> DeploymentOptions(dp=8, ep=8).parallel(k2, 8).label
        'DP8 + EP8'
        >>> DeploymentOptions(engine="sglang", tp=8, dp=8, ep=8, dp_attention=True).parallel(k2, 8).label
        'TP8 + DP8 attention + EP8'
        """
        return self.rules.parallel(self, spec, gpus)

    def page(self) -> int:
        """Tokens per KV page: vLLM's --block-size, SGLang's --page-size (1 unless given)."""
        return self.rules.page(self)

    def context(self, spec: ModelSpec) -> int:
        """max_model_len, or the config's max_position_embeddings. [tokens]"""
        return self.max_model_len or spec.max_position_embeddings

    def dtype(self, spec: ModelSpec) -> str:
        """The cache dtype: --kv-dtype, or the engine's pick for the model at the release (its
        default_kv_dtype), or the model's."""
        if self.kv_dtype is not None:
            return self.kv_dtype
        return self.rules.default_kv_dtype(spec, self.engine_release) or default_dtype(spec)

    def reserve_for(self, anatomy: Anatomy, gpu: Accelerator, parallel: Parallel) -> Reserve | None:
        """What is kept back: None under --kv-memory; otherwise the engine's rule (--reserve given, or its
        estimate: vLLM's profile pass, SGLang's memory in use before the weights load and its share)."""
        if self.kv_memory is not None:
            return None
        return self.rules.reserve(self, anatomy, gpu, parallel)


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
    groups: tuple[PoolGroup, ...]  # the model's cache on this GPU, for its kv_layers
    #: Tokens whose KV fits in the pool, in whole pages, as the engine packs the groups (one per-token
    #: group: floor(pool ÷ (block_size × bytes_per_token)) × block_size). [tokens]
    tokens: int
    #: A family's own groups (DeepSeek V4's) as the engine's rule packs them; None for one per-token group.
    packing: Packing | None = None
    #: How the engine packed a per-sequence state beside the per-token cache (None without one).
    state: StatePool | None = None

    @property
    def cache(self) -> LayoutCache:
        """The per-token group's layout: bytes per token on this GPU, for its kv_layers."""
        cache = self.groups[0].cache
        assert cache is not None, "the per-token group comes first; a packed model's cache is its Packing"
        return cache

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token held on this GPU (all its layers). [bytes/token]"""
        return sum(group.bytes_per_token for group in self.groups)

    @property
    def kv_bytes(self) -> int:
        """What those tokens take: tokens × bytes_per_token (a Packing's pages). [bytes]"""
        return self.tokens * self.bytes_per_token if self.packing is None else self.packing.used_bytes


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
    static_fraction: StaticFraction | None = None  # SGLang's mem_fraction_static; None for vLLM
    min_gpus_search: GpuSearch | None = None  # how --min-gpus searched, when asked

    @property
    def spec(self) -> ModelSpec:
        return self.anatomy.spec

    @property
    def engine(self) -> str:
        """The engine's name, as --engine takes it."""
        return self.options.engine

    @property
    def rules(self) -> ServerEngine:
        """The engine whose memory rule sized the plan."""
        return self.options.rules

    @property
    def release(self) -> Release:
        """The release whose rules the plan applied."""
        return self.options.engine_release

    @property
    def deepep_buffer(self) -> DeepEPBuffer | None:
        """Under EP, DeepEP's low-latency all-to-all buffer on one GPU, should the MoE run on DeepEP: an
        estimate, not subtracted from the pool (engines/deepep.py). None without EP."""
        if not self.parallel.ep:
            return None
        return low_latency_buffer(self.spec.hidden_size, self.spec.n_routed_experts + self.parallel.redundant)

    @property
    def max_running_requests(self) -> int | None:
        """SGLang's max_running_requests per DP rank, as it prints it (None for an engine without one)."""
        return self.rules.max_running(self)

    @property
    def utilization(self) -> Fraction:
        return self.options.utilization

    @property
    def kv_memory(self) -> int | None:
        return self.options.kv_memory

    @property
    def packing(self) -> Packing | None:
        """The fullest stage's Packing (DeepSeek V4's groups, one stage); None for one per-token group."""
        return self.fullest.packing

    @property
    def block_size(self) -> int:
        """Tokens per KV page: vLLM's block size or SGLang's page size (a Packing's; for a hybrid model
        vLLM's block as its hybrid manager raised it)."""
        if self.packing is not None:
            return self.packing.page
        state = self.fullest.state
        return self.options.page() if state is None else state.block_size

    @property
    def states(self) -> tuple[StatePool, ...]:
        """Each stage's state pool, for a model with a per-sequence state; () without."""
        return tuple(stage.state for stage in self.stages if stage.state is not None)

    @property
    def max_model_len(self) -> int:
        return self.options.context(self.spec)

    @property
    def usable(self) -> int:
        """What the engine sizes against: vLLM's usable_memory, ceil(CUDA's total ×
        gpu_memory_utilization); SGLang's whole CUDA total (its share is in the reserve). [bytes]"""
        return self.rules.usable(self.gpu, self.options)

    @property
    def reserve_input(self) -> str:
        """What the reserve estimate is called among the estimated inputs: 'reserve' (vLLM's),
        'preload' (the memory in use before SGLang loads the weights)."""
        return self.rules.reserve_input

    @property
    def estimated_inputs(self) -> tuple[str, ...]:
        """The estimates the pool rests on, and so every figure that follows from it (tokens, concurrency,
        the verdict, the fewest GPUs): 'reserve' or 'preload', 'cuda_memory'; none under --kv-memory."""
        if self.kv_memory is not None:
            return ()
        reserve = (self.reserve_input,) if self.reserve is not None and self.reserve.estimate else ()
        return reserve + (("cuda_memory",) if self.gpu.cuda_memory_estimated else ())

    @property
    def search_estimated_inputs(self) -> tuple[str, ...]:
        """The estimates the --min-gpus search rests on: it sizes every layout from usable memory less
        the reserve (never from --kv-memory), so the reserve unless --reserve gave it, and an estimated
        CUDA total."""
        reserve = (self.reserve_input,) if self.options.reserve is None else ()
        return reserve + (("cuda_memory",) if self.gpu.cuda_memory_estimated else ())

    @property
    def estimate(self) -> bool:
        """Whether the pool and what follows from it are estimates."""
        return bool(self.estimated_inputs)

    @property
    def pages_per_gpu(self) -> int:
        """KV pages on each GPU of the fullest stage (every stage must hold the same tokens); a
        Packing's block ids. [pages]"""
        if self.packing is not None:
            return self.packing.pages
        return min(stage.tokens for stage in self.stages) // self.block_size

    @property
    def tokens_per_gpu(self) -> int:
        """pages_per_gpu × block_size; a Packing's tokens as its engine reports them. [tokens]"""
        return self.pages_per_gpu * self.block_size if self.packing is None else self.packing.tokens

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
        """Pages one sequence of max_model_len takes on each GPU (a Packing's, over all its groups). [pages]"""
        if self.packing is not None:
            return self.packing.request_pages
        return sequence_pages(self.max_model_len, self.block_size, self.parallel.dcp)

    @property
    def longest(self) -> int:
        """The longest max_model_len one replica holds: pages_per_gpu × block_size × DCP (a Packing's,
        by its engine's rule; 0 when no request fits). [tokens]"""
        if self.packing is not None:
            return self.packing.longest
        return self.pages_per_gpu * self.block_size * self.parallel.dcp

    @property
    def max_concurrency(self) -> float:
        """pages_per_gpu ÷ sequence_pages, as vLLM prints it ('2.73x'; its num_blocks ÷
        cdiv(max_model_len, block_size), DCP splitting max_model_len first); for a hybrid model the
        engine's own, its state pages or slots counted."""
        if self.states:
            return min(state.concurrency for state in self.states)
        return self.pages_per_gpu / self.sequence_pages

    @property
    def sequences_per_replica(self) -> int:
        """Whole sequences of max_model_len one replica holds at once (a hybrid model's states
        counted). [sequences]"""
        if self.states:
            return min(state.requests for state in self.states)
        return self.pages_per_gpu // self.sequence_pages

    @property
    def fits(self) -> bool:
        """Every GPU holds its weights, the reserve and one sequence of max_model_len."""
        return self.short_by == 0

    @property
    def short_by(self) -> int:
        """The most bytes any GPU lacks for one sequence of max_model_len (0 when it fits). [bytes]"""
        if self.packing is not None:
            return max(
                0, *(stage.packing.request_bytes - stage.pool for stage in self.stages if stage.packing)
            )
        if self.states:
            return max(state.short_by for state in self.states)
        one = self.sequence_pages * self.block_size
        return max(0, *(one * stage.bytes_per_token - stage.pool for stage in self.stages))

    @property
    def fullest(self) -> StageMemory:
        """The stage with the least room: the one that decides."""
        return min(self.stages, key=lambda s: (s.tokens, s.pool))


def plan_memory(
    anatomy: Anatomy, gpu: Accelerator, parallel: Parallel, options: DeploymentOptions
) -> PlanReport:
    """Place the weights on `parallel.gpus` GPUs and size every stage's KV pool by the engine's rule
    (options checked)."""
    spec, rules = anatomy.spec, options.rules
    placement = place(
        anatomy, parallel, mtp=options.mtp, vision=options.vision, copies_name=rules.absorption_copies
    )
    extras = rules.load_extras(options, anatomy, gpu, placement)
    if extras:
        placement = replace(placement, components=placement.components + extras)
    dtype = options.dtype(spec)
    layout = engine_layout(spec, dtype, options.kv_layout)
    reserve = options.reserve_for(anatomy, gpu, parallel)
    usable = rules.usable(gpu, options)
    page = options.page()
    workload = Workload(tokens=options.context(spec), block_size=page, tp=parallel.tp)
    kept = 0 if reserve is None else reserve.bytes
    weights = [placement.weight_bytes(index) for index in range(len(placement.stages))]
    loaded = rules.loaded(weights)
    stages = []
    state_dtypes = rules.state_dtypes(options, spec)
    for index, layers in enumerate(placement.stages):
        kv_layers = placement.kv_layers(index)
        pool = options.kv_memory if options.kv_memory is not None else usable - loaded[index] - kept
        groups = model_groups(
            spec,
            layout,
            element_bytes(dtype, "--kv-dtype"),
            kv_layers,
            workload,
            stage_layers=layers,
            indexer_every_layer=rules.indexer_every_layer,
            state_dtypes=state_dtypes,
        )
        packing = rules.pack(pool, groups, options, spec, gpu, parallel)  # a family's own groups
        state = None
        if packing is not None:
            tokens = packing.tokens
        elif per_sequence(groups):  # a state beside the latent: the engine's hybrid rule packs both
            state = rules.pack_state(pool, groups, options, options.context(spec), parallel)
            tokens = state.tokens
        else:
            tokens = rules.pool_tokens(pool, groups, page)
        stages.append(
            StageMemory(
                index,
                layers,
                kv_layers,
                weights[index],
                kept,
                pool,
                groups,
                tokens,
                packing=packing,
                state=state,
            )
        )
        dtype = dtype if packing is None else packing.dtype
    return PlanReport(
        anatomy,
        gpu,
        parallel.gpus,
        parallel,
        placement,
        options,
        reserve,
        layout,
        dtype,
        tuple(stages),
        static_fraction=rules.static_fraction(options, anatomy, gpu, parallel),
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
    >>> from kimicount.deploy.hardware import ACCELERATORS
    >>> report = plan(build_anatomy(k2), ACCELERATORS["H200"], 16, DeploymentOptions(kv_memory=40 * 2**30))
    >>> report.parallel.label, report.tokens_per_gpu  # floor(40 GiB ÷ (64 × 70,272 B)) × 64
    ('TP16', 611136)
    """
    options.check(anatomy)
    report = plan_memory(anatomy, gpu, options.parallel(anatomy.spec, count), options)
    if not min_gpus:
        return report
    search = search_fewest(anatomy, gpu, options)
    return replace(report, min_gpus=search.found, min_gpus_asked=True, min_gpus_search=search)


def for_model(options: DeploymentOptions, spec: ModelSpec) -> DeploymentOptions:
    """The options with the release the plan follows for this model: none asked, a model the engine's
    default release does not run follows the first that does (its floor_release: SGLang runs Kimi K3
    from 0.5.18); asked, as asked."""
    floor = options.rules.floor_release(spec)
    if options.release is not None or floor is None:
        return options
    if options.engine_release.version < Version.parse(floor):
        return replace(options, release=floor)
    return options


# --- the fewest GPUs -------------------------------------------------------------------------------

#: The search gives up past this many GPUs.
MAX_SEARCH_GPUS = 4096


def candidate_layouts(
    spec: ModelSpec, gpus: int, redundant: int = 0, dense_over_dp: bool = False
) -> Iterator[Parallel]:
    """Layouts of `gpus` GPUs worth trying, simplest first: TP alone, TP with EP, DP attention with EP
    (SGLang's, dense parts over TP × DP, under `dense_over_dp`), then TP × PP with and without EP (fewer
    stages first). Layouts the model cannot run, or whose EP does not divide the experts and `redundant`
    slots, are skipped."""
    tried: list[dict[str, int]] = [{"tp": gpus}, {"tp": gpus, "ep": gpus}, {"tp": 1, "dp": gpus, "ep": gpus}]
    for pp in range(2, min(gpus, spec.num_hidden_layers) + 1):
        if gpus % pp == 0:
            tried += [{"tp": gpus // pp, "pp": pp}, {"tp": gpus // pp, "pp": pp, "ep": gpus // pp}]
    for options in tried:
        try:
            yield parallel_layout(spec, gpus, **options, redundant=redundant, sglang_dp=dense_over_dp)
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
    if not has_mla_group(cache_groups(spec)):  # DeepSeek V4: its cache bounded below by nothing here
        return options.rules.least_reserve(options, anatomy, gpu)
    kv = bytes_per_token_per_layer(spec.mla, layout, element_bytes(dtype, "--kv-dtype"))
    one = sequence_pages(options.context(spec), options.page()) * options.page() * kv
    return one + options.rules.least_reserve(options, anatomy, gpu)


@dataclass(frozen=True)
class GpuSearch:
    """What the --min-gpus search found: the fewest GPUs and their layout, or none; the largest count it
    tried; and the closest miss (the plan that lacked least), to say why none fits."""

    found: tuple[int, Parallel] | None
    largest_tried: int
    closest: tuple[int, Parallel, int] | None = None  # (GPUs, layout, bytes short per GPU)
    least_need: int = 0  # bytes every layout needs on its fullest GPU, however many GPUs
    usable: int = 0
    plans: int = 0  # the layouts it planned


def layout_families(
    spec: ModelSpec, limit: int, redundant: int = 0, dense_over_dp: bool = False
) -> Iterator[list[Parallel]]:
    """The layouts of up to `limit` GPUs, by family, each in increasing GPUs: TP × PP at one TP size,
    with or without EP (PP from 1), and DP attention with EP (TP1). Within a family what the fullest GPU
    needs does not grow with the GPUs (fewer layers a stage, fewer experts a GPU; the reserve and the
    replicated parts the same), so whether a layout fits is False up to some count and True from it."""
    for tp in range(1, spec.num_attention_heads + 1):
        if spec.num_attention_heads % tp:
            continue
        for ep in (False, True) if tp > 1 else (False,):
            family = []
            for pp in range(1, min(spec.num_hidden_layers, limit // tp) + 1):
                try:
                    family.append(
                        parallel_layout(
                            spec, tp * pp, tp=tp, pp=pp, ep=tp if ep else None, redundant=redundant
                        )
                    )
                except UsageError:
                    continue
            yield family
    dp_family = []
    for gpus in range(2, limit + 1):
        try:
            dp_family.append(
                parallel_layout(
                    spec, gpus, tp=1, dp=gpus, ep=gpus, redundant=redundant, sglang_dp=dense_over_dp
                )
            )
        except UsageError:
            continue
    yield dp_family


def search_fewest(anatomy: Anatomy, gpu: Accelerator, options: DeploymentOptions) -> GpuSearch:
    """The fewest GPUs of this type, and a layout, on which every GPU holds its weights, the reserve and
    one sequence of max_model_len; none when no count up to search_limit does, or at once when even
    least_need exceeds a GPU's usable memory. In bounded time: a binary search in each family of
    layout_families (about a hundred plans for Kimi K2), then the simplest layout that fits at the
    fewest count (candidate_layouts' order)."""
    spec = anatomy.spec
    usable = options.rules.usable(gpu, options)
    need = least_need(anatomy, gpu, options)
    limit = search_limit(spec)
    if need > usable:
        return GpuSearch(None, 0, None, need, usable)
    search = replace(options, kv_memory=None)
    whole = sum(
        c.model_bytes for c in place(anatomy, Parallel(), mtp=options.mtp, vision=options.vision).components
    )
    start = max(1, whole // usable)
    closest: tuple[int, Parallel, int] | None = None
    tried = plans = 0

    def fits(parallel: Parallel) -> bool:
        nonlocal closest, tried, plans
        tried, plans = max(tried, parallel.gpus), plans + 1
        try:
            report = plan_memory(anatomy, gpu, parallel, search)
        except UsageError:  # a split an engine cannot make (FP8 blocks, INT4 groups)
            return False
        if not report.fits and (closest is None or report.short_by < closest[2]):
            closest = (parallel.gpus, parallel, report.short_by)
        return report.fits

    best: int | None = None
    for family in layout_families(spec, limit, options.redundant_experts, options.rules.dense_over_dp):
        family = [p for p in family if p.gpus >= start and (best is None or p.gpus < best)]
        low, high = 0, len(family)  # the first that fits lies in [low, high)
        while low < high:
            middle = (low + high) // 2
            if fits(family[middle]):
                high = middle
            else:
                low = middle + 1
        if low < len(family):
            best = family[low].gpus
    if best is not None:
        for parallel in candidate_layouts(spec, best, options.redundant_experts, options.rules.dense_over_dp):
            if fits(parallel):
                return GpuSearch((best, parallel), tried, closest, need, usable, plans)
    return GpuSearch(None, tried, closest, need, usable, plans)


def fewest_gpus(
    anatomy: Anatomy, gpu: Accelerator, options: DeploymentOptions
) -> tuple[int, Parallel] | None:
    """search_fewest's GPUs and layout, or None."""
    return search_fewest(anatomy, gpu, options).found
