"""The one renderer: rich tables and trees for people on a terminal. Reads results, computes nothing.

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
from typing import TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.table import Table

from kimicount.anatomy import Anatomy, Node, TensorRef
from kimicount.conventions import Reconciliation, reconcile
from kimicount.kvcache import KvCacheReport, Layout, LayoutCache
from kimicount.storage import Memory, memory_map, model_dtype, quantization_summary

if TYPE_CHECKING:  # annotations only: params and kv-cache must not pay for importing verify or torch
    from kimicount.measure import CacheTensor, LayoutMeasurement, Measurement
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
    shapes = "shapes"  # the activations in and out, with named dimensions (kimicount.flow)


def component_table(
    root: Node,
    *,
    max_depth: int | None = None,
    detail: Detail = Detail.calculation,
    shapes: dict[int, str] | None = None,
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
        elif detail is Detail.shapes:
            text = (shapes or {}).get(id(node), "")
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
    shapes = None
    if detail is Detail.shapes:
        from kimicount.flow import flow_map

        flows = flow_map(spec, anatomy.model, anatomy.mtp, anatomy.vision)
        shapes = {key: flow.text for key, flow in flows.items()}
    show(console, f"[bold]{spec.name}[/] ({spec.model_type}): parameters per component")
    show(console, component_table(anatomy.model, max_depth=max_depth, detail=detail, shapes=shapes))
    show(console)
    _totals(console, anatomy, memory)
    if anatomy.mtp is not None:
        show(console)
        show(console, "[bold]Multi-token prediction[/] (outside the total; dim rows are stored copies)")
        show(console, component_table(anatomy.mtp, max_depth=max_depth, detail=detail, shapes=shapes))
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
        show(console, component_table(anatomy.vision, max_depth=max_depth, detail=detail, shapes=shapes))
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
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Convention", no_wrap=True)
    table.add_column("Exact", justify="right", no_wrap=True)
    table.add_column("≈", justify="right", no_wrap=True)
    table.add_column("Explains")
    for convention, found in r.conventions:
        explains = ", ".join(e.figure.text + (" (cut)" if e.reading == "truncated" else "") for e in found)
        table.add_row(convention.name, f"{convention.value:,}", human(convention.value), explains)
    show(console, table)
    if r.family:
        show(console, "Rounded half up to the figure's last digit; (cut): truncated there instead.")
    if r.unexplained:
        none = Table.grid(padding=(0, 2))
        none.add_column(no_wrap=True)
        none.add_column(no_wrap=True)
        none.add_column()
        for figure in r.unexplained:
            none.add_row(figure.text, COUNTS_LABELS[figure.counts], figure.source)
        show(console, "Explained by none of them:")
        show(console, none)


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


# --- verify ----------------------------------------------------------------------------------------

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


# --- kimicount kv-cache ---------------------------------------------------------------------------


def times(ratio: float) -> str:
    """A ratio with one decimal: Kimi K2's naive cache is 35.6× the latent.

    >>> times(2_498_560 / 70_272), times(656 / 1152)
    ('35.6×', '0.6×')
    """
    return f"{ratio:.1f}×"


#: One colour per layout, for the terminal and the --plot SVG alike.
LAYOUT_COLOURS = {
    Layout.naive: "#d62728",
    Layout.flash: "#e6a100",
    Layout.latent: "#2ca02c",
    Layout.flashmla_fp8: "#17becf",
}


def render_kv_cache(console: Console, report: KvCacheReport) -> None:
    """The layouts side by side, where each number comes from, and what pages, TP and a budget change."""
    spec, workload = report.spec, report.workload
    show(
        console,
        f"[bold]{spec.name}[/] ({spec.model_type}): KV cache in {report.dtype}, "
        f"{workload.tokens:,} tokens × {_count(workload.batch, 'sequence')}, {report.layers} layers",
    )
    show(console, _kv_cache_table(report))
    show(console)
    e = _count(report.element_bytes, "byte")
    show(console, f"Bytes per token per layer (e = {e} per {report.dtype} element), × {_layers(report)}:")
    show(console, _formula_table(report))
    notes = list(_kv_cache_notes(report))
    if notes:
        show(console)
        show(console, "\n".join(notes))
    if report.budget is not None:
        show(console)
        _render_budget(console, report, report.budget)


def _kv_cache_table(report: KvCacheReport) -> Table:
    workload = report.workload
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Layout")
    table.add_column("Per token per layer", justify="right")
    table.add_column(f"Per token ({report.layers} layers)", justify="right")
    per_sequence = f"{workload.tokens_per_sequence:,} tokens"
    table.add_column(
        per_sequence if workload.batch == 1 else f"{workload.batch:,} × {per_sequence}", justify="right"
    )
    table.add_column("≈", justify="right")
    table.add_column("× latent", justify="right")
    if workload.block_size > 1:
        table.add_column("In page tails", justify="right")
    if workload.tp > 1:
        table.add_column("Per GPU", justify="right")
        table.add_column(f"All {workload.tp} GPUs", justify="right")
        table.add_column("× latent per GPU", justify="right")
    for cache in report.caches:
        extra = []
        if workload.block_size > 1:
            extra.append(human_bytes(cache.wasted_bytes))
        if workload.tp > 1:
            per_gpu_ratio = times(report.ratio_to_latent_per_gpu(cache))
            extra += [human_bytes(cache.bytes_per_gpu), human_bytes(cache.bytes_all_gpus), per_gpu_ratio]
        table.add_row(
            f"[{LAYOUT_COLOURS[cache.layout]}]{cache.layout.value}[/]",
            f"{cache.bytes_per_token_per_layer:,} B",
            f"{cache.bytes_per_token:,} B",
            f"{cache.total_bytes:,} B",
            human_bytes(cache.total_bytes),
            times(report.ratio_to_latent(cache)),
            *extra,
        )
    if report.indexer is not None:
        table.add_row(
            "[dim]of which indexer keys[/]",
            f"[dim]{report.indexer.bytes_per_token_per_layer:,} B[/]",
            f"[dim]{report.indexer.bytes_per_token:,} B[/]",
            f"[dim]{report.indexer_total_bytes:,} B[/]",
            f"[dim]{human_bytes(report.indexer_total_bytes)}[/]",
        )
    return table


def _layers(report: KvCacheReport) -> str:
    """'61 layers = num_hidden_layers', or with the MTP layers: '62 layers = num_hidden_layers 61 + 1 …'."""
    if not report.mtp_layers:
        return f"{report.layers} layers = num_hidden_layers"
    return (
        f"{report.layers} layers = num_hidden_layers {report.spec.num_hidden_layers} "
        f"+ {report.mtp_layers} multi-token-prediction (num_nextn_predict_layers)"
    )


def _formula_table(report: KvCacheReport) -> Table:
    table = Table.grid(padding=(0, 2))
    for justify in ("left", "left", "left", "right", "left"):
        table.add_column(justify=justify)
    lines = [(cache.layout.value, cache.attention) for cache in report.caches]
    if report.indexer is not None:
        lines.append(("indexer keys", report.indexer))
    for name, line in lines:
        table.add_row(
            name, line.formula, f"= {line.calculation}", f"= {line.bytes_per_token_per_layer:,} B", line.note
        )
    return table


def _kv_cache_notes(report: KvCacheReport) -> Iterator[str]:
    spec, workload = report.spec, report.workload
    mtp = len(spec.mtp_layers)
    if report.include_mtp and not mtp:
        yield (
            f"{spec.name} has no multi-token-prediction layer (num_nextn_predict_layers 0): "
            "--include-mtp adds nothing."
        )
    elif mtp and not report.include_mtp:
        yield (
            f"Not counted: {_count(mtp, 'multi-token-prediction layer')} (num_nextn_predict_layers); "
            "--include-mtp adds its cache."
        )
    if workload.block_size > 1:
        pages = workload.tokens_per_sequence // workload.block_size
        yield (
            f"Pages of {workload.block_size:,} tokens: each sequence of {workload.tokens:,} tokens takes "
            f"{_count(pages, 'page')} ({workload.tokens_per_sequence:,} tokens); "
            f"{workload.wasted_tokens:,} tokens allocated but unused over {_count(workload.batch, 'sequence')}, "
            "counted in the totals."
        )
    if workload.tp > 1:
        heads = spec.num_attention_heads
        yield (
            f"Tensor parallel over {workload.tp} GPUs: naive and flash split their {heads} heads, "
            f"{heads // workload.tp} per GPU. The latent belongs to no head: it is replicated, every GPU "
            f"holds the whole latent cache ({workload.tp} copies in all)"
            + (", and so are the indexer keys." if report.indexer is not None else ".")
        )


def _render_budget(console: Console, report: KvCacheReport, budget: int) -> None:
    workload = report.workload
    where = "per GPU" if workload.tp > 1 else "of memory"
    pages = f", in whole pages of {workload.block_size}" if workload.block_size > 1 else ""
    show(console, f"What fits in {human_bytes(budget)} ({budget:,} B) {where}{pages}:")
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Layout")
    table.add_column("Tokens", justify="right")
    table.add_column(f"Sequences of {workload.tokens:,} tokens", justify="right")
    for cache in report.caches:
        table.add_row(
            f"[{LAYOUT_COLOURS[cache.layout]}]{cache.layout.value}[/]",
            f"{cache.max_tokens(budget):,}",
            f"{cache.max_sequences(budget):,}",
        )
    show(console, table)


#: The longest bar of the chart, in characters.
CHART_WIDTH = 48


def render_cache_chart(console: Console, sweep: list[tuple[int, tuple[LayoutCache, ...]]]) -> None:
    """Total cache size against context length, one bar per layout, on a log scale so that the gap
    between layouts (35.6× for Kimi K2) is as long at 512 tokens as at 128K. Bars grow by a whole number of characters per doubling."""
    sizes = [cache.total_bytes for _, caches in sweep for cache in caches]
    low, high = min(sizes), max(sizes)
    per_doubling = max(1, CHART_WIDTH // max(1, math.ceil(math.log2(high / low))))
    batch = sweep[0][1][0].workload.batch
    show(
        console,
        f"Cache size against context length, {_count(batch, 'sequence')} "
        f"(log scale: {per_doubling} characters = ×2):",
    )
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("Tokens", justify="right")
    table.add_column("Layout")
    table.add_column("")
    table.add_column("", justify="right")
    for tokens, caches in sweep:
        for i, cache in enumerate(caches):
            length = 1 + round(per_doubling * math.log2(cache.total_bytes / low))
            style = LAYOUT_COLOURS[cache.layout]
            table.add_row(
                f"{tokens:,}" if i == 0 else "",
                f"[{style}]{cache.layout.value}[/]",
                f"[{style}]{'█' * length}[/]",
                human_bytes(cache.total_bytes),
            )
    show(console, table)


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
        f"{m.dtype} cache, {_count(m.tokens, 'token')} × batch {m.batch} × {_count(m.layers, 'layer')}, "
        f"seeded random weights (seed {m.seed})",
    )
    show(console, _measure_table(m))
    show(console)
    for line in _measure_notes(m):
        show(console, line)


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
    if m.note:
        lines.append(m.note)
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
        f"Decode ms/step: median of {_count(m.decode_steps, 'step')} through {_count(m.layers, 'layer')} "
        f"in {m.compute_dtype}, the new token's projections included; reported, not asserted."
    )
    bad = [r.layout.value for r in m.layouts if not r.ok]
    lines.append(
        f"[bold red]MISMATCH in {', '.join(bad)}[/]"
        if bad
        else "All layouts hold the predicted bytes and decode alike."
    )
    return lines
