"""The stable JSON of each command (DESIGN.md, "Stable JSON"), built from the library's results.

Plain dictionaries of ints and strings, no rendering: `--json` prints them as they are.
"""

from __future__ import annotations

from typing import Any

from kimicount.anatomy import Anatomy, Node, TensorRef
from kimicount.verify import VerifyReport


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


def _tally_json(tally) -> dict[str, int]:
    return {"tensors": tally.tensors, "elements": tally.elements, "bytes": tally.bytes}


def _counts_json(counts) -> dict[str, int]:
    return {
        "expected_tensors": counts.expected_tensors,
        "expected_elements": counts.expected_elements,
        "verified_tensors": counts.verified_tensors,
        "verified_elements": counts.verified_elements,
    }


def verify_json(report: VerifyReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "source": report.source,
        "model": report.model,
        "files": report.files,
        "tensors": report.tensors,
        "parameters": {"expected": report.parameters_expected, "found": report.parameters_found},
        "weights": _tally_json(report.weights),
        "fp8_scales": _tally_json(report.fp8_scales),
        "rotary_buffers": _tally_json(report.rotary_buffers),
        "mtp": {"expected": report.mtp_expected, "found": report.mtp.elements, **_tally_json(report.mtp)},
        "unknown": _tally_json(report.unknown),
        "by_dtype": {dtype: _tally_json(tally) for dtype, tally in report.by_dtype.items()},
        "index": {"total_size": report.index_total_size, "header_data_bytes": report.data_bytes},
        "components": [
            {"name": c.name, "depth": c.depth, **_counts_json(c.counts)} for c in report.components
        ],
        "layers": [{"index": x.index, "kind": x.kind, **_counts_json(x.counts)} for x in report.layers],
        "mismatches": [
            {"tensor": m.tensor, "kind": m.kind, "expected": m.expected, "found": m.found}
            for m in report.mismatches
        ],
        "read": {"header_bytes": report.bytes_read, "requests": report.requests},
    }
