"""Rendering shared by every view (consoles, number formats), and the `params` views: rich tables
and trees for people on a terminal. Reads results, computes nothing. The other commands' views are
render_kv_cache.py, render_verify.py and render_measure.py, one module per command.

Numbers are right-justified with thousands separators; each function takes the Console to draw on,
so tests pin width and colour (`Console(width=…, color_system=None)`) and compare text.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from enum import Enum
from fractions import Fraction

from rich.console import Console, RenderableType
from rich.table import Table

from kimicount.anatomy import Anatomy, Node, TensorRef
from kimicount.storage import Memory, memory_map, model_dtype, quantization_summary


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


#: Binary units, each 1024 times the one before.
BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")


def human_bytes(count: int) -> str:
    """Binary units, three significant digits (four from 1,000 to 1,023 of a unit): 305 GiB, 8.58 GiB.
    In integer arithmetic, rounding half to even: a size too big for a float still prints.

    >>> human_bytes(327_491_256_320), human_bytes(9_210_691_584), human_bytes(40_960), human_bytes(656)
    ('305 GiB', '8.58 GiB', '40 KiB', '656 B')
    >>> human_bytes(1000 * 2**30), human_bytes(3 * 2**50), human_bytes(2**35 - 2**24), human_bytes(0)
    ('1000 GiB', '3 PiB', '32 GiB', '0 B')
    >>> human_bytes(2**30 * 9997 // 10), human_bytes(2**40 - 1)  # 999.7 GiB, and 1 B short of 1 TiB
    ('1000 GiB', '1024 GiB')
    >>> human_bytes(2**1100) == f"{2**1020} YiB"  # over 10^308: no float holds it
    True
    """
    power = 0
    while power + 1 < len(BINARY_UNITS) and count >= 1024 ** (power + 1):
        power += 1
    value = Fraction(count, 1024**power)
    decimals = max(0, 3 - len(str(math.floor(value))))  # as many as make three significant digits
    whole, fraction = divmod(round(value * 10**decimals), 10**decimals)
    text = f"{whole}.{fraction:0{decimals}d}".rstrip("0").rstrip(".") if decimals else str(whole)
    return f"{text} {BINARY_UNITS[power]}"


def _count(number: int, noun: str) -> str:
    """A number and its noun, plural unless the number is 1.

    >>> _count(1, "sequence"), _count(4096, "token")
    ('1 sequence', '4,096 tokens')
    """
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


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
    memory = memory_map(spec, anatomy.model, anatomy.mtp, anatomy.vision)
    show(console, f"[bold]{spec.name}[/] ({spec.model_type}): parameters per component")
    show(console, component_table(anatomy.model, max_depth=max_depth, detail=detail))
    show(console)
    _totals(console, anatomy, memory)
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
    if anatomy.vision is not None:
        tower, projector = anatomy.vision.children
        show(console)
        show(
            console,
            "[bold]Vision[/] (apart from the language model's total; it runs per image, not per token)",
        )
        show(console, component_table(anatomy.vision, max_depth=max_depth, detail=detail))
        show(
            console,
            f"Vision: {tower.params:,} in the tower + {projector.params:,} in the projector = "
            f"{anatomy.vision.params:,} parameters ({human(anatomy.vision.params)})"
            + (
                f", {human_bytes(memory[id(anatomy.vision)].stored)} in {model_dtype(spec)}" if memory else ""
            ),
        )


def _totals(console: Console, anatomy: Anatomy, memory: dict[int, Memory] | None) -> None:
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
    if memory:
        stored = memory[id(anatomy.model)]
        totals.add_row(
            "[bold]Weights[/]",
            f"[bold]{stored.stored:,}[/]",
            f"bytes as stored ({human_bytes(stored.stored)}): {quantization_summary(spec)}; "
            f"{human_bytes(stored.bf16)} in BF16",
        )
    else:
        totals.add_row("[bold]Weights[/]", "not sized", f"{quantization_summary(spec)}")
    show(console, totals)


def render_memory(console: Console, anatomy: Anatomy, *, max_depth: int | None = None) -> None:
    """Weight memory per component: bytes as the checkpoint stores them against BF16."""
    spec = anatomy.spec
    memory = memory_map(spec, anatomy.model, anatomy.mtp, anatomy.vision)
    assert memory is not None, "the CLI refuses --by memory for a quantization it does not model"
    show(console, f"[bold]{spec.name}[/] ({spec.model_type}): weight memory per component")
    show(
        console,
        f"Stored: {quantization_summary(spec)}. Scales and packed shapes are counted with their weights.",
    )
    for root in (anatomy.model, anatomy.mtp, anatomy.vision):
        if root is None:
            continue
        table = Table(box=None, pad_edge=False, header_style="bold")
        table.add_column("Component", no_wrap=True)
        for column in ("Parameters", "Stored bytes", "Stored", "BF16", "Stored / BF16"):
            table.add_column(column, justify="right")
        for label, _, node, _ in _tree_rows(root, max_depth):
            bytes_ = memory[id(node)]
            table.add_row(
                label,
                f"{node.params:,}",
                f"{bytes_.stored:,}",
                human_bytes(bytes_.stored),
                human_bytes(bytes_.bf16),
                f"{bytes_.stored / bytes_.bf16:.3f}",
                style="dim" if node.copy else None,
            )
        show(console)
        show(console, table)
    show(console)
    _totals(console, anatomy, memory)


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
    _totals(console, anatomy, memory_map(spec, anatomy.model))


def times(ratio: float) -> str:
    """A ratio with one decimal: Kimi K2's naive cache is 35.6× the latent.

    >>> times(2_498_560 / 70_272), times(656 / 1152)
    ('35.6×', '0.6×')
    """
    return f"{ratio:.1f}×"
