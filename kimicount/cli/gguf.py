"""`kimicount gguf`: a GGUF checkpoint read from its headers and checked against the anatomy, or a
llama-quantize type sized from the config before anything is downloaded (--quant)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from kimicount.cli.common import (
    ConfigOption,
    JsonOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    end_check,
    load_model,
    progress,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app
from kimicount.errors import UsageError
from kimicount.options import parse_depth


@app.command(
    epilog=EXIT_CODES, short_help="A GGUF checked against the anatomy from its headers, or a --quant sized."
)
def gguf(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Argument(
            metavar="[FILE | MODEL]",
            help="A .gguf file, the first file of a split set (…-00001-of-00009.gguf), or a folder "
            "holding one of either: every file's header is read, never the tensor data. With --quant, "
            "a bundled model's name (deepseek-v3) instead.",
            show_default=False,
        ),
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(
            "--repo",
            metavar="ORG/NAME",
            help="A Hub repo: its .gguf files that --include matches, read by ranged requests (headers "
            "only); with --quant, the repo whose config.json to size.",
            show_default=False,
        ),
    ] = None,
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            metavar="PATTERN",
            help="With --repo: which .gguf files, as `hf download --include` takes them "
            '(e.g. "UD-Q2_K_XL/*"); one file or one split set. Repeatable.',
            show_default=False,
        ),
    ] = None,
    quant: Annotated[
        str | None,
        typer.Option(
            "--quant",
            metavar="TYPE",
            help="Size a llama-quantize conversion instead of reading a GGUF: Q8_0, Q6_K, Q5_K_M, Q4_K_M, "
            "Q4_0, BF16, F16… An estimate from the config (or FILE's metadata), with llama.cpp's rules.",
            show_default=False,
        ),
    ] = None,
    config: ConfigOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    depth: Annotated[
        str, typer.Option("--depth", metavar="N", help="Component rows down to depth N (all: every one).")
    ] = "3",
    as_json: JsonOption = False,
) -> None:
    """Bytes and bits per weight of every component of a GGUF (llama.cpp, arch deepseek2: Kimi K2,
    DeepSeek-V3/R1; glm-dsa: GLM-5; kimi-linear, kimi-k3: Kimi Linear, K3), every tensor's name and
    shape checked against the architecture its metadata implies, and the total as llama.cpp prints it
    ("file size"). Exit 1 on a mismatch.

    With --quant, the same figures for a conversion of the model (the bundled Kimi K2, --config,
    --repo, or FILE's metadata) to one llama-quantize type: an estimate, labelled.
    """
    max_depth = parse_depth(depth)
    model = None
    if file is not None and not os.path.lexists(file):
        from kimicount.models import known_model

        if known_model(str(file)) is not None:  # a bundled model named as every command takes one
            model, file = str(file), None
            if quant is None:
                raise UsageError(f"{model}: a model, not a .gguf FILE: give --quant TYPE to size its GGUF")
    if quant is not None:
        from kimicount.gguf.quantize import parse_quant

        quant = parse_quant(quant)
    if include and (repo is None or quant is not None):
        raise UsageError("--include needs --repo, without --quant (it chooses the repo's .gguf files)")
    if file is not None and (repo is not None or config is not None):
        raise UsageError(f"name one source: {file} or --repo/--config, not both")
    if quant is None and file is None and repo is None:
        raise UsageError("name a .gguf FILE, --repo ORG/NAME --include PATTERN, or --quant TYPE")
    if quant is None and config is not None:
        raise UsageError("--config needs --quant (a GGUF carries its own architecture)")
    from kimicount.gguf.layout import check_listing

    if quant is None:
        with progress(not as_json, repo, token, timeout) as activity:
            if file is not None:
                from kimicount.gguf.reader import read_gguf

                listing = read_gguf(file)
            else:
                from kimicount.gguf.hub import read_gguf_hub
                from kimicount.source import hub_module

                hub_module()  # the HF_* variables checked before huggingface_hub reads them
                listing = read_gguf_hub(repo, include or [], revision, activity.hub)  # type: ignore[arg-type]
        report = check_listing(listing)
    else:
        from kimicount.gguf.quantize import ESTIMATE, estimate_uniform

        if file is not None:
            from kimicount.gguf.layout import spec_from_metadata
            from kimicount.gguf.reader import read_gguf

            spec = spec_from_metadata(read_gguf(file))
        else:
            spec = load_model(model, config, repo, revision, token, timeout, live=not as_json, command="gguf")
        report = check_listing(estimate_uniform(spec, quant), spec, estimate=ESTIMATE.format(quant=quant))
    from kimicount.gguf.render import gguf_json, render_gguf

    end_check(
        ctx,
        report.ok,
        as_json,
        lambda: gguf_json(report),
        lambda console: render_gguf(console, report, max_depth=max_depth),
    )
