"""`kimicount compare A B [C…]` (or `diff`): models side by side, component by component."""

from __future__ import annotations

from typing import Annotated

import typer

from kimicount.cli.common import JsonOption, count, ignored, load_model, print_json
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app
from kimicount.errors import UsageError
from kimicount.options import parse_depth


def compare_command(
    ctx: typer.Context,
    models: Annotated[
        list[str],
        typer.Argument(
            metavar="MODEL MODEL [MODEL…]",
            help="Two or more models: bundled names (kimicount models lists them: kimi-k2, deepseek-v3, …), "
            "Hub repo ids, or config.json files and folders.",
            show_default=False,
        ),
    ],
    tp: Annotated[
        str,
        typer.Option(
            "--tp", metavar="N", help="Tensor-parallel GPUs for the weights per GPU (vLLM's layout)."
        ),
    ] = "8",
    depth: Annotated[
        str, typer.Option("--depth", metavar="N", help="Component rows down to depth N (all: every one).")
    ] = "3",
    as_json: JsonOption = False,
) -> None:
    """Models side by side by component role: parameters and activated per token of each part, joined
    by stable component ids (Kimi K2's "60 MoE blocks" and DeepSeek-V3's "58 MoE blocks" are one row,
    "moe"), then each model's KV cache per token in each layout and its weights on one GPU.

    kimicount compare kimi-k2 deepseek-v3
    """
    max_depth = parse_depth(depth)
    gpus = count(tp, "--tp")
    if len(models) < 2:
        raise UsageError("compare needs two models or more (kimicount compare kimi-k2 deepseek-v3)")
    from pathlib import Path

    from kimicount.anatomy import build_anatomy
    from kimicount.compare import compare

    anatomies = []
    for name in models:
        path = Path(name)
        is_file = path.exists()  # a config.json or a folder holding one; else a name or a repo id
        spec = load_model(
            None if is_file else name,
            path if is_file else None,
            None,
            None,
            None,
            None,
            live=not as_json,
            command="compare",
        )
        anatomies.append(build_anatomy(spec))
    if as_json:
        from kimicount.reports import compare_json

        ignored(ctx, "with --json (it holds every component)", "depth")
        print_json(compare_json(compare(anatomies, tp=gpus)))
        return
    from kimicount.render import make_console
    from kimicount.render_compare import render_compare

    render_compare(make_console(), compare(anatomies, tp=gpus, max_depth=max_depth))


_HELP = "Models side by side by component role (kimicount compare kimi-k2 deepseek-v3)."
app.command("compare", epilog=EXIT_CODES, short_help=_HELP)(compare_command)
app.command("diff", epilog=EXIT_CODES, short_help="The same as compare.", hidden=True)(compare_command)
