"""`kimicount show NAME`: one page of the anatomy explorer in the terminal, or as JSON."""

from __future__ import annotations

from typing import Annotated

import typer

from kimicount.cli.common import (
    ConfigOption,
    JsonOption,
    ModelingOption,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    print_json,
    progress,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app


@app.command("show", epilog=EXIT_CODES, short_help="One component, activation or tensor, as a page.")
def show_command(
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME",
            help="A component ('Key content up-projection', any case, a unique prefix), a module attribute "
            "(kv_b_proj), a checkpoint tensor (model.layers.5.self_attn.kv_b_proj.weight), an activation "
            "(compressed_kv, c_KV) or a path (Latent attention › Key heads).",
            show_default=False,
        ),
    ],
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    modeling: ModelingOption = None,
    as_json: JsonOption = False,
) -> None:
    """One page of the anatomy explorer: where a part sits, what it computes, its shapes, what it does
    with the KV cache in prefill and decode, its parameters over the whole model, and the lines of
    code that define and use it.
    """
    from kimicount.explorer.build import load_explorer
    from kimicount.explorer.lookup import resolve

    with progress(not as_json, repo, token, timeout) as activity:
        pages = load_explorer(config, repo, revision, modeling, activity.hub)
    page = resolve(pages, name)
    if as_json:
        from kimicount.explorer.page_json import page_json

        print_json(page_json(page, pages))
        return
    from kimicount.explorer.terminal import render_page
    from kimicount.render import make_console

    render_page(make_console(), page, pages)
