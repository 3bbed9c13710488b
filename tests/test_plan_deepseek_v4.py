"""`kimicount plan` for DeepSeek V4 Flash and Pro, under vLLM and SGLang, against what the engines printed
and the engines' rules written out by hand.

vLLM issue #44376 (v0.22): DeepSeek-V4-Flash on 2 × GH200 96 GB, LLM(tensor_parallel_size=2,
enable_expert_parallel=True, max_model_len=30_000, kv_cache_dtype="fp8", block_size=256,
gpu_memory_utilization=0.95) stopped with

    ValueError: To serve at least one request with the model's max seq len (30000), (6.66 GiB KV cache
    is needed, which is larger than the available KV cache memory (5.44 GiB). Based on the available
    memory, the estimated maximum model length is 13528. ...

The LLM class batches 16,384 tokens by default on a GPU of 70 GiB or more (vllm/engine/arg_utils.py,
EngineArgs.get_batch_defaults, UsageContext.LLM_CLASS); `vllm serve` 8,192 (OPENAI_API_SERVER). The
pages below are tests/test_vllm_deepseek_v4.py's, written out by hand there: a block id costs (37,440 +
8,640 + 1,728) B × 22 layer tuples = 1,051,776 B."""

from __future__ import annotations

import json

import pytest

from .helpers import fails_cleanly, invoke
from .test_plan import flat, plan_json
from .test_vllm_deepseek_v4 import PRINTED, TUPLE, TUPLES, pages

BLOCK = TUPLE * TUPLES
ISSUE = (
    "deepseek-v4-flash", "--gpus", "2xGH200-96GB", "--tp", "2", "--enable-expert-parallel",
    "--max-model-len", "30000", "--kv-cache-dtype", "fp8", "--block-size", "256",
    "--gpu-memory-utilization", "0.95",
)  # fmt: skip
SERVE = (
    "vllm", "serve", "deepseek-ai/DeepSeek-V4-Flash", "--tensor-parallel-size", "2", "--enable-expert-parallel",
    "--max-model-len", "30000", "--kv-cache-dtype", "fp8", "--block-size", "256",
    "--gpu-memory-utilization", "0.95",
)  # fmt: skip


@pytest.mark.parametrize("blocks", [5_554, 5_555])
def test_the_issue_s_pool_gives_vllms_two_figures_in_its_words(blocks):
    """Every pool of 5,554 or 5,555 block ids prints as "5.44 GiB" and gives 13,528 (tests/
    test_vllm_deepseek_v4.py): the plan says vLLM's line to the character and refuses to call it a fit."""
    pool = str(blocks * BLOCK)
    report = plan_json(*ISSUE, "--max-num-batched-tokens", "16384", "--kv-memory", pool)
    kv = report["kv_cache"]
    assert report["fits"] is False
    assert kv["packing"]["blocks"] == kv["pages_per_gpu"] == blocks
    assert kv["sequence_pages"] == pages(30_000) == 6_800
    assert kv["packing"]["request_bytes"] == 22 * 47_808 * 6_800 == 7_152_076_800  # "6.66 GiB"
    assert kv["packing"]["longest_max_model_len"] == 13_528
    assert report["short_by_bytes"] == 7_152_076_800 - blocks * BLOCK
    assert report["engine_prints"] == [f"vLLM 0.22.0 would print: {PRINTED}"]
    out = invoke("plan", *ISSUE, "--max-num-batched-tokens", "16384", "--kv-memory", pool)
    assert out.exit_code == 0, out.output
    text = flat(out.stdout)
    assert "(vLLM 0.22.0): does not fit 30,000-token requests; up to 13,528 tokens fit" in text
    assert f'vLLM 0.22.0 would stop: "{PRINTED}"' in text
    assert "--max-model-len 13528" in text  # the way out is vLLM's own estimate


def test_the_serve_command_of_the_issue_plans_the_same_with_the_llm_class_batch():
    pool = str(5_554 * BLOCK)
    pasted = plan_json(
        "--gpus", "2xGH200-96GB", "--kv-memory", pool, "--", *SERVE, "--max-num-batched-tokens", "16384"
    )
    typed = plan_json(*ISSUE, "--max-num-batched-tokens", "16384", "--kv-memory", pool)
    assert pasted["kv_cache"]["packing"] == typed["kv_cache"]["packing"]
    assert pasted["parallel"]["label"] == typed["parallel"]["label"] == "TP2 + EP2"
    assert pasted["engine_prints"] == [f"vLLM 0.22.0 would print: {PRINTED}"]


