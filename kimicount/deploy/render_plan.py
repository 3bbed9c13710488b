"""`kimicount plan` for people: where the weights go, one GPU's memory as a bar, the KV cache it holds,
and the speed floor of a decode step.

Reads a PlanReport and the speed module's Steps; computes nothing but layout. Shared helpers (console,
prose, units, tables that fit) come from render.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kimicount.deploy.groups import Packing
from kimicount.deploy.hardware import GIVEN_MEMORY, Accelerator
from kimicount.deploy.placement import Kind, Parallel
from kimicount.deploy.plan import PlanReport, StageMemory, search_limit
from kimicount.deploy.speed import Step, compute_bound_from
from kimicount.flow import Mla
from kimicount.render import Column, fitted, flops_text, human_bytes, say, show, show_fitted
from kimicount.storage import quantization_summary

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
#: How each estimate the pool can rest on is named in a sentence.
ESTIMATED_INPUTS = {
    "reserve": "the estimated reserve",
    "preload": "the estimated memory in use before the weights load",
    "cuda_memory": "the estimated CUDA total",
}


def estimated_from(report: PlanReport, names: tuple[str, ...] | None = None) -> str:
    """'the estimated reserve', 'the estimated reserve and the estimated CUDA total', or '': the
    estimates the pool rests on, or those `names`."""
    names = report.estimated_inputs if names is None else names
    return " and ".join(ESTIMATED_INPUTS[name] for name in names)


def verdict(report: PlanReport) -> str:
    """'fits, 757,312 tokens of KV cache in all' or 'does not fit: short by 8.9 GiB per GPU', then
    '(estimated: it rests on the estimated reserve)' when the pool does."""
    if report.fits:
        text = f"fits, {report.tokens_total:,} tokens of KV cache in all"
    else:
        text = f"does not fit: short by {human_bytes(report.short_by)} per GPU"
    return text + (f" (estimated: it rests on {estimated_from(report)})" if report.estimate else "")


def memory_text(gpu: Accelerator, engine: str = "vLLM") -> str:
    """Where the GPU's memory figures come from: the vendor tool's total, shown so the part is
    recognised, and CUDA's, which the engine sizes against and the plan uses."""
    if gpu.memory_source == GIVEN_MEMORY:
        return (
            f"{human_bytes(gpu.memory_bytes)} ({gpu.memory_bytes:,} B) as given by --gpu-memory, used as the "
            "total CUDA reports"
        )
    reported = f"{gpu.memory_bytes // 2**20:,} MiB"
    shown = (
        f"{reported} nominal (no device report found)"
        if gpu.memory_source == "nominal"
        else f"{reported} as {gpu.memory_source} reports it"
    )
    about = "an estimated " if gpu.cuda_memory_estimated else ""
    return (
        f"{shown}; the plan uses CUDA's total, {about}{gpu.cuda_memory_bytes // 2**20:,} MiB, which "
        f"{engine} sizes against ({gpu.cuda_memory_source})"
    )


def render_plan(console: Console, report: PlanReport, *, verdict_line: bool = True) -> None:
    """The verdict (unless the answer above gave it), the weights per GPU, one GPU's memory and bar, the
    KV cache, --min-gpus."""
    spec, gpu, parallel = report.spec, report.gpu, report.parallel
    colour = "green" if report.fits else "red"
    if verdict_line:
        engine = report.rules.sized_by(report.release)
        say(
            console,
            f"[bold]{spec.name}[/] ({spec.model_type}) on {report.count} × {gpu.name}, {parallel.label}{engine}: "
            f"[bold {colour}]{verdict(report)}[/]",
        )
    overridden = f"; given: {', '.join(gpu.overridden)}" if gpu.overridden else ""
    say(console, f"{gpu.name}: {gpu.description}, {memory_text(gpu, report.rules.label)}{overridden}")
    say(console)
    say(console, f"Weights on one GPU, as stored: {quantization_summary(spec)}.")
    _weights_table(console, report)
    if parallel.dp > 1:
        say(console, sglang_dp_text(parallel) if parallel.sglang_dp else dp_text(parallel.dp))
    if parallel.redundant:
        say(console, redundant_text(report))
    if len(report.stages) > 1:
        show(console)
        _stages_table(console, report)
    show(console)
    _memory(console, report, report.fullest)
    if report.deepep_buffer is not None:
        buffer = report.deepep_buffer
        say(
            console,
            f"If the MoE's all-to-all runs on DeepEP, keep {human_bytes(buffer.bytes)} per GPU free for its "
            f"low-latency buffer, an estimate not taken from the pool: {buffer.calculation} ({buffer.source}).",
        )
    show(console)
    _kv(console, report)
    if report.min_gpus_asked:
        show(console)
        say(console, min_gpus_text(report))


