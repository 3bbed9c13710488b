"""The `kv-cache` view: the layouts side by side, their formulas, budgets and the cache-size chart."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.table import Table

from kimicount.kvcache import KvCacheReport, Layout, LayoutCache
from kimicount.render import GAP, Column, fitted, human_bytes, plural, show, show_fitted, times

#: One colour per layout, for the terminal and the --plot SVG alike.
LAYOUT_COLOURS = {
    Layout.naive: "#d62728",
    Layout.flash: "#e6a100",
    Layout.latent: "#2ca02c",
    Layout.flashmla_fp8: "#17becf",
}


def render_kv_cache(console: Console, report: KvCacheReport) -> None:
    """The layouts side by side, where each number comes from, and what pages, TP and a budget change."""
    spec, workload = report.spec, report.workload
    show(
        console,
        f"[bold]{spec.name}[/] ({spec.model_type}): KV cache in {report.dtype}, "
        f"{workload.tokens:,} tokens × {plural(workload.batch, 'sequence')}, {report.layers} layers",
    )
    show_fitted(console, *_kv_cache_table(console, report))
    show(console)
    e = plural(report.element_bytes, "byte")
    show(console, f"Bytes per token per layer (e = {e} per {report.dtype} element), × {_layers(report)}:")
    show_fitted(console, *_formula_table(console, report))
    if report.states:
        show(console)
        _render_state(console, report)
    notes = list(_kv_cache_notes(report))
    if notes:
        show(console)
        show(console, "\n".join(notes))
    if report.budget is not None:
        show(console)
        _render_budget(console, report, report.budget)


def _kv_cache_table(console: Console, report: KvCacheReport) -> tuple[Table, list[Column]]:
    workload = report.workload
    per_sequence = f"{workload.tokens_per_sequence:,} tokens"
    columns = [
        Column("Layout", wraps=True),
        Column("Per token per layer", number=True, drop=2, hint="the formulas below"),
        Column(f"Per token ({report.layers} layers)", number=True, drop=1),
        Column(per_sequence if workload.batch == 1 else f"{workload.batch:,} × {per_sequence}", number=True),
        Column("≈", number=True),
        Column("× latent", number=True),
    ]
    if workload.block_size > 1:
        columns.append(Column("In page tails", number=True))
    if workload.tp > 1:
        columns += [
            Column("Per GPU", number=True),
            Column(f"All {workload.tp} GPUs", number=True),
            Column("× latent per GPU", number=True),
        ]
    rows = []
    # GLM-5.2: the indexer keys are on some layers only, so a layout's row gives its own bytes per layer
    partial = report.indexer is not None and report.indexer.layers != report.layers
    for cache in report.caches:
        extra = []
        if workload.block_size > 1:
            extra.append(human_bytes(cache.wasted_bytes))
        if workload.tp > 1:
            per_gpu_ratio = times(report.ratio_to_latent_per_gpu(cache))
            extra += [human_bytes(cache.bytes_per_gpu), human_bytes(cache.bytes_all_gpus), per_gpu_ratio]
        rows.append(
            [
                f"[{LAYOUT_COLOURS[cache.layout]}]{cache.layout.value}[/]",
                f"{(cache.attention if partial else cache).bytes_per_token_per_layer:,} B",
                f"{cache.bytes_per_token:,} B",
                f"{cache.total_bytes:,} B",
                human_bytes(cache.total_bytes),
                times(report.ratio_to_latent(cache)),
                *extra,
            ]
        )
    if report.indexer is not None:
        label = f"+ indexer keys ({report.indexer.layers} layers)" if partial else "of which indexer keys"
        dim = [
            f"[dim]{label}[/]",
            f"[dim]{report.indexer.bytes_per_token_per_layer:,} B[/]",
            f"[dim]{report.indexer.bytes_per_token:,} B[/]",
            f"[dim]{report.indexer_total_bytes:,} B[/]",
            f"[dim]{human_bytes(report.indexer_total_bytes)}[/]",
        ]
        rows.append(dim + [""] * (len(columns) - len(dim)))
    return fitted(console, columns, rows)


def _layers(report: KvCacheReport) -> str:
    """'61 layers = num_hidden_layers', or with the MTP layers: '62 layers = num_hidden_layers 61 + 1 …';
    a hybrid model's MLA layers: '24 MLA layers (the other 69 keep a state per sequence, below)'."""
    if report.states:
        others = sum(state.layers for state in report.states)
        return f"{report.layers} MLA layers (the other {others} keep a state per sequence, below)"
    if not report.mtp_layers:
        return f"{report.layers} layers = num_hidden_layers"
    return (
        f"{report.layers} layers = num_hidden_layers {report.spec.num_hidden_layers} "
        f"+ {report.mtp_layers} multi-token-prediction (num_nextn_predict_layers)"
    )


