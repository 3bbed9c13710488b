"""The `params` views: the component tree as a table, per-layer rows and weight memory, with the totals."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console
from rich.table import Table

from kimicount.anatomy import Anatomy, Node, TensorRef
from kimicount.conventions import Reconciliation, reconcile
from kimicount.options import Detail
from kimicount.render import Column, fitted, human, human_bytes, layer_runs, show, show_fitted
from kimicount.storage import Memory, memory_map, model_dtype, quantization_summary


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


#: How narrow the automatic detail column may get before it is left out (an explicit --detail folds).
DETAIL_MIN_WIDTH = 24


def detail_text(node: Node, detail: Detail, shapes: dict[int, str] | None = None) -> str:
    """The last column's text for one component: one branch per Detail member. `shapes` holds each
    node's activation shapes (kimicount.flow), for Detail.shapes."""
    if detail is Detail.tensors:
        return "\n".join(_tensor_label(t) for t in node.tensors)
    if detail is Detail.formula:
        return node.formula or node.calculation
    if detail is Detail.shapes:
        return (shapes or {}).get(id(node), "")
    return node.calculation


def component_table(
    console: Console,
    root: Node,
    *,
    max_depth: int | None = None,
    detail: Detail | None = None,
    shapes: dict[int, str] | None = None,
) -> tuple[Table, list[Column]]:
    """The tree as a table: per instance × instances = parameters, activated, and the `detail` column
    (None: the calculation, left out when the terminal is too narrow for it)."""
    shown = detail or Detail.calculation
    columns = (
        Column("Component"),
        Column("Per instance", number=True, drop=2),
        Column("Instances", number=True, drop=2),
        Column("Parameters", number=True),
        Column("Activated", number=True, drop=1),  # only for an explicit --detail, on a narrow terminal
        Column(
            shown.value.capitalize(),
            wraps=True,
            drop=3 if detail is None else 0,
            min_width=DETAIL_MIN_WIDTH if detail is None else 0,
            hint=f"--detail {shown.value}",
        ),
    )
    rows, styles, continuation = [], [], []
    for label, guides, node, parent in _tree_rows(root, max_depth):
        text = detail_text(node, shown, shapes)
        rows.append(
            (
                label,
                f"{node.params_per_instance:,}",
                _instances(node, parent),
                f"{node.params:,}",
                f"{node.activated:,}",
                text,
            )
        )
        styles.append("dim" if node.copy else None)
        continuation.append(guides)  # under the label, on every further line: the tree's guides unbroken
    return fitted(console, columns, rows, styles=styles, continuation=continuation)


def _tensor_label(tensor: TensorRef) -> str:
    shape = " × ".join(str(d) for d in tensor.shape)
    part = f" ({tensor.part})" if tensor.part else ""
    return f"{tensor.display_name} [{shape}]{part}"


def render_params(
    console: Console,
    anatomy: Anatomy,
    *,
    max_depth: int | None = None,
    detail: Detail | None = None,
) -> None:
    spec = anatomy.spec
    memory = memory_map(spec, anatomy.model, anatomy.mtp, anatomy.vision)
    shapes = None
    if detail is Detail.shapes:
        from kimicount.flow import flow_map

        flows = flow_map(spec, anatomy.model, anatomy.mtp, anatomy.vision)
        shapes = {key: flow.text for key, flow in flows.items()}
    show(console, f"[bold]{spec.name}[/] ({spec.model_type}): parameters per component")
    show_fitted(
        console, *component_table(console, anatomy.model, max_depth=max_depth, detail=detail, shapes=shapes)
    )
    for note in anatomy.notes:
        show(console, note)
    show(console)
    _totals(console, anatomy, memory)
    if anatomy.mtp is not None:
        show(console)
        copies = "; dim rows are stored copies" if anatomy.mtp.params > anatomy.mtp_unique else ""
        show(console, f"[bold]Multi-token prediction[/] (outside the total{copies})")
        show_fitted(
            console, *component_table(console, anatomy.mtp, max_depth=max_depth, detail=detail, shapes=shapes)
        )
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
        show_fitted(
            console,
            *component_table(console, anatomy.vision, max_depth=max_depth, detail=detail, shapes=shapes),
        )
        show(
            console,
            f"Vision: {tower.params:,} in the tower + {projector.params:,} in the projector = "
            f"{anatomy.vision.params:,} parameters ({human(anatomy.vision.params)})"
            + (
                f", {human_bytes(memory[id(anatomy.vision)].stored)} in {model_dtype(spec)}" if memory else ""
            ),
        )
    show(console)
    render_conventions(console, reconcile(anatomy))