def dp_text(dp: int) -> str:
    """What --dp means here: vLLM's data-parallel attention (SGLang's differs)."""
    return (
        f"DP{dp} is vLLM's data-parallel attention: each of the {dp} replicas holds the whole attention, dense "
        "MLP, shared expert, embedding and head, and keeps its own sequences; only the routed experts span "
        "all GPUs. (SGLang's DP attention splits the dense MLP and the head over all GPUs: --engine sglang "
        "--enable-dp-attention.)"
    )


def sglang_dp_text(parallel: Parallel) -> str:
    """What SGLang's DP attention is: attention per DP rank, the rest over the whole TP group."""
    group = parallel.tp * parallel.dp
    attention = "whole attention" if parallel.tp == 1 else f"attention split over TP{parallel.tp}"
    return (
        f"DP{parallel.dp} attention is SGLang's (--enable-dp-attention): each of the {parallel.dp} DP ranks holds "
        f"the {attention} and keeps its own sequences in its own pool; the dense MLP, the shared expert and "
        f"the output head split over all {group} GPUs of --tp {group}, the embedding is whole on every GPU."
    )


def redundant_text(report: PlanReport) -> str:
    """The redundant expert slots: how many, where, and what they cost."""
    parallel, spec = report.parallel, report.spec
    slots = spec.n_routed_experts + parallel.redundant
    return (
        f"Redundant experts: {spec.n_routed_experts} + {parallel.redundant} = {slots:,} expert slots over "
        f"EP{parallel.moe_ranks}, {slots // parallel.moe_ranks} per GPU, each a whole expert's weights "
        "(EPLB: vLLM --enable-eplb --num-redundant-experts, SGLang --ep-num-redundant-experts)."
    )


def _weights_table(console: Console, report: PlanReport) -> None:
    """One row per component: its split, its bytes in the whole model and on one GPU of each stage."""
    stages = len(report.stages)
    columns = [
        Column("Component"),
        Column("Split per GPU", wraps=True, min_width=20),
        Column("Whole model", number=True),
        *(Column("Per GPU" if stages == 1 else f"Stage {i}", number=True) for i in range(stages)),
    ]
    components = report.placement.components
    rows = [
        [
            c.name,
            c.rule,
            human_bytes(c.model_bytes) if c.in_checkpoint else "not stored",
            *(human_bytes(b) for b in c.bytes_per_gpu),
        ]
        for c in components
    ]
    whole = sum(c.model_bytes for c in components)
    totals = (f"[bold]{human_bytes(report.placement.weight_bytes(i))}[/]" for i in range(stages))
    rows.append(["[bold]Total[/]", "", human_bytes(whole), *totals])
    show_fitted(console, *fitted(console, columns, rows))
    if report.placement.has(Kind.absorption):
        say(console, report.rules.absorption_note)


def _stages_table(console: Console, report: PlanReport) -> None:
    columns = [
        Column("Stage", number=True),
        Column("Layers"),
        *(
            Column(name, number=True)
            for name in ("KV layers", "Weights", "Reserve", "KV pool", "Tokens per GPU")
        ),
    ]
    rows = [
        [
            str(s.stage),
            f"{s.layers[0]}–{s.layers[-1]}" if len(s.layers) > 1 else str(s.layers[0]),
            str(s.kv_layers),
            human_bytes(s.weights),
            human_bytes(s.reserve),
            _signed(s.pool),
            f"{s.tokens:,}",
        ]
        for s in report.stages
    ]
    show_fitted(console, *fitted(console, columns, rows))


def _signed(count: int) -> str:
    return human_bytes(count) if count >= 0 else f"−{human_bytes(-count)}"


