"""The one renderer: rich tables and trees for people on a terminal. Reads results, computes nothing.

Numbers are right-justified with thousands separators; each function takes the Console to draw on,
so tests pin width and colour (`Console(width=…, color_system=None)`) and compare text.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from enum import Enum

from rich.console import Console, RenderableType
from rich.table import Table

from kimicount.anatomy import Anatomy, Node, TensorRef
from kimicount.verify import Counts, LayerCheck, VerifyReport


def make_console(stderr: bool = False) -> Console:
    """A console for the CLI. Piped output gets a wide page instead of rich's 80 columns, so the tables
    do not wrap in files and READMEs (COLUMNS still wins)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else 240
    return Console(file=stream, width=width, highlight=False)


def show(console: Console, *renderables: RenderableType) -> None:
    """Print; off a terminal, without the padding rich leaves at the end of table lines."""
    if console.is_terminal:
        console.print(*renderables)
        return
    with console.capture() as captured:
        console.print(*renderables)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def human(count: float, unit: str = "") -> str:
    """Short decimal form for counts: 1.03 T, 32.9 B, 7.17 K.

    >>> human(1_026_408_232_448), human(32_861_500_928), human(7168), human(12)
    ('1.03 T', '32.9 B', '7.17 K', '12')
    """
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(count) >= scale:
            return f"{count / scale:.3g} {suffix}{unit}"
    return f"{count:g}{(' ' + unit) if unit else ''}"


def _tree_rows(node: Node, max_depth: int | None) -> Iterator[tuple[str, str, Node, Node | None]]:
    """(label with tree guides, guides for the label's extra lines, node, parent) in display order,
    down to max_depth (root = 0)."""

    def walk(node: Node, parent: Node | None, prefix: str, last: bool, depth: int):
        guide = "" if parent is None else ("└── " if last else "├── ")
        child_prefix = prefix if parent is None else prefix + ("    " if last else "│   ")
        yield prefix + guide + node.name, child_prefix, node, parent
        if max_depth is not None and depth >= max_depth:
            return
        for i, child in enumerate(node.children):
            yield from walk(child, node, child_prefix, i == len(node.children) - 1, depth + 1)

    yield from walk(node, None, "", True, 0)


def _instances(node: Node, parent: Node | None) -> str:
    """'60', or '384 × 60' when the node repeats inside a repeated parent (experts in blocks)."""
    if parent is not None and parent.instances > 1 and node.instances // parent.instances > 1:
        return f"{node.instances // parent.instances} × {parent.instances}"
    return f"{node.instances:,}"


class Detail(str, Enum):
    """What the last column of the component table shows."""

    calculation = "calculation"  # the arithmetic with numbers: 512 × 8,192
    formula = "formula"  # the same in config keys: kv_lora_rank × num_attention_heads·qk_nope_head_dim
    tensors = "tensors"  # the checkpoint tensors (or parts) the component owns


def component_table(
    root: Node, *, max_depth: int | None = None, detail: Detail = Detail.calculation
) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Component", no_wrap=True)
    table.add_column("Per instance", justify="right")
    table.add_column("Instances", justify="right")
    table.add_column("Parameters", justify="right")
    table.add_column("Activated", justify="right")
    table.add_column(detail.value.capitalize(), overflow="fold")
    for label, guides, node, parent in _tree_rows(root, max_depth):
        if detail is Detail.tensors:
            lines = [_tensor_label(t) for t in node.tensors]
            label = "\n".join([label] + [guides] * (len(lines) - 1))  # keep the tree's guides unbroken
            text = "\n".join(lines)
        else:
            text = node.formula or node.calculation if detail is Detail.formula else node.calculation
        table.add_row(
            label,
            f"{node.params_per_instance:,}",
            _instances(node, parent),
            f"{node.params:,}",
            f"{node.activated:,}",
            text,
            style="dim" if node.copy else None,
        )
    return table


