"""The JSON of `kimicount flops`: the tree with each node's matmul FLOPs per token, the attention per way
of running MLA, and the totals; plain dictionaries of ints and strings, in the style of reports.py."""

from __future__ import annotations

from typing import Any

from kimicount.anatomy import Node
from kimicount.flow import FlopsReport, Mla, node_calculation, node_compute


def flops_json(report: FlopsReport) -> dict[str, Any]:
    """`kimicount flops --json`: the tree with each node's matmul FLOPs per token, the attention per way,
    and the totals; for a hybrid model, its recurrent layers' "state" last."""
    data = _tables_json(report)
    if (state := flops_state_json(report)) is not None:
        data["state"] = state
    return data


def _tables_json(report: FlopsReport) -> dict[str, Any]:
    """flops_json's tree, attention and totals."""
    from kimicount.component_ids import tree_ids

    spec = report.spec
    ids = tree_ids(report.model)

    def node(n: Node) -> dict[str, Any]:
        return {
            "id": ids[id(n)],
            "name": n.name,
            "instances": n.instances,
            "calculation": node_calculation(spec, n),
            "flops_per_token": report.flops[id(n)],
            "compute": node_compute(spec, n),
            "children": [node(c) for c in n.children],
        }

    head = {
        "model": spec.name,
        "model_type": spec.model_type,
        "tokens": report.tokens,
        "context": report.context,
        "layers": report.layers,
        "matmul_flops_per_token": report.matmul_flops,
        "tree": node(report.model),
    }
    if report.kinds is not None:  # DeepSeek V4: the attention of each layer kind
        return {
            **head,
            "attention": [
                {
                    "kind": k.kind,
                    "layers": k.layers,
                    "formula": k.formula,
                    "decode_calculation": k.calculation,
                    "decode_flops_per_token_per_layer": k.decode,
                    "prefill_flops_per_token_per_layer": float(k.prefill),
                }
                for k in report.kinds
            ],
            "decode_flops_per_token": float(report.kinds_total(True)),
            "prefill_flops_per_token": float(report.kinds_total(False)),
        }
    return {
        **head,
        "attention": [
            {
                "way": way.name,
                "formula": report.decode(way).formula,
                "decode_calculation": report.decode(way).calculation,
                "decode_flops_per_token_per_layer": report.decode(way).flops,
                "prefill_flops_per_token_per_layer": float(report.prefill(way)),
                "decode_flops_per_token": report.decode_total(way),
                "prefill_flops_per_token": float(report.prefill_total(way)),
            }
            for way in Mla
        ],
        "absorbed_cheaper_than_reexpanded_from": report.crossover,
    }


def flops_state_json(report: FlopsReport) -> dict[str, Any] | None:
    """`kimicount flops --json`'s "state": a hybrid model's recurrent layers (KDA) beside its MLA ones,
    their state's FLOPs per token per layer in a chunked prefill and a recurrent decode; None when every
    layer is MLA."""
    state = report.state
    if state is None:
        return None
    return {
        "group": state.name,
        "layers": state.layers,
        "heads": state.heads,
        "key_dim": state.key_dim,
        "value_dim": state.value_dim,
        "chunk": state.chunk,
        "prefill_formula": state.prefill_formula,
        "prefill_calculation": state.prefill_calculation,
        "prefill_flops_per_chunk_per_layer": state.chunk_flops,
        "prefill_flops_per_token_per_layer": float(state.prefill),
        "decode_formula": state.decode_formula,
        "decode_calculation": state.decode_calculation,
        "decode_flops_per_token_per_layer": state.decode,
    }
