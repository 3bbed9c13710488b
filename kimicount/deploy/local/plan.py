"""A local run planned whole: the cache the build and file give, every device's load, the longest
context that fits, the flags to pass, and the speed floor. The CLI's `plan` takes this route when a
GGUF, a --quant, --ram or a llama.cpp offload option is given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kimicount.deploy.engines.llama_cpp import LLAMA_CPP, LlamaCpp
from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.local.builds import CacheChoice, CacheLayout
from kimicount.deploy.local.cache import SERVER_SLOTS, Cache, make_cache, padded_cells
from kimicount.deploy.local.floor import DISK_BANDWIDTH, PCIE4_X16, Floors, floors
from kimicount.deploy.local.placement import (
    Fit,
    Layout,
    Offload,
    Tensor,
    fewest_cpu_moe,
    longest_context,
    place,
)
from kimicount.errors import UsageError, require_positive
from kimicount.spec import ModelSpec

#: The context shown when none is asked and none fits.
FALLBACK_CONTEXT = 4096


@dataclass(frozen=True)
class LocalOptions:
    """What the user asked: engine and build (or -mla, or a layout), cache types, offload, context, RAM."""

    engine: LlamaCpp = LLAMA_CPP
    build: int | None = None
    mla: int | None = None
    layout: CacheLayout | None = None
    type_k: str = "f16"
    type_v: str = "f16"
    offload: Offload = field(default_factory=Offload)
    context: int | None = None  # None: the longest that fits
    ram: int | None = None
    ram_bandwidth: int | None = None
    pcie_bandwidth: int = PCIE4_X16
    disk_bandwidth: int = DISK_BANDWIDTH  # --disk-bandwidth: what the page cache cannot hold comes from disk
    mmap: bool = True
    in_ram: bool = False  # the host tensors must fit in RAM even with mmap (the quant choice)
    ubatch: int = 512
    flash_attn: bool = True
    parallel: int | None = None  # -np, --parallel: None is llama-server's auto (SERVER_SLOTS, unified)

    @property
    def sequences(self) -> int:
        """n_seq_max: --parallel, or llama-server's 4 slots when it is not given. [sequences]"""
        return SERVER_SLOTS if self.parallel is None else self.parallel


@dataclass(frozen=True)
class LocalPlan:
    spec: ModelSpec
    source: str  # the file, or the --quant it estimates
    estimate: str | None  # why the listing is an estimate (--quant), None for a real header
    options: LocalOptions
    gpu: Accelerator | None
    count: int
    choice: CacheChoice
    context: int
    layout: Layout
    fit: Fit
    cpu_moe: int | None  # the fewest --n-cpu-moe that fits at `context`
    floors: Floors | None
    flags: tuple[str, ...]
    tensor_count: int

    @property
    def cache(self) -> Cache:
        return self.layout.cache


def is_mla_gguf(metadata: object, tensors: Sequence[Tensor]) -> bool:
    """Whether a GGUF was written for MLA, as llama.cpp decides it: `attention.key_length_mla` is there
    and not 0 (src/llama-model.cpp reads LLM_KV_ATTENTION_KEY_LENGTH_MLA; llama_hparams::is_mla).
    Without deepseek2 metadata at all, the attn_k_b tensors that only MLA conversions write decide."""
    get = getattr(metadata, "get", None)
    # kimi-linear's loader reads the same key (src/models/kimi-linear.cpp load_arch_hparams, line 6)
    for arch in ("deepseek2", "kimi-linear"):
        if get is not None and get(f"{arch}.block_count") is not None:
            return bool(get(f"{arch}.attention.key_length_mla"))
    return any(t.name.endswith("attn_k_b.weight") for t in tensors)


@dataclass(frozen=True)
class Sized:
    """One run sized: the cache the build gives, the longest context that fits, the context planned,
    and every device's load at it; `ram` is the RAM the host must fit in (None: none does)."""

    choice: CacheChoice
    fit: Fit
    context: int
    layout: Layout
    ram: int | None


