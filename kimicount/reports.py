"""The stable JSON of each command (DESIGN.md, "Stable JSON"), built from the library's results.

Plain dictionaries of ints and strings, no rendering: `--json` prints them as they are.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kimicount.kvcache import CacheLine, KvCacheReport, LayoutCache, splits_across_ranks

# Annotations only: kv-cache pays for neither the anatomy nor storage, nothing for verify or torch.
if TYPE_CHECKING:
    from kimicount.anatomy import Anatomy, Node, TensorRef
    from kimicount.compare import Comparison
    from kimicount.conventions import Figure, Reconciliation
    from kimicount.flow import Flow
    from kimicount.measure import Measurement
    from kimicount.storage import Memory
    from kimicount.verify import IndexReport, VerifyReport


def tensor_json(tensor: TensorRef) -> dict[str, Any]:
    return {
        "name": tensor.display_name,
        "shape": list(tensor.shape),
        "count": tensor.copies,
        "role": tensor.role.value,
        "part": tensor.part or None,
        "elements": tensor.elements,
    }


def node_json(
    node: Node,
    memory: dict[int, Memory] | None,
    flows: dict[int, Flow] | None = None,
    ids: dict[int, str] | None = None,
) -> dict[str, Any]:
    """A node and its children; `id` is its stable component id (kimicount.component_ids), the key
    on which two models' trees join."""
    flow = None if flows is None else flows.get(id(node))
    return {
        "id": None if ids is None else ids[id(node)],
        "name": node.name,
        "params_per_instance": node.params_per_instance,
        "instances": node.instances,
        "params": node.params,
        "activated": node.activated,
        "calculation": node.calculation,
        "formula": node.formula,
        "stored_bytes": memory[id(node)].stored if memory else None,
        "bf16_bytes": memory[id(node)].bf16 if memory else None,
        "tensors": [tensor_json(t) for t in node.tensors],
        "flow": None if flow is None else flow_json(flow),
        "children": [node_json(c, memory, flows, ids) for c in node.children],
    }


def flow_json(flow: Flow) -> dict[str, Any]:
    """The activations in, through and out of a component, each with its shape and what each
    dimension counts; symbols (B, T, L, P) are strings, sizes ints."""

    def activations(group) -> list[dict[str, Any]]:
        return [
            {"name": a.name, "shape": [d.size for d in a.dims], "dims": [d.label for d in a.dims]}
            for a in group
        ]

    return {
        "text": flow.text,
        "inputs": activations(flow.inputs),
        "middle": activations(flow.middle),
        "outputs": activations(flow.outputs),
        "reads": activations(flow.reads),
    }


def params_json(anatomy: Anatomy) -> dict[str, Any]:
    from kimicount.component_ids import tree_ids
    from kimicount.conventions import reconcile
    from kimicount.flow import flow_map
    from kimicount.storage import memory_map, quantization_summary

    spec = anatomy.spec
    memory = memory_map(spec, anatomy.model, anatomy.mtp, anatomy.vision)
    flows = flow_map(spec, anatomy.model, anatomy.mtp, anatomy.vision)
    ids = tree_ids(anatomy.model, anatomy.mtp, anatomy.vision)
    mtp = vision = None
    if anatomy.mtp is not None:
        mtp = {
            "total": anatomy.mtp.params,
            "unique": anatomy.mtp_unique,
            "activated": anatomy.mtp_activated,
            "tree": node_json(anatomy.mtp, memory, flows, ids),
        }
    if anatomy.vision is not None:
        tower, projector = anatomy.vision.children
        vision = {
            "total": anatomy.vision.params,
            "tower": tower.params,
            "projector": projector.params,
            "tree": node_json(anatomy.vision, memory, flows, ids),
        }
    return {
        "model": spec.name,
        "model_type": spec.model_type,
        "total": anatomy.total,
        "activated": anatomy.activated,
        "memory": {
            "stored_bytes": memory[id(anatomy.model)].stored if memory else None,
            "bf16_bytes": memory[id(anatomy.model)].bf16 if memory else None,
            "storage": quantization_summary(spec),
        },
        "tree": node_json(anatomy.model, memory, flows, ids),
        "layers": [
            {"index": row.index, "kind": row.kind, "params": row.params, "activated": row.activated}
            for row in anatomy.layers()
        ],
        "mtp": mtp,
        "vision": vision,
        **conventions_json(reconcile(anatomy)),
    }


