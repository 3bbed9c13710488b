"""The typer application every command registers with, and its root options (--version, -h)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from kimicount import __version__
from kimicount.cli.exits import EXIT_CODES, OneLineErrors

app = typer.Typer(
    cls=OneLineErrors,
    name="kimicount",
    help="Exact parameter and KV-cache accounting for Kimi K2 and the DeepSeek-V3 family (MLA + MoE).\n\n"
    "With no model named, every command reads the bundled moonshotai/Kimi-K2-Instruct config.\n\n"
    "Not covered, for now: training and fine-tuning memory (optimizer states, gradients, activations "
    "kept for the backward pass, LoRA adapters). kimicount sizes inference: parameters, weights, the KV "
    "cache, serving plans.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # click's plain help: --help imports no rich, wraps to the terminal, and shows no <bool> metavars
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},  # commands inherit it
)


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
        # huggingface_hub logs each retry as a warning; kimicount says each retry itself, and the error
        # line says what failed. Read when huggingface_hub is first imported, so an explicit setting of
        # the user's wins.
        os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    # One progress display: kimicount's own line says what is fetched from where (_activity).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