def _formula_table(console: Console, report: KvCacheReport) -> tuple[Table, list[Column]]:
    columns = (
        Column(""),
        Column("the formulas in config keys", wraps=True, drop=2, min_width=40, hint="--json has them"),
        Column(""),
        Column("", number=True),
        Column("the notes", wraps=True, min_width=20),  # wrapped, never left out: each says why
    )
    lines = [(cache.layout.value, cache.attention) for cache in report.caches]
    if report.indexer is not None:
        lines.append(("indexer keys", report.indexer))
    rows = [
        (name, line.formula, f"= {line.calculation}", f"= {line.bytes_per_token_per_layer:,} B", line.note)
        for name, line in lines
    ]
    return fitted(console, columns, rows, header=False)


def _kv_cache_notes(report: KvCacheReport) -> Iterator[str]:
    spec, workload = report.spec, report.workload
    mtp = len(spec.mtp_layers)
    if report.include_mtp and not mtp:
        yield (
            f"{spec.name} has no multi-token-prediction layer (num_nextn_predict_layers 0): "
            "--include-mtp adds nothing."
        )
    elif mtp and not report.include_mtp:
        yield (
            f"Not counted: {plural(mtp, 'multi-token-prediction layer')} (num_nextn_predict_layers); "
            "--include-mtp adds its cache."
        )
    indexer = report.indexer
    if indexer is not None and indexer.layers != report.layers:
        shared = report.layers - indexer.layers
        yield (
            f'Indexer keys on {indexer.layers} of the {report.layers} layers (indexer_types "full"; an MTP '
            f"layer has its own): the other {shared} reuse a full layer's top-k and cache none, as vLLM and "
            "llama.cpp allocate it (SGLang's CUDA pool keeps a buffer for every layer). A layout's bytes per "
            "token per layer are its own; its per-token figures add the indexer keys."
        )
    if workload.block_size > 1:
        pages = workload.tokens_per_sequence // workload.block_size
        yield (
            f"Pages of {workload.block_size:,} tokens: each sequence of {workload.tokens:,} tokens takes "
            f"{plural(pages, 'page')} ({workload.tokens_per_sequence:,} tokens); "
            f"{workload.wasted_tokens:,} tokens allocated but unused over {plural(workload.batch, 'sequence')}, "
            "counted in the totals."
        )
    if workload.tp > 1:
        heads = spec.num_attention_heads
        yield (
            f"Tensor parallel over {workload.tp} GPUs: naive and flash split their {heads} heads, "
            f"{heads // workload.tp} per GPU. The latent belongs to no head: it is replicated, every GPU "
            f"holds the whole latent cache ({workload.tp} copies in all)"
            + (", and so are the indexer keys." if report.indexer is not None else ".")
        )


