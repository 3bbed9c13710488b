"""The command line: parse options, call the library, render with rich or print --json. Nothing else.

Exit codes: 0 ok, 1 verification found a mismatch, 2 bad input or unreachable source (one line on
stderr; KIMICOUNT_DEBUG=1 shows the traceback instead).
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from kimicount import __version__
from kimicount.errors import KimicountError
from kimicount.render import Detail

app = typer.Typer(
    name="kimicount",
    help="Exact parameter and KV-cache accounting for Kimi K2 and the DeepSeek-V3 family (MLA + MoE).\n\n"
    "With no model named, every command reads the bundled moonshotai/Kimi-K2-Instruct config.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="A config.json file, or a folder holding one.", show_default=False),
]
RepoOption = Annotated[
    str | None,
    typer.Option(
        "--repo",
        help="A Hub repo id (ORG/NAME); only config.json is downloaded. Honours HF_ENDPOINT, HF_TOKEN, "
        "HF_HUB_OFFLINE and the Hub cache.",
        show_default=False,
    ),
]
RevisionOption = Annotated[
    str | None, typer.Option("--revision", help="Branch, tag or commit of --repo.", show_default=False)
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the stable JSON report instead of tables.")]


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad input and unreachable sources end the command with one line on stderr and exit code 2."""
    try:
        yield
    except KimicountError as error:
        if os.environ.get("KIMICOUNT_DEBUG"):
            raise
        message = " ".join(str(error).split("\n"))
        typer.echo(f"kimicount: error: {message}", err=True)
        raise typer.Exit(2) from None


def print_json(report: dict[str, Any]) -> None:
    typer.echo(json.dumps(report, indent=2, ensure_ascii=False))


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kimicount {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Exact parameter and KV-cache accounting for Kimi K2 and the DeepSeek-V3 family."""
    if not os.environ.get("KIMICOUNT_DEBUG"):
        # huggingface_hub logs each retry as a warning; the error line we print says what failed.
        # Read when huggingface_hub is first imported, so an explicit setting of the user's wins.
        os.environ.setdefault("HF_HUB_VERBOSITY", "error")


class Breakdown(str, Enum):
    component = "component"
    layer = "layer"


@app.command()
def params(
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    by: Annotated[
        Breakdown, typer.Option("--by", help="component: the component tree; layer: one row per layer.")
    ] = Breakdown.component,
    depth: Annotated[
        int | None,
        typer.Option("--depth", min=0, help="Fold the tree below this depth (0 = the model only)."),
    ] = None,
    detail: Annotated[
        Detail,
        typer.Option(
            "--detail",
            help="Last column: calculation (numbers), formula (config keys) or tensors (checkpoint names).",
        ),
    ] = Detail.calculation,
    as_json: JsonOption = False,
) -> None:
    """Parameters per component, per layer, in total and activated per token.

    Counts come from config.json alone. FP8 scales and rotary buffers are not parameters; the
    multi-token-prediction module (DeepSeek-V3) is reported apart, outside the total.
    """
    from kimicount.anatomy import build_anatomy
    from kimicount.source import load_spec

    with user_errors():
        anatomy = build_anatomy(load_spec(config, repo, revision))
    if as_json:
        from kimicount.reports import params_json

        print_json(params_json(anatomy))
        return
    from kimicount import render

    console = render.make_console()
    if by is Breakdown.layer:
        render.render_layers(console, anatomy)
    else:
        render.render_params(console, anatomy, max_depth=depth, detail=detail)


@app.command()
def verify(
    path: Annotated[
        Path | None,
        typer.Option(
            "--path",
            help="A local checkpoint folder (model.safetensors.index.json, model.safetensors or shards).",
            show_default=False,
        ),
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(
            "--repo",
            help="A Hub repo id (ORG/NAME): its config.json and safetensors headers, never the tensor data.",
            show_default=False,
        ),
    ] = None,
    revision: RevisionOption = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="config.json to check against (default: the checkpoint's own).",
            show_default=False,
        ),
    ] = None,
    depth: Annotated[int, typer.Option("--depth", min=0, help="Component rows down to this tree depth.")] = 3,
    as_json: JsonOption = False,
) -> None:
    """Check every tensor of a checkpoint against the computed anatomy, reading only the headers.

    Names, shapes and dtypes are compared; FP8 block scales are checked against their weights and,
    like rotary buffers, counted apart. Exit 0 when everything matches, 1 on any mismatch.
    """
    from kimicount.anatomy import build_anatomy
    from kimicount.source import load_checkpoint
    from kimicount.verify import verify as verify_checkpoint

    with (
        user_errors(),
        _progress("Reading safetensors headers", enabled=not as_json) as on_file,
        _gc_paused(),
    ):
        spec, checkpoint = load_checkpoint(path, repo, revision, config, on_file)
        report = verify_checkpoint(build_anatomy(spec), checkpoint)
    if as_json:
        from kimicount.reports import verify_json

        print_json(verify_json(report))
    else:
        from kimicount import render

        render.render_verify(render.make_console(), report, max_depth=depth)
    raise typer.Exit(0 if report.ok else 1)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing 139,644 header entries allocates hundreds of thousands of small objects and none of them
    form cycles; the cyclic collector would otherwise rescan them again and again (a third of the time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def _progress(description: str, enabled: bool) -> Iterator[Callable[[str], None] | None]:
    """A progress line on stderr while files are read, on a terminal only; yields the per-file callback."""
    from kimicount.render import make_console

    console = make_console(stderr=True)
    if not (enabled and console.is_terminal):
        yield None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description} {task.completed} files"),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(description)
        yield lambda _file: progress.advance(task)


def main() -> None:
    """Console-script entry point."""
    app()
