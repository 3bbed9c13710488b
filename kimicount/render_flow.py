"""`kimicount flops` for people: the component tree with each component's FLOPs per token, then the
attention itself in its three ways, with formulas and totals. Reads a FlopsReport; computes nothing."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console
from rich.table import Table

from kimicount.anatomy import Node
from kimicount.flow import FlopsReport, Mla, node_calculation, node_compute, node_layers, vllm_bf16_absorption
from kimicount.render import Column, fitted, flops_text, say, show, show_fitted


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

    columns = (
        Column("Component"),
        Column("Per instance", drop=2),
        Column("Layers", number=True),
        Column("FLOPs per token", number=True),
        Column("Compute", drop=1),
    )
    rows = (
        (
            label,
            node_calculation(spec, node),
            f"{node_layers(spec, node):,}" if node.tensors else "",
            f"{report.flops[id(node)]:,}",
            node_compute(spec, node),
        )
        for label, node in _tree(report.model, max_depth)
    )
    show_fitted(console, *fitted(console, columns, rows))
    show(console)
    if report.kinds is not None:
        _kinds(console, report)
        return
    _attention(console, report)
    if report.state is not None:
        _state(console, report)


def _kinds(console: Console, report: FlopsReport) -> None:
    """The attention of each layer kind (DeepSeek V4: SWA, CSA, HCA), per token per layer."""
    assert report.kinds is not None
    say(
        console,
        f"The attention itself (no parameters), per token per layer: prefill averaged over a causal pass of "
        f"T = {report.tokens:,} tokens, decode over L = {report.context:,} positions.",
    )
    columns = (
        Column("Kind"),
        Column("Layers", number=True),
        Column("Prefill per layer", number=True, drop=1),
        Column("Decode per layer", number=True),
    )
    rows = [(k.kind, f"{k.layers}", f"{round(k.prefill):,}", f"{k.decode:,}") for k in report.kinds]
    show_fitted(console, *fitted(console, columns, rows))
    show(console)
    formulas = Table.grid(padding=(0, 2))
    formulas.add_column()
    formulas.add_column()
    for k in report.kinds:
        formulas.add_row(k.kind, k.formula)
        formulas.add_row("", f"= {k.calculation} = {k.decode:,}")
    say(
        console,
        "Decode, per token per layer (H = num_attention_heads; one key–value head, read as key and value):",
    )
    show(console, formulas)
    say(
        console,
        f"All, matmuls ({report.matmul_flops:,} FLOPs per token) and attention: prefill "
        f"{flops_text(report.kinds_total(False))}, decode {flops_text(report.kinds_total(True))} per token. "
        "The hyper-connections' mixing projections (hc_*_fn, F32) are not counted.",
    )


def _attention(console: Console, report: FlopsReport) -> None:
    spec = report.spec
    say(
        console,
        f"The attention itself (no parameters), per token per layer, × {report.layers} "
        f"{'MLA ' if report.state is not None else ''}layers: prefill "
        f"averaged over a causal pass of T = {report.tokens:,} tokens, decode over L = {report.context:,} "
        "positions.",
    )

    columns = (
        Column("Way"),
        Column("Prefill per layer", number=True, drop=2),
        Column("Decode per layer", number=True, drop=1),
        Column("Prefill, all", number=True),
        Column("Decode, all", number=True),
    )
    rows = (
        (
            way.value,
            f"{round(report.prefill(way)):,}",
            f"{report.decode(way).flops:,}",
            flops_text(float(report.prefill_total(way))),
            flops_text(report.decode_total(way)),
        )
        for way in Mla
    )
    show_fitted(console, *fitted(console, columns, rows))
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
    recurrent = "" if report.state is None else f" and the {report.state.name} layers' state (below)"
    say(
        console,
        f'"All" adds every matmul ({report.matmul_flops:,} FLOPs per token){recurrent}. The absorbed way runs W_UK '
        f"({nope} → {rank} per head) on the query and W_UV ({rank} → {value}) on the output: 2 × {heads} × "
        f"{nope} × {rank} + 2 × {heads} × {rank} × {value} FLOPs, kv_b_proj's own count, in its rows above"
        + (
            "; vLLM runs them in BF16, on copies of W_UK and W_UV it dequantizes from the FP8 kv_b_proj at load."
            if vllm_bf16_absorption(spec)
            else "."
        ),
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


def _state(console: Console, report: FlopsReport) -> None:
    """The recurrent layers (KDA): their state's arithmetic in a chunked prefill and a recurrent decode."""
    state = report.state
    assert state is not None
    say(
        console,
        f"The {state.layers} {state.name} layers keep no cache: each holds a recurrent state S of {state.heads} "
        f"heads × {state.key_dim} × {state.value_dim} per sequence. A prefill runs in chunks of {state.chunk} "
        "positions and writes S once at the end (fla's chunk_kda); a decode step reads S and overwrites it, "
        "the same cost at any context (fused_recurrent_kda). Per token per layer, × "
        f"{state.layers} layers:",
    )
    columns = (Column("Mode"), Column("Per layer", number=True), Column("All layers", number=True))
    rows = (
        (
            f"prefill, chunked (T = {report.tokens:,})",
            f"{round(state.prefill):,}",
            flops_text(state.prefill * state.layers),
        ),
        ("decode, recurrent", f"{state.decode:,}", flops_text(state.decode * state.layers)),
    )
    show_fitted(console, *fitted(console, columns, rows))
    show(console)
    formulas = Table.grid(padding=(0, 2))
    formulas.add_column()
    formulas.add_column()
    formulas.add_row("prefill", state.prefill_formula)
    formulas.add_row("", f"= {state.prefill_calculation} = {round(state.prefill):,}")
    formulas.add_row("decode", state.decode_formula)
    formulas.add_row("", f"= {state.decode_calculation} = {state.decode:,}")
    say(
        console, "Per token per layer (H = heads, d_k and d_v the state's key and value widths, C the chunk):"
    )
    show(console, formulas)
    way = Mla.absorbed
    say(
        console,
        f"Per token, every matmul, the MLA layers absorbed and the {state.name} layers' state: prefill {flops_text(report.prefill_total(way))}, decode {flops_text(report.decode_total(way))}. "
        "The gates' activations, the q and k L2 norms and the exponentials are not counted; the short "
        "convolutions are, with the components above (2 × kernel per channel).",
    )