def size_run(
    spec: ModelSpec,
    tensors: Sequence[Tensor],
    gpu: Accelerator | None,
    count: int,
    options: LocalOptions,
    *,
    mla_gguf: bool,
) -> Sized:
    """The cache the engine and build give the file, the longest context that fits, and every device's
    load at the context asked (or that longest)."""
    require_positive("--ubatch", options.ubatch)
    if options.engine.computes_missing_attention and getattr(spec, "FAMILY", None) == "kimi_linear":
        # ik_llama.cpp @ 8337e4c (2026-08-15): no kimi-linear or kimi-k3 arch anywhere in its src/
        raise UsageError(
            f"{spec.name}: ik_llama.cpp has no kimi-linear or kimi-k3 architecture (none in its src/ at "
            "8337e4c, 2026-08-15): give --engine llama.cpp"
        )
    if options.context is not None:
        require_positive("--context", options.context)
    if options.parallel is not None:
        require_positive("--parallel", options.parallel)
    if options.offload.n_cpu_moe and options.offload.experts_in_ram:
        raise UsageError(
            "--n-cpu-moe and --offload experts: give one (every block's experts are in RAM already)"
        )
    choice = options.engine.cache_layout(
        options.build,
        mla_gguf=mla_gguf,
        mla=options.mla,
        flash_attn=options.flash_attn,
        layout=options.layout,
    )
    ik = options.engine.keeps_2d_by_head
    # with mmap the page cache holds what it can and the rest is read from disk: RAM limits nothing
    # then (the plan says what the page cache would need, the floor what the disk reads); with
    # --no-mmap, or where weights read from disk are no fit (the quant choice), the host must fit
    ram = None if options.mmap and not options.in_ram else options.ram
    ubatch, flash_attn = options.ubatch, options.flash_attn
    sequences = options.sequences
    probe = make_cache(spec, choice, options.type_k, options.type_v, choice.pad, ik=ik, sequences=sequences)
    fit = longest_context(
        spec, tensors, gpu, count, options.offload, probe, ram=ram, ubatch=ubatch, flash_attn=flash_attn
    )
    context = options.context or fit.longest or FALLBACK_CONTEXT
    cache = make_cache(spec, choice, options.type_k, options.type_v, context, ik=ik, sequences=sequences)
    layout = place(
        spec, tensors, gpu, count, options.offload, cache, ram=ram, ubatch=ubatch, flash_attn=flash_attn
    )
    return Sized(choice, fit, context, layout, ram)


def local_plan(
    spec: ModelSpec,
    tensors: Sequence[Tensor],
    gpu: Accelerator | None,
    count: int,
    options: LocalOptions,
    *,
    source: str,
    mla_gguf: bool,
    estimate: str | None = None,
    model_path: str = "MODEL.gguf",
) -> LocalPlan:
    """Plan a local run (see the module docstring)."""
    sized = size_run(spec, tensors, gpu, count, options, mla_gguf=mla_gguf)
    choice, fit, context, layout, ram = sized.choice, sized.fit, sized.context, sized.layout, sized.ram
    cache, ubatch, flash_attn = layout.cache, options.ubatch, options.flash_attn
    cpu_moe = (
        fewest_cpu_moe(
            spec, tensors, gpu, count, options.offload, cache, ram=ram, ubatch=ubatch, flash_attn=flash_attn
        )
        if gpu is not None and (options.offload.experts_in_ram or options.offload.n_cpu_moe)
        else None
    )
    speed = None
    if options.ram_bandwidth is not None and gpu is not None:
        speed = floors(
            spec,
            list(tensors),
            layout,
            gpu,
            context=context,
            ram_bandwidth=options.ram_bandwidth,
            pcie_bandwidth=options.pcie_bandwidth,
            page_cache=page_cache(layout, options),
            disk_bandwidth=options.disk_bandwidth,
        )
    flags = run_flags(options, choice, padded_cells(context, choice.pad), model_path)
    return LocalPlan(
        spec,
        source,
        estimate,
        options,
        gpu,
        count,
        choice,
        context,
        layout,
        fit,
        cpu_moe,
        speed,
        flags,
        len(tensors),
    )


