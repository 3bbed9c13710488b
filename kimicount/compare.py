"""Models side by side, component by component (`kimicount compare A B [C…]`): the rows of their trees
joined on their stable component ids (kimicount.component_ids), so that "60 MoE blocks (layers 1–60)"
of Kimi K2 and "58 MoE blocks (layers 3–60)" of DeepSeek-V3 are one row; then each model's KV cache
per token in each layout and its weights on one GPU under tensor parallelism, as `kv-cache` and
`plan` compute them (kimicount.kvcache, kimicount.placement). Computes nothing of its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kimicount.anatomy import Anatomy, Node
from kimicount.component_ids import MODEL, role_name, walk_ids
from kimicount.errors import UsageError
from kimicount.kvcache import DEFAULT_LAYOUTS, check_tp, kv_cache_report


@dataclass(frozen=True)
class Row:
    """One component role: its id, its depth in the tree, a label, and each model's node (None: the
    model has no such part)."""

    id: str
    depth: int
    label: str
    nodes: tuple[Node | None, ...]


@dataclass(frozen=True)
class KvRow:
    """One cache layout: bytes per token over all layers, in each model, on one GPU and in all."""

    layout: str
    per_token: tuple[int, ...]
    per_token_per_gpu: tuple[int, ...]


@dataclass(frozen=True)
class Weights:
    """One model's weights on the fullest GPU under `label` (vLLM's layout: TP, no PP), as stored."""

    label: str
    bytes_per_gpu: int
    routed_expert_bytes: int


@dataclass(frozen=True)
class Comparison:
    anatomies: tuple[Anatomy, ...]
    rows: tuple[Row, ...]
    kv: tuple[KvRow, ...]
    kv_dtypes: tuple[str, ...]
    tp: int
    weights: tuple[Weights, ...]
    #: A hybrid model's per-sequence state (the KDA layers', kvcache.StateCache) in all and on one GPU
    #: under TP; 0 for a model whose cache is all per token.
    state_per_sequence: tuple[int, ...] = ()
    state_per_sequence_per_gpu: tuple[int, ...] = ()

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(a.spec.name for a in self.anatomies)


def row_label(node: Node, row_id: str) -> str:
    """A row's words: "model" for the root, else the node's name as every model's node of that role
    reads ("MoE blocks", "transformer blocks")."""
    return "model" if row_id == MODEL else role_name(node)


def joined_rows(roots: Sequence[Node], max_depth: int | None = None) -> tuple[Row, ...]:
    """The component roles of several models' trees, in tree order: each model's ids in its own order,
    a role only one model has placed after the role before it in that model's tree."""
    order: list[str] = []
    depth: dict[str, int] = {}
    found: list[dict[str, Node]] = []
    for root in roots:
        nodes: dict[str, Node] = {}
        previous = None
        for node, node_id in walk_ids(root):
            level = 0 if node_id == MODEL else node_id.count("/") + 1
            if max_depth is not None and level > max_depth:
                continue
            nodes[node_id] = node
            if node_id not in depth:
                depth[node_id] = level
                at = len(order) if previous is None else order.index(previous) + 1
                # after the part before it and that part's descendants already placed
                while at < len(order) and order[at].startswith(f"{previous}/"):
                    at += 1
                order.insert(at, node_id)
            previous = node_id
        found.append(nodes)
    rows = []
    for row_id in order:
        row_nodes = tuple(model.get(row_id) for model in found)
        most = max(
            (n for n in row_nodes if n is not None), key=lambda n: n.instances
        )  # "dense blocks", not "block"
        rows.append(Row(row_id, depth[row_id], row_label(most, row_id), row_nodes))
    return tuple(rows)


def compare(anatomies: Sequence[Anatomy], *, tp: int = 8, max_depth: int | None = None) -> Comparison:
    """The models side by side: their trees joined by component id, their KV cache per token in each
    layout (their own dtype), and their weights per GPU under TP `tp`. A model named twice, or a TP
    degree a model's heads do not divide into, is a UsageError."""
    from kimicount.deploy.placement import Kind, Parallel, place

    names = [a.spec.name for a in anatomies]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise UsageError(f"{twice} is named twice: compare different models")
    for anatomy in anatomies:
        check_tp(anatomy.spec, tp)
    rows = joined_rows([a.model for a in anatomies], max_depth)
    reports = [kv_cache_report(a.spec, tokens=1, tp=tp) for a in anatomies]
    kv = tuple(
        KvRow(
            layout.value,
            tuple(next(c for c in r.caches if c.layout is layout).bytes_per_token for r in reports),
            tuple(next(c for c in r.caches if c.layout is layout).bytes_per_token_per_gpu for r in reports),
        )
        for layout in DEFAULT_LAYOUTS
    )
    parallel = Parallel(tp=tp)
    weights = []
    for anatomy in anatomies:
        placement = place(anatomy, parallel)
        weights.append(
            Weights(parallel.label, placement.weight_bytes(0), placement.kind_bytes(0, Kind.routed_experts))
        )
    return Comparison(
        tuple(anatomies),
        rows,
        kv,
        tuple(r.dtype for r in reports),
        tp,
        tuple(weights),
        tuple(r.state_bytes_per_sequence for r in reports),
        tuple(r.state_bytes_per_sequence_per_gpu for r in reports),
    )