def test_vllm_serve_s_own_batch_of_8192_fits_30000_tokens_in_the_same_pool():
    """`vllm serve` batches 8,192 tokens: the windows' and compressor states' pages shrink with the chunk
    (cdiv(127 + 8,192, 64) + 1 = 131 per window group, cdiv(7 + 8,192, 4) + 1 = 2,051 and cdiv(127 +
    8,192, 8) + 1 = 1,041 for the states), so the pool the LLM class lacked 1.22 GiB in holds it twice."""
    report = plan_json("--gpus", "2xGH200-96GB", "--kv-memory", str(5_554 * BLOCK), "--", *SERVE)
    request = 118 + 2 * 131 + 2_051 + 1_041
    kv = report["kv_cache"]
    assert report["fits"] is True
    assert kv["sequence_pages"] == request == 3_472
    assert kv["packing"]["request_bytes"] == request * BLOCK == 3_651_766_272
    assert kv["max_concurrency"] == 5_554 / 3_472
    # vLLM's "GPU KV cache size" is max concurrency × max_model_len (issue #51041)
    assert kv["tokens_per_gpu"] == int(5_554 / 3_472 * 30_000) == 47_989
    assert report["engine_prints"] == [
        (
            "vLLM 0.22.0 would print: Available KV cache memory: 5.44 GiB; GPU KV cache size: 47,989 tokens; "
            "Maximum concurrency for 30,000 tokens per request: 1.60x"
        )
    ]


def test_gpu_kv_cache_size_is_concurrency_times_max_model_len_not_pool_over_bytes_per_token():
    """Issue #51041: the same pool reports a different "GPU KV cache size" for another max_model_len,
    because a request's windows and compressor states take the same 6,682 block ids past 16,511 tokens."""
    pool = 40 * 2**30
    sizes = {}
    for length in (30_000, 100_000):
        args = (
            *ISSUE[:7],
            str(length),
            *ISSUE[8:],
            "--max-num-batched-tokens",
            "16384",
            "--kv-memory",
            str(pool),
        )
        kv = plan_json(*args)["kv_cache"]
        assert kv["pages_per_gpu"] == pool // BLOCK == 40_835
        assert kv["sequence_pages"] == pages(length)
        sizes[length] = kv["tokens_per_gpu"]
        assert sizes[length] == int(40_835 / pages(length) * length)
    assert sizes == {30_000: 180_154, 100_000: 577_336}
    args = (*ISSUE, "--max-num-batched-tokens", "16384", "--kv-memory", str(pool))
    text = flat(invoke("plan", *args).stdout)
    assert (
        'vLLM\'s "GPU KV cache size" is 180,154 tokens: max concurrency × max-model-len (40,835 ÷ 6,800 × '
        "30,000; issue #51041), not the pool ÷ bytes per token"
    ) in text
    assert "GPU KV cache size: 180,154 tokens" in flat(invoke("plan", *args, "--detail").stdout)


