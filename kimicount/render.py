"""The one renderer: rich tables and trees for people on a terminal. Reads results, computes nothing.

Numbers are right-justified with thousands separators; each function takes the Console to draw on,
so tests pin width and colour (`Console(width=…, color_system=None)`) and compare text.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from enum import Enum
from typing import TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.table import Table

from kimicount.anatomy import Anatomy, Node, TensorRef

if TYPE_CHECKING:
    from kimicount.measure import CacheTensor, LayoutMeasurement, Measurement


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


def render_measure(console: Console, measurement: Measurement) -> None:
    """The `measure` table: per layout predicted and measured bytes, their ratio, decode time and the
    decode check against the naive cache, then how each column was obtained."""
    m = measurement
    show(
        console,
        f"[bold]{m.model}[/]: KV caches built and measured on {m.device} ({m.device_name}), "
        f"torch {m.torch_version}",
    )
    show(
        console,
        f"{m.dtype} cache, {_plural(m.tokens, 'token')} × batch {m.batch} × {_plural(m.layers, 'layer')}, "
        f"seeded random weights (seed {m.seed})",
    )
    show(console, _measure_table(m))
    show(console)
    for line in _measure_notes(m):
        show(console, line)


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _measure_table(m: Measurement) -> Table:
    with_peak = any(r.peak_bytes is not None for r in m.layouts)
    with_note = any(r.note for r in m.layouts)
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Layout", no_wrap=True)
    table.add_column("Predicted B", justify="right")
    table.add_column("Measured B", justify="right")
    table.add_column("Ratio", justify="right")
    if with_peak:
        table.add_column("Peak B", justify="right")
    table.add_column("Decode ms/step", justify="right")
    table.add_column("Decode vs naive", justify="right")
    table.add_column("Cache tensors per layer")
    if with_note:
        table.add_column("Note", overflow="fold")
    for r in m.layouts:
        row = [r.layout.value, f"{r.predicted_bytes:,}", f"{r.measured_bytes:,}", f"{r.ratio:.4f}"]
        if with_peak:
            row.append(f"{r.peak_bytes:,}")
        row += [f"{r.decode_ms:.2f}", _agreement(r), "; ".join(_tensor_text(t) for t in r.tensors)]
        if with_note:
            row.append(r.note)
        table.add_row(*row, style=None if r.ok else "bold red")
    return table


def _agreement(r: LayoutMeasurement) -> str:
    if r.decode_error is None:
        return "reference"
    verdict = "ok" if r.decode_agrees else "DIFFERS"
    return f"{r.decode_error:.1e} ≤ {r.decode_tolerance:g} {verdict}"


def _tensor_text(tensor: CacheTensor) -> str:
    return f"{tensor.name} [{' × '.join(str(d) for d in tensor.shape)}] {tensor.dtype}"


def _measure_notes(m: Measurement) -> list[str]:
    lines = [f"Measured: {m.measured_with}."]
    if any(r.peak_bytes is not None for r in m.layouts):
        lines.append(
            "Peak: torch.cuda.max_memory_allocated() during the prefill above what was held before it: the "
            "cache plus the transient projections (the up-projected keys and values)."
        )
    lines.append(
        f"Decode: one more token (position {m.tokens:,}) attends over each cache and itself; error = "
        "max |output − naive output| / max |naive output|."
    )
    lines.append(
        "latent and flashmla-fp8 absorb kv_b_proj's key half into the query and its value half into the "
        "output, as DeepSeek's inference does."
    )
    tighter = "" if m.dtype == "fp32" else " (--dtype fp32 shows about 1e-6)"
    lines.append(
        f"The caches store different numbers, each rounded to {m.dtype} (flashmla-fp8's latent to fp8), "
        f"so they agree to that precision{tighter}."
    )
    lines.append(
        f"Decode ms/step: median of {_plural(m.decode_steps, 'step')} through {_plural(m.layers, 'layer')} "
        f"in {m.compute_dtype}, the new token's projections included; reported, not asserted."
    )
    bad = [r.layout.value for r in m.layouts if not r.ok]
    lines.append(
        f"[bold red]MISMATCH in {', '.join(bad)}[/]"
        if bad
        else "All layouts hold the predicted bytes and decode alike."
    )
    return lines
