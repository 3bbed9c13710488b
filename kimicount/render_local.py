"""The local `plan` view: a GGUF under llama.cpp or ik_llama.cpp, device by device, with its cache, the
longest context, the flags to pass and the speed floor."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kimicount.local.builds import CacheLayout, Engine
from kimicount.local.placement import COMPUTE_SOURCE, DeviceLoad
from kimicount.local.plan import LocalPlan
from kimicount.render import human_bytes, plural, say, show

MIB = 2**20


def mib(count: int) -> str:
    """As llama.cpp prints buffer sizes: 2998.56 MiB."""
    return f"{count / MIB:,.2f} MiB"


def _engine(plan: LocalPlan) -> str:
    options = plan.options
    if options.engine is Engine.ik_llama_cpp:
        return "ik_llama.cpp"
    return "llama.cpp" + ("" if options.build is None else f" b{options.build}")


def _box(plan: LocalPlan) -> str:
    gpus = f"{plan.count} × {plan.gpu.name}" if plan.gpu else "no GPU"
    ram = "" if plan.options.ram is None else f" + {human_bytes(plan.options.ram)} RAM"
    return gpus + ram


def render_local_plan(console: Console, plan: LocalPlan) -> None:
    """Devices, cache, context, flags, floor."""
    spec, cache = plan.spec, plan.cache
    say(
        console,
        f"[bold]{spec.name}[/], {plan.source} ({plural(plan.tensor_count, 'tensor')}, "
        f"{human_bytes(plan.layout.file_bytes)}), {_engine(plan)} on {_box(plan)}",
    )
    if plan.estimate:
        say(console, f"Sizes are an {plan.estimate}.")
    say(console)
    per_token = cache.token_bytes() * spec.num_hidden_layers
    types = f"K {cache.type_k}" + ("" if cache.choice.layout is CacheLayout.latent else f", V {cache.type_v}")
    say(
        console,
        f"KV cache: {cache.choice.layout.value} ({cache.choice.reason}); {types}: {per_token:,} B per token "
        f"({spec.num_hidden_layers} layers); {cache.cells:,} cells for {plan.context:,} tokens: "
        f"{mib(cache.layer_bytes * spec.num_hidden_layers)}.",
    )
    show(console)
    show(console, _devices(plan))
    show(console)
    for line in _notes(plan):
        say(console, line)
    show(console)
    show(console, "Run:")
    show(console, "  " + " ".join(plan.flags))
    if plan.floors is not None:
        show(console)
        _floor(console, plan)


def _devices(plan: LocalPlan) -> Table:
    table = Table(box=None, pad_edge=False)
    table.add_column("Device")
    for name in ("Weights", "Tensors", "KV cache", "Compute (estimate)", "Total", "Has"):
        table.add_column(name, justify="right")
    table.add_column("Holds")
    for load in (*plan.layout.gpus, plan.layout.host):
        table.add_row(
            load.name,
            mib(load.weights),
            f"{load.tensors:,}",
            mib(load.cache),
            mib(load.compute),
            mib(load.total),
            _has(plan, load),
            _holds(plan, load),
        )
    return table


def _has(plan: LocalPlan, load: DeviceLoad) -> str:
    if load.name == "RAM":
        return "—" if plan.options.ram is None else mib(plan.options.ram)
    return "—" if load.memory is None else mib(load.memory)


def _holds(plan: LocalPlan, load: DeviceLoad) -> str:
    parts = []
    if load.layers:
        first, last = load.layers[0], load.layers[-1]
        run = f"block {first}" if first == last else f"blocks {first}–{last}"
        parts.append(f"{run} and their cache")
    if load.name == "RAM":
        parts.insert(0, "token_embd")
        if load.experts:
            parts.append(f"routed experts ({human_bytes(load.experts)})")
    else:
        if load.experts:
            parts.append(f"routed experts ({human_bytes(load.experts)})")
        if load.output:
            parts.append("output")
    verdict = "" if load.fits is None else ("" if load.fits else " — does not fit")
    return ", ".join(parts) + verdict


def _notes(plan: LocalPlan):
    host, options = plan.layout.host, plan.options
    gpu_bytes = sum(load.experts + load.other for load in plan.layout.gpus)
    if options.mmap:
        text = (
            f"RAM (mmap, the default): the page cache holds the file's host tensors, {human_bytes(host.weights)}; "
            f"the GPU tensors ({human_bytes(gpu_bytes)}) are read through it once and can be dropped"
        )
        if options.ram is not None:
            need = host.weights + host.cache + host.compute
            text += f"; with the host cache and buffers {human_bytes(need)} of {human_bytes(options.ram)}" + (
                ": it fits."
                if need <= options.ram
                else ": it does not fit, and each token reads the rest from disk."
            )
        else:
            text += "."
        yield text
    else:
        yield (
            f"RAM (--no-mmap): the host tensors are copied into memory, {human_bytes(host.weights)}, "
            "and must fit with the host cache and buffers."
        )
    fit = plan.fit
    if fit.longest is None:
        yield f"Longest context that fits: none ({fit.limit} is full before the first {plan.choice.pad} cells)."
    else:
        yield f"Longest context that fits: {fit.longest:,} tokens ({_limit(fit.limit)})."
    if plan.cpu_moe is not None:
        last = plan.spec.num_hidden_layers - 1
        on_gpus = f"block {last}" if plan.cpu_moe == last else f"blocks {plan.cpu_moe}–{last}"
        yield (
            f"Fewest --n-cpu-moe that fits at {plan.context:,} tokens: {plan.cpu_moe} (the routed experts of "
            f"{on_gpus} on the GPUs; the blocks stay where -ts puts them)."
        )
    yield f"Compute buffers: {COMPUTE_SOURCE}."


def _limit(limit: str) -> str:
    return "the trained context" if limit.startswith("the trained") else f"then {limit} is full"


def _floor(console: Console, plan: LocalPlan) -> None:
    floors = plan.floors
    assert floors is not None
    parts = ", ".join(
        f"{read.name} {human_bytes(round(read.bytes))} at {read.bandwidth / 1e9:,.1f} GB/s"
        for read in floors.reads
    )
    say(
        console,
        f"Decode floor at {floors.context:,} tokens, one sequence: each token reads {parts} (routed experts: "
        f"{plan.spec.num_experts_per_tok} of {plan.spec.n_routed_experts} per layer), in turn: ≥ "
        f"{floors.decode_seconds * 1000:.1f} ms, ≤ {floors.decode_tokens_per_s:.1f} tokens/s.",
    )
    say(
        console,
        f"Prompt floor: each {floors.ubatch}-token ubatch moves the {human_bytes(floors.ram_weights)} in RAM "
        f"over PCIe at {floors.pcie_bandwidth / 1e9:.1f} GB/s and computes on the GPU: ≥ "
        f"{floors.prompt_seconds:.2f} s ({floors.prompt_bound}-bound), ≤ {floors.prompt_tokens_per_s:,.0f} tokens/s.",
    )


# --- the CLI's local route: options as typed -> the plan -> this view or JSON ------------------------


def run_local_plan(
    spec,
    *,
    gpus: str,
    gpu_memory: str | None,
    hbm_bandwidth: str | None,
    peak_bf16: str | None,
    gguf,
    quant: str | None,
    ram: str | None,
    offload: str | None,
    n_cpu_moe: str | None,
    ngl: str | None,
    engine: str,
    build: str | None,
    mla: str | None,
    cache_layout: str | None,
    cache_type_k: str,
    cache_type_v: str,
    tensor_split: str | None,
    ubatch: str,
    no_mmap: bool,
    ram_bandwidth: str | None,
    ram_channels: str | None,
    ram_speed: str | None,
    context: str | None,
    as_json: bool,
) -> None:
    """`kimicount plan` for a local box: parse what was typed, read or estimate the listing, plan, show."""
    from kimicount.errors import UsageError
    from kimicount.hardware import (
        custom_accelerator,
        parse_bandwidth,
        parse_flops,
        parse_gpus,
        with_overrides,
    )
    from kimicount.local.builds import CacheLayout, Engine, parse_build
    from kimicount.local.cache import parse_cache_type
    from kimicount.local.floor import ram_bandwidth as channel_bandwidth
    from kimicount.local.placement import Offload
    from kimicount.local.plan import LocalOptions, is_mla_gguf, local_plan
    from kimicount.options import parse_count, parse_size

    if (gguf is None) == (quant is None):
        raise UsageError("plan on a local box: give --gguf FILE or --quant TYPE (one of them)")
    count, gpu = parse_gpus(gpus)
    memory = None if gpu_memory is None else parse_size(gpu_memory, "--gpu-memory")
    if gpu is None:
        if memory is None:
            raise UsageError(
                f"--gpus {gpus}: name the GPU type (e.g. {count}xRTX3090) or give --gpu-memory SIZE"
            )
        gpu = custom_accelerator(memory)
    gpu = with_overrides(
        gpu,
        memory_bytes=memory,
        hbm_bandwidth=None if hbm_bandwidth is None else parse_bandwidth(hbm_bandwidth),
        bf16_flops=None if peak_bf16 is None else parse_flops(peak_bf16, "--peak-bf16"),
    )
    if offload is not None and offload.strip().lower() != "experts":
        raise UsageError(f"--offload '{offload}': expected experts (the routed experts in RAM, -ot exps=CPU)")
    try:
        chosen_engine = Engine(engine.strip().lower())
    except ValueError:
        raise UsageError(f"--engine '{engine}': expected llama.cpp or ik_llama.cpp") from None
    layout = None
    if cache_layout is not None:
        try:
            layout = CacheLayout(cache_layout.strip().lower())
        except ValueError:
            raise UsageError(
                f"--cache-layout '{cache_layout}': expected per-head, latent+v or latent"
            ) from None
    split = None
    if tensor_split is not None:
        split = tuple(parse_count(part, "--tensor-split") for part in tensor_split.split(","))
        if any(part < 0 for part in split):
            raise UsageError(f"--tensor-split '{tensor_split}': expected shares of 0 or more")
    bandwidth = None
    if ram_bandwidth is not None:
        bandwidth = parse_bandwidth(ram_bandwidth, "--ram-bandwidth")
    elif (ram_channels is None) != (ram_speed is None):
        raise UsageError("--ram-channels and --ram-speed: give both (or --ram-bandwidth)")
    elif ram_channels is not None and ram_speed is not None:
        bandwidth = channel_bandwidth(
            parse_count(ram_channels, "--ram-channels"), parse_count(ram_speed, "--ram-speed")
        )
    layers = None if ngl is None else parse_count(ngl, "-ngl")
    if layers is not None and layers < 0:
        raise UsageError(f"-ngl {ngl}: expected 0 or more layers")
    cpu_moe = 0 if n_cpu_moe is None else parse_count(n_cpu_moe, "--n-cpu-moe")
    if cpu_moe < 0:
        raise UsageError(f"--n-cpu-moe {n_cpu_moe}: expected 0 or more blocks")
    options = LocalOptions(
        engine=chosen_engine,
        build=None if build is None else parse_build(build),
        mla=None if mla is None else parse_count(mla, "--mla"),
        layout=layout,
        type_k=parse_cache_type(cache_type_k, "-ctk"),
        type_v=parse_cache_type(cache_type_v, "-ctv"),
        offload=Offload(layers, offload is not None, cpu_moe, split),
        context=None if context is None else parse_count(context, "--context"),
        ram=None if ram is None else parse_size(ram, "--ram"),
        ram_bandwidth=bandwidth,
        mmap=not no_mmap,
        ubatch=parse_count(ubatch, "--ubatch"),
    )
    if gguf is not None:
        from kimicount.gguf.layout import spec_from_metadata
        from kimicount.gguf.reader import read_gguf

        listing = read_gguf(gguf)
        spec = spec_from_metadata(listing)
        source, estimate, path = str(gguf), None, str(gguf)
        mla_gguf = is_mla_gguf(listing.metadata, listing.tensors)
    else:
        from kimicount.gguf.quantize import estimate_uniform, parse_quant

        ftype = parse_quant(quant)
        listing = estimate_uniform(spec, ftype)
        source, mla_gguf = f"{ftype} (llama-quantize, uniform)", True
        path = f"{spec.name.rsplit('/', 1)[-1]}-{ftype}.gguf"
        estimate = (
            "estimate: llama-quantize's rules for a uniform conversion; dynamic quants differ (give --gguf)"
        )
    plan = local_plan(
        spec,
        listing.tensors,
        gpu,
        count,
        options,
        source=source,
        mla_gguf=mla_gguf,
        estimate=estimate,
        model_path=path,
    )
    if as_json:
        from kimicount.cli.common import print_json
        from kimicount.local.reports import local_plan_json

        print_json(local_plan_json(plan))
        return
    from kimicount.render import make_console

    render_local_plan(make_console(), plan)
