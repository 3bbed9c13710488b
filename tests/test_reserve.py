"""vLLM's reserve (non-KV memory besides the weights): kimicount's estimate against the runs people
published, and the terms it is made of, each checked against a hand count.

Published runs (printed by vLLM, independent of kimicount):
- Kimi-K2-Thinking on 8 × H200, TP8, defaults (vllm-project/recipes, moonshotai/Kimi-K2-Think.md, startup
  logs of 2025-11-06): "Available KV cache memory: 46.80 GiB". vLLM's pool is its request_memory,
  ceil(143,156 MiB × 0.9) = 135,098,951,271 B, less the weights and the reserve; the weights on one GPU
  are 76,183,146,496 B (tests/test_plan.py writes them out by hand, component by component), so the
  reserve was 135,098,951,271 − 76,183,146,496 − 46.80 GiB = 8.07 GiB.
- Kimi-K2.5 on 8 × H100, TP8, --max-num-seqs 64, CUDA graphs on: "Model loading took 72.02 GiB",
  "Available KV cache memory: -3.32 GiB" at --gpu-memory-utilization 0.9 and "0.64 GiB" at 0.95. On an
  H100 (81,090 MiB as CUDA reports it) that is ceil(85,029,027,840 × 0.9) − 72.02 GiB + 3.32 GiB = 2.57 GiB,
  and ceil(85,029,027,840 × 0.95) − 72.02 GiB − 0.64 GiB = 2.57 GiB.

The estimate has no per-run constant: the same formula over each run's own limits (8,192 batched tokens
by default on both; 1,024 sequences by default against 64) lands within 1 GiB of both, and the
difference between the runs, 5.50 GiB, is the estimate's sampler term moving by 5.57 GiB.
"""

from __future__ import annotations

import math

import pytest

from .helpers import invoke
from .test_plan import GIB, H200_USABLE, K25, flat, plan_json

H100_CUDA = 81_090 * 2**20
#: The K2-Thinking run: usable − weights − 46.80 GiB of KV printed.
K2_THINKING_RESERVE = H200_USABLE - 76_183_146_496 - 46.80 * GIB
#: The K2.5 run on H100, from its two printed pools.
K25_H100_RESERVE_090 = math.ceil(H100_CUDA * 0.9) - 72.02 * GIB + 3.32 * GIB
K25_H100_RESERVE_095 = math.ceil(H100_CUDA * 0.95) - 72.02 * GIB - 0.64 * GIB


def test_published_reserves_are_what_the_runs_printed():
    assert f"{K2_THINKING_RESERVE / GIB:.2f}" == "8.07"
    assert f"{K25_H100_RESERVE_090 / GIB:.2f}" == f"{K25_H100_RESERVE_095 / GIB:.2f}" == "2.57"


def test_k2_thinking_on_8_h200_within_a_gib():
    reserve = plan_json("--config", K25, "--text-only", "--gpus", "8xH200")["reserve"]
    assert reserve["estimate"] is True
    # 1,442,840,576 (activations) + 6,375,342,080 (sampler) + 1,610,612,736 (non-torch) = 8.78 GiB
    assert reserve["bytes"] == 9_428_795_392
    assert abs(reserve["bytes"] - K2_THINKING_RESERVE) < GIB  # 0.71 GiB over


@pytest.mark.parametrize(
    "utilization, published", [("0.9", K25_H100_RESERVE_090), ("0.95", K25_H100_RESERVE_095)]
)
def test_k25_on_8_h100_with_64_sequences_within_a_gib(utilization, published):
    args = (
        "--config",
        K25,
        "--gpus",
        "8xH100",
        "--max-num-seqs",
        "64",
        "--gpu-memory-utilization",
        utilization,
    )
    reserve = plan_json(*args)["reserve"]
    # 1,442,840,576 + 64 × 163,840 × 38 = 398,458,880 + 1,610,612,736 = 3.21 GiB
    assert reserve["bytes"] == 1_442_840_576 + 398_458_880 + 1_610_612_736
    assert abs(reserve["bytes"] - published) < GIB  # 0.64 GiB over


def test_what_moves_the_reserve_between_the_runs():
    # the runs' reserves differ by 5.50 GiB; the estimate's by (1,024 − 64) × 163,840 × 38 B = 5.57 GiB
    published = K2_THINKING_RESERVE - K25_H100_RESERVE_090
    estimated = (1_024 - 64) * 163_840 * 38
    assert f"{published / GIB:.2f}" == "5.50" and f"{estimated / GIB:.2f}" == "5.57"


def test_the_terms_by_hand():
    terms = {t["name"]: t for t in plan_json("--gpus", "8xH200")["reserve"]["terms"]}
    assert list(terms) == ["activations", "sampler", "non-torch"]
    # the sampler's dummy run at its sort, per row and vocabulary entry: bf16 logits 2 B, fp32 copy 4 B,
    # PyTorch's int64 iota 8 B, sorted values 4 B and int64 indices 8 B, CUB's alternate buffers 4 + 8 B
    assert terms["sampler"]["bytes"] == 1_024 * 163_840 * (2 + 4 + 8 + 4 + 8 + 4 + 8)
    assert terms["sampler"]["calculation"] == "1,024 × 163,840 × 38 B"
    assert terms["non-torch"]["bytes"] == 1_610_612_736  # 1.5 GiB
    # rows are min(max_num_seqs, max_batched_tokens): 512 batched tokens cap 1,024 sequences
    small = plan_json("--gpus", "8xH200", "--max-batched-tokens", "512")["reserve"]["terms"]
    assert {t["name"]: t["bytes"] for t in small}["sampler"] == 512 * 163_840 * 38


def test_the_estimate_says_what_it_leaves_out():
    reserve = plan_json("--gpus", "8xH200")["reserve"]
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1" in reserve["assumes"]
    assert "CUDA graphs come after the pool is sized" in flat(
        invoke("plan", "--detail", "--gpus", "8xH200").stdout
    )


def test_reserve_and_kv_memory_stay_exact_routes():
    given = plan_json("--gpus", "8xH200", "--reserve", "8.07GiB")
    assert given["reserve"]["estimate"] is False and given["estimated_inputs"] == []
    assert given["reserve"]["bytes"] == 8_665_096_519  # floor(8.07 × 2^30)
    pool = plan_json("--config", K25, "--text-only", "--gpus", "8xH200", "--kv-memory", "46.80GiB")
    assert pool["reserve"] is None and pool["kv_cache"]["tokens_per_gpu"] == 715_072
