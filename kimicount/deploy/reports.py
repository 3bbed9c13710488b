"""The JSON of `kimicount plan`: plain dictionaries of ints and strings, in the style of reports.py.

Keys: `model`, `model_type`, `engine` ('vllm' or 'sglang'), `engine_release` (the release whose rules
the plan applied, e.g. '0.5.8.post1'), `engine_rules` ('SGLang 0.5.8.post1'), `engine_prints` (what the
engine would print at start-up, in its words), `gpus` (the accelerator and its figures),
`parallel`, `weights` (the components per GPU), `stages` (each stage's memory), `reserve`, `sglang`
(SGLang's mem_fraction_static and what it prints; null for vLLM), `deepep_buffer` (under EP, DeepEP's
low-latency buffer per GPU: an estimate, not in the pool), `kv_cache` (with `packing` for a family's
own groups, DeepSeek V4's, as the engine's rule packs them; null otherwise), `fits`, `short_by_bytes`,
`min_gpus`, `min_gpus_search` (under --min-gpus: the largest count tried, the layouts planned, the closest layout that did
not fit and by how much, the least any layout needs against a GPU's usable memory; else null), and
`estimate` wherever a figure rests on an estimate: on each stage, on `kv_cache`, on
`min_gpus` and at the top level (for `fits` and `short_by_bytes`), with `estimated_inputs` naming the
estimates ('reserve', 'preload' (SGLang's memory in use before the weights load), 'cuda_memory').
Bytes and FLOPs are ints; the speed floor's expected values
(what the experts a step touches under uniform routing, `"routing": "uniform"`, add) are rounded to
the nearest byte or FLOP, under keys that say `expected`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kimicount.deploy.engines import DEFAULT_SERVER, ENGINES, server_engine
from kimicount.deploy.engines.base import ServerEngine
from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.placement import Parallel
from kimicount.deploy.plan import GpuSearch, PlanReport
from kimicount.deploy.speed import Step, compute_bound_from

if TYPE_CHECKING:
    from kimicount.deploy.request import CompareAnswer, PlanAnswer
    from kimicount.deploy.serve_command import ServeCommand


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


def parallel_json(parallel: Parallel, engine: str = DEFAULT_SERVER) -> dict[str, Any]:
    """The layout's sizes; "ep" is 1 when expert parallelism is off; "tp" is the attention TP group
    (under SGLang's DP attention its --tp is "dense_tp", all TP × DP ranks); "dp_attention" names whose
    DP attention it is: the dense parts over all TP × DP ranks (SGLang's) or per DP group (vLLM's)."""
    rules = server_engine(engine)
    dense = next(e.name for e in ENGINES.values() if isinstance(e, ServerEngine) and e.dense_over_dp)
    per_group = next(e.name for e in ENGINES.values() if isinstance(e, ServerEngine) and not e.dense_over_dp)
    return {
        "label": parallel.label,
        "engine": rules.label,  # whose layout: DP attention, EP, PP split
        "tp": parallel.tp,
        "pp": parallel.pp,
        "dp": parallel.dp,
        "dp_attention": dense if parallel.sglang_dp else (per_group if parallel.dp > 1 else None),
        "dense_tp": parallel.dense_ranks,
        "ep": parallel.moe_ranks if parallel.ep else 1,
        "redundant_experts": parallel.redundant,
        "dcp": parallel.dcp,
        "gpus": parallel.gpus,
    }


def plan_json(report: PlanReport) -> dict[str, Any]:
    """`kimicount plan --json`: the keys of the module docstring."""
    spec, placement = report.spec, report.placement
    reserve = report.reserve
    fullest = report.fullest
    estimate = report.estimate
    figures_key, figures = report.rules.json_figures(report)
    return {
        "model": spec.name,
        "model_type": spec.model_type,
        "engine": report.engine,
        "engine_release": str(report.release.version),
        "engine_rules": f"{report.release}",
        "engine_prints": report.rules.printed_lines(report),
        "gpus": accelerator_json(report.gpu, report.count),
        "parallel": parallel_json(report.parallel, report.engine),
        "gpu_memory_utilization": float(report.utilization),
        "usable_bytes": report.usable,
        "estimated_inputs": list(report.estimated_inputs),
        "weights": [
            {
                "name": c.name,
                "component_ids": list(c.component_ids),
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
                "kv_bytes_per_token": s.bytes_per_token if s.packing is None else None,
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
        figures_key: figures,
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
            **_cache_json(report),
            "dtype": report.dtype,
            "layers": fullest.kv_layers,
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
        "state": state_json(report),
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
        "min_gpus_search": None
        if report.min_gpus_search is None
        else search_json(report.min_gpus_search, report.engine),
    }


def _cache_json(report: PlanReport) -> dict[str, Any]:
    """The cache's own keys: an MLA layout's bytes per token; or, for a family's own groups packed by
    the engine's rule (DeepSeek V4), null there and `packing`: the rule, the block ids, a request's,
    its bytes, the longest max_model_len that fits, the engine's groups and figures and its words."""
    fullest, packing = report.fullest, report.packing
    if packing is None:
        return {
            "layout": report.layout.value,
            "bytes_per_token_per_layer": fullest.cache.bytes_per_token_per_layer,
            "attention_calculation": fullest.cache.attention.calculation,
            "bytes_per_token_per_gpu": fullest.bytes_per_token,
            "packing": None,
        }
    return {
        "layout": None,
        "bytes_per_token_per_layer": None,
        "attention_calculation": None,
        "bytes_per_token_per_gpu": None,
        "packing": {
            "rule": packing.rule,
            "block_bytes": packing.page_bytes,
            "blocks": packing.pages,
            "blocks_per_request": packing.request_pages,
            "request_bytes": packing.request_bytes,
            "longest_max_model_len": packing.longest,
            "used_bytes": packing.used_bytes,
            "calculation": packing.calculation,
            "groups": [{"name": name, "paged": words} for name, words in packing.rows],
            "figures": packing.figures,
            "notes": list(packing.notes),
        },
    }


def state_json(report: PlanReport) -> dict[str, Any] | None:
    """A hybrid model's per-sequence state as the engine packed it on the fullest GPU: each state group
    (its layers there, its bytes a sequence per layer and in all, the tensors), the requests the state
    and the latent admit, which pool limits them, and the engine's own figures; None without a state."""
    stage = report.fullest
    state = stage.state
    if state is None:
        return None
    return {
        "groups": [
            {
                "name": group.name,
                "layers": group.layers,
                "bytes_per_sequence_per_layer": group.bytes_per_layer,
                "bytes_per_sequence": group.bytes_per_sequence,
                "tensors": [
                    {
                        "name": part.tensor.name,
                        "shape": list(part.shape),
                        "dtype": part.dtype,
                        "bytes": part.bytes,
                    }
                    for part in group.state.parts()
                ],
            }
            for group in stage.groups
            if group.state is not None
        ],
        "limited_by": "state_pool" if state.limit == "state" else "kv_pool",
        "requests": state.requests,
        "concurrency": state.concurrency,
        "slots": state.slots,
        "slots_per_request": state.slots_per_request,
        "request_state_bytes": state.request_state_bytes,
        "state_pool_bytes": state.state_bytes,
        "kv_pool_bytes": state.kv_bytes,
        "calculation": list(state.lines),
        report.rules.name: state.figures,
        "estimate": report.estimate,
    }


def search_json(search: GpuSearch, engine: str) -> dict[str, Any]:
    """How --min-gpus searched: the largest count it tried, the closest layout that did not fit (and by how
    much a GPU it lacked), and the least any layout needs on its fullest GPU against a GPU's usable memory."""
    closest = search.closest
    return {
        "largest_tried": search.largest_tried,
        "layouts_planned": search.plans,
        "closest": None
        if closest is None
        else {
            "count": closest[0],
            "parallel": parallel_json(closest[1], engine),
            "short_by_bytes": closest[2],
        },
        "least_need_bytes": search.least_need,
        "usable_bytes": search.usable,
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
    from kimicount.deploy.answer import limited_by, max_num_seqs, sequence_bytes, verdict_of

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
    from kimicount.deploy.answer import verdict_of

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


def serve_json(serve: ServeCommand) -> dict[str, Any]:
    """The serve command a plan read: its engine, launcher (and image, with the release its tag names),
    model, flags as typed, and what the plan does not model."""
    return {
        "engine": serve.engine,
        "launcher": serve.launcher,
        "image": serve.image,
        "release": serve.release,
        "model": serve.model,
        "revision": serve.revision,
        "nodes": serve.nodes,
        "flags": dict(serve.flags),
        "unmodelled": list(serve.unmodelled),
        "memory_unmodelled": list(serve.memory_unmodelled),
    }


def plan_answer_json(answer: PlanAnswer) -> dict[str, Any]:
    """`kimicount plan --json`: the plan, the short answer and the ways out, --batch max, the serve
    command and the speed floor, as one document."""
    report, request = answer.report, answer.request
    ways = [(way.kind, way.why, command, way.report) for way, command in answer.tries]
    return {
        **plan_json(report),
        **answer_json(report, request.nodes, ways),
        **(
            {}
            if answer.batch_max is None
            else {
                "batch_max": {
                    "batch": answer.batch_max,
                    "context": answer.positions,
                    "estimate": report.estimate,
                }
            }
        ),
        **({} if request.serve is None else {"serve_command": serve_json(request.serve)}),
        **({} if answer.speed is None else speed_json(report, *answer.speed)),
    }


def compare_answer_json(answer: CompareAnswer) -> dict[str, Any]:
    """`kimicount plan --compare --json`."""
    return compare_json(answer.spec, answer.request.gpu, list(answer.rows))
