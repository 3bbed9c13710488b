"""`kimicount plan` for people: where the weights go, one GPU's memory as a bar, the KV cache it holds.

Reads a PlanReport; computes nothing but layout. Shared helpers (console, units) come from render.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from kimicount.plan import PlanReport, StageMemory
from kimicount.render import human_bytes, show
from kimicount.storage import quantization_summary

#: Prose wraps at this width (or the terminal's, if narrower), at spaces: numbers are never cut.
PROSE_WIDTH = 100
#: The memory bar's width in characters.
BAR_WIDTH = 60
#: (character, colour) of each part of the bar.
BAR_PARTS = {
    "weights": ("█", "#1f77b4"),
    "reserve": ("▓", "#e6a100"),
    "KV cache": ("▒", "#2ca02c"),
    "unused pool": ("░", "#98df8a"),
    "headroom": ("·", "#7f7f7f"),
}


def say(console: Console, text: str = "") -> None:
    """Print a paragraph wrapped at PROSE_WIDTH columns; off a terminal without trailing spaces."""
    width = min(console.width, PROSE_WIDTH)
    if console.is_terminal:
        console.print(text, width=width)
        return
    with console.capture() as captured:
        console.print(text, width=width)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def fitting_table(console: Console, build: Callable[[set[str]], Table], optional: Sequence[str]) -> Table:
    """`build(dropped)` with as many of the `optional` columns as the console's width holds, dropped in
    that order: rich would otherwise squeeze the columns and cut numbers."""
    dropped: set[str] = set()
    table = build(dropped)
    for column in optional:
        natural = Measurement.get(console, console.options.update_width(10**6), table).maximum
        if natural <= console.width:
            break
        dropped.add(column)
        table = build(dropped)
    return table


def plural(number: int, noun: str) -> str:
    """'1 GPU', '8 GPUs', '715,072 tokens'.

    >>> plural(1, "stage"), plural(715_072, "token")
    ('1 stage', '715,072 tokens')
    """
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def verdict(report: PlanReport) -> str:
    """'fits: 715,072 tokens of context per replica' or 'does not fit: short by 8.9 GiB per GPU'."""
    if report.fits:
        return f"fits, {report.tokens_total:,} tokens of KV cache in all"
    return f"does not fit: short by {human_bytes(report.short_by)} per GPU"


def render_plan(console: Console, report: PlanReport) -> None:
    spec, gpu, parallel = report.spec, report.gpu, report.parallel
    colour = "green" if report.fits else "red"
    say(
        console,
        f"[bold]{spec.name}[/] ({spec.model_type}) on {report.count} × {gpu.name}, {parallel.label}: "
        f"[bold {colour}]{verdict(report)}[/]",
    )
    overridden = f"; given: {', '.join(gpu.overridden)}" if gpu.overridden else ""
    say(
        console,
        f"{gpu.name}: {gpu.description}, {gpu.memory_bytes // 2**20:,} MiB as the device reports it{overridden}",
    )
    say(console)
    say(console, f"Weights on one GPU, as stored: {quantization_summary(spec)}.")
    show(console, _weights_table(report))
    if len(report.stages) > 1:
        show(console)
        show(console, _stages_table(report))
    show(console)
    _memory(console, report, report.fullest)
    show(console)
    _kv(console, report)
    if report.min_gpus_asked:
        show(console)
        say(console, _min_gpus(report))


def _weights_table(report: PlanReport) -> Table:
    """One row per component: its split, its bytes in the whole model and on one GPU of each stage."""
    stages = len(report.stages)
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Component", no_wrap=True)
    table.add_column("Split per GPU", overflow="fold")
    table.add_column("Whole model", justify="right", no_wrap=True)
    for index in range(stages):
        table.add_column("Per GPU" if stages == 1 else f"Stage {index}", justify="right", no_wrap=True)
    for c in report.placement.components:
        table.add_row(c.name, c.rule, human_bytes(c.model_bytes), *(human_bytes(b) for b in c.bytes_per_gpu))
    whole = sum(c.model_bytes for c in report.placement.components)
    totals = (f"[bold]{human_bytes(report.placement.weight_bytes(i))}[/]" for i in range(stages))
    table.add_row("[bold]Total[/]", "", human_bytes(whole), *totals)
    return table


def _stages_table(report: PlanReport) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Stage", justify="right")
    table.add_column("Layers")
    for column in ("KV layers", "Weights", "Reserve", "KV pool", "Tokens per GPU"):
        table.add_column(column, justify="right")
    for s in report.stages:
        span = f"{s.layers[0]}–{s.layers[-1]}" if len(s.layers) > 1 else str(s.layers[0])
        table.add_row(
            str(s.stage),
            span,
            str(s.kv_layers),
            human_bytes(s.weights),
            human_bytes(s.reserve),
            _signed(s.pool),
            f"{s.tokens:,}",
        )
    return table


def _signed(count: int) -> str:
    return human_bytes(count) if count >= 0 else f"−{human_bytes(-count)}"


def _memory(console: Console, report: PlanReport, stage: StageMemory) -> None:
    gpu = report.gpu
    where = f"stage {stage.stage}, the fullest" if len(report.stages) > 1 else "any of them"
    say(console, f"One GPU ({where}):")
    grid = Table.grid(padding=(0, 2))
    for justify in ("left", "right", "right"):
        grid.add_column(justify=justify)
    utilization = f"{float(report.utilization):g}"
    grid.add_row("Memory", f"{gpu.memory_bytes:,} B", human_bytes(gpu.memory_bytes))
    if report.kv_memory is None:
        grid.add_row(
            f"Usable: × {utilization} (--gpu-memory-utilization)",
            f"{report.usable:,} B",
            human_bytes(report.usable),
        )
        grid.add_row("− weights", f"{stage.weights:,} B", human_bytes(stage.weights))
        label = "− reserve (an estimate, below)" if report.reserve.estimate else "− reserve (--reserve)"
        grid.add_row(label, f"{stage.reserve:,} B", human_bytes(stage.reserve))
        grid.add_row("= KV cache pool", f"{stage.pool:,} B", _signed(stage.pool))
    else:
        grid.add_row("Weights", f"{stage.weights:,} B", human_bytes(stage.weights))
        grid.add_row("KV cache pool (--kv-memory)", f"{stage.pool:,} B", human_bytes(stage.pool))
    show(console, grid)
    for line in _bar(report, stage):
        say(console, line)
    if report.reserve is not None and report.reserve.estimate:
        say(console, f"Reserve, an estimate of {report.reserve.assumes_short}:")
        terms = Table.grid(padding=(0, 2))
        for justify in ("left", "left", "right"):
            terms.add_column(justify=justify)
        for name, calculation, bytes_ in report.reserve.terms:
            terms.add_row(f"  {name}", calculation, f"= {bytes_:,} B")
        show(console, terms)
        say(console, "--reserve SIZE replaces it; --kv-memory SIZE starts from the pool an engine printed.")


def bar_parts(report: PlanReport, stage: StageMemory) -> list[tuple[str, int]]:
    """(part, bytes) across one GPU's memory: weights, reserve, the KV cache's whole pages, the rest of
    the pool, and what the utilization leaves (headroom). A pool below zero shows as no KV."""
    memory = report.gpu.memory_bytes
    kv = stage.kv_bytes
    pool = max(stage.pool, 0)
    parts = [
        ("weights", stage.weights),
        ("reserve", stage.reserve),
        ("KV cache", kv),
        ("unused pool", pool - kv),
    ]
    used = sum(size for _, size in parts)
    parts.append(("headroom", max(memory - used, 0)))
    return parts


def _bar(report: PlanReport, stage: StageMemory) -> tuple[str, str]:
    parts = bar_parts(report, stage)
    total = max(report.gpu.memory_bytes, sum(size for _, size in parts))
    cells, edge, drawn = [], 0, 0
    for name, size in parts:
        edge += size
        width = round(BAR_WIDTH * edge / total) - drawn
        drawn += width
        char, colour = BAR_PARTS[name]
        if width:
            cells.append(f"[{colour}]{char * width}[/]")
    legend = "  ".join(
        f"[{BAR_PARTS[name][1]}]{BAR_PARTS[name][0]}[/] {name} {human_bytes(size)}"
        for name, size in parts
        if size
    )
    overflow = " [red]over by " + human_bytes(-stage.pool) + "[/]" if stage.pool < 0 else ""
    return f"[{''.join(cells)}]{overflow}", legend


def _kv(console: Console, report: PlanReport) -> None:
    stage = report.fullest
    line, indexer = stage.cache.attention, stage.cache.indexer
    parallel = report.parallel
    keys = f" + {indexer.bytes_per_token_per_layer:,} B of indexer keys" if indexer else ""
    say(
        console,
        f"KV cache: {report.layout.value} in {report.dtype}, {line.calculation} = "
        f"{line.bytes_per_token_per_layer:,} B{keys} per token per layer",
    )
    say(console, f"  × {stage.kv_layers} layers = {stage.cache.bytes_per_token:,} B per token on each GPU")
    if parallel.dcp > 1:
        say(
            console,
            f"  split by token over {parallel.dcp} ranks of each TP group (decode-context parallelism)",
        )
    elif parallel.tp > 1:
        say(
            console,
            f"  each of the {parallel.tp} TP ranks holds all of it (the latent belongs to no head)"
            if line.ranks == 1
            else f"  split by head over the {parallel.tp} TP ranks",
        )
    page = report.block_size
    pool = max(stage.pool, 0)
    say(
        console,
        f"Pages of {page} tokens: floor({pool:,} B ÷ ({page} × {stage.bytes_per_token:,} B)) = "
        f"{stage.tokens // page:,}",
    )
    replicas = "".join(
        (
            f"; × DCP {parallel.dcp} = {report.tokens_per_replica:,} per replica" if parallel.dcp > 1 else "",
            f"; × DP {parallel.dp} = {report.tokens_total:,} in all" if parallel.dp > 1 else "",
        )
    )
    say(console, f"Tokens: {stage.tokens // page:,} × {page} = {report.tokens_per_gpu:,} per GPU{replicas}")
    whole = plural(report.sequences_per_replica, "whole sequence")
    everywhere = f", {report.sequences_per_replica * parallel.dp:,} in all" if parallel.dp > 1 else ""
    say(
        console,
        f"Maximum concurrency for {report.max_model_len:,} tokens per request: {report.max_concurrency:.2f}× "
        f"({whole} per replica{everywhere})",
    )
    needs = (
        f"one sequence of {report.max_model_len:,} tokens"
        if report.kv_memory is not None
        else f"its weights, the reserve and one sequence of {report.max_model_len:,} tokens"
    )
    if report.fits:
        say(console, f"[green]Fits[/]: every GPU holds {needs}.")
    else:
        short = f"{human_bytes(report.short_by)} ({report.short_by:,} B)"
        say(console, f"[red]Does not fit[/]: a GPU is short by {short} for {needs}.")


def _min_gpus(report: PlanReport) -> str:
    if report.min_gpus is None:
        return f"--min-gpus: no layout of up to 4,096 × {report.gpu.name} holds it."
    gpus, parallel = report.min_gpus
    return (
        f"--min-gpus: {gpus} × {report.gpu.name} ({parallel.label}) hold the weights, the reserve and one "
        f"sequence of {report.max_model_len:,} tokens on every GPU."
    )


# --- the speed floor (plan --batch --context) ---------------------------------------------------------


def _ms(seconds: float) -> str:
    """'17.5 ms', '0.114 ms', '1.32 s'.

    >>> _ms(0.0175), _ms(0.000114), _ms(1.3162)
    ('17.5 ms', '0.114 ms', '1.32 s')
    """
    return f"{seconds:.3g} s" if seconds >= 1 else f"{seconds * 1e3:.3g} ms"


def _rate(value: float) -> str:
    """Tokens per second with thousands separators: '6,380', '44.5'."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def render_speed(console: Console, report: PlanReport, step, steps, prefill) -> None:
    """The decode floor at the asked batch and context, the sweep over batch sizes with a chart, and
    the prefill floor."""
    from kimicount.render_flow import flops_text

    gpu = report.gpu
    say(
        console,
        f"[bold]Decode floor[/]: {step.batch:,} sequences per replica at context {step.context:,}, "
        f"{report.layout.value} cache, attention {step.way.value}",
    )
    stage = step.slowest
    where = f" (stage {stage.stage}, the slowest)" if len(step.stages) > 1 else ""
    peaks = ", ".join(
        f"{flops_text(f)} in {dtype} at {gpu.peak_flops(dtype) / 1e12:,.4g} TFLOPS"
        for dtype, f in sorted(stage.flops.items())
    )
    say(
        console,
        f"One GPU{where} reads {human_bytes(round(stage.bytes))}: {human_bytes(stage.weight_bytes)} of weights, "
        f"{human_bytes(round(stage.expert_bytes))} of the experts it holds (the share B × DP tokens touch), "
        f"{human_bytes(round(stage.kv_bytes))} of KV cache; at {gpu.hbm_bandwidth / 1e12:.3g} TB/s that is "
        f"{_ms(stage.memory_time)}.",
    )
    say(console, f"It computes {peaks}: {_ms(stage.compute_time)}.")
    say(
        console,
        f"Floor: {_ms(step.time)} per step ({step.bound}-bound), so at most {_rate(step.tokens_per_s)} tokens/s "
        f"in all, {_rate(step.tokens_per_s_per_gpu)} per GPU, {_rate(step.tokens_per_s_per_sequence)} per sequence"
        + ("" if step.fits else "; [red]this batch's KV cache does not fit the pool[/]")
        + ".",
    )
    say(
        console,
        "These are floors: time ≥ max(bytes ÷ HBM bandwidth, Σ FLOPs ÷ dense peak of their dtype), with ideal "
        "bandwidth and FLOP/s, no communication, no kernel overhead.",
    )
    say(console)
    _sweep_table(console, report, steps)
    say(console)
    say(
        console,
        f"[bold]Prefill floor[/] (time to first token) for a prompt of {prefill.context:,} tokens on one replica: "
        f"{_ms(prefill.time)} ({prefill.bound}-bound, {flops_text(prefill.slowest.total_flops)} on the busiest GPU).",
    )


