"""The JSON of `kimicount plan`: plain dictionaries of ints and strings, in the style of reports.py.

Keys: `model`, `model_type`, `engine` ('vllm' or 'sglang'), `gpus` (the accelerator and its figures),
`parallel`, `weights` (the components per GPU), `stages` (each stage's memory), `reserve`, `sglang`
(SGLang's mem_fraction_static and what it prints; null for vLLM), `deepep_buffer` (under EP, DeepEP's
low-latency buffer per GPU: an estimate, not in the pool), `kv_cache`, `fits`, `short_by_bytes`,
`min_gpus`, and `estimate` wherever a figure rests on an estimate: on each stage, on `kv_cache`, on
`min_gpus` and at the top level (for `fits` and `short_by_bytes`), with `estimated_inputs` naming the
estimates ('reserve', 'preload' (SGLang's memory in use before the weights load), 'cuda_memory'). Bytes and FLOPs are ints; the speed floor's expected values
(what the experts a step touches under uniform routing, `"routing": "uniform"`, add) are rounded to
the nearest byte or FLOP, under keys that say `expected`.
"""

from __future__ import annotations

from typing import Any

from kimicount.anatomy import Node
from kimicount.flow import FlopsReport, Mla, node_calculation, node_compute
from kimicount.hardware import Accelerator
from kimicount.placement import Parallel
from kimicount.plan import PlanReport
from kimicount.speed import Step, compute_bound_from


def accelerator_json(gpu: Accelerator, count: int) -> dict[str, Any]:
    """The accelerator's figures and where each comes from (nvidia-smi's total, CUDA's)."""
    return {
        "count": count,
        "type": gpu.name,
        "description": gpu.description,
        "memory_bytes": gpu.memory_bytes,
        "memory_source": gpu.memory_source,
        "cuda_memory_bytes": gpu.cuda_memory_bytes,
        "cuda_memory_source": gpu.cuda_memory_source,
        "cuda_memory_estimated": gpu.cuda_memory_estimated,
        "hbm_bandwidth_bytes_per_s": gpu.hbm_bandwidth,
        "bf16_flops": gpu.bf16_flops,
        "fp8_flops": gpu.fp8_flops,
        "source": gpu.source,
        "overridden": list(gpu.overridden),
    }


def parallel_json(parallel: Parallel, engine: str = "vllm") -> dict[str, Any]:
    """The layout's sizes; "ep" is 1 when expert parallelism is off; "tp" is the attention TP group
    (under SGLang's DP attention its --tp is "dense_tp", all TP × DP ranks)."""
    return {
        "label": parallel.label,
        "engine": "SGLang" if engine == "sglang" else "vLLM",  # whose layout: DP attention, EP, PP split
        "tp": parallel.tp,
        "pp": parallel.pp,
        "dp": parallel.dp,
        "dp_attention": "sglang" if parallel.sglang_dp else ("vllm" if parallel.dp > 1 else None),
        "dense_tp": parallel.dense_ranks,
        "ep": parallel.moe_ranks if parallel.ep else 1,
        "redundant_experts": parallel.redundant,
        "dcp": parallel.dcp,
        "gpus": parallel.gpus,
    }


def sglang_json(report: PlanReport) -> dict[str, Any] | None:
    """SGLang's figures: mem_fraction_static (given or its default, with the calculation) and what it
    prints at start-up per DP rank (max_total_num_tokens, max_running_requests, context_len, in GiB
    that it writes "GB"); None for vLLM."""
    if report.engine != "sglang":
        return None
    fraction = report.static_fraction
    return {
        "mem_fraction_static": None if fraction is None else float(fraction.value),
        "mem_fraction_static_given": None if fraction is None else fraction.given,
        "mem_fraction_static_calculation": None if fraction is None else fraction.calculation,
        "page_size": report.block_size,
        "max_total_num_tokens": report.tokens_per_gpu,
        "max_running_requests": report.max_running_requests,
        "context_len": report.max_model_len,
        "estimate": report.estimate,
    }


