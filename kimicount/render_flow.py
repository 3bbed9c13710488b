"""`kimicount flops` for people: the component tree with each component's FLOPs per token, then the
attention itself in its three ways, with formulas and totals. Reads a FlopsReport; computes nothing."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console
from rich.table import Table

from kimicount.anatomy import Node
from kimicount.flow import FlopsReport, Mla, node_calculation, node_compute, node_layers
from kimicount.render import show
from kimicount.render_plan import fitting_table, say


def _tree(node: Node, max_depth: int | None) -> Iterator[tuple[str, Node]]:
    """(label with tree guides, node) in display order, down to max_depth (root = 0)."""

    def walk(node: Node, prefix: str, guide: str, depth: int):
        yield prefix + guide + node.name, node
        if max_depth is not None and depth >= max_depth:
            return
        inner = prefix + ("" if not guide else "    " if guide.startswith("└") else "│   ")
        for i, child in enumerate(node.children):
            yield from walk(child, inner, "└── " if i == len(node.children) - 1 else "├── ", depth + 1)

    yield from walk(node, "", "", 0)


def flops_text(flops: float) -> str:
    """Three significant digits with an SI prefix: '63.4 GFLOP', '168 MFLOP'.

    >>> flops_text(63_372_132_352), flops_text(167_772_160), flops_text(1.5e15)
    ('63.4 GFLOP', '168 MFLOP', '1.5 PFLOP')
    """
    flops = float(flops)
    for scale, prefix in ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k")):
        if flops >= scale:
            return f"{flops / scale:.3g} {prefix}FLOP"
    return f"{flops:.3g} FLOP"


def render_flops(console: Console, report: FlopsReport, *, max_depth: int | None = None) -> None:
    spec = report.spec
    say(
        console,
        f"[bold]{spec.name}[/] ({spec.model_type}): FLOPs per token of the forward pass, "
        f"prefill of {report.tokens:,} tokens, decode at context {report.context:,}",
    )
    say(
        console,
        "A matmul of in × out takes 2 × in × out FLOPs per token; the routed experts count k of E, the "
        "shared experts always. Norms, activations, RoPE and softmax are not counted.",
    )

    def build(dropped: set[str]) -> Table:
        table = Table(box=None, pad_edge=False, header_style="bold")
        table.add_column("Component", no_wrap=True)
        if "Per instance" not in dropped:
            table.add_column("Per instance")
        table.add_column("Layers", justify="right", no_wrap=True)
        table.add_column("FLOPs per token", justify="right", no_wrap=True)
        if "Compute" not in dropped:
            table.add_column("Compute", no_wrap=True)
        for label, node in _tree(report.model, max_depth):
            cells = [label]
            if "Per instance" not in dropped:
                cells.append(node_calculation(spec, node))
            cells += [f"{node_layers(spec, node):,}" if node.tensors else "", f"{report.flops[id(node)]:,}"]
            if "Compute" not in dropped:
                cells.append(node_compute(spec, node))
            table.add_row(*cells)
        return table

    show(console, fitting_table(console, build, ("Per instance", "Compute")))
    show(console)
    _attention(console, report)


def _attention(console: Console, report: FlopsReport) -> None:
    spec = report.spec
    say(
        console,
        f"The attention itself (no parameters), per token per layer, × {report.layers} layers: prefill "
        f"averaged over a causal pass of T = {report.tokens:,} tokens, decode over L = {report.context:,} "
        "positions.",
    )

    def build(dropped: set[str]) -> Table:
        table = Table(box=None, pad_edge=False, header_style="bold")
        table.add_column("Way")
        shown = [
            c
            for c in ("Prefill per layer", "Decode per layer", "Prefill, all", "Decode, all")
            if c not in dropped
        ]
        for column in shown:
            table.add_column(column, justify="right", no_wrap=True)
        for way in Mla:
            cells = {
                "Prefill per layer": f"{round(report.prefill(way)):,}",
                "Decode per layer": f"{report.decode(way).flops:,}",
                "Prefill, all": flops_text(report.prefill_total(way)),
                "Decode, all": flops_text(report.decode_total(way)),
            }
            table.add_row(way.value, *(cells[c] for c in shown))
        return table

    show(console, fitting_table(console, build, ("Prefill per layer", "Decode per layer")))
    show(console)
    formulas = Table.grid(padding=(0, 2))
    formulas.add_column()
    formulas.add_column()
    for way in Mla:
        attention = report.decode(way)
        formulas.add_row(way.value, attention.formula)
        formulas.add_row("", f"= {attention.calculation} = {attention.flops:,}")
    say(console, "Decode, per token per layer (H = num_attention_heads):")
    show(console, formulas)
    heads, nope, value, rank = (
        spec.num_attention_heads,
        spec.qk_nope_head_dim,
        spec.v_head_dim,
        spec.kv_lora_rank,
    )
    say(
        console,
        f'"All" adds every matmul ({report.matmul_flops:,} FLOPs per token). The absorbed way runs W_UK '
        f"({nope} → {rank} per head) on the query and W_UV ({rank} → {value}) on the output: 2 × {heads} × "
        f"{nope} × {rank} + 2 × {heads} × {rank} × {value} FLOPs, kv_b_proj's own count, in its rows above.",
    )
    crossover = report.crossover
    say(
        console,
        (
            f"Absorbed takes fewer FLOPs than re-expanding the latent from L = {crossover:,} on; "
            if crossover
            else "Absorbed never takes fewer FLOPs than re-expanding the latent; "
        )
        + "the naive cache takes the fewest at every L, but reads every head's keys and values, "
        f"{report.naive_to_latent_bytes:.1f}× the latent's bytes (kimicount kv-cache). Engines prefill the "
        "expanded way and decode absorbed.",
    )
