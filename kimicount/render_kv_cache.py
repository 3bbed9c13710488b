"""The `kv-cache` view: the layouts side by side, their formulas, budgets and the cache-size chart."""

from __future__ import annotations

import math
from collections.abc import Iterator

from rich.console import Console
from rich.table import Table

from kimicount.kvcache import KvCacheReport, Layout, LayoutCache
from kimicount.render import _count, human_bytes, show, times

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
        f"{workload.tokens:,} tokens × {_count(workload.batch, 'sequence')}, {report.layers} layers",
    )
    show(console, _kv_cache_table(report))
    show(console)
    e = _count(report.element_bytes, "byte")
    show(console, f"Bytes per token per layer (e = {e} per {report.dtype} element), × {_layers(report)}:")
    show(console, _formula_table(report))
    notes = list(_kv_cache_notes(report))
    if notes:
        show(console)
        show(console, "\n".join(notes))
    if report.budget is not None:
        show(console)
        _render_budget(console, report, report.budget)


def _kv_cache_table(report: KvCacheReport) -> Table:
    workload = report.workload
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Layout")
    table.add_column("Per token per layer", justify="right")
    table.add_column(f"Per token ({report.layers} layers)", justify="right")
    per_sequence = f"{workload.tokens_per_sequence:,} tokens"
    table.add_column(
        per_sequence if workload.batch == 1 else f"{workload.batch:,} × {per_sequence}", justify="right"
    )
    table.add_column("≈", justify="right")
    table.add_column("× latent", justify="right")
    if workload.block_size > 1:
        table.add_column("In page tails", justify="right")
    if workload.tp > 1:
        table.add_column("Per GPU", justify="right")
        table.add_column(f"All {workload.tp} GPUs", justify="right")
        table.add_column("× latent per GPU", justify="right")
    for cache in report.caches:
        extra = []
        if workload.block_size > 1:
            extra.append(human_bytes(cache.wasted_bytes))
        if workload.tp > 1:
            per_gpu_ratio = times(report.ratio_to_latent_per_gpu(cache))
            extra += [human_bytes(cache.bytes_per_gpu), human_bytes(cache.bytes_all_gpus), per_gpu_ratio]
        table.add_row(
            f"[{LAYOUT_COLOURS[cache.layout]}]{cache.layout.value}[/]",
            f"{cache.bytes_per_token_per_layer:,} B",
            f"{cache.bytes_per_token:,} B",
            f"{cache.total_bytes:,} B",
            human_bytes(cache.total_bytes),
            times(report.ratio_to_latent(cache)),
            *extra,
        )
    if report.indexer is not None:
        table.add_row(
            "[dim]of which indexer keys[/]",
            f"[dim]{report.indexer.bytes_per_token_per_layer:,} B[/]",
            f"[dim]{report.indexer.bytes_per_token:,} B[/]",
            f"[dim]{report.indexer_total_bytes:,} B[/]",
            f"[dim]{human_bytes(report.indexer_total_bytes)}[/]",
        )
    return table


def _layers(report: KvCacheReport) -> str:
    """'61 layers = num_hidden_layers', or with the MTP layers: '62 layers = num_hidden_layers 61 + 1 …'."""
    if not report.mtp_layers:
        return f"{report.layers} layers = num_hidden_layers"
    return (
        f"{report.layers} layers = num_hidden_layers {report.spec.num_hidden_layers} "
        f"+ {report.mtp_layers} multi-token-prediction (num_nextn_predict_layers)"
    )


def _formula_table(report: KvCacheReport) -> Table:
    table = Table.grid(padding=(0, 2))
    for justify in ("left", "left", "left", "right", "left"):
        table.add_column(justify=justify)
    lines = [(cache.layout.value, cache.attention) for cache in report.caches]
    if report.indexer is not None:
        lines.append(("indexer keys", report.indexer))
    for name, line in lines:
        table.add_row(
            name, line.formula, f"= {line.calculation}", f"= {line.bytes_per_token_per_layer:,} B", line.note
        )
    return table


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
            f"Not counted: {_count(mtp, 'multi-token-prediction layer')} (num_nextn_predict_layers); "
            "--include-mtp adds its cache."
        )
    if workload.block_size > 1:
        pages = workload.tokens_per_sequence // workload.block_size
        yield (
            f"Pages of {workload.block_size:,} tokens: each sequence of {workload.tokens:,} tokens takes "
            f"{_count(pages, 'page')} ({workload.tokens_per_sequence:,} tokens); "
            f"{workload.wasted_tokens:,} tokens allocated but unused over {_count(workload.batch, 'sequence')}, "
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


def _render_budget(console: Console, report: KvCacheReport, budget: int) -> None:
    workload = report.workload
    where = "per GPU" if workload.tp > 1 else "of memory"
    pages = f", in whole pages of {workload.block_size}" if workload.block_size > 1 else ""
    show(console, f"What fits in {human_bytes(budget)} ({budget:,} B) {where}{pages}:")
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Layout")
    table.add_column("Tokens", justify="right")
    table.add_column(f"Sequences of {workload.tokens:,} tokens", justify="right")
    for cache in report.caches:
        table.add_row(
            f"[{LAYOUT_COLOURS[cache.layout]}]{cache.layout.value}[/]",
            f"{cache.max_tokens(budget):,}",
            f"{cache.max_sequences(budget):,}",
        )
    show(console, table)


#: The longest bar of the chart, in characters.
CHART_WIDTH = 48


def render_cache_chart(console: Console, sweep: list[tuple[int, tuple[LayoutCache, ...]]]) -> None:
    """Total cache size against context length, one bar per layout, on a log scale so that the gap
    between layouts (35.6× for Kimi K2) is as long at 512 tokens as at 128K. Bars grow by a whole number of characters per doubling."""
    sizes = [cache.total_bytes for _, caches in sweep for cache in caches]
    low, high = min(sizes), max(sizes)
    per_doubling = max(1, CHART_WIDTH // max(1, math.ceil(math.log2(high / low))))
    batch = sweep[0][1][0].workload.batch
    show(
        console,
        f"Cache size against context length, {_count(batch, 'sequence')} "
        f"(log scale: {per_doubling} characters = ×2):",
    )
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Tokens", justify="right")
    table.add_column("Layout")
    table.add_column("")
    table.add_column("", justify="right")
    for tokens, caches in sweep:
        for i, cache in enumerate(caches):
            length = 1 + round(per_doubling * math.log2(cache.total_bytes / low))
            style = LAYOUT_COLOURS[cache.layout]
            table.add_row(
                f"{tokens:,}" if i == 0 else "",
                f"[{style}]{cache.layout.value}[/]",
                f"[{style}]{'█' * length}[/]",
                human_bytes(cache.total_bytes),
            )
    show(console, table)
