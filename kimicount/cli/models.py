"""`kimicount models`: the models whose config ships with kimicount, and where each came from."""

from __future__ import annotations

from kimicount.cli.common import JsonOption, print_json
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app


@app.command("models", epilog=EXIT_CODES, short_help="The models kimicount knows by name, offline.")
def models_command(as_json: JsonOption = False) -> None:
    """The models whose config.json ships with kimicount: a repo id or short name among them reads its
    config without the Hub (`kimicount params deepseek-v3`). Each says what its config is: the raw file,
    the values as transformers re-serializes them, or derived from a sibling's config."""
    from kimicount.models import catalogue

    rows = catalogue()
    if as_json:
        print_json({"models": rows})
        return
    from kimicount.render import make_console
    from kimicount.render_models import render_models

    render_models(make_console(), rows)
