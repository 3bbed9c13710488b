"""`kimicount measure`: the KV caches built in torch and measured."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from kimicount.cli.common import (
    COUNTS,
    ConfigOption,
    DtypeOption,
    JsonOption,
    ModelArgument,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    choices,
    count,
    load_model,
    print_json,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app
from kimicount.options import parse_count, parse_dtype


class MeasureDevice(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


@app.command(
    "measure", epilog=EXIT_CODES, short_help="Build each KV-cache layout in torch and measure its bytes."
)
def measure_command(
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    device: Annotated[
        MeasureDevice,
        typer.Option(
            "--device",
            metavar=choices(MeasureDevice),
            help="auto: the CUDA GPU when torch sees one, else the CPU; cuda: fail without one.",
        ),
    ] = MeasureDevice.auto,
    tokens: Annotated[
        str, typer.Option("--tokens", metavar="N", help=f"Tokens prefilled into each cache (T; {COUNTS}).")
    ] = "4096",
    batch: Annotated[str, typer.Option("--batch", metavar="N", help="Sequences in the batch (B).")] = "1",
    layers: Annotated[
        str,
        typer.Option(
            "--layers", metavar="N", help="Layers whose caches are filled (caches grow linearly with it)."
        ),
    ] = "1",
    dtype: DtypeOption = None,
    decode_steps: Annotated[
        str,
        typer.Option("--decode-steps", metavar="N", help="Decode steps timed after a warm-up one (median)."),
    ] = "5",
    as_json: JsonOption = False,
) -> None:
    """Build each KV-cache layout for real in torch and measure the bytes it holds.

    Runs one MLA attention layer at the model's true dimensions with seeded random weights, fills the
    naive, flash, latent and FlashMLA-fp8 caches by a real prefill, compares their bytes with the
    kv-cache prediction, and decodes one more token over each to check that they hold the same thing.
    Exits 1 when a cache holds other bytes than predicted or decodes differently from the naive cache.

    Needs torch, an optional extra: from a kimicount checkout, pip install "torch==2.13.0+cpu" -e
    ".[measure]" --extra-index-url https://download.pytorch.org/whl/cpu (with a CUDA GPU: pip install
    torch==2.13.0 -e ".[measure]").
    """
    from kimicount.measure import measure

    spec = load_model(model, config, repo, revision, token, timeout, live=not as_json, command="measure")
    result = measure(
        spec,
        device=device.value,
        tokens=count(tokens, "--tokens"),
        batch=parse_count(batch, "--batch"),
        layers=parse_count(layers, "--layers"),
        dtype=None if dtype is None else parse_dtype(dtype),
        decode_steps=parse_count(decode_steps, "--decode-steps"),
    )
    if as_json:
        from kimicount.reports import measure_json

        print_json(measure_json(result))
    else:
        from kimicount.render import make_console
        from kimicount.render_measure import render_measure

        render_measure(make_console(), result)
    if not result.ok:
        raise typer.Exit(1)