def _figure_json(figure: Figure, family: str | None) -> dict[str, Any]:
    return {"figure": figure.text, "counts": figure.counts, "family": family, "source": figure.source}


def conventions_json(r: Reconciliation) -> dict[str, Any]:
    """`conventions`: each counting convention, its exact value and the published figures it explains
    (how: rounded or truncated to the figure's last digit); `unexplained_figures`: those none explains."""
    return {
        "conventions": [
            {
                "name": c.name,
                "description": c.description,
                "counts": c.counts,
                "value": c.value,
                "explains": [{**_figure_json(e.figure, r.family), "reading": e.reading} for e in found],
            }
            for c, found in r.conventions
        ],
        "unexplained_figures": [_figure_json(f, r.family) for f in r.unexplained],
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
        "vision": {
            "expected": report.vision_expected,
            "found": report.vision.elements,
            **_tally_json(report.vision),
        },
        "int4_metadata": _tally_json(report.int4_metadata),
        "fp4_scales": _tally_json(report.fp4_scales),
        "packed_linears": None if report.packed_linears is None else asdict(report.packed_linears),
        "unknown": _tally_json(report.unknown),
        "by_dtype": {dtype: _tally_json(tally) for dtype, tally in report.by_dtype.items()},
        "index": {"total_size": report.index_total_size, "header_data_bytes": report.data_bytes},
        "components": [
            {"id": c.id, "name": c.name, "depth": c.depth, **_counts_json(c.counts)}
            for c in report.components
        ],
        "layers": [{"index": x.index, "kind": x.kind, **_counts_json(x.counts)} for x in report.layers],
        "mismatches": _mismatches_json(report.mismatches),
        "read": {"header_bytes": report.bytes_read, "requests": report.requests},
    }


def kv_cache_json(report: KvCacheReport) -> dict[str, Any]:
    """DESIGN.md's kv-cache keys, then the workload's page rounding, tensor parallelism and budget.

    Byte figures are per layout and include the indexer keys, which `indexer` also gives on their own.
    """
    spec, workload = report.spec, report.workload
    return {
        "model": spec.name,
        "model_type": spec.model_type,
        "dtype": report.dtype,
        "element_bytes": report.element_bytes,
        "tokens": workload.tokens,
        "batch": workload.batch,
        "layers": report.layers,
        "mtp_layers": report.mtp_layers,
        "block_size": workload.block_size,
        "allocated_tokens": workload.allocated_tokens,
        "wasted_tokens": workload.wasted_tokens,
        "tp": workload.tp,
        "budget_bytes": report.budget,
        "indexer": None if report.indexer is None else _indexer_json(report, report.indexer),
        "layouts": [_layout_json(report, cache) for cache in report.caches],
        "state": _state_json(report) if report.states else None,
    }


def _state_json(report: KvCacheReport) -> dict[str, Any]:
    """A hybrid model's per-sequence state (its KDA layers'): per group and tensor, with its shape per
    GPU, then the totals beside every layout's per-token cache."""
    return {
        "bytes_per_sequence": report.state_bytes_per_sequence,
        "bytes_per_sequence_per_gpu": report.state_bytes_per_sequence_per_gpu,
        "total_bytes": report.state_total_bytes,
        "groups": [
            {
                "name": state.group.name,
                "layers": list(state.group.layers),
                "bytes_per_sequence_per_layer": state.bytes_per_sequence_per_layer,
                "bytes_per_sequence": state.bytes_per_sequence,
                "bytes_per_sequence_per_gpu": state.bytes_per_sequence_per_gpu,
                "tensors": [
                    {
                        "name": part.tensor.name,
                        "formula": part.tensor.formula,
                        "shape_per_gpu": list(part.shape),
                        "dtype": part.dtype,
                        "bytes_per_gpu": part.bytes,
                    }
                    for part in state.parts()
                ],
            }
            for state in report.states
        ],
        "layouts": [
            {
                "layout": cache.layout.value,
                "total_bytes_with_state": report.total_with_state(cache),
                "break_even_tokens": report.break_even_tokens(cache),
            }
            for cache in report.caches
        ],
    }


