"""The `compare` view: models side by side, one row per component role, then their KV cache per token
and their weights on one GPU. Reads a kimicount.compare.Comparison; computes nothing."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from kimicount.compare import Comparison, Row
from kimicount.component_ids import MODEL
from kimicount.render import Column, fitted, human_bytes, say, show, show_fitted


def _parent(row_id: str) -> str:
    return row_id.rsplit("/", 1)[0] if "/" in row_id else MODEL


def _guides(rows: tuple[Row, ...]) -> list[tuple[str, str]]:
    """(label prefix, continuation) per row: the tree's guides, from the rows' ids."""
    last = {}
    for row in rows:
        if row.id != MODEL:
            last[_parent(row.id)] = row.id  # the last child seen of each parent
    prefixes = {MODEL: ""}
    guides = []
    for row in rows:
        if row.id == MODEL:
            guides.append(("", ""))
            continue
        parent = _parent(row.id)
        is_last = last[parent] == row.id
        above = prefixes.get(parent, "")
        prefixes[row.id] = above + ("    " if is_last else "│   ")
        guides.append((above + ("└── " if is_last else "├── "), prefixes[row.id]))
    return guides


def _bytes(count: int) -> str:
    return f"{count:,} B"


def render_compare(console: Console, comparison: Comparison) -> None:
    names = [name.rsplit("/", 1)[-1] for name in comparison.models]
    say(console, f"[bold]{escape(' vs '.join(comparison.models))}[/]: parameters per component role")
    columns = [Column("Component")]
    for name in names:
        columns.append(Column(f"{name} parameters", number=True))
    for name in names:
        columns.append(Column(f"{name} activated", number=True, drop=1))
    rows, continuation = [], []
    for row, (prefix, guide) in zip(comparison.rows, _guides(comparison.rows)):
        label = prefix + row.label
        rows.append(
            [
                escape(label),
                *("—" if n is None else f"{n.params:,}" for n in row.nodes),
                *("—" if n is None else f"{n.activated:,}" for n in row.nodes),
            ]
        )
        continuation.append(guide)
    show_fitted(console, *fitted(console, columns, rows, continuation=continuation))
    missing = any(n is None for row in comparison.rows for n in row.nodes)
    say(
        console,
        ("—: the model has no such part. " if missing else "")
        + "Blocks are joined by their kind (dense, MoE), whatever their count.",
    )
    show(console)
    dtypes = ", ".join(dict.fromkeys(comparison.kv_dtypes))
    per_token = [Column(f"KV cache per token ({dtypes}; per GPU: TP{comparison.tp})", wraps=True)]
    per_token += [Column(name, number=True) for name in names]
    per_token += [Column(f"{name} per GPU", number=True) for name in names]
    kv_rows = [
        [kv.layout, *(f"{b:,} B" for b in kv.per_token), *(f"{b:,} B" for b in kv.per_token_per_gpu)]
        for kv in comparison.kv
    ]
    stateful = any(comparison.state_per_sequence)
    if stateful:  # a hybrid model's KDA state: per sequence, whatever its length
        kv_rows.append(
            [
                "state per sequence",
                *(f"{b:,} B" if b else "—" for b in comparison.state_per_sequence),
                *(f"{b:,} B" if b else "—" for b in comparison.state_per_sequence_per_gpu),
            ]
        )
    show_fitted(console, *fitted(console, per_token, kv_rows))
    if stateful:
        say(
            console,
            "A hybrid model's per-token rows are its MLA layers'; its other layers keep the state per sequence "
            "instead, whatever the sequence's length (kimicount kv-cache MODEL shows both).",
        )
    show(console)
    gpu = [Column(f"On one GPU, {comparison.weights[0].label}")] + [
        Column(name, number=True) for name in names
    ]
    weight_rows = [
        ["Weights, as stored", *(_bytes(w.bytes_per_gpu) for w in comparison.weights)],
        ["of which routed experts", *(_bytes(w.routed_expert_bytes) for w in comparison.weights)],
    ]
    show_fitted(console, *fitted(console, gpu, weight_rows))
    sizes = ", ".join(human_bytes(w.bytes_per_gpu) for w in comparison.weights)
    say(console, f"Weights per GPU ({sizes}) as plan places them; plan adds the KV pool and the reserve.")