def _tensor_label(tensor: TensorRef) -> str:
    shape = " × ".join(str(d) for d in tensor.shape)
    part = f" ({tensor.part})" if tensor.part else ""
    return f"{tensor.display_name} [{shape}]{part}"


def render_params(
    console: Console,
    anatomy: Anatomy,
    *,
    max_depth: int | None = None,
    detail: Detail = Detail.calculation,
) -> None:
    spec = anatomy.spec
    show(console, f"[bold]{spec.name}[/] ({spec.model_type}): parameters per component")
    show(console, component_table(anatomy.model, max_depth=max_depth, detail=detail))
    show(console)
    _totals(console, anatomy)
    if anatomy.mtp is not None:
        show(console)
        show(console, "[bold]Multi-token prediction[/] (outside the total; dim rows are stored copies)")
        show(console, component_table(anatomy.mtp, max_depth=max_depth, detail=detail))
        show(
            console,
            f"MTP: {anatomy.mtp_unique:,} parameters of its own ({human(anatomy.mtp_unique)}), "
            f"{anatomy.mtp.params - anatomy.mtp_unique:,} in copies of the embedding and head, "
            f"{anatomy.mtp_activated:,} activated per token",
        )


def _totals(console: Console, anatomy: Anatomy) -> None:
    spec = anatomy.spec
    share = 100 * anatomy.activated / anatomy.total
    totals = Table.grid(padding=(0, 2))
    totals.add_column()
    totals.add_column(justify="right")
    totals.add_column()
    totals.add_row("[bold]Total[/]", f"[bold]{anatomy.total:,}[/]", f"{human(anatomy.total)} parameters")
    totals.add_row(
        "[bold]Activated[/]",
        f"[bold]{anatomy.activated:,}[/]",
        f"{human(anatomy.activated)} per token ({share:.2f} %): "
        f"{spec.num_experts_per_tok} of {spec.n_routed_experts} routed experts per MoE layer",
    )
    show(console, totals)


def render_layers(console: Console, anatomy: Anatomy) -> None:
    spec = anatomy.spec
    table = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
    table.add_column("Layer", justify="right")
    table.add_column("Kind")
    table.add_column("Parameters", justify="right")
    table.add_column("Activated", justify="right")
    for row in anatomy.layers():
        table.add_row(
            str(row.index), "MoE" if row.kind == "moe" else "dense", f"{row.params:,}", f"{row.activated:,}"
        )
    show(console, f"[bold]{spec.name}[/] ({spec.model_type}): parameters per transformer layer")
    show(console, table)
    show(console)
    _totals(console, anatomy)


# --- verify ----------------------------------------------------------------------------------------

#: Mismatches shown on a terminal; --json has them all.
MISMATCHES_SHOWN = 20


def _mark(ok: bool) -> str:
    return "[green]✓[/]" if ok else "[red]✗[/]"


def render_verify(console: Console, report: VerifyReport, *, max_depth: int = 3) -> None:
    show(
        console,
        f"[bold]{report.source}[/] against [bold]{report.model}[/]: {report.files} files, "
        f"{report.tensors:,} tensors, {report.bytes_read:,} header bytes read"
        + (f" in {report.requests} requests" if report.requests else ""),
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
    if report.mtp_expected or report.mtp.tensors:
        table.add_row(
            "MTP module (apart)",
            f"{report.mtp_expected:,}",
            f"{report.mtp.elements:,}",
            f"{report.mtp.tensors:,}",
            f"{report.mtp.bytes:,}",
            _mark(report.mtp_expected == report.mtp.elements),
        )
    for label, tally in (
        ("FP8 block scales (not parameters)", report.fp8_scales),
        ("Rotary buffers (not parameters)", report.rotary_buffers),
    ):
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
        f"{total_bytes:,} ({total_bytes / 2**30:,.1f} GiB)",
    )
    return table