def _indexer_json(report: KvCacheReport, indexer: CacheLine) -> dict[str, Any]:
    return {
        "layers": indexer.layers,  # GLM-5.2: its "full" layers only
        "bytes_per_token_per_layer": indexer.bytes_per_token_per_layer,
        "bytes_per_token": indexer.bytes_per_token,
        "total_bytes": report.indexer_total_bytes,
        "formula": indexer.formula,
        "calculation": indexer.calculation,
    }


def _layout_json(report: KvCacheReport, cache: LayoutCache) -> dict[str, Any]:
    attention = cache.attention
    entry = {
        "layout": cache.layout.value,
        "bytes_per_token_per_layer": cache.bytes_per_token_per_layer,
        "bytes_per_token": cache.bytes_per_token,
        "total_bytes": cache.total_bytes,
        "attention_bytes_per_token_per_layer": attention.bytes_per_token_per_layer,
        "formula": attention.formula,
        "calculation": attention.calculation,
        "ratio_to_latent": report.ratio_to_latent(cache),
        "ratio_to_latent_per_gpu": report.ratio_to_latent_per_gpu(cache),
        "wasted_bytes": cache.wasted_bytes,
        "split_across_tp": splits_across_ranks(cache.layout),
        "bytes_per_token_per_gpu": cache.bytes_per_token_per_gpu,
        "bytes_per_gpu": cache.bytes_per_gpu,
        "bytes_all_gpus": cache.bytes_all_gpus,
    }
    if report.budget is not None:
        entry["budget_max_tokens"] = cache.max_tokens(report.budget)
        entry["budget_max_sequences"] = cache.max_sequences(report.budget)
    return entry


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
        "note": m.note,
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


def index_json(report: IndexReport) -> dict[str, Any]:
    """`verify --index`: the names and the metadata totals, declared against the trees'."""
    return {
        "ok": report.ok,
        "source": report.source,
        "model": report.model,
        "files": report.files,
        "names": {
            "expected": report.expected_names,
            "found": report.entries,
            "rotary_buffers": report.rotary_buffers,
        },
        "total_size": {"declared": report.total_size, "expected": report.expected_size},
        "total_parameters": {"declared": report.total_parameters, "expected": report.expected_parameters},
        "mismatches": _mismatches_json(report.mismatches),
    }


def _mismatches_json(mismatches) -> list[dict[str, str]]:
    """verify's mismatches, as --json lists them (headers and an index alike)."""
    return [
        {"tensor": m.tensor, "kind": m.kind, "expected": m.expected, "found": m.found} for m in mismatches
    ]


