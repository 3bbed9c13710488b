"""The command line: parse options, call the library, render with rich or print --json. Nothing else.

Exit codes: 0 ok, 1 verification found a mismatch, 2 bad input or unreachable source (one line on
stderr; KIMICOUNT_DEBUG=1 shows the traceback instead).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
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


class MeasureDevice(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


@app.command("measure")
def measure_command(
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    device: Annotated[
        MeasureDevice,
        typer.Option(
            "--device", help="auto: the CUDA GPU when torch sees one, else the CPU; cuda: fail without one."
        ),
    ] = MeasureDevice.auto,
    tokens: Annotated[int, typer.Option("--tokens", help="Tokens prefilled into each cache (T).")] = 4096,
    batch: Annotated[int, typer.Option("--batch", help="Sequences in the batch (B).")] = 1,
    layers: Annotated[
        int, typer.Option("--layers", help="Layers whose caches are filled (caches grow linearly with it).")
    ] = 1,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="Cache dtype: bf16, fp16, fp32 or fp8 (default: the model's torch_dtype).",
            show_default=False,
        ),
    ] = None,
    decode_steps: Annotated[
        int, typer.Option("--decode-steps", help="Decode steps timed after a warm-up one (median).")
    ] = 5,
    as_json: JsonOption = False,
) -> None:
    """Build each KV-cache layout for real in torch and measure the bytes it holds.

    Runs one MLA attention layer at the model's true dimensions with seeded random weights, fills the
    naive, flash, latent and FlashMLA-fp8 caches by a real prefill, compares their bytes with the
    kv-cache prediction, and decodes one more token over each to check that they hold the same thing.
    Needs torch, an optional extra: pip install "kimicount\\[measure]". Exits 1 when a cache holds other
    bytes than predicted or decodes differently from the naive cache.
    """
    from kimicount.measure import measure
    from kimicount.source import load_spec

    with user_errors():
        spec = load_spec(config, repo, revision)
        result = measure(
            spec,
            device=device.value,
            tokens=tokens,
            batch=batch,
            layers=layers,
            dtype=dtype,
            decode_steps=decode_steps,
        )
    if as_json:
        from kimicount.reports import measure_json

        print_json(measure_json(result))
    else:
        from kimicount import render

        render.render_measure(render.make_console(), result)
    if not result.ok:
        raise typer.Exit(1)


def main() -> None:
    """Console-script entry point."""
    app()
