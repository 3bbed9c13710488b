"""`kimicount params`: parameters per component, per layer, in total and activated."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from kimicount.cli.common import (
    ConfigOption,
    JsonOption,
    ModelArgument,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    choices,
    ignored,
    load_model,
    print_json,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app
from kimicount.options import Detail, parse_depth


class Breakdown(str, Enum):
    component = "component"
    layer = "layer"
    memory = "memory"


@app.command(epilog=EXIT_CODES, short_help="Parameters per component and layer, in total and activated.")
def params(
    ctx: typer.Context,
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    by: Annotated[
        Breakdown,
        typer.Option(
            "--by",
            metavar=choices(Breakdown),
            help="component: the component tree; layer: one row per layer (identical layers share a row); "
            "memory: weight bytes per component, as stored (FP8, INT4) and in BF16.",
        ),
    ] = Breakdown.component,
    depth: Annotated[
        str,
        typer.Option(
            "--depth",
            metavar="N",
            help="Tree rows down to depth N: 0 = the model alone, all = every component.",
        ),
    ] = "3",
    detail: Annotated[
        Detail | None,
        typer.Option(
            "--detail",
            metavar=choices(Detail),
            help="Last column: calculation (numbers; the default, left out when the terminal is too narrow "
            "for it), formula (config keys), tensors (checkpoint names) or shapes (the activations in and "
            "out, with named dimensions).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Parameters per component, per layer, in total and activated per token.

    Counts come from config.json alone. FP8 scales and rotary buffers are not parameters; the
    multi-token-prediction module (DeepSeek-V3) is reported apart, outside the total.
    """
    max_depth = parse_depth(depth)  # option text is read first: a typo costs no imports
    from kimicount.anatomy import build_anatomy

    spec = load_model(model, config, repo, revision, token, timeout, live=not as_json, command="params")
    if detail is Detail.shapes:  # the shapes are the flops model's
        from kimicount.families import require_command

        require_command(spec, "flops")
    anatomy = build_anatomy(spec)
    if by is Breakdown.memory:
        from kimicount.storage import require_modelled

        require_modelled(anatomy.spec)
    if as_json:
        from kimicount.reports import params_json

        shaped = ("depth", "detail") if by is Breakdown.memory else ("by", "depth", "detail")
        ignored(ctx, "with --json (it holds the whole tree and every layer)", *shaped)
        print_json(params_json(anatomy))
        return
    from kimicount.render import make_console
    from kimicount.render_params import render_layers, render_memory, render_params

    console = make_console()
    if by is Breakdown.layer:
        ignored(ctx, "with --by layer (one row per layer)", "depth", "detail")
        render_layers(console, anatomy)
    elif by is Breakdown.memory:
        ignored(ctx, "with --by memory (it shows bytes, not calculations)", "detail")
        render_memory(console, anatomy, max_depth=max_depth)
    else:
        render_params(console, anatomy, max_depth=max_depth, detail=detail)