#: What a figure counts, in words.
COUNTS_LABELS = {"total": "total", "activated": "activated", "mtp": "MTP", "mtp_activated": "MTP activated"}


def render_conventions(console: Console, r: Reconciliation) -> None:
    """The headline figures, narrow enough for 80 columns: each convention's exact number, rounded, and
    the published figures it explains; then the figures none explains."""
    known = f"the published {r.family} figures each gives" if r.family else "no published figures known"
    show(console, f"[bold]Headline figures[/]: each way of counting, and {known}")
    columns = (
        Column("Convention"),
        Column("Exact", number=True),
        Column("≈", number=True),
        Column("Explains", wraps=True),
    )
    rows = [
        (
            convention.name,
            f"{convention.value:,}",
            human(convention.value),
            ", ".join(e.figure.text + (" (cut)" if e.reading == "truncated" else "") for e in found),
        )
        for convention, found in r.conventions
    ]
    show_fitted(console, *fitted(console, columns, rows))
    if r.family:
        show(console, "Rounded half up to the figure's last digit; (cut): truncated there instead.")
    if r.unexplained:
        unexplained = [(figure.text, COUNTS_LABELS[figure.counts], figure.source) for figure in r.unexplained]
        show(console, "Explained by none of them:")
        blank = (Column(""), Column(""), Column("", wraps=True))
        show_fitted(console, *fitted(console, blank, unexplained, header=False))


def _totals(console: Console, anatomy: Anatomy, memory: dict[int, Memory] | None) -> None:
    spec = anatomy.spec
    share = 100 * anatomy.activated / anatomy.total
    rows = [
        ("[bold]Total[/]", f"[bold]{anatomy.total:,}[/]", f"{human(anatomy.total)} parameters"),
        (
            "[bold]Activated[/]",
            f"[bold]{anatomy.activated:,}[/]",
            (
                f"{human(anatomy.activated)} per token ({share:.2f} %): "
                f"{spec.num_experts_per_tok} of {spec.n_routed_experts} routed experts per MoE layer"
            ),
        ),
    ]
    if memory:
        stored = memory[id(anatomy.model)]
        rows.append(
            (
                "[bold]Weights[/]",
                f"[bold]{stored.stored:,}[/]",
                (
                    f"bytes as stored ({human_bytes(stored.stored)}): {quantization_summary(spec)}; "
                    f"{human_bytes(stored.bf16)} in BF16"
                ),
            )
        )
    else:
        rows.append(("[bold]Weights[/]", "not sized", f"{quantization_summary(spec)}"))
    columns = (Column(""), Column("", number=True), Column("", wraps=True))
    show_fitted(console, *fitted(console, columns, rows, header=False))


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
        columns = (
            Column("Component"),
            Column("Parameters", number=True, drop=2, hint="kimicount params has them"),
            Column("Stored bytes", number=True),
            Column("Stored", number=True),
            Column("BF16", number=True),
            Column("Stored / BF16", number=True, drop=1),
        )
        rows, styles = [], []
        for label, _, node, _ in _tree_rows(root, max_depth):
            bytes_ = memory[id(node)]
            rows.append(
                (
                    label,
                    f"{node.params:,}",
                    f"{bytes_.stored:,}",
                    human_bytes(bytes_.stored),
                    human_bytes(bytes_.bf16),
                    f"{bytes_.stored / bytes_.bf16:.3f}",
                )
            )
            styles.append("dim" if node.copy else None)
        show(console)
        show_fitted(console, *fitted(console, columns, rows, styles=styles))
    show(console)
    _totals(console, anatomy, memory)


def render_layers(console: Console, anatomy: Anatomy) -> None:
    """One row per layer; consecutive layers with the same figures share a row ('1–60 moe (each)')."""
    spec = anatomy.spec
    runs = layer_runs((row.index, row.kind, (row.params, row.activated)) for row in anatomy.layers())
    columns = (Column("Layer"), Column("Parameters", number=True), Column("Activated", number=True))
    rows = [(label, f"{params:,}", f"{activated:,}") for label, (params, activated) in runs]
    show(console, f"[bold]{spec.name}[/] ({spec.model_type}): parameters per transformer layer")
    show_fitted(console, *fitted(console, columns, rows))
    for note in anatomy.notes:
        show(console, note)
    show(console)
    _totals(console, anatomy, memory_map(spec, anatomy.model))
