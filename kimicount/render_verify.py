"""The `verify` view: the checkpoint against the anatomy, as rich tables. Reads results, computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from kimicount.render import Column, fitted, human_bytes, layer_runs, show, show_fitted

if TYPE_CHECKING:  # annotations only: importing verify stays with the command that runs it
    from kimicount.verify import Counts, IndexReport, VerifyReport


#: Mismatches shown on a terminal; --json has them all.
MISMATCHES_SHOWN = 20


def _mark(ok: bool) -> str:
    return "[green]✓[/]" if ok else "[red]✗[/]"


def render_verify(console: Console, report: VerifyReport, *, max_depth: int | None = 3) -> None:
    show(
        console,
        f"[bold]{report.source}[/] against [bold]{report.model}[/]: {report.files} files, "
        f"{report.tensors:,} tensors, "
        + f"{report.bytes_read or 0:,} header bytes read"
        + (f" in {report.requests} request{'' if report.requests == 1 else 's'}" if report.requests else ""),
    )
    show(console)
    show_fitted(console, *_summary_table(console, report))
    show(console)
    components = [
        ("  " * c.depth + c.name, c.counts)
        for c in report.components
        if max_depth is None or c.depth <= max_depth
    ]
    show_fitted(console, *_counts_table(console, "Component", components))
    show(console)
    layers = layer_runs((layer.index, layer.kind, layer.counts) for layer in report.layers)
    show_fitted(console, *_counts_table(console, "Layer", layers))
    show(console)
    show_fitted(console, *_dtype_table(console, report))
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
    columns = [Column(header, wraps=True, min_width=8) for header in ("Tensor", "Kind", "Expected", "Found")]
    rows = [(m.tensor, m.kind, m.expected, m.found) for m in report.mismatches[:MISMATCHES_SHOWN]]
    show(console, f"[bold red]{len(report.mismatches):,} mismatches[/]")
    show_fitted(console, *fitted(console, columns, rows))
    if len(report.mismatches) > MISMATCHES_SHOWN:
        show(console, f"… and {len(report.mismatches) - MISMATCHES_SHOWN:,} more (--json lists them all)")


def _summary_table(console: Console, report: VerifyReport) -> tuple[Table, list[Column]]:
    columns = (
        Column("", wraps=True),
        Column("Expected", number=True),
        Column("Found", number=True),
        Column("Tensors", number=True),
        Column("Bytes", number=True, drop=1),
        Column(""),
    )
    params_ok = report.parameters_expected == report.parameters_found
    rows = [
        (
            "Parameters",
            f"{report.parameters_expected:,}",
            f"{report.parameters_found:,}",
            f"{report.weights.tensors + report.unknown.tensors:,}",
            f"{report.weights.bytes + report.unknown.bytes:,}",
            _mark(params_ok),
        )
    ]
    for label, expected, tally in (
        ("MTP module (apart)", report.mtp_expected, report.mtp),
        ("Vision tower and projector (apart)", report.vision_expected, report.vision),
    ):
        if expected or tally.tensors:
            rows.append(
                (
                    label,
                    f"{expected:,}",
                    f"{tally.elements:,}",
                    f"{tally.tensors:,}",
                    f"{tally.bytes:,}",
                    _mark(expected == tally.elements),
                )
            )
    for label, tally in (
        ("FP8 block scales (not parameters)", report.fp8_scales),
        ("INT4 scales and shapes (not parameters)", report.int4_metadata),
        ("FP4 scales (not parameters)", report.fp4_scales),
        ("Rotary buffers (not parameters)", report.rotary_buffers),
    ):
        if tally.tensors or label.startswith(("FP8", "Rotary")):
            rows.append((label, "", f"{tally.elements:,}", f"{tally.tensors:,}", f"{tally.bytes:,}", ""))
    return fitted(console, columns, rows)


def _counts_table(console: Console, title: str, rows: list[tuple[str, Counts]]) -> tuple[Table, list[Column]]:
    columns = (
        Column(title),
        Column("Tensors", number=True, drop=1),
        Column("verified", number=True, drop=1),
        Column("Elements", number=True),
        Column("verified", number=True),
        Column(""),
    )
    cells = [
        (
            label,
            f"{counts.expected_tensors:,}",
            f"{counts.verified_tensors:,}",
            f"{counts.expected_elements:,}",
            f"{counts.verified_elements:,}",
            _mark(counts.ok),
        )
        for label, counts in rows
    ]
    return fitted(console, columns, cells)


def _dtype_table(console: Console, report: VerifyReport) -> tuple[Table, list[Column]]:
    columns = (
        Column("Stored as"),
        Column("Tensors", number=True),
        Column("Elements", number=True),
        Column("Bytes", number=True),
    )
    rows = [
        (dtype, f"{tally.tensors:,}", f"{tally.elements:,}", f"{tally.bytes:,}")
        for dtype, tally in report.by_dtype.items()
    ]
    total_bytes = sum(t.bytes for t in report.by_dtype.values())
    rows.append(
        (
            "[bold]all[/]",
            f"{report.tensors:,}",
            f"{sum(t.elements for t in report.by_dtype.values()):,}",
            f"{total_bytes:,} ({human_bytes(total_bytes)})",
        )
    )
    return fitted(console, columns, rows)


def render_index(console: Console, report: IndexReport) -> None:
    """`verify --index`: names expected against listed, the declared totals against the trees', and
    the first mismatches."""
    show(
        console,
        f"[bold]{report.source}[/] against [bold]{report.model}[/]: {report.entries:,} entries in "
        f"{report.files} files (the index alone: names and totals, no shapes or dtypes)",
    )
    rotary = f", and {report.rotary_buffers:,} rotary buffers" if report.rotary_buffers else ""
    names_ok = not any(m.kind in ("missing", "unexpected") for m in report.mismatches)
    rows = [
        (
            "Tensor names",
            f"{report.expected_names:,} expected as stored{rotary}",
            f"{report.entries:,} listed",
            _mark(names_ok),
        ),
    ]
    for label, declared, expected in (
        ("total_size", report.total_size, report.expected_size),
        ("total_parameters", report.total_parameters, report.expected_parameters),
    ):
        if declared is None:
            rows.append((label, "not declared", "", ""))
        elif expected is None:
            rows.append((label, "not modelled (the config's quantization)", f"{declared:,}", ""))
        elif report.rotary_buffers:
            rows.append((label, f"{expected:,} + the rotary buffers'", f"{declared:,}", ""))
        else:
            rows.append((label, f"{expected:,}", f"{declared:,}", _mark(declared == expected)))
    columns = (Column(""), Column("Trees", wraps=True), Column("Index", number=True), Column(""))
    show_fitted(console, *fitted(console, columns, rows))
    if report.mismatches:
        show(console)
        show(
            console,
            f"[red]{len(report.mismatches):,} mismatches[/] (first {MISMATCHES_SHOWN}; --json has all):",
        )
        columns = (
            Column("Tensor", wraps=True),
            Column("Kind"),
            Column("Expected", wraps=True),
            Column("Found", wraps=True),
        )
        rows = [(m.tensor, m.kind, m.expected, m.found) for m in report.mismatches[:MISMATCHES_SHOWN]]
        show_fitted(console, *fitted(console, columns, rows))
