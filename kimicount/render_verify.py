"""The `verify` view: the checkpoint against the anatomy, as rich tables. Reads results, computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from kimicount.render import human_bytes, show

if TYPE_CHECKING:  # annotations only: importing verify stays with the command that runs it
    from kimicount.verify import Counts, LayerCheck, VerifyReport


#: Mismatches shown on a terminal; --json has them all.
MISMATCHES_SHOWN = 20


def _mark(ok: bool) -> str:
    return "[green]✓[/]" if ok else "[red]✗[/]"


def render_verify(console: Console, report: VerifyReport, *, max_depth: int = 3) -> None:
    show(
        console,
        f"[bold]{report.source}[/] against [bold]{report.model}[/]: {report.files} files, "
        f"{report.tensors:,} tensors, "
        + (
            "headers from the Hub's bulk endpoint in one request"
            if report.bytes_read is None
            else f"{report.bytes_read:,} header bytes read"
            + (
                f" in {report.requests} request{'' if report.requests == 1 else 's'}"
                if report.requests
                else ""
            )
        ),
    )
    show(console)
    show(console, _summary_table(report))
    show(console)
    components = [("  " * c.depth + c.name, c.counts) for c in report.components if c.depth <= max_depth]
    show(console, _counts_table("Component", components))
    show(console)
    show(console, _counts_table("Layer", _layer_runs(report.layers)))
    show(console)
    show(console, _dtype_table(report))
    if report.index_total_size is not None:
        same = report.index_total_size == report.data_bytes
        show(
            console,
            f"Index metadata.total_size {report.index_total_size:,} B; headers' tensor data "
            f"{report.data_bytes:,} B {_mark(same)}",
        )
    linears = report.packed_linears
    if linears is not None:
        show(
            console,
            f"Linears: {linears.packed:,} packed (INT4), {linears.plain:,} stored as themselves, as the names "
            f"say; against the config's targets and ignore list: {linears.packed_against_config:,} packed "
            f"that it ignores, {linears.plain_against_config:,} unpacked that it targets",
        )
    show(console)
    if report.ok:
        show(console, "[bold green]OK[/]: every tensor has the name, shape and dtype the anatomy predicts.")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("Tensor", "Kind", "Expected", "Found"):
        table.add_column(column, overflow="fold")
    for m in report.mismatches[:MISMATCHES_SHOWN]:
        table.add_row(m.tensor, m.kind, m.expected, m.found)
    show(console, f"[bold red]{len(report.mismatches):,} mismatches[/]")
    show(console, table)
    if len(report.mismatches) > MISMATCHES_SHOWN:
        show(console, f"… and {len(report.mismatches) - MISMATCHES_SHOWN:,} more (--json lists them all)")


def _summary_table(report: VerifyReport) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("")
    for column in ("Expected", "Found", "Tensors", "Bytes"):
        table.add_column(column, justify="right")
    table.add_column("")
    params_ok = report.parameters_expected == report.parameters_found
    table.add_row(
        "Parameters",
        f"{report.parameters_expected:,}",
        f"{report.parameters_found:,}",
        f"{report.weights.tensors + report.unknown.tensors:,}",
        f"{report.weights.bytes + report.unknown.bytes:,}",
        _mark(params_ok),
    )
    for label, expected, tally in (
        ("MTP module (apart)", report.mtp_expected, report.mtp),
        ("Vision tower and projector (apart)", report.vision_expected, report.vision),
    ):
        if expected or tally.tensors:
            table.add_row(
                label,
                f"{expected:,}",
                f"{tally.elements:,}",
                f"{tally.tensors:,}",
                f"{tally.bytes:,}",
                _mark(expected == tally.elements),
            )
    for label, tally in (
        ("FP8 block scales (not parameters)", report.fp8_scales),
        ("INT4 scales and shapes (not parameters)", report.int4_metadata),
        ("Rotary buffers (not parameters)", report.rotary_buffers),
    ):
        if tally.tensors or label.startswith(("FP8", "Rotary")):
            table.add_row(label, "", f"{tally.elements:,}", f"{tally.tensors:,}", f"{tally.bytes:,}", "")
    return table


def _counts_table(title: str, rows: list[tuple[str, Counts]]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column(title, no_wrap=True)
    for column in ("Tensors", "verified", "Elements", "verified"):
        table.add_column(column, justify="right")
    table.add_column("")
    for label, counts in rows:
        table.add_row(
            label,
            f"{counts.expected_tensors:,}",
            f"{counts.verified_tensors:,}",
            f"{counts.expected_elements:,}",
            f"{counts.verified_elements:,}",
            _mark(counts.ok),
        )
    return table


def _layer_runs(layers: tuple[LayerCheck, ...]) -> list[tuple[str, Counts]]:
    """Consecutive layers of the same kind with the same counts share a row: '1–60 moe (each)'."""
    runs: list[list] = []  # [first, last, kind, counts]
    for layer in layers:
        if runs and runs[-1][1] == layer.index - 1 and runs[-1][2:] == [layer.kind, layer.counts]:
            runs[-1][1] = layer.index
        else:
            runs.append([layer.index, layer.index, layer.kind, layer.counts])
    return [
        (f"{first} {kind}" if first == last else f"{first}–{last} {kind} (each)", counts)
        for first, last, kind, counts in runs
    ]


def _dtype_table(report: VerifyReport) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Stored as")
    for column in ("Tensors", "Elements", "Bytes"):
        table.add_column(column, justify="right")
    for dtype, tally in report.by_dtype.items():
        table.add_row(dtype, f"{tally.tensors:,}", f"{tally.elements:,}", f"{tally.bytes:,}")
    total_bytes = sum(t.bytes for t in report.by_dtype.values())
    table.add_row(
        "[bold]all[/]",
        f"{report.tensors:,}",
        f"{sum(t.elements for t in report.by_dtype.values()):,}",
        f"{total_bytes:,} ({human_bytes(total_bytes)})",
    )
    return table
