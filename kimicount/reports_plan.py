"""The JSON of `kimicount plan`: plain dictionaries of ints and strings, in the style of reports.py.

Keys: `model`, `model_type`, `gpus` (the accelerator and its figures), `parallel`, `weights` (the
components per GPU), `stages` (each stage's memory), `reserve`, `kv_cache`, `fits`, `short_by_bytes`
and `min_gpus`.
"""

from __future__ import annotations

from typing import Any

from kimicount.hardware import Accelerator
from kimicount.placement import Parallel
from kimicount.plan import PlanReport


def accelerator_json(gpu: Accelerator, count: int) -> dict[str, Any]:
    return {
        "count": count,
        "type": gpu.name,
        "description": gpu.description,
        "memory_bytes": gpu.memory_bytes,
        "hbm_bandwidth_bytes_per_s": gpu.hbm_bandwidth,
        "bf16_flops": gpu.bf16_flops,
        "fp8_flops": gpu.fp8_flops,
        "source": gpu.source,
        "overridden": list(gpu.overridden),
    }


def parallel_json(parallel: Parallel) -> dict[str, Any]:
    return {
        "label": parallel.label,
        "tp": parallel.tp,
        "pp": parallel.pp,
        "dp": parallel.dp,
        "ep": parallel.moe_ranks if parallel.ep else 1,
        "dcp": parallel.dcp,
        "gpus": parallel.gpus,
    }


def plan_json(report: PlanReport) -> dict[str, Any]:
    spec, placement = report.spec, report.placement
    reserve = report.reserve
    fullest = report.fullest
    line = fullest.cache.attention
    return {
        "model": spec.name,
        "model_type": spec.model_type,
        "gpus": accelerator_json(report.gpu, report.count),
        "parallel": parallel_json(report.parallel),
        "gpu_memory_utilization": float(report.utilization),
        "usable_bytes": report.usable,
        "weights": [
            {
                "name": c.name,
                "rule": c.rule,
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
            "max_concurrency": report.max_concurrency,
            "sequences_per_replica": report.sequences_per_replica,
        },
        "fits": report.fits,
        "short_by_bytes": report.short_by,
        "min_gpus": None
        if report.min_gpus is None
        else {"count": report.min_gpus[0], "parallel": parallel_json(report.min_gpus[1])},
    }