def _sweep_table(console: Console, report: PlanReport, steps) -> None:
    from kimicount.render_flow import flops_text
    from kimicount.speed import compute_bound_from

    turn = compute_bound_from(steps)
    say(
        console,
        f"Decode floor against batch, context {steps[0].context:,}"
        + (f"; compute-bound from batch {turn:,}" if turn else "; memory-bound at every batch shown")
        + ":",
    )
    best = max(s.tokens_per_s_per_gpu for s in steps)
    columns = {
        "Batch": lambda s: f"{s.batch:,}",
        "Fits": lambda s: "yes" if s.fits else "no",
        "Reads": lambda s: human_bytes(round(s.slowest.bytes)),
        "Computes": lambda s: flops_text(s.slowest.total_flops),
        "Memory": lambda s: _ms(s.slowest.memory_time),
        "Compute": lambda s: _ms(s.slowest.compute_time),
        "Floor": lambda s: _ms(s.time),
        "tok/s/GPU": lambda s: _rate(s.tokens_per_s_per_gpu),
    }

    def build(dropped: set[str]) -> Table:
        table = Table(box=None, pad_edge=False, header_style="bold")
        shown = [name for name in columns if name not in dropped]
        chart = 0 if "chart" in dropped else 12 if "wide chart" in dropped else 24
        for name in shown:
            table.add_column(name, justify="left" if name == "Fits" else "right", no_wrap=True)
        if chart:
            table.add_column("", no_wrap=True)
        for s in steps:
            table.add_row(
                *(columns[name](s) for name in shown), *([_bar_cell(s, best, chart)] if chart else [])
            )
        return table

    table = fitting_table(console, build, ("wide chart", "Computes", "chart", "Compute", "Memory", "Reads"))
    show(console, table)
    charted = (
        "Chart: tokens/s per GPU, linear; ▒ memory-bound, █ compute-bound. "
        if table.columns[-1].header == ""
        else ""
    )
    say(console, charted + "Fits: the batch's KV fits the pool.")


def _bar_cell(step, best: float, chart: int) -> str:
    width = max(1, round(chart * step.tokens_per_s_per_gpu / best))
    colour = "#2ca02c" if step.bound == "memory" else "#d62728"
    return f"[{colour}]{('▒' if step.bound == 'memory' else '█') * width}[/]"