def _memory(console: Console, report: PlanReport, stage: StageMemory) -> None:
    gpu = report.gpu
    where = f"stage {stage.stage}, the fullest" if len(report.stages) > 1 else "any of them"
    say(console, f"One GPU ({where}):")
    grid = Table.grid(padding=(0, 2))
    for justify in ("left", "right", "right"):
        grid.add_column(justify=justify)
    about = " (an estimate)" if gpu.cuda_memory_estimated else ""
    grid.add_row(f"CUDA's total{about}", f"{gpu.cuda_memory_bytes:,} B", human_bytes(gpu.cuda_memory_bytes))
    if report.kv_memory is None:
        for row in report.rules.memory_rows(report, stage):
            shown = _signed(row.bytes) if row.signed else human_bytes(row.bytes)
            grid.add_row(row.label, f"{row.bytes:,} B", shown)
    else:
        grid.add_row("Weights", f"{stage.weights:,} B", human_bytes(stage.weights))
        grid.add_row("KV cache pool (--kv-memory)", f"{stage.pool:,} B", human_bytes(stage.pool))
    show(console, grid)
    for line in _bar(report, stage):
        say(console, line)
    lines, terms = report.rules.reserve_lines(report)
    if report.reserve is not None and terms:
        *before, after = lines
        for line in before:
            say(console, line)
        _show_terms(console, report.reserve.terms)
        say(console, after)


def _show_terms(console: Console, terms: tuple[tuple[str, str, int], ...]) -> None:
    """The reserve's terms, one a row: name, calculation, bytes."""
    grid = Table.grid(padding=(0, 2))
    for justify in ("left", "left", "right"):
        grid.add_column(justify=justify)
    for name, calculation, bytes_ in terms:
        grid.add_row(f"  {name}", calculation, f"= {bytes_:,} B")
    show(console, grid)


def bar_parts(report: PlanReport, stage: StageMemory) -> list[tuple[str, int]]:
    """(part, bytes) across one GPU's memory as CUDA reports it: weights, reserve, the KV cache's whole
    pages, the rest of the pool, and what the utilization leaves (headroom). A pool below zero shows as
    no KV."""
    memory = report.gpu.cuda_memory_bytes
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
    total = max(report.gpu.cuda_memory_bytes, sum(size for _, size in parts))
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
    if stage.packing is not None:
        _packed_kv(console, report, stage.packing)
        return
    line, indexer = stage.cache.attention, stage.cache.indexer
    parallel = report.parallel
    keys = f" + {indexer.bytes_per_token_per_layer:,} B of indexer keys" if indexer else ""
    say(
        console,
        f"KV cache: {report.layout.value} in {report.dtype}, {line.calculation} = "
        f"{line.bytes_per_token_per_layer:,} B{keys} per token per layer",
    )
    say(console, f"  × {line.layers} layers = {stage.cache.bytes_per_token:,} B per token on each GPU")
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
    if stage.state is not None:  # a hybrid model's pool: the engine's own lines say how it is split
        for state_group in stage.groups[1:]:
            if state_group.state is not None:
                parts = " + ".join(f"{part.calculation}" for part in state_group.state.parts())
                say(
                    console,
                    f"State: {state_group.name}, {parts} = {state_group.bytes_per_layer:,} B per sequence per "
                    f"layer × {state_group.layers} layers = {state_group.bytes_per_sequence:,} B on each GPU",
                )
        for printed in report.rules.printed_lines(report):
            say(console, printed)
        return
    if page == 1:
        say(
            console,
            f"Tokens: floor({pool:,} B ÷ {stage.bytes_per_token:,} B) = {report.pages_per_gpu:,} (pages of 1)",
        )
    else:
        say(
            console,
            f"Pages of {page} tokens: floor({pool:,} B ÷ ({page} × {stage.bytes_per_token:,} B)) = "
            f"{report.pages_per_gpu:,}",
        )
    replicas = "".join(
        (
            f"; × DCP {parallel.dcp} = {report.tokens_per_replica:,} per replica" if parallel.dcp > 1 else "",
            f"; × DP {parallel.dp} = {report.tokens_total:,} in all" if parallel.dp > 1 else "",
        )
    )
    if page > 1:
        say(
            console,
            f"Tokens: {report.pages_per_gpu:,} × {page} = {report.tokens_per_gpu:,} per GPU{replicas}",
        )
    elif replicas:
        say(console, f"Tokens: {report.tokens_per_gpu:,} per GPU{replicas}")
    for printed in report.rules.printed_lines(report):
        say(console, printed)
    _fits(console, report)


