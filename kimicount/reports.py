"""The stable JSON of each command (DESIGN.md, "Stable JSON"), built from the library's results.

Plain dictionaries of ints and strings, no rendering: `--json` prints them as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kimicount.anatomy import Anatomy, Node, TensorRef

if TYPE_CHECKING:
    from kimicount.measure import Measurement


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


def measure_json(measurement: Measurement) -> dict[str, Any]:
    """DESIGN.md's `{"device", "tokens", "batch", "layers", "layouts": [{"layout", "predicted_bytes",
    "measured_bytes", "ratio"}]}`, plus where and how it was measured and each layout's decode check."""
    m = measurement
    return {
        "model": m.model,
        "device": m.device,
        "device_name": m.device_name,
        "torch_version": m.torch_version,
        "measured_with": m.measured_with,
        "dtype": m.dtype,
        "compute_dtype": m.compute_dtype,
        "tokens": m.tokens,
        "batch": m.batch,
        "layers": m.layers,
        "seed": m.seed,
        "decode_steps": m.decode_steps,
        "ok": m.ok,
        "layouts": [
            {
                "layout": r.layout.value,
                "predicted_bytes": r.predicted_bytes,
                "measured_bytes": r.measured_bytes,
                "ratio": r.ratio,
                "storage_bytes": r.storage_bytes,
                "peak_bytes": r.peak_bytes,
                "tensors": [
                    {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "bytes": t.bytes}
                    for t in r.tensors
                ],
                "decode_ms": r.decode_ms,
                "decode_reference": "naive",
                "decode_max_error": r.decode_error,
                "decode_tolerance": r.decode_tolerance,
                "decode_agrees": r.decode_agrees,
                "note": r.note,
            }
            for r in m.layouts
        ],
    }
