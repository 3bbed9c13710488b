"""`kimicount explore`: the anatomy explorer as one self-contained HTML file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kimicount.cli.common import (
    ConfigOption,
    JsonOption,
    ModelArgument,
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


@app.command("explore", epilog=EXIT_CODES, short_help="Every page of the model in one HTML file.")
def explore_command(
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    modeling: ModelingOption = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Where to write the HTML (default: NAME-explorer.html here, NAME the model's); - writes "
            "it to stdout. A file is written whole or not at all (a temporary file beside it, renamed).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Write the anatomy explorer: the component tree on the left, each component's, activation's and
    tensor's page on the right (the pages of kimicount show), a search box and deep links (#kv_b_proj).
    One file, no network: it opens from disk, offline.
    """
    from kimicount.errors import UsageError
    from kimicount.explorer.build import load_explorer
    from kimicount.explorer.html import render_html
    from kimicount.explorer.pages import slug
    from kimicount.reading import printable
    from kimicount.writing import write_whole

    to_stdout = output is not None and str(output) == "-"
    if to_stdout and as_json:
        raise UsageError("-o - writes the HTML to stdout, where --json writes its report; name a file")
    repo = repo_id(model, repo)
    with progress(not as_json, repo, token, timeout) as activity:
        pages = load_explorer(config, repo, revision, modeling, activity.hub, "explore")
    text = render_html(pages)
    if to_stdout:
        sys.stdout.write(text)
        return
    name = slug(pages.model.rsplit("/", 1)[-1]) or "model"
    path = output if output is not None else Path(f"{name}-explorer.html")
    data = text.encode("utf-8")
    write_whole(path, data, "-o")
    if as_json:
        print_json({"model": pages.model, "file": str(path), "pages": len(pages.pages), "bytes": len(data)})
        return
    typer.echo(printable(f"Wrote {path}: {len(pages.pages):,} pages of {pages.model}, {len(data):,} bytes."))
