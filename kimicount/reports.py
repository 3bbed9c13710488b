"""The stable JSON of each command (DESIGN.md, "Stable JSON"), built from the library's results.

Plain dictionaries of ints and strings, no rendering: `--json` prints them as they are.
"""

from __future__ import annotations

from typing import Any

from kimicount.anatomy import Anatomy, Node, TensorRef


def tensor_json(tensor: TensorRef) -> dict[str, Any]:
    return {
        "name": tensor.display_name,
        "shape": list(tensor.shape),
        "count": tensor.copies,
        "role": tensor.role.value,
        "part": tensor.part or None,
        "elements": tensor.elements,
    }


def node_json(node: Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "params_per_instance": node.params_per_instance,
        "instances": node.instances,
        "params": node.params,
        "activated": node.activated,
        "calculation": node.calculation,
        "formula": node.formula,
        "tensors": [tensor_json(t) for t in node.tensors],
        "children": [node_json(c) for c in node.children],
    }


def params_json(anatomy: Anatomy) -> dict[str, Any]:
    spec = anatomy.spec
    mtp = None
    if anatomy.mtp is not None:
        mtp = {
            "total": anatomy.mtp.params,
            "unique": anatomy.mtp_unique,
            "activated": anatomy.mtp_activated,
            "tree": node_json(anatomy.mtp),
        }
    return {
        "model": spec.name,
        "model_type": spec.model_type,
        "total": anatomy.total,
        "activated": anatomy.activated,
        "tree": node_json(anatomy.model),
        "layers": [
            {"index": row.index, "kind": row.kind, "params": row.params, "activated": row.activated}
            for row in anatomy.layers()
        ],
        "mtp": mtp,
    }
