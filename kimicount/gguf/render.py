"""The `gguf` view and its JSON: a GGUF (or a --quant estimate) on the component tree. Reads a
GGUFReport, computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from kimicount.render import Column, fitted, human_bytes, say, show, show_fitted

if TYPE_CHECKING:
    from kimicount.gguf.layout import GGUFReport

#: Mismatches shown on a terminal; --json has them all.
MISMATCHES_SHOWN = 20
GIB = 1024**3


def file_size_line(report: GGUFReport) -> str:
    """The tensors' total as llama.cpp's llama_model_loader::print_info prints it, e.g.
    `file size   = 784.70 GiB (6.57 BPW)`: the sum of ggml_nbytes over the tensors (n_bytes), in GiB
    (MiB under 1 GiB), and n_bytes × 8 / n_elements."""
    size = report.tensor_bytes
    shown = f"{size / 1024**2:.2f} MiB" if size < GIB else f"{size / GIB:.2f} GiB"
    return f"file size   = {shown} ({report.bits_per_weight:.2f} BPW)"


def gguf_json(report: GGUFReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "source": report.source,
        "model": report.model,
        "estimate": report.estimate,
        "files": list(report.files),
        "file_bytes": report.file_bytes,
        "tensors": report.tensors,
        "parameters": {"expected": report.parameters_expected, "found": report.elements},
        "file_size": {
            "bytes": report.tensor_bytes,
            "gib": round(report.tensor_bytes / GIB, 2),
            "bits_per_weight": round(report.bits_per_weight, 4),
            "llama_cpp": file_size_line(report),
        },
        "kv_b": report.kv_b,
        "notes": list(report.notes),
        "by_type": {
            name: {"tensors": tensors, "elements": elements, "bytes": nbytes}
            for name, (tensors, elements, nbytes) in report.by_type.items()
        },
        "components": [
            {
                "id": c.id,
                "name": c.name,
                "depth": c.depth,
                "params": c.params,
                "tensors": c.tensors,
                "bytes": c.bytes,
                "bits_per_weight": round(c.bits_per_weight, 4),
                "types": list(c.types),
            }
            for c in report.components
        ],
        "mismatches": [
            {"tensor": m.tensor, "kind": m.kind, "expected": m.expected, "found": m.found}
            for m in report.mismatches
        ],
    }


def render_gguf(console: Console, report: GGUFReport, *, max_depth: int | None = 3) -> None:
    files = len(report.files)
    if report.estimate:
        show(console, f"[bold]{report.source}[/]: {report.tensors:,} tensors")
        say(console, f"[yellow]{report.estimate[:1].upper() + report.estimate[1:]}.[/]")
    else:
        show(
            console,
            f"[bold]{report.source}[/] against [bold]{report.model}[/]: {files} file{'s' if files != 1 else ''}, "
            f"{report.tensors:,} tensors, {report.file_bytes:,} bytes on disk",
        )
    for note in report.notes:
        say(console, f"[yellow]Note: {escape(note)}.[/]")
    show(console)
    columns = (
        Column("Component"),
        Column("Parameters", number=True),
        Column("Tensors", number=True, drop=2),
        Column("Types", drop=3, hint="--json"),
        Column("Bytes", number=True),
        Column("Size", number=True, drop=1),
        Column("BPW", number=True),
    )
    rows = [
        (
            "  " * c.depth + c.name,
            f"{c.params:,}",
            f"{c.tensors:,}",
            " ".join(c.types),
            f"{c.bytes:,}",
            human_bytes(c.bytes),
            f"{c.bits_per_weight:.2f}",
        )
        for c in report.components
        if max_depth is None or c.depth <= max_depth
    ]
    show_fitted(console, *fitted(console, columns, rows))
    show(console)
    type_columns = (
        Column("ggml type"),
        Column("Tensors", number=True),
        Column("Elements", number=True),
        Column("Bytes", number=True),
        Column("BPW", number=True),
    )
    type_rows = [
        (name, f"{tensors:,}", f"{elements:,}", f"{nbytes:,}", f"{nbytes * 8 / elements:.2f}")
        for name, (tensors, elements, nbytes) in report.by_type.items()
    ]
    type_rows.append(
        (
            "[bold]all[/]",
            f"{report.tensors:,}",
            f"{report.elements:,}",
            f"{report.tensor_bytes:,}",
            f"{report.bits_per_weight:.2f}",
        )
    )
    show_fitted(console, *fitted(console, type_columns, type_rows))
    show(console)
    show(console, f"As llama.cpp prints it: {file_size_line(report)}")
    expected_params = report.parameters_expected == report.elements
    show(
        console,
        f"Parameters: {report.elements:,} in the tensors, {report.parameters_expected:,} in the anatomy "
        + ("[green]✓[/]" if expected_params else "[red]✗[/]"),
    )
    if report.estimate:
        return
    show(console)
    if report.ok:
        show(
            console,
            "[bold green]OK[/]: every tensor has the name and shape the metadata's architecture implies.",
        )
        return
    show(console, f"[bold red]{len(report.mismatches):,} mismatches[/]")
    mismatch_columns = [Column(h, wraps=True, min_width=8) for h in ("Tensor", "Kind", "Expected", "Found")]
    mismatch_rows = [(m.tensor, m.kind, m.expected, m.found) for m in report.mismatches[:MISMATCHES_SHOWN]]
    show_fitted(console, *fitted(console, mismatch_columns, mismatch_rows))
    if len(report.mismatches) > MISMATCHES_SHOWN:
        show(console, f"… and {len(report.mismatches) - MISMATCHES_SHOWN:,} more (--json lists them all)")