def _render_state(console: Console, report: KvCacheReport) -> None:
    """The per-sequence state of a hybrid model's KDA layers: each tensor's formula and bytes (per GPU
    under --tp), then the totals beside the per-token cache and the context where the two are equal."""
    workload = report.workload
    gpu = f" per GPU of {workload.tp}" if workload.tp > 1 else ""
    for state in report.states:
        show(
            console,
            f"Per sequence, whatever its length: the {state.group.name} layers' state{gpu} "
            f"(conv {state.conv_dtype}, recurrent {state.ssm_dtype}; --mamba-cache-dtype, --mamba-ssm-dtype):",
        )
        columns = (
            Column(""),
            Column("", wraps=True, drop=2, min_width=30),
            Column(""),
            Column("", number=True),
        )
        rows = [
            (part.tensor.name, part.tensor.formula + " × e", f"= {part.calculation}", f"= {part.bytes:,} B")
            for part in state.parts()
        ]
        per_layer = sum(part.bytes for part in state.parts())
        rows.append(
            (
                "per sequence",
                f"per layer × {state.layers} layers",
                f"= {per_layer:,} × {state.layers}",
                f"= {state.bytes_per_sequence_per_gpu:,} B",
            )
        )
        show_fitted(console, *fitted(console, columns, rows, header=False))
    sequences = plural(workload.batch, "sequence")
    latent = report.latent
    state_bytes = report.state_bytes_per_sequence
    show(
        console,
        f"For {sequences} of {workload.tokens:,} tokens: tokens × per token + sequences × state = "
        f"{latent.total_bytes:,} B ({latent.layout.value}) + {report.state_total_bytes:,} B = "
        f"{report.total_with_state(latent):,} B ({human_bytes(report.total_with_state(latent))}).",
    )
    even = report.break_even_tokens(latent)
    show(
        console,
        f"The per-token cache equals the state at {even:,.1f} tokens per sequence "
        f"({state_bytes:,} B ÷ {latent.bytes_per_token:,} B per token, {latent.layout.value}); "
        "past that the per-token cache is the larger.",
    )


def _render_budget(console: Console, report: KvCacheReport, budget: int) -> None:
    workload = report.workload
    where = "per GPU" if workload.tp > 1 else "of memory"
    pages = f", in whole pages of {workload.block_size}" if workload.block_size > 1 else ""
    show(console, f"What fits in {human_bytes(budget)} ({budget:,} B) {where}{pages}:")
    columns = (
        Column("Layout"),
        Column("Tokens", number=True),
        Column(f"Sequences of {workload.tokens:,} tokens", number=True),
    )
    rows = [
        (
            f"[{LAYOUT_COLOURS[cache.layout]}]{cache.layout.value}[/]",
            f"{cache.max_tokens(budget):,}",
            f"{cache.max_sequences(budget):,}",
        )
        for cache in report.caches
    ]
    show_fitted(console, *fitted(console, columns, rows))


#: The longest bar of the chart, in characters, where the terminal is wide enough.
CHART_WIDTH = 48


def render_cache_chart(console: Console, sweep: list[tuple[int, tuple[LayoutCache, ...]]]) -> None:
    """Total cache size against context length, one bar per layout, on a log scale so that the gap
    between layouts (35.6× for Kimi K2) is as long at 512 tokens as at 128K. Bars grow by a whole number
    of characters per doubling; they are shorter on a terminal too narrow for CHART_WIDTH."""
    sizes = [cache.total_bytes for _, caches in sweep for cache in caches]
    low, high = min(sizes), max(sizes)
    rows: list[list[Any]] = [  # the cache in column 2 until its bar replaces it
        [f"{tokens:,}" if i == 0 else "", cache.layout.value, cache, human_bytes(cache.total_bytes)]
        for tokens, caches in sweep
        for i, cache in enumerate(caches)
    ]
    beside_bars = sum(max(len(row[column]) for row in rows) for column in (0, 1, 3)) + 3 * GAP
    bars = max(8, min(CHART_WIDTH, console.width - beside_bars - 1))
    per_doubling = max(1, bars // max(1, math.ceil(math.log2(high / low))))
    batch = sweep[0][1][0].workload.batch
    show(
        console,
        f"Cache size against context length, {plural(batch, 'sequence')} "
        f"(log scale: {per_doubling} characters = ×2):",
    )
    for row in rows:
        cache = row[2]
        style = LAYOUT_COLOURS[cache.layout]
        length = 1 + round(per_doubling * math.log2(cache.total_bytes / low))
        row[1] = f"[{style}]{row[1]}[/]"
        row[2] = f"[{style}]{'█' * length}[/]"
    columns = (Column("Tokens", number=True), Column("Layout"), Column(""), Column("", number=True))
    show_fitted(console, *fitted(console, columns, rows))