def plan_json(report: PlanReport) -> dict[str, Any]:
    """`kimicount plan --json`: the keys of the module docstring."""
    spec, placement = report.spec, report.placement
    reserve = report.reserve
    fullest = report.fullest
    line = fullest.cache.attention
    estimate = report.estimate
    return {
        "model": spec.name,
        "model_type": spec.model_type,
        "engine": report.engine,
        "gpus": accelerator_json(report.gpu, report.count),
        "parallel": parallel_json(report.parallel, report.engine),
        "gpu_memory_utilization": float(report.utilization),
        "usable_bytes": report.usable,
        "estimated_inputs": list(report.estimated_inputs),
        "weights": [
            {
                "name": c.name,
                "rule": c.rule,
                "kind": c.kind.value,
                "in_checkpoint": c.in_checkpoint,
                "model_bytes": c.model_bytes,
                "bytes_per_gpu": list(c.bytes_per_gpu),
            }
            for c in placement.components
        ],
        "stages": [
            {
                "stage": s.stage,
                "layers": list(s.layers),
                "kv_layers": s.kv_layers,
                "weights_bytes": s.weights,
                "reserve_bytes": s.reserve,
                "kv_pool_bytes": s.pool,
                "kv_bytes_per_token": s.bytes_per_token,
                "kv_tokens": s.tokens,
                "kv_bytes": s.kv_bytes,
                "estimate": estimate,
            }
            for s in report.stages
        ],
        "reserve": None
        if reserve is None
        else {
            "bytes": reserve.bytes,
            "estimate": reserve.estimate,
            "formula": reserve.formula,
            "terms": [{"name": n, "calculation": c, "bytes": b} for n, c, b in reserve.terms],
            "assumes": reserve.assumes,
        },
        "sglang": sglang_json(report),
        "deepep_buffer": None
        if report.deepep_buffer is None
        else {
            "bytes": report.deepep_buffer.bytes,
            "calculation": report.deepep_buffer.calculation,
            "source": report.deepep_buffer.source,
            "estimate": True,
            "in_pool": False,
        },
        "kv_memory_bytes": report.kv_memory,
        "kv_cache": {
            "layout": report.layout.value,
            "dtype": report.dtype,
            "bytes_per_token_per_layer": fullest.cache.bytes_per_token_per_layer,
            "attention_calculation": line.calculation,
            "layers": fullest.kv_layers,
            "bytes_per_token_per_gpu": fullest.bytes_per_token,
            "block_size": report.block_size,
            "tokens_per_gpu": report.tokens_per_gpu,
            "tokens_per_replica": report.tokens_per_replica,
            "tokens_total": report.tokens_total,
            "max_model_len": report.max_model_len,
            "pages_per_gpu": report.pages_per_gpu,
            "sequence_pages": report.sequence_pages,
            "max_concurrency": report.max_concurrency,
            "sequences_per_replica": report.sequences_per_replica,
            "estimate": estimate,
        },
        "fits": report.fits,
        "short_by_bytes": report.short_by,
        "estimate": estimate,
        "min_gpus": None
        if report.min_gpus is None
        else {
            "count": report.min_gpus[0],
            "parallel": parallel_json(report.min_gpus[1], report.engine),
            "estimate": bool(report.search_estimated_inputs),
            "estimated_inputs": list(report.search_estimated_inputs),
        },
    }


