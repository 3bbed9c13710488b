"""`kimicount show [MODEL] NAME`: one page of the anatomy explorer in the terminal, or as JSON."""

from __future__ import annotations

from typing import Annotated

import typer

from kimicount.cli.common import (
    MODEL_HELP,
    ConfigOption,
    JsonOption,
    ModelingOption,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    print_json,
    progress,
    repo_id,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app


@app.command("show", epilog=EXIT_CODES, short_help="One component, activation or tensor, as a page.")
def show_command(
    words: Annotated[
        list[str],
        typer.Argument(
            metavar="[MODEL] NAME",
            help="NAME: a component ('Key content up-projection', any case, a unique prefix, or a name "
            "people use: 'Output projection', 'MoE gate'), a module attribute (kv_b_proj), a checkpoint "
            "tensor (model.layers.5.self_attn.kv_b_proj.weight), an activation (compressed_kv, c_KV) or a "
            "path (Latent attention › Key heads). MODEL, before it: " + MODEL_HELP,
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
    code that define and use it (kimicount show deepseek-v3 router).
    """
    from kimicount.explorer.build import load_explorer
    from kimicount.explorer.lookup import resolve

    model, name = model_and_name(words)
    repo = repo_id(model, repo)
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


def model_and_name(words: list[str]) -> tuple[str | None, str]:
    """(MODEL, NAME) from `show`'s words: a first word that names a model (a bundled name, or ORG/NAME)
    is the model, as in every command; so is a last one that is a bundled name (show router v3). The
    other words are the NAME, joined by spaces, so that an unquoted `show key heads` finds its page.

    >>> model_and_name(["kv_b_proj"]), model_and_name(["deepseek-v3", "router"])
    ((None, 'kv_b_proj'), ('deepseek-v3', 'router'))
    >>> model_and_name(["router", "v3"]), model_and_name(["key", "heads"])
    (('v3', 'router'), (None, 'key heads'))
    """
    from kimicount.models import known_model

    def names_model(word: str) -> bool:
        return known_model(word) is not None or (word.count("/") == 1 and " " not in word.strip())

    if len(words) > 1 and names_model(words[0]):
        return words[0], " ".join(words[1:])
    if len(words) > 1 and known_model(words[-1]) is not None:
        return words[-1], " ".join(words[:-1])
    return None, " ".join(words)
