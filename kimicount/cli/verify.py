"""`kimicount verify`: a checkpoint's headers against the anatomy."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Annotated

import typer

from kimicount.cli.common import (
    JsonOption,
    ModelArgument,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    end_check,
    progress,
    repo_id,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app
from kimicount.options import parse_depth


@app.command(epilog=EXIT_CODES, short_help="Check a checkpoint against the anatomy, from its headers alone.")
def verify(
    ctx: typer.Context,
    model: ModelArgument = None,
    path: Annotated[
        Path | None,
        typer.Option(
            "--path",
            metavar="DIR",
            help="A local checkpoint folder (model.safetensors.index.json, model.safetensors or shards).",
            show_default=False,
        ),
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(
            "--repo",
            metavar="ORG/NAME",
            help="A Hub repo id: its config.json and safetensors headers, never the tensor data.",
            show_default=False,
        ),
    ] = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="PATH",
            help="config.json to check against (default: the checkpoint's own).",
            show_default=False,
        ),
    ] = None,
    index: Annotated[
        Path | None,
        typer.Option(
            "--index",
            metavar="FILE",
            help="A model.safetensors.index.json alone: its tensor names and metadata totals against the "
            "tree of the model named (--config, or its name), reading nothing else.",
            show_default=False,
        ),
    ] = None,
    depth: Annotated[
        str, typer.Option("--depth", metavar="N", help="Component rows down to depth N (all: every one).")
    ] = "3",
    as_json: JsonOption = False,
) -> None:
    """Check every tensor of a checkpoint against the computed anatomy, reading only the headers.

    Names, shapes and dtypes are compared; FP8 block scales are checked against their weights and,
    like rotary buffers, counted apart. Exit 0 when everything matches, 1 on any mismatch.
    """
    max_depth = parse_depth(depth)
    if index is not None:
        _verify_index(ctx, index, model, config, repo, revision, token, timeout, path, as_json)
        return
    from kimicount.anatomy import build_anatomy
    from kimicount.checkpoint import paused_gc
    from kimicount.families import require_command, spec_for_names
    from kimicount.source import load_checkpoint
    from kimicount.verify import verify as verify_checkpoint

    repo = repo_id(model, repo)
    # One pause from the first header read to the last check (each pauses on its own too): between
    # them, the collector would scan every object the headers made (0.06 s on Kimi K3's 497,220 names).
    with progress(not as_json, repo, token, timeout, local_files=True) as activity, paused_gc():
        spec, checkpoint = load_checkpoint(path, repo, revision, config, activity.on_file, activity.hub)
        require_command(spec, "verify")
        # a family whose checkpoints come in two namings is checked in the one these names use
        report = verify_checkpoint(build_anatomy(spec_for_names(spec, checkpoint.tensor_names)), checkpoint)
    # The headers' hundreds of thousands of objects were made with the collector off, so they all sit
    # in its youngest generation: the next collection would scan every one. Nothing of them is garbage
    # before the run ends; keep them out of every collection.
    gc.freeze()
    from kimicount.reports import verify_json

    def render(console) -> None:
        from kimicount.render_verify import render_verify  # rich, only for the tables

        render_verify(console, report, max_depth=max_depth)

    end_check(ctx, report.ok, as_json, lambda: verify_json(report), render)


def _verify_index(ctx, index, model, config, repo, revision, token, timeout, path, as_json) -> None:
    """`verify --index FILE`: the index against the tree of the model the options name."""
    from kimicount.anatomy import build_anatomy
    from kimicount.checkpoint import read_index_file
    from kimicount.cli.common import load_model
    from kimicount.errors import UsageError
    from kimicount.families import spec_for_names
    from kimicount.verify import verify_index

    if path is not None:
        raise UsageError(
            "--index checks an index alone: name the model with --config or its name, not --path"
        )
    spec = load_model(model, config, repo, revision, token, timeout, live=not as_json, command="verify")
    listed = read_index_file(index)
    report = verify_index(build_anatomy(spec_for_names(spec, listed.weight_map)), listed, str(index))
    from kimicount.reports import index_json

    def render(console) -> None:
        from kimicount.render_verify import render_index

        render_index(console, report)

    end_check(ctx, report.ok, as_json, lambda: index_json(report), render)