def page_cache(layout: Layout, options: LocalOptions) -> int | None:
    """With mmap and --ram: the bytes of the host tensors the page cache can hold, what RAM leaves after
    the host's KV cache and compute buffers (the rest is read from disk); None otherwise (all of them:
    --no-mmap copies them into RAM, and without --ram nothing says what RAM holds). [bytes]"""
    if not options.mmap or options.ram is None:
        return None
    return max(options.ram - layout.host.cache - layout.host.compute, 0)


def run_flags(options: LocalOptions, choice: CacheChoice, context: int, model_path: str) -> tuple[str, ...]:
    """The command line: llama-server (or ik_llama.cpp's) with the options this plan assumes."""
    flags = ["llama-server", "-m", model_path]
    flags += options.engine.mode_flags(options.mla)
    flags += options.offload.flags()
    flags += ["-c", str(context)]
    if options.flash_attn:
        flags += choice.fa_flag.split()
    if options.type_k != "f16":
        flags += ["-ctk", options.type_k]
    has_v = choice.layout is not CacheLayout.latent
    if options.type_v != "f16" and has_v:
        flags += ["-ctv", options.type_v]
    if options.parallel is not None:
        # -kvu (--kv-unified): one KV buffer of -c cells the sequences share, as llama-server's auto
        # slots have it; without it -np N splits -c into N streams of -c/N (src/llama-context.cpp
        # lines 290–303, common/common.h kv_unified = false)
        flags += ["-np", str(options.parallel), "-kvu"]
    if options.ubatch != 512:
        flags += ["-ub", str(options.ubatch)]
    if not options.mmap:
        flags.append("--no-mmap")
    return tuple(flags)


@dataclass(frozen=True)
class Pools:
    """A hybrid's two memory pools at the planned context: the KV cells of its attention layers (per
    token) and the recurrent state of its recurrent layers (per sequence), and which weighs more."""

    kv_layers: int
    kv_bytes_per_token: int
    kv_bytes: int  # at the plan's cells
    state_layers: int
    state_bytes_per_sequence: int  # every recurrent layer
    sequences: int
    state_bytes: int
    formula: str

    @property
    def limit(self) -> str:
        """ "context" when the per-token cache is the larger pool, "sequences" when the state is."""
        return "context" if self.kv_bytes >= self.state_bytes else "sequences"


def pools(plan: LocalPlan) -> Pools | None:
    """The plan's two pools (None for a model without per-sequence state)."""
    cache = plan.cache
    state = cache.state
    if state is None:
        return None
    per_sequence = state.sequence_bytes * len(state.layers)
    return Pools(
        len(cache.layers),
        cache.token_bytes() * len(cache.layers),
        cache.layer_bytes * len(cache.layers),
        len(state.layers),
        per_sequence,
        state.cells,
        per_sequence * state.cells,
        state.formula,
    )


def pool_words(found: Pools, context: int, parallel: int | None) -> str:
    """Which pool limits, in words: the larger of the two at the planned context, and what one
    sequence more or fewer changes."""
    asked = (
        f"--parallel {found.sequences}" if parallel is not None else f"llama-server's {found.sequences} slots"
    )
    kv = f"the KV cache ({found.kv_bytes / 2**20:,.2f} MiB at {context:,} tokens)"
    state = f"the state ({found.state_bytes / 2**20:,.2f} MiB for {asked})"
    if found.limit == "context":
        return (
            f"The context limits: {kv} outweighs {state}; each more sequence costs "
            f"{found.state_bytes_per_sequence / 2**20:,.2f} MiB, whatever its length."
        )
    return (
        f"The sequences limit: {state} outweighs {kv}; each sequence fewer frees "
        f"{found.state_bytes_per_sequence / 2**20:,.2f} MiB."
    )
