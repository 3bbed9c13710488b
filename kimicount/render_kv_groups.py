"""The `kv-cache` view of a model whose cache groups carry their entries (DeepSeek V4): the groups per
token and per sequence with their formulas, then vLLM's pages and pool of them and SGLang's pools."""

from __future__ import annotations

from rich.console import Console

from kimicount.kv_groups import GroupCacheReport, exact
from kimicount.render import Column, fitted, human_bytes, plural, show, show_fitted


def render_kv_groups(console: Console, report: GroupCacheReport, *, pages: bool = True) -> None:
    """The groups side by side with the formula of each term; with `pages`, the engines' pages of them."""
    spec = report.spec
    record = "FlashMLA's 584-B record" if report.dtype == "fp8" else "head_dim values in bf16"
    mtp = (
        f" + {plural(report.mtp_layers, 'MTP layer')}"
        if report.include_mtp and report.mtp_layers
        else (" (not the MTP layer: --include-mtp)" if report.mtp_layers else "")
    )
    show(
        console,
        f"[bold]{spec.name}[/] ({spec.model_type}): KV cache in {report.dtype} ({record}), "
        f"{report.tokens:,} tokens × {plural(report.batch, 'sequence')}, {spec.num_hidden_layers} layers{mtp}",
    )
    total = "" if report.batch == 1 else f"{report.batch:,} × "
    columns = [
        Column("Group", wraps=True),
        Column("Bytes for T tokens", drop=3, hint="--json has them"),
        Column("Per token", number=True),
        Column("Per sequence", number=True, drop=1),
        Column(f"{total}T = {report.tokens:,}", number=True),
        Column("≈", number=True, drop=2),
    ]
    rows = []
    for line in report.lines:
        rows.append(
            [
                line.group.name,
                line.formula,
                f"{exact(line.per_token)} B" if line.per_token else "—",
                f"{line.per_sequence:,} B" if line.per_sequence else "—",
                f"{line.bytes_per_sequence * report.batch:,} B",
                human_bytes(line.bytes_per_sequence * report.batch),
            ]
        )
    rows.append(
        [
            "[bold]Total[/]",
            "",
            f"[bold]{exact(report.bytes_per_token)} B[/]",
            f"[bold]{report.bytes_per_sequence:,} B[/]",
            f"[bold]{report.total_bytes:,} B[/]",
            f"[bold]{human_bytes(report.total_bytes)}[/]",
        ]
    )
    show_fitted(console, *fitted(console, columns, rows))
    entries = dict.fromkeys(f"{line.group.entry_bytes:,} B = {line.entry_formula}" for line in report.lines)
    show(console, "Entries: " + "; ".join(entries) + ".")
    show(
        console,
        f"A sequence of T tokens: T × {exact(report.bytes_per_token)} B of compressed entries + "
        f"{report.bytes_per_sequence:,} B of windows and compressor states once T ≥ 128; at T = "
        f"{report.tokens:,}, with ⌊T / ratio⌋ entries, {report.sequence_bytes:,} B.",
    )
    if pages and report.vllm is not None:
        show(console)
        _render_vllm(console, report)
    if pages and report.sglang is not None:
        show(console)
        _render_sglang(console, report)


def _render_vllm(console: Console, report: GroupCacheReport) -> None:
    from kimicount.deploy.engines.vllm_deepseek_v4 import format_gib

    layout, tokens, batch = report.vllm, report.tokens, report.max_num_batched_tokens
    show(
        console,
        f"vLLM (its DeepSeek V4 rule, as in v0.22): --block-size {report.block_size}; every page a multiple "
        f"of 576 B; {plural(len(layout.groups), 'group')} draw block ids from one pool:",
    )
    columns = (
        Column("vLLM group", wraps=True),
        Column("Spec", wraps=True, drop=2),
        Column("Block", number=True),
        Column("Page bytes", number=True),
        Column("Layer tuples", number=True),
        Column(f"Pages for {tokens:,}", number=True),
    )
    rows = []
    for group in layout.groups:
        first = group.specs[0]
        spec = f"sliding window {first.window}" if group.sliding else "MLA, compressed"
        pages = sorted({s.page for s in group.specs}, reverse=True)
        rows.append(
            (
                group.names,
                spec,
                f"{first.block_size}",
                " + ".join(f"{p:,}" for p in pages) + " B",
                f"{group.layer_tuples}",
                f"{group.pages(tokens, batch):,}",
            )
        )
    show_fitted(console, *fitted(console, columns, rows))
    pages = layout.pages(tokens, batch)
    needed = layout.memory_for(tokens, batch)
    sizes = " + ".join(f"{p:,}" for p in layout.page_sizes)
    show(
        console,
        f"A block id costs ({sizes}) × {layout.layer_tuples} layer tuples = {layout.block_bytes:,} B; one request "
        f"of max_model_len {tokens:,} takes {pages:,} block ids (--max-num-batched-tokens {batch:,} sizes the "
        f"windows' and states' pages): {needed:,} B, vLLM's \"{format_gib(needed)} GiB KV cache is needed\".",
    )
    if report.budget is not None:
        budget = report.budget
        estimate = layout.estimate_max_model_len(budget, tokens, batch)
        fits = (
            "fits"
            if needed <= budget
            else f"does not fit: the estimated maximum model length is {estimate:,}"
        )
        show(
            console,
            f"In {human_bytes(budget)} ({budget:,} B) of KV cache per GPU, max_model_len {tokens:,} {fits}; "
            f'{layout.num_blocks(budget):,} block ids, "GPU KV cache size: '
            f'{layout.kv_cache_size_tokens(budget, tokens, batch):,} tokens" (max concurrency '
            f"{layout.max_concurrency(budget, tokens, batch):.2f} × max_model_len, not the pool ÷ bytes per token).",
        )


def _render_sglang(console: Console, report: GroupCacheReport) -> None:
    show(
        console,
        f"SGLang (DeepSeekV4TokenToKVPool): pages of --page-size {report.block_size} tokens; the SWA ring is a "
        "pool of its own, 584 B per position, pages padded to 576 B:",
    )
    columns = (
        Column("Pool", wraps=True),
        Column("Layers", number=True),
        Column("Entry", number=True),
        Column("Page per layer", number=True),
        Column("Ring per request", number=True, hint="8 / 128 positions"),
    )
    rows = [
        (
            pool.name,
            f"{pool.layers}",
            f"{pool.entry_bytes:,} B",
            "—"
            if pool.page_bytes is None
            else f"{pool.per_page} × {pool.entry_bytes} → {pool.page_bytes:,} B",
            "—"
            if pool.ring is None
            else f"{pool.ring[0]} × {pool.entry_bytes:,} × {pool.layers} = {pool.ring_bytes:,} B",
        )
        for pool in report.sglang
    ]
    show_fitted(console, *fitted(console, columns, rows))
