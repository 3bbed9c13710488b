"""`kimicount show NAME`: one page of the anatomy explorer in the terminal, or as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kimicount.cli.common import (
    ConfigOption,
    JsonOption,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    print_json,
    progress,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app

if TYPE_CHECKING:
    from kimicount.explorer.pages import Pages

ModelingOption = Annotated[
    Path | None,
    typer.Option(
        "--modeling",
        metavar="FILE",
        help="The model's modeling_deepseek.py, for the code evidence (default: beside --config's "
        "config.json, or from the Hub at the config's revision with --repo).",
        show_default=False,
    ),
]


def load_pages(
    config: Path | None,
    repo: str | None,
    revision: str | None,
    token: str | None,
    timeout: str | None,
    modeling: Path | None,
    *,
    live: bool,
) -> Pages:
    """The explorer's pages of the model the options name, with the progress line while the Hub is
    asked for config.json and the modeling file."""
    from kimicount.explorer.build import explorer_pages, load_model_and_config

    with progress(live, repo, token, timeout) as activity:
        spec, source = load_model_and_config(config, repo, revision, activity.hub)
        return explorer_pages(
            spec, source, repo=repo, revision=revision, modeling=modeling, hub_options=activity.hub
        )


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
    from kimicount.explorer.lookup import resolve

    pages = load_pages(config, repo, revision, token, timeout, modeling, live=not as_json)
    page = resolve(pages, name)
    if as_json:
        from kimicount.explorer.pages import page_json

        print_json(page_json(page, pages))
        return
    from kimicount.explorer.terminal import render_page
    from kimicount.render import make_console

    render_page(make_console(), page, pages)
