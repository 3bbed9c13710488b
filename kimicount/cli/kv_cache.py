"""`kimicount kv-cache`: KV-cache bytes per layout, for any context, batch and GPU split."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kimicount.cli.common import (
    COUNTS,
    ConfigOption,
    DtypeOption,
    JsonOption,
    ModelArgument,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    count_or_none,
    ignored,
    load_model,
    print_json,
    warn,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app
from kimicount.options import parse_count, parse_dtype


@app.command(
    "kv-cache",
    epilog=EXIT_CODES,
    short_help="KV-cache bytes per layout, for any context, batch and GPU split.",
)
def kv_cache(
    ctx: typer.Context,
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    tokens: Annotated[
        str | None,
        typer.Option(
            "--tokens",
            metavar="N",
            help=f"Tokens per sequence (context length; {COUNTS}). Default: the model's max_position_embeddings.",
            show_default=False,
        ),
    ] = None,
    batch: Annotated[str, typer.Option("--batch", metavar="N", help="Sequences cached at once.")] = "1",
    layout: Annotated[
        list[str] | None,
        typer.Option(
            "--layout",
            metavar="[naive|flash|latent|flashmla-fp8]",
            help="Show this layout only; repeat for several. Default: naive, flash and latent. naive: every "
            "head's key and value; flash: values padded to the key width; latent: MLA's compressed latent "
            "+ rotary key; flashmla-fp8: FlashMLA's fp8 latent (656 B per token per layer for Kimi K2).",
            show_default=False,
        ),
    ] = None,
    dtype: DtypeOption = None,
    block_size: Annotated[
        str,
        typer.Option(
            "--block-size",
            metavar="N",
            help="Page size in tokens: engines allocate whole pages, so each sequence is rounded up "
            "(vLLM and SGLang use 16 to 64; FlashMLA 64). 1: no rounding.",
        ),
    ] = "1",
    tp: Annotated[
        str,
        typer.Option(
            "--tp",
            metavar="N",
            help="Tensor-parallel GPUs: naive and flash split their heads across them (N must divide "
            "num_attention_heads); the latent is replicated on every GPU.",
        ),
    ] = "1",
    include_mtp: Annotated[
        bool,
        typer.Option(
            "--include-mtp", help="Count the multi-token-prediction layers' caches too (DeepSeek-V3)."
        ),
    ] = False,
    mamba_cache_dtype: Annotated[
        str,
        typer.Option(
            "--mamba-cache-dtype",
            metavar="[auto|float32|float16|bfloat16]",
            help="Hybrid models (Kimi Linear, K3): the dtype of the KDA layers' convolution windows, as vLLM's "
            "flag of that name (auto: the model's dtype).",
        ),
    ] = "auto",
    mamba_ssm_dtype: Annotated[
        str,
        typer.Option(
            "--mamba-ssm-dtype",
            "--mamba-ssm-cache-dtype",
            metavar="[auto|float32|float16|bfloat16]",
            help="Hybrid models: the dtype of the KDA layers' recurrent state, as SGLang's --mamba-ssm-dtype "
            "(auto: float32; vLLM keeps KDA's state in float32 whatever its --mamba-ssm-cache-dtype).",
        ),
    ] = "auto",
    indexer_cache: Annotated[
        str,
        typer.Option(
            "--indexer-cache",
            metavar="[fp8|fp4]",
            help="DeepSeek V4: the dtype of the CSA indexer's keys (fp8: 132 B, fp4: 68 B; SGLang "
            "allocates 68, vLLM 132 either way).",
        ),
    ] = "fp8",
    max_num_batched_tokens: Annotated[
        str,
        typer.Option(
            "--max-num-batched-tokens",
            metavar="N",
            help="DeepSeek V4, vLLM's flag: the chunk its windows' and compressor states' pages are sized "
            "for (8192: vllm serve's default on a GPU of 70 GiB or more; the LLM class's is 16384).",
        ),
    ] = "8192",
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            metavar="SIZE",
            help="Memory for the cache on each GPU, e.g. 80GiB, 80GB, 512MiB or bytes: prints the most "
            "tokens, and the most sequences of --tokens, that fit in each layout.",
            show_default=False,
        ),
    ] = None,
    chart: Annotated[
        bool, typer.Option("--chart/--no-chart", help="Chart the cache size against context length.")
    ] = True,
    pages: Annotated[
        bool,
        typer.Option(
            "--pages/--no-pages", help="DeepSeek V4: vLLM's pages and pool of its groups, and SGLang's pools."
        ),
    ] = True,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="FILE.svg",
            help="Also write that chart as an SVG file (log-log: bytes against context length; per-GPU "
            "lines with --tp, the budget with --budget).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """KV-cache bytes per token, per layer and in total, in each cache layout an engine may use.

    Multi-head latent attention caches one small latent per token for all heads; engines that expand
    it into per-head keys and values pay for every head (35.6× the latent for Kimi K2).
    """
    from kimicount.kvcache import context_sweep, kv_cache_report, parse_layout, parse_mamba_dtype
    from kimicount.options import parse_size

    conv_dtype = parse_mamba_dtype(mamba_cache_dtype, "--mamba-cache-dtype")  # a typo costs no model load
    ssm_dtype = parse_mamba_dtype(mamba_ssm_dtype, "--mamba-ssm-dtype")
    tokens_count, batch_count = count_or_none(tokens, "--tokens"), parse_count(batch, "--batch")
    dtype = None if dtype is None else parse_dtype(dtype)
    spec = load_model(model, config, repo, revision, token, timeout, live=not as_json, command="kv-cache")
    from kimicount.cache_groups import has_mla_group
    from kimicount.families import cache_groups

    if not has_mla_group(cache_groups(spec)):  # DeepSeek V4: its groups carry their own entries
        _group_cache(ctx, spec, tokens_count, batch_count, dtype, layout, block_size, include_mtp, budget,
                     indexer_cache, max_num_batched_tokens, pages, as_json)  # fmt: skip
        return
    ignored(
        ctx,
        f"for {spec.name} (DeepSeek V4's groups only)",
        "indexer_cache",
        "max_num_batched_tokens",
        "pages",
    )
    report = kv_cache_report(
        spec,
        tokens=tokens_count,
        batch=batch_count,
        dtype=dtype,
        layouts=[parse_layout(name) for name in layout or ()],
        block_size=parse_count(block_size, "--block-size"),
        tp=parse_count(tp, "--tp"),
        include_mtp=include_mtp,
        budget=None if budget is None else parse_size(budget),
        conv_dtype=conv_dtype,
        ssm_dtype=ssm_dtype,
    )
    if not report.states:
        ignored(ctx, f"for {spec.name} (no layer keeps a state)", "mamba_cache_dtype", "mamba_ssm_dtype")
    if plot is not None:
        from kimicount.chart import write_svg

        write_svg(plot, report, context_sweep(report))
    longest = report.spec.max_position_embeddings
    if report.workload.tokens > longest:
        warn(
            f"--tokens {report.workload.tokens:,} is past the model's context, {longest:,} tokens "
            "(max_position_embeddings); the sizes are exact all the same"
        )
    if as_json:
        from kimicount.reports import kv_cache_json

        ignored(ctx, "with --json", "chart")
        print_json(kv_cache_json(report))
        return
    from kimicount.render import make_console, show
    from kimicount.render_kv_cache import render_cache_chart, render_kv_cache

    console = make_console()
    render_kv_cache(console, report)
    if chart:
        show(console)
        render_cache_chart(console, context_sweep(report))


def _group_cache(
    ctx,
    spec,
    tokens,
    batch,
    dtype,
    layout,
    block_size,
    include_mtp,
    budget,
    indexer,
    max_batched,
    pages,
    as_json,
) -> None:
    """kv-cache of a model without an MLA group (DeepSeek V4): its groups, and the engines' pages."""
    from kimicount.deploy.engines.deepseek_v4 import engine_pages
    from kimicount.errors import UsageError
    from kimicount.kv_groups import group_cache_report
    from kimicount.options import parse_size

    if layout:
        raise UsageError(
            f"--layout: {spec.name} caches no MLA latent; --dtype fp8 (FlashMLA's 584-B record, what vLLM "
            "and SGLang keep) or bf16 chooses its entries"
        )
    if dtype is not None and dtype not in ("fp8", "bf16"):
        raise UsageError(f"--dtype {dtype}: {spec.name}'s cache is fp8 (FlashMLA's record) or bf16")
    ignored(ctx, f"for {spec.name} (its cache is replicated on every GPU)", "tp")
    ignored(
        ctx, f"for {spec.name} (no layer keeps a recurrent state)", "mamba_cache_dtype", "mamba_ssm_dtype"
    )
    ignored(ctx, f"for {spec.name} (the chart is the MLA layouts')", "chart", "plot")
    given = ctx.get_parameter_source("block_size")
    report = engine_pages(
        group_cache_report(
            spec,
            tokens=tokens,
            batch=batch,
            dtype=dtype,
            indexer=indexer,
            include_mtp=include_mtp,
            block_size=parse_count(block_size, "--block-size")
            if given and given.name == "COMMANDLINE"
            else None,
            max_num_batched_tokens=parse_count(max_batched, "--max-num-batched-tokens"),
            budget=None if budget is None else parse_size(budget),
        )
    )
    if as_json:
        from kimicount.reports import group_cache_json

        print_json(group_cache_json(report))
        return
    from kimicount.render import make_console
    from kimicount.render_kv_groups import render_kv_groups

    render_kv_groups(make_console(), report, pages=pages)