def test_the_weights_per_gpu_by_hand():
    """DeepSeek-V4-Flash, TP2 + EP2, from the checkpoint's storage (the V4 family's tree): 43 layers of
    wq_b [64 heads × 512, 1,024] FP8 with one E8M0 scale per 128 × 128 block, split by heads; 128 of the
    256 routed experts, each w1 and w3 [2,048, 4,096] and w2 [4,096, 2,048] in FP4 two a byte with one
    E8M0 per 32."""
    weights = {c["name"]: c["bytes_per_gpu"][0] for c in plan_json(*ISSUE, "--kv-memory", "8GiB")["weights"]}
    assert weights["Query heads"] == 43 * (32 * 512 * 1024 + (32 * 512 // 128) * (1024 // 128))
    expert = 2 * (2048 * 4096 // 2 + 2048 * 4096 // 32) + (4096 * 2048 // 2 + 4096 * 2048 // 32)
    assert weights["Routed experts"] == 43 * 128 * expert == 73_584_869_376
    assert weights["Shared key–value head"] == 43 * (
        512 * 4096 + 4 * 32 + 512 * 2
    )  # wkv, kv_norm: replicated
    # Pro on TP8: 128 heads, 16 a rank, the sinks padded to FlashMLA's 64 (F32) on each of 61 layers
    pro = plan_json("deepseek-v4-pro", "--gpus", "8xH200", "--kv-memory", "8GiB")
    sinks = next(c for c in pro["weights"] if c["name"] == "Attention sinks")
    assert sinks["bytes_per_gpu"] == [61 * 64 * 4] and sinks["model_bytes"] == 61 * 128 * 4


def test_sglang_splits_the_pool_as_its_dsv4_configurator():
    """DSV4PoolConfigurator (pool_configurator.py @ 003fca8), by hand for V4-Flash (43 layers, 21 CSA, 20
    HCA): bytes_per_full_token = 0.1 × 584 × 43 + 584 / 4 × 21 + 584 / 128 × 20 + 132 / 4 × 21 + 0.1 ×
    8 / 128 × (8,192 + 2,048) × 21; the c128 states of 256 + 1 request slots first: ((257 × 128 + 129) up
    to a multiple of 128) rows × 2 × 512 × 4 B × 20 layers."""
    per_token = (
        0.1 * 584 * 43 + 584 / 4 * 21 + 584 / 128 * 20 + 132 / 4 * 21 + 0.1 * 8 / 128 * (8192 + 2048) * 21
    )
    assert round(per_token, 6) == 7_705.45
    states = -(-(257 * 128 + 129) // 128) * 128 * 2 * 512 * 4 * 20
    assert states == 33_152 * 4096 * 20 == 2_715_811_840
    pool = 40 * 2**30
    report = plan_json("deepseek-v4-flash", "--gpus", "4xH200", "--engine", "sglang", "--tp", "4",
                       "--max-model-len", "65536", "--kv-memory", str(pool))  # fmt: skip
    full = int((pool - states) / 7_705.45) // 256 * 256
    assert full == 5_221_376
    figures = report["kv_cache"]["packing"]["figures"]
    assert report["kv_cache"]["tokens_per_gpu"] == report["sglang"]["max_total_num_tokens"] == full
    assert figures["c128_state_fixed_bytes"] == states
    assert figures["swa_max_total_num_tokens"] == int(full * 0.1) // 256 * 256 == 521_984
    assert report["kv_cache"]["block_size"] == 256  # apply_deepseek_v4_defaults' page, whatever is given
    assert report["sglang"]["max_running_requests"] == 256  # its default for V4
    assert report["kv_cache"]["max_concurrency"] == (full // 256) / 256  # 65,536 tokens: 256 pages
    (line,) = report["engine_prints"]
    assert "DSV4 memory calculation: bytes_per_full_token=7705.45, available_bytes=40.00 GB" in line
    assert f"full_token={full}; DSV4 pool sizes: full={full}, swa=521984" in line


def test_a_given_max_running_requests_sizes_sglangs_c128_states():
    report = plan_json("deepseek-v4-flash", "--gpus", "4xH200", "--engine", "sglang", "--tp", "4",
                       "--max-running-requests", "64", "--kv-memory", "40GiB")  # fmt: skip
    rows = -(-(65 * 128 + 129) // 128) * 128
    assert report["kv_cache"]["packing"]["figures"]["c128_state_fixed_bytes"] == rows * 4096 * 20
    assert report["sglang"]["max_running_requests"] == 64


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--kv-dtype", "bf16"], ["bf16", "vLLM caches DeepSeek V4 in fp8 only"]),
        (["--pp", "2"], ["--pp 2", "pipeline stage", "not modelled"]),
        (["--dcp", "2"], ["--dcp 2", "not modelled"]),
        (["--gpus", "16xH200", "--tp", "16"], ["--tp 16", "8 output groups"]),
        (["--engine", "vllm==0.15.0"], ["from 0.22.0", "#44376"]),
        (["--block-size", "64"], ["--block-size 64", "multiple of 128"]),
        (["--batch", "8"], ["--batch/--context", "not modelled yet"]),
        (["--batch", "max"], ["--batch max", "not modelled yet"]),
        (["--engine", "sglang", "--kv-dtype", "bf16"], ["SGLang caches DeepSeek V4 in fp8_e4m3 only"]),
    ],
)
def test_what_the_v4_rules_do_not_take_is_refused_in_one_line(args, needles):
    gpus = [] if "--gpus" in args else ["--gpus", "8xH200"]
    fails_cleanly(invoke("plan", "deepseek-v4-flash", *gpus, *args), *needles)


def test_every_layout_and_the_fewest_gpus_plan_without_an_internal_error():
    compared = invoke("plan", "deepseek-v4-pro", "--gpus", "8xH200", "--compare", "tp8,dp8ep8,tp4pp2")
    assert compared.exit_code == 0, compared.output
    assert "cannot run: --pp 2" in flat(compared.stdout)
    report = plan_json("deepseek-v4-pro", "--gpus", "4xH200", "--min-gpus")
    assert report["fits"] is False and report["min_gpus"]["count"] > 4
    assert json.dumps(report)  # every figure serializes


def test_the_kv_cache_command_still_shows_both_engines_pages():
    report = json.loads(invoke("kv-cache", "deepseek-v4-flash", "--json").stdout)
    assert report["vllm"]["block_bytes"] == BLOCK and report["sglang"][0]["pool"] == "c4 KV"


def test_readme_says_the_issue_s_two_figures_as_the_plan_prints_them():
    from .helpers import ROOT

    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (
        "`kimicount plan --gpus 2xGH200 --kv-memory 5841563904 -- vllm serve deepseek-ai/DeepSeek-V4-Flash …`), "
        'gives its "6.66 GiB KV cache is needed" and "the estimated maximum model length is 13528"'
    ) in readme
    out = invoke(
        "plan",
        "--gpus",
        "2xGH200",
        "--kv-memory",
        "5841563904",
        "--",
        *SERVE,
        "--max-num-batched-tokens",
        "16384",
    )
    assert "(6.66 GiB KV cache is needed" in flat(out.stdout) and "model length is 13528." in flat(out.stdout)
