"""The local `plan` view: a GGUF under llama.cpp or ik_llama.cpp, device by device, with its cache, the
longest context, the flags to pass and the speed floor."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console
from rich.table import Table

from kimicount.deploy.local.builds import CacheLayout
from kimicount.deploy.local.placement import COMPUTE_SOURCE, DeviceLoad
from kimicount.deploy.local.plan import LocalPlan
from kimicount.deploy.render_command import command_lines, print_command
from kimicount.render import Column, fitted, human_bytes, plural, say, show, show_fitted

MIB = 2**20


def mib(count: int) -> str:
    """As llama.cpp prints buffer sizes: 2998.56 MiB."""
    return f"{count / MIB:,.2f} MiB"


def _engine(plan: LocalPlan) -> str:
    return plan.options.engine.describe(plan.options.build)


def _box(plan: LocalPlan) -> str:
    gpus = f"{plan.count} × {plan.gpu.name}" if plan.gpu else "no GPU"
    ram = "" if plan.options.ram is None else f" + {human_bytes(plan.options.ram)} RAM"
    return gpus + ram


def render_local_plan(console: Console, plan: LocalPlan) -> None:
    """Devices, cache, context, flags, floor."""
    spec, cache = plan.spec, plan.cache
    say(
        console,
        f"[bold]{spec.name}[/], {plan.source}: {plural(plan.tensor_count, 'tensor')}, "
        f"{human_bytes(plan.layout.file_bytes)}",
    )
    say(console, f"{_engine(plan)} on {_box(plan)}")
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
    show_fitted(console, *_devices(console, plan))
    show(console)
    for line in _notes(plan):
        say(console, line)
    show(console)
    show(console, "Run:" if plan.layout.fits else "Run (as asked; it does not fit: see above):")
    print_command(console, command_lines(plan.flags, console.width, lead="  "))
    if plan.floors is not None:
        show(console)
        _floor(console, plan)


def _devices(console: Console, plan: LocalPlan) -> tuple[Table, list[Column]]:
    names = ("Weights", "Tensors", "KV cache", "Compute (estimate)", "Total", "Has")
    columns = [Column("Device"), *(Column(name, number=True) for name in names), Column("Holds", wraps=True)]
    rows = [
        [
            load.name,
            mib(load.weights),
            f"{load.tensors:,}",
            mib(load.cache),
            mib(load.compute),
            mib(load.total),
            _has(plan, load),
            _holds(plan, load),
        ]
        for load in (*plan.layout.gpus, plan.layout.host)
    ]
    return fitted(console, columns, rows)


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


def _notes(plan: LocalPlan) -> Iterator[str]:
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
            f"{on_gpus} on the GPU that holds each block)."
        )
    yield f"Compute buffers: {COMPUTE_SOURCE}."
    if options.engine.computes_missing_attention:
        yield (
            "ik_llama.cpp computes the attention tensors a file lacks at load (attn_kv_b from attn_k_b and "
            "attn_v_b, or the reverse): GPU memory beyond the buffers above, not counted here."
        )


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
