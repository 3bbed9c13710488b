"""`kimicount flops`: FLOPs per token of every component, and of MLA run three ways."""

from __future__ import annotations

from typing import Annotated

import typer

from kimicount.cli.common import (
    COUNTS,
    ConfigOption,
    JsonOption,
    ModelArgument,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    count,
    load_model,
    print_json,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app
from kimicount.options import parse_depth


@app.command(
    "flops", epilog=EXIT_CODES, short_help="FLOPs per token of every component, and of MLA run three ways."
)
def flops_command(
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    tokens: Annotated[
        str, typer.Option("--tokens", metavar="N", help=f"Prompt length T of the prefill ({COUNTS}).")
    ] = "4096",
    context: Annotated[
        str, typer.Option("--context", metavar="N", help="Positions L a decode step attends to.")
    ] = "4096",
    depth: Annotated[
        str,
        typer.Option(
            "--depth",
            metavar="N",
            help="Tree rows down to depth N: 0 = the model alone, all = every component.",
        ),
    ] = "all",
    as_json: JsonOption = False,
) -> None:
    """FLOPs per token of every component, and of the attention in each way engines run MLA.

    A matmul of in × out is 2 × in × out FLOPs per token. The attention is shown for a naive cache,
    the latent re-expanded through kv_b_proj every step, and the absorbed latent, in prefill and decode;
    a hybrid model's KDA layers (Kimi Linear, Kimi K3) by their state, chunked in prefill and recurrent
    in decode.
    """
    max_depth = parse_depth(depth)
    prompt, positions = count(tokens, "--tokens"), count(context, "--context")
    from kimicount.anatomy import build_anatomy
    from kimicount.flow import flops_report

    spec = load_model(model, config, repo, revision, token, timeout, live=not as_json, command="flops")
    anatomy = build_anatomy(spec)
    report = flops_report(anatomy.spec, anatomy.model, tokens=prompt, context=positions)
    if as_json:
        from kimicount.reports_flops import flops_json

        print_json(flops_json(report))
        return
    from kimicount.render import make_console
    from kimicount.render_flow import render_flops

    render_flops(make_console(), report, max_depth=max_depth)