def _packed_kv(console: Console, report: PlanReport, packing: Packing) -> None:
    """A family's own groups (DeepSeek V4's) as the engine's rule packs them: its groups, block ids."""
    say(console, f"KV cache: {report.spec.name}'s groups in {packing.dtype}, by {packing.rule}:")
    for name, words in packing.rows:
        say(console, f"  {name}: {words}")
    say(console, packing.calculation)
    for printed in report.rules.printed_lines(report):
        say(console, printed)
    _fits(console, report)


def _fits(console: Console, report: PlanReport) -> None:
    """Whether every GPU holds what it must, and what that rests on."""
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
    if report.estimate:
        say(
            console,
            f"The pool, its tokens, the concurrency and the verdict rest on {estimated_from(report)}: "
            "estimates, exact only as far as it is.",
        )


def min_gpus_text(report: PlanReport) -> str:
    """The --min-gpus sentence, labelled with the estimates the search rests on."""
    names = report.search_estimated_inputs
    estimated = f" (estimated: it rests on {estimated_from(report, names)})" if names else ""
    if report.min_gpus is None:
        return f"--min-gpus: no layout holds it{estimated}: {_why_none(report)}."
    gpus, parallel = report.min_gpus
    return (
        f"--min-gpus: {gpus} × {report.gpu.name} ({parallel.label}) hold the weights, the reserve and one "
        f"sequence of {report.max_model_len:,} tokens on every GPU{estimated}."
    )