def group_cache_json(report: Any) -> dict[str, Any]:
    """kv-cache of a model whose groups carry their entries (DeepSeek V4, kimicount.kv_groups): DESIGN.md's
    keys (`layouts` holds the one record chosen by --dtype), each group with its entry and formula,
    then vLLM's layout and SGLang's pools of them. Per-token rates are exact in binary (power-of-two
    ratios), so they are JSON numbers."""
    vllm, sglang, tokens = report.vllm, report.sglang, report.tokens
    return {
        "model": report.spec.name,
        "model_type": report.spec.model_type,
        "dtype": report.dtype,
        "indexer_dtype": report.indexer,
        "tokens": tokens,
        "batch": report.batch,
        "layers": report.layers,
        "mtp_layers": report.mtp_layers if report.include_mtp else 0,
        "layouts": [
            {
                "layout": report.dtype,
                "bytes_per_token_per_layer": None,  # the groups differ by layer kind; see "groups"
                "bytes_per_token": float(report.bytes_per_token),
                "total_bytes": report.total_bytes,
            }
        ],
        "bytes_per_token": float(report.bytes_per_token),
        "bytes_per_sequence": report.bytes_per_sequence,
        "sequence_bytes": report.sequence_bytes,
        "total_bytes": report.total_bytes,
        "groups": [
            {
                "name": line.group.name,
                "kind": line.group.kind.value,
                "content": line.group.content,
                "layers": list(line.group.layers),
                "ratio": line.group.ratio,
                "window": line.group.window,
                "entry_bytes": line.group.entry_bytes,
                "entry": [
                    {"name": p.name, "count": p.count, "bytes_each": p.bytes_each, "formula": p.formula}
                    for p in line.group.entry
                ],
                "entries_per_layer": line.entries,
                "bytes_per_token": float(line.per_token),
                "bytes_per_sequence_when_full": line.per_sequence,
                "sequence_bytes": line.bytes_per_sequence,
                "formula": line.formula,
            }
            for line in report.lines
        ],
        "vllm": None if vllm is None else _vllm_json(report),
        "sglang": None
        if sglang is None
        else [
            {
                "pool": pool.name,
                "layers": pool.layers,
                "entry_bytes": pool.entry_bytes,
                "entries_per_page": pool.per_page,
                "page_bytes_per_layer": pool.page_bytes,
                "ring_per_request": None
                if pool.ring is None
                else {"plain": pool.ring[0], "speculative": pool.ring[1]},
                "ring_bytes_per_request": pool.ring_bytes,
            }
            for pool in sglang
        ],
    }


def _vllm_json(report: Any) -> dict[str, Any]:
    layout, tokens, batch = report.vllm, report.tokens, report.max_num_batched_tokens
    budget = report.budget
    return {
        "rule": "vLLM's DeepSeek V4 KV-cache rule, as in v0.22 (kimicount/deploy/engines/vllm_deepseek_v4.py)",
        "block_size": report.block_size,
        "max_num_batched_tokens": batch,
        "page_sizes": list(layout.page_sizes),
        "layer_tuples": layout.layer_tuples,
        "block_bytes": layout.block_bytes,
        "groups": layout.groups_json(tokens, batch),
        "pages_per_request": layout.pages(tokens, batch),
        "memory_bytes": layout.memory_for(tokens, batch),
        "budget": None
        if budget is None
        else {
            "bytes": budget,
            "fits": layout.memory_for(tokens, batch) <= budget,
            "estimated_max_model_len": layout.estimate_max_model_len(budget, tokens, batch),
            "num_blocks": layout.num_blocks(budget),
            "max_concurrency": layout.max_concurrency(budget, tokens, batch),
            "kv_cache_size_tokens": layout.kv_cache_size_tokens(budget, tokens, batch),
        },
    }


def compare_json(comparison: Comparison) -> dict[str, Any]:
    """`compare`: the models, then `components` keyed by stable component id (the same id in every
    model that has the part; null where a model has none), each model's KV cache per token in each
    layout, and its weights on one GPU under TP."""
    models = comparison.models
    return {
        "models": list(models),
        "tp": comparison.tp,
        "components": {
            row.id: {
                "name": row.label,
                "depth": row.depth,
                "models": {
                    model: None
                    if node is None
                    else {
                        "name": node.name,
                        "params_per_instance": node.params_per_instance,
                        "instances": node.instances,
                        "params": node.params,
                        "activated": node.activated,
                    }
                    for model, node in zip(models, row.nodes)
                },
            }
            for row in comparison.rows
        },
        "kv_cache": {
            kv.layout: {
                model: {"dtype": dtype, "bytes_per_token": total, "bytes_per_token_per_gpu": per_gpu}
                for model, dtype, total, per_gpu in zip(
                    models, comparison.kv_dtypes, kv.per_token, kv.per_token_per_gpu
                )
            }
            for kv in comparison.kv
        },
        "weights_per_gpu": {
            model: {"layout": w.label, "bytes": w.bytes_per_gpu, "routed_expert_bytes": w.routed_expert_bytes}
            for model, w in zip(models, comparison.weights)
        },
        "state_per_sequence": {
            model: None if total == 0 else {"bytes": total, "bytes_per_gpu": per_gpu}
            for model, total, per_gpu in zip(
                models, comparison.state_per_sequence, comparison.state_per_sequence_per_gpu
            )
        },
    }
