"""A page as data: what `show --json` prints and the explorer's HTML renders (the stable keys of the
page, its numbers as Python ints, its evidence as {file, revision, start, end, role, excerpt, link})."""

from __future__ import annotations

from typing import Any

from kimicount.explorer.formula import as_text
from kimicount.explorer.pages import Page, Pages


def page_json(page: Page, pages: Pages) -> dict[str, Any]:
    """A page as `show --json` prints it and the explorer embeds it."""

    def link(page_id: str | None) -> dict[str, str] | None:
        if page_id is None or page_id not in pages.pages:
            return None
        return {"id": page_id, "name": pages[page_id].name}

    parameters = None
    if page.parameters is not None:
        p = page.parameters
        parameters = {
            "per_instance": p.per_instance,
            "calculation": p.calculation,
            "formula": p.formula,
            "tensors": [
                {
                    "tensor": r.tensor,
                    "name": r.name,
                    "part": r.part,
                    "shape": list(r.shape),
                    "stored_as": r.layout,
                    "calculation": r.calculation,
                    "elements": r.elements,
                    "bias": r.bias,
                    "dtype": r.dtype,
                    "storage": r.storage,
                    "owner": r.owner or None,
                    "owner_name": pages[r.owner].name if r.owner in pages.pages else None,
                }
                for r in p.rows
            ],
            "where": [{"where": x.where, "instances": x.instances, "params": x.params} for x in p.where],
            "instances": p.instances,
            "total": p.total,
            "activated": p.activated,
            "stored_bytes": p.stored_bytes,
            "bf16_bytes": p.bf16_bytes,
            "flops_per_token": p.flops_per_token,
        }
    return {
        "model": pages.model,
        "id": page.id,
        "component_ids": list(page.component_ids),
        "name": page.name,
        "kind": page.kind_text,
        "path": list(page.path),
        "role": page.role,
        "formula": as_text(page.formula),
        "code": page.code,
        "class": page.cls or None,
        "attributes": list(page.attributes),
        "variable": page.variable or None,
        "explanation": page.explanation,
        "shapes": {
            "in": [s.json() for s in page.inputs],
            "out": [s.json() for s in page.outputs],
            "middle": [s.json() for s in page.middle],
            "cache_reads": [s.json() for s in page.cache_reads],
        },
        "modes": [{"mode": m.mode, "state": m.state, "cache": m.cache} for m in page.modes],
        "parameters": parameters,
        "parts": [
            {"id": x.id, "name": x.name, "per_instance": x.per_instance, "count": x.count, "params": x.params}
            for x in page.parts
        ],
        "kv_cache": [
            {
                "layout": k.layout,
                "formula": k.formula,
                "calculation": k.calculation,
                "bytes_per_token_per_layer": k.per_token_per_layer,
                "layers": k.layers,
                "bytes_per_token": k.per_token,
            }
            for k in page.kv
        ],
        "kv_note": page.kv_note or None,
        "links": _links(page, link),
        "also_in": list(page.also_in),
        "layer": page.layer,
        "layer_note": page.layer_note or None,
        "config_keys": list(page.config_keys),
        "evidence": [e.to_json() for e in page.evidence],
        "evidence_note": page.evidence_note or None,
        "findings": list(page.findings),
    }


def _links(page: Page, link) -> dict[str, Any]:
    """A component's links name the activations it reads and writes; an activation's (or operation's)
    the components that make and read it."""
    made = page.kind in ("activation", "operation")
    return {
        "parent": link(page.parent),
        "children": [link(c) for c in page.children],
        "made_by" if made else "writes": [link(c) for c in page.writes],
        "read_by" if made else "reads": [link(c) for c in page.reads],
        "tensors": [link(c) for c in page.tensors],
    }