def _why_none(report: PlanReport) -> str:
    """Why the --min-gpus search found no layout: every layout needs more than a GPU has, or the closest
    of those it tried up to its largest count still lacks memory."""
    search, gpu = report.min_gpus_search, report.gpu.name
    if search is None:  # a report made without the search's record
        return f"none of up to {search_limit(report.spec):,} × {gpu} does"
    if search.closest is None and search.largest_tried:
        return f"none of the layouts it tried, up to {search.largest_tried:,} × {gpu}, is a split the engine can make"
    if search.closest is None:
        return (
            f"every layout needs at least {human_bytes(search.least_need)} on its fullest GPU (the reserve "
            f"and one layer's KV of one sequence) and each {gpu} has {human_bytes(search.usable)} usable, "
            "so it tried no count"
        )
    gpus, parallel, short = search.closest
    return (
        f"it tried up to {search.largest_tried:,} × {gpu}; the closest, {gpus:,} × {gpu} ({parallel.label}), "
        f"is short by {human_bytes(short)} a GPU, and more GPUs put no less on the fullest one"
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


def render_speed(console: Console, report: PlanReport, step: Step, steps: list[Step], prefill: Step) -> None:
    """The decode floor at the asked batch and context, the sweep over batch sizes with a chart, and
    the prefill floor."""
    gpu, parallel = report.gpu, report.parallel
    say(
        console,
        f"[bold]Decode floor[/]: {step.batch:,} sequences per replica at context {step.context:,}, "
        f"{report.layout.value} cache, attention {step.way.value}",
    )
    stage = step.slowest
    where = f" (stage {stage.stage}, the slowest)" if len(step.stages) > 1 else ""
    peaks = ", ".join(
        f"{flops_text(float(f))} in {dtype} at {gpu.peak_flops(dtype) / 1e12:,.4g} TFLOPS"
        for dtype, f in sorted(stage.flops.items())
    )
    names = report.rules.absorption_copies
    copies = (
        f" ({names} in place of the FP8 kv_b_proj)"
        if step.way is Mla.absorbed and report.placement.has(Kind.absorption)
        else ""
    )
    say(
        console,
        f"One GPU{where} reads {human_bytes(round(stage.bytes))}: {human_bytes(stage.weight_bytes)} of weights"
        f"{copies}, {human_bytes(round(stage.expert_bytes))} of the experts it holds (the share B × DP tokens "
        f"touch under uniform routing, expected), {human_bytes(stage.kv_bytes)} of KV cache; at "
        f"{gpu.hbm_bandwidth / 1e12:.3g} TB/s that is {_ms(stage.memory_time)}.",
    )
    say(console, f"It computes {peaks}: {_ms(stage.compute_time)}.")
    fits = "" if step.fits else "; [red]this batch's KV cache does not fit the pool[/]"
    rates = (
        f"at most {_rate(step.tokens_per_s)} tokens/s in all, {_rate(step.tokens_per_s_per_gpu)} per GPU, "
        f"{_rate(step.tokens_per_s_per_sequence)} per sequence"
    )
    if parallel.pp > 1:
        say(
            console,
            f"Floor: a token crosses the {parallel.pp} stages in {_ms(step.time)} at least, and with "
            f"{parallel.pp} micro-batches in flight ({parallel.pp * step.batch:,} sequences per replica) one leaves "
            f"every {_ms(step.interval)}, the slowest stage ({step.bound}-bound): {rates}{fits}.",
        )
    else:
        say(console, f"Floor: {_ms(step.time)} per step ({step.bound}-bound), so {rates}{fits}.")
    say(
        console,
        "These are floors: time ≥ max(bytes ÷ HBM bandwidth, Σ FLOPs ÷ dense peak of their dtype), with ideal "
        "bandwidth and FLOP/s, no communication, no kernel overhead, and routing spread evenly over the "
        "experts (skewed routing touches fewer).",
    )
    say(console)
    _sweep_table(console, report, steps)
    say(console)
    say(
        console,
        f"[bold]Prefill floor[/] (time to first token) for a prompt of {prefill.context:,} tokens on one replica: "
        f"{_ms(prefill.time)} ({prefill.bound}-bound, {flops_text(float(prefill.slowest.total_flops))} on the busiest GPU)"
        + ("" if prefill.fits else "; [red]its KV cache does not fit the pool[/]")
        + ".",
    )


#: Widths the sweep's chart tries, widest first.
CHART_WIDTHS = (24, 12)


def _sweep_table(console: Console, report: PlanReport, steps: list[Step]) -> None:
    turn = compute_bound_from(steps)
    say(
        console,
        f"Decode floor against batch, context {steps[0].context:,}"
        + (f"; compute-bound from batch {turn:,}" if turn else "; memory-bound at every batch shown")
        + ":",
    )
    best = max(s.tokens_per_s_per_gpu for s in steps)
    columns = [
        Column("Batch", number=True),
        Column("Fits"),
        Column("Reads", number=True, drop=1),
        Column("Computes", number=True, drop=4),
        Column("Memory", number=True, drop=2),
        Column("Compute", number=True, drop=3),
        Column("Floor", number=True),
        Column("tok/s/GPU", number=True),
        Column("", drop=5),  # the chart
    ]
    for chart in CHART_WIDTHS:
        rows = [
            [
                f"{s.batch:,}",
                "yes" if s.fits else "no",
                human_bytes(round(s.slowest.bytes)),
                flops_text(float(s.slowest.total_flops)),
                _ms(s.slowest.memory_time),
                _ms(s.slowest.compute_time),
                _ms(s.time),
                _rate(s.tokens_per_s_per_gpu),
                _bar_cell(s, best, chart),
            ]
            for s in steps
        ]
        table, left_out = fitted(console, columns, rows)
        if columns[-1] not in left_out:
            break
    named = [column if column.header else Column("the chart") for column in left_out]
    show_fitted(console, table, named)
    charted = (
        ""
        if columns[-1] in left_out
        else "Chart: tokens/s per GPU, linear; ▒ memory-bound, █ compute-bound. "
    )
    pipeline = f"{report.parallel.pp} micro-batches of it" if report.parallel.pp > 1 else "the batch"
    estimated = (
        f" (an estimate, as the pool: it rests on {estimated_from(report)})" if report.estimate else ""
    )
    say(console, f"{charted}Fits: the KV of {pipeline} fits the pool{estimated}.")


def _bar_cell(step: Step, best: float, chart: int) -> str:
    width = max(1, round(chart * step.tokens_per_s_per_gpu / best))
    colour = "#2ca02c" if step.bound == "memory" else "#d62728"
    return f"[{colour}]{('▒' if step.bound == 'memory' else '█') * width}[/]"
