"""`plan --json` for a local run (or the quants that fit): the same figures as the view, as numbers."""

from __future__ import annotations

import shlex
from typing import Any

from kimicount.deploy.local.choice import QuantChoice
from kimicount.deploy.local.floor import DISK_BANDWIDTH, DISK_SOURCE
from kimicount.deploy.local.placement import COMPUTE_SOURCE, DeviceLoad
from kimicount.deploy.local.plan import LocalPlan, pool_words, pools


def _device(load: DeviceLoad) -> dict[str, Any]:
    return {
        "name": load.name,
        "weights_bytes": load.weights,
        "routed_expert_bytes": load.experts,
        "tensors": load.tensors,
        "layers": list(load.layers),
        "kv_cache_bytes": load.cache,
        "state_bytes": load.state,
        "compute_bytes_estimate": load.compute,
        "total_bytes": load.total,
        "memory_bytes": load.memory,
        "output_layer": load.output,
        "fits": load.fits,
    }


def _state_json(plan: LocalPlan) -> dict[str, Any] | None:
    """A hybrid's recurrent state (None without one) and which pool limits (plan.pools)."""
    found, state = pools(plan), plan.cache.state
    if found is None or state is None:
        return None
    return {
        "layers": list(state.layers),
        "type": "f32",
        "r_elements_per_layer": state.r_elements,
        "s_elements_per_layer": state.s_elements,
        "formula": found.formula,
        "bytes_per_sequence": found.state_bytes_per_sequence,
        "sequences": state.cells,
        "parallel": plan.options.parallel,
        "cells": state.cells,
        "total_bytes": found.state_bytes,
        "limit": found.limit,
        "limit_words": pool_words(found, plan.context, plan.options.parallel),
    }


def local_plan_json(plan: LocalPlan) -> dict[str, Any]:
    """The local plan as JSON."""
    cache, options = plan.cache, plan.options
    floors = plan.floors
    return {
        "model": plan.spec.name,
        "route": "local",
        "source": plan.source,
        "estimate": plan.estimate,
        "engine": options.engine.name,
        "build": options.build,
        "gpus": {"count": plan.count, "type": None if plan.gpu is None else plan.gpu.name},
        "ram_bytes": options.ram,
        "mmap": options.mmap,
        "kv_cache": {
            "layout": cache.choice.layout.value,
            "reason": cache.choice.reason,
            "type_k": cache.type_k,
            "type_v": None if not any(t.name == "V" for t in cache.tensors) else cache.type_v,
            "bytes_per_token": cache.token_bytes() * len(cache.layers),
            "context": plan.context,
            "cells": cache.cells,
            "layers": list(cache.layers),
            "total_bytes": cache.layer_bytes * len(cache.layers),
        },
        "per_sequence_state": _state_json(plan),
        "devices": [_device(load) for load in (*plan.layout.gpus, plan.layout.host)],
        "compute_estimate_source": COMPUTE_SOURCE,
        "longest_context": plan.fit.longest,
        "longest_context_limit": plan.fit.limit,
        "fewest_n_cpu_moe": plan.cpu_moe,
        "command": list(plan.flags),
        "command_line": shlex.join(plan.flags),  # quoted for a shell
        "floor": None
        if floors is None
        else {
            "context": floors.context,
            "decode_seconds_per_token": floors.decode_seconds,
            "decode_tokens_per_s": floors.decode_tokens_per_s,
            "reads": [
                {"device": r.name, "bytes": float(r.bytes), "bandwidth_bytes_per_s": r.bandwidth}
                for r in floors.reads
            ],
            "ubatch": floors.ubatch,
            "prompt_seconds_per_ubatch": floors.prompt_seconds,
            "prompt_tokens_per_s": floors.prompt_tokens_per_s,
            "prompt_bound": floors.prompt_bound,
            "pcie_bandwidth_bytes_per_s": floors.pcie_bandwidth,
            "disk_bytes_uncached": floors.uncached,
            "disk_bandwidth_bytes_per_s": floors.disk_bandwidth,
            "disk_bandwidth_source": DISK_SOURCE
            if floors.disk_bandwidth == DISK_BANDWIDTH
            else "--disk-bandwidth",
            "disk_estimate": "uniform routing: an even share of each layer's routed experts cached",
        },
    }


def quant_choice_json(choice: QuantChoice) -> dict[str, Any]:
    """`plan --json` without --gguf or --quant: every quant, largest first, with whether it fits, its
    offload and context, what the GPUs and RAM hold, the command, and the decode floor when asked."""
    from kimicount.gguf.quantize import ESTIMATE

    options = choice.options
    return {
        "model": choice.spec.name,
        "route": "local",
        "question": "which_quant",
        "engine": options.engine.name,
        "build": options.build,
        "gpus": {"count": choice.count, "type": None if choice.gpu is None else choice.gpu.name},
        "ram_bytes": options.ram,
        "memory_bytes": choice.memory,
        "min_context": choice.min_context,
        "context": options.context,
        "offload_asked": choice.offload_asked,
        "estimate": ESTIMATE.format(quant="each type"),
        "fitting": [row.quant for row in choice.fitting],
        "quants": [
            {
                "quant": row.quant,
                "file_bytes": row.file_bytes,
                "bits_per_weight": row.bits_per_weight,
                "imatrix": row.imatrix,
                "fits": row.fits,
                "context": row.context,
                "too_large": row.sized is None,  # the file alone is more than the GPUs and RAM hold
                "longest_context": None if row.sized is None else row.sized.fit.longest,
                "full": [
                    {"device": load.name, "total_bytes": load.total, "memory_bytes": load.memory}
                    for load in row.full
                ],
                "offload": row.offload.flags(),
                "gpu_bytes": row.gpu_bytes,
                "ram_bytes": row.ram_bytes,
                "command": list(row.flags),
                "command_line": shlex.join(row.flags),
                "decode_tokens_per_s": None if row.floors is None else row.floors.decode_tokens_per_s,
            }
            for row in choice.rows
        ],
    }


def local_answer_json(answer: LocalPlan | QuantChoice) -> dict[str, Any]:
    """A local plan's JSON, or the quant choice's."""
    return local_plan_json(answer) if isinstance(answer, LocalPlan) else quant_choice_json(answer)