def flops_json(report: FlopsReport) -> dict[str, Any]:
    """`kimicount flops --json`: the tree with each node's matmul FLOPs per token, the attention per way,
    and the totals."""
    spec = report.spec

    def node(n: Node) -> dict[str, Any]:
        return {
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


def step_json(step: Step, estimate: bool) -> dict[str, Any]:
    """One step's floor: per stage what one GPU reads and computes, and the times that bounds.
    `estimate`: whether `kv_fits` rests on an estimated pool."""
    return {
        "batch": step.batch,
        "context": step.context,
        "attention": step.way.name,
        "routing": "uniform",
        "kv_fits": step.fits,
        "kv_fits_estimate": estimate,
        "stages": [
            {
                "stage": s.stage,
                "weight_bytes": s.weight_bytes,
                "expected_expert_bytes": round(s.expert_bytes),
                "kv_bytes": s.kv_bytes,
                "expected_bytes": round(s.bytes),
                "expected_flops": {dtype: round(f) for dtype, f in sorted(s.flops.items())},
                "memory_time_s": s.memory_time,
                "compute_time_s": s.compute_time,
                "bound": s.bound,
            }
            for s in step.stages
        ],
        "floor_s": step.time,
        "interval_s": step.interval,
        "bound": step.bound,
        "tokens_per_s": step.tokens_per_s,
        "tokens_per_s_per_gpu": step.tokens_per_s_per_gpu,
        "tokens_per_s_per_sequence": step.tokens_per_s_per_sequence,
    }


def speed_json(report: PlanReport, step: Step, steps: list[Step], prefill: Step) -> dict[str, Any]:
    """`plan --batch --context`: the decode floor, the sweep over batch sizes, the prefill floor."""
    estimate = report.estimate
    return {
        "decode": step_json(step, estimate),
        "sweep": [step_json(s, estimate) for s in steps],
        "compute_bound_from_batch": compute_bound_from(steps),
        "prefill": step_json(prefill, estimate),
    }


def answer_json(
    report: PlanReport, nodes: int, ways: list[tuple[str, str, str, PlanReport]]
) -> dict[str, Any]:
    """The short answer's figures (`answer`) and the ways out (`try`: each a command that fits, with the
    plan it gives), for `plan --json`; `gpus` gains `nodes` where --gpus named them."""
    from kimicount.plan_answer import limited_by, max_num_seqs, sequence_bytes, verdict_of

    per_node = report.count // nodes
    return {
        "answer": {
            "verdict": verdict_of(report).value,
            "tokens_per_gpu": report.tokens_per_gpu,
            "tokens_total": report.tokens_total,
            "max_model_len": report.max_model_len,
            "max_concurrency": report.max_concurrency,
            "sequences_per_replica": report.sequences_per_replica,
            "sequence_bytes": sequence_bytes(report),
            "limited_by": limited_by(report),
            "max_num_seqs": max_num_seqs(report),
            "nodes": nodes,
            "gpus_per_node": per_node,
            "tp_spans_nodes": nodes > 1 and report.parallel.tp > per_node,
            "estimate": report.estimate,
        },
        "try": [
            {
                "kind": kind,
                "why": why,
                "command": command,
                "gpus": found.count,
                "parallel": parallel_json(found.parallel, found.engine),
                "tokens_per_gpu": found.tokens_per_gpu,
                "max_model_len": found.max_model_len,
                "fits": found.fits,
                "estimate": found.estimate,
            }
            for kind, why, command, found in ways
        ],
    }


def compare_json(spec: Any, gpu: Accelerator, rows: list[Any]) -> dict[str, Any]:
    """`plan --compare --json`: the model, the GPU type, and per layout its plan's figures (or `error`)."""
    from kimicount.plan_answer import verdict_of

    return {
        "model": spec.name,
        "model_type": spec.model_type,
        "gpu": gpu.name,
        "compare": [
            {"layout": row.typed, "gpus": row.gpus, "error": row.error}
            if row.report is None
            else {
                "layout": row.typed,
                "gpus": row.gpus,
                "error": None,
                "parallel": parallel_json(row.report.parallel, row.report.engine),
                "weights_bytes": row.report.fullest.weights,
                "kv_pool_bytes": row.report.fullest.pool,
                "tokens_per_gpu": row.report.tokens_per_gpu,
                "tokens_total": row.report.tokens_total,
                "max_model_len": row.report.max_model_len,
                "max_concurrency": row.report.max_concurrency,
                "fits": row.report.fits,
                "verdict": verdict_of(row.report).value,
                "estimate": row.report.estimate,
            }
            for row in rows
        ],
    }
