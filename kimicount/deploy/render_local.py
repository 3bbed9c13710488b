"""The local `plan` view: a GGUF under llama.cpp or ik_llama.cpp, device by device, with its cache, the
longest context, the flags to pass and the speed floor; without --gguf or --quant, the quants that fit."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console
from rich.table import Table

from kimicount.deploy.local.builds import CacheLayout
from kimicount.deploy.local.choice import QuantChoice, QuantFit
from kimicount.deploy.local.floor import DISK_BANDWIDTH, DISK_SOURCE
from kimicount.deploy.local.placement import COMPUTE_SOURCE, DeviceLoad
from kimicount.deploy.local.plan import LocalPlan, pool_words, pools
from kimicount.deploy.render_command import command_lines, print_command
from kimicount.render import Column, fitted, human_bytes, plural, say, show, show_fitted

MIB = 2**20


def mib(count: int) -> str:
    """As llama.cpp prints buffer sizes: 2998.56 MiB."""
    return f"{count / MIB:,.2f} MiB"


def _engine(plan: LocalPlan) -> str:
    return plan.options.engine.describe(plan.options.build)


def _box(plan: LocalPlan | QuantChoice) -> str:
    gpus = f"{plan.count} × {plan.gpu.name}" if plan.gpu else "no GPU"
    ram = "" if plan.options.ram is None else f" + {human_bytes(plan.options.ram)} RAM"
    return gpus + ram


def render_local_answer(console: Console, answer: LocalPlan | QuantChoice) -> None:
    """A local plan, or which quants fit."""
    if isinstance(answer, LocalPlan):
        render_local_plan(console, answer)
    else:
        render_quant_choice(console, answer)


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
    layers = len(cache.layers)
    per_token = cache.token_bytes() * layers
    types = f"K {cache.type_k}" + ("" if cache.choice.layout is CacheLayout.latent else f", V {cache.type_v}")
    kind = "" if cache.state is None else " MLA"
    say(
        console,
        f"KV cache: {cache.choice.layout.value} ({cache.choice.reason}); {types}: {per_token:,} B per token "
        f"({layers}{kind} layers); {cache.cells:,} cells for {plan.context:,} tokens: "
        f"{mib(cache.layer_bytes * layers)}.",
    )
    found = pools(plan)
    if found is not None:
        state = cache.state
        assert state is not None  # pools() is None without one
        say(
            console,
            f"Recurrent state (per sequence, F32): {found.state_layers} KDA layers × (r {state.r_elements:,} "
            f"+ s {state.s_elements:,} values: {found.formula}) × 4 B = "
            f"{found.state_bytes_per_sequence:,} B per sequence; {state.cells} cells for {state.cells} "
            f"sequences: {mib(found.state_bytes)}.",
        )
        say(console, pool_words(found, plan.context, plan.options.parallel))
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
    kv = "KV cache" if plan.cache.state is None else "KV + state"
    names = ("Weights", "Tensors", kv, "Compute (estimate)", "Total", "Has")
    columns = [Column("Device"), *(Column(name, number=True) for name in names), Column("Holds", wraps=True)]
    rows = [
        [
            load.name,
            mib(load.weights),
            f"{load.tensors:,}",
            mib(load.cache + load.state),
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
    disk = floors.disk
    if disk is not None:
        host = plan.layout.host
        source = DISK_SOURCE if floors.disk_bandwidth == DISK_BANDWIDTH else "--disk-bandwidth"
        say(
            console,
            f"Read from disk: the page cache holds {human_bytes(host.weights - floors.uncached)} of the "
            f"{human_bytes(host.weights)} of host tensors, so each token reads the rest's share of its routed "
            f"experts, {human_bytes(round(disk.bytes))}, from disk at {floors.disk_bandwidth / 1e9:,.2f} GB/s "
            f"({source}): {disk.seconds * 1000:,.1f} ms of the floor, ≤ {1 / disk.seconds:.2f} tokens/s from "
            "the disk alone (uniform routing; skewed routing keeps the hot experts cached and reads less).",
        )
    say(
        console,
        f"Prompt floor: each {floors.ubatch}-token ubatch moves the {human_bytes(floors.ram_weights)} in RAM "
        f"over PCIe at {floors.pcie_bandwidth / 1e9:.1f} GB/s"
        + (f", reads {human_bytes(floors.uncached)} of them from disk," if floors.uncached else "")
        + " and computes on the GPU: ≥ "
        f"{floors.prompt_seconds:.2f} s ({floors.prompt_bound}-bound), ≤ {floors.prompt_tokens_per_s:,.0f} tokens/s.",
    )


# --- which quant fits ------------------------------------------------------------------------------


def render_quant_choice(console: Console, choice: QuantChoice) -> None:
    """The quants that fit, largest first, a table of their offload and context, the next larger that
    does not fit and why, and the command of the largest."""
    fitting = choice.fitting
    engine = choice.options.engine.describe(choice.options.build)
    where = _box(choice) + (
        "" if choice.options.ram is not None else " (the GPUs alone: --ram SIZE adds RAM)"
    )
    count = (
        f"{plural(len(fitting), 'uniform llama-quantize type')} fit"
        if fitting
        else "no uniform llama-quantize type fits"
    )
    say(
        console,
        f"[bold]{choice.spec.name}[/] on {where}, {engine}: {count}"
        + (", largest first:" if fitting else "."),
    )
    if fitting:
        show_fitted(console, *_choice_table(console, choice, fitting))
    larger = choice.next_larger
    if larger is not None:
        what = "The next larger" if fitting else "The smallest"
        say(
            console,
            f"{what}, {larger.quant} ({human_bytes(larger.file_bytes)}), does not fit: {_why(choice, larger)}.",
        )
        if larger.sized is None or any(load.name == "RAM" for load in larger.full):
            say(
                console,
                "With mmap (the default) llama.cpp runs a larger one anyway, reading what RAM cannot hold from "
                "disk at every token: --quant TYPE with --ram-bandwidth gives its speed floor, the disk's read "
                "rate included.",
            )
    context = (
        f"at {choice.options.context:,} tokens (--context)"
        if choice.options.context is not None
        else f"with at least {choice.min_context:,} tokens of context (the longest shown; --context asks for one)"
    )
    say(
        console,
        f"Fits: every GPU{' and RAM' if choice.options.ram is not None else ''} holds its tensors, KV cache and "
        f"compute buffers {context}; RAM holds the host tensors, none read from disk at each token.",
    )
    imatrix = [row.quant for row in fitting if row.imatrix]
    say(
        console,
        "Sizes are estimates: llama-quantize's rules for a uniform conversion (llama.cpp b10572); dynamic "
        "quants (UD-*) differ: give --gguf."
        + (f" {', '.join(imatrix)} need an importance matrix (llama-quantize --imatrix)." if imatrix else ""),
    )
    if fitting:
        show(console)
        show(console, f"Run the largest ({fitting[0].quant}):")
        print_command(console, command_lines(fitting[0].flags, console.width, lead="  "))
    say(
        console,
        "--quant TYPE plans one whole: each device's buffers, the fewest --n-cpu-moe, the speed floor.",
    )


def _why(choice: QuantChoice, row: QuantFit) -> str:
    """Why a quant does not fit: the file against all the memory, the devices it overfills, or the
    context it leaves."""
    if row.sized is None:
        return f"the file alone is more than the GPUs and RAM hold together ({human_bytes(choice.memory)})"
    if row.full:
        loads = ", ".join(
            f"{load.name} {human_bytes(load.total)} of {human_bytes(load.memory or 0)}" for load in row.full
        )
        return f"at {row.sized.context:,} tokens it would take {loads}"
    longest = row.sized.fit.longest
    return f"only {longest:,} tokens of context fit" if longest else "not one block of context fits"


def _choice_table(
    console: Console, choice: QuantChoice, rows: tuple[QuantFit, ...]
) -> tuple[Table, list[Column]]:
    speed = any(row.floors is not None for row in rows)
    columns = [
        Column("Quant"),
        Column("File", number=True),
        Column("BPW", number=True),
        Column("GPUs" if choice.count > 1 else "GPU", number=True),
        Column("RAM", number=True, drop=1),
        Column("Context", number=True),
        Column("Offload", wraps=True),
        *([Column("Decode ≤", number=True, drop=2, hint="--json")] if speed else []),
    ]
    table_rows = [
        [
            row.quant,
            human_bytes(row.file_bytes),
            f"{row.bits_per_weight:.2f}",
            human_bytes(row.gpu_bytes),
            human_bytes(row.ram_bytes),
            f"{row.context:,}" if row.context is not None else "—",
            " ".join(row.offload.flags()),
            *([f"{row.floors.decode_tokens_per_s:.1f} tok/s" if row.floors else "—"] if speed else []),
        ]
        for row in rows
    ]
    return fitted(console, columns, table_rows)
