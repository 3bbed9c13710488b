"""`kimicount plan --engine sglang`: SGLang's pool rule, its defaults and its DP attention, against
figures from outside the code.

- SGLang's Kubernetes guide (docs, "Deploy On Kubernetes"), DeepSeek-R1 (FP8, DeepSeek-V3's shapes) on
  2 nodes × 8 × H20, `--tp 16 --mem-fraction-static 0.93`, bf16 latent cache, page 1, context 163,840:
  its log prints `max_total_num_tokens=712400`.
- SGLang's rule, read in its code (model_runner.py profile_max_num_token; pool_configurator.py
  profile_available_bytes): rest = free after load − free before load × (1 − mem_fraction_static);
  max_total_num_tokens = int(rest) // cell // page × page; cell = (kv_lora_rank + qk_rope_head_dim) ×
  layers × element size (MLATokenToKVPool), plus index_head_dim + index_head_dim ÷ 128 × 4 bytes of
  indexer keys per layer on DeepSeek-V3.2 (DSATokenToKVPool).
- SGLang's default mem_fraction_static (server_args.py _handle_gpu_memory_settings): reserved MiB =
  512 + max(chunked_prefill_size, 2048) × 1.5 + cuda_graph_max_bs × 2 + tp × pp ÷ 8 × 1024 (+ DP
  attention terms), at least 10,240 above 60 GiB; round((MiB − reserved) ÷ MiB, 3), MiB as nvidia-smi
  reports the GPU (H200: 143,771; H20: 97,871).
- max_running_requests (model_runner): min(max(int(tokens ÷ context_len × 512), 2048), 4096), at most
  tokens ÷ 2; a given value is divided by the DP size.
"""

from __future__ import annotations

import math

import pytest

from .helpers import fails_cleanly, invoke
from .test_plan import GIB, K25, MIB, V3, V32, flat, per_gpu, plan_json

H20_CUDA = 97_285 * MIB  # the H20's CUDA total (kimicount/deploy/hardware.py)
PRELOAD = 3 * GIB // 2  # kimicount's estimate of the memory in use before the weights load
R1_H20 = ("--config", V3, "--gpus", "16xH20", "--engine", "sglang", "--mem-fraction-static", "0.93")


def test_deepseek_r1_on_two_h20_nodes_within_one_percent_of_sglangs_log():
    report = plan_json(*R1_H20, "--max-model-len", "163840")
    sglang = report["sglang"]
    assert (sglang["page_size"], sglang["context_len"]) == (1, 163_840)
    assert report["kv_cache"]["bytes_per_token_per_gpu"] == (512 + 64) * 2 * 61 == 70_272
    # the pool: floor((97,285 MiB − 1.5 GiB) × 0.93) − the weights on one GPU
    free = H20_CUDA - PRELOAD
    assert (
        report["stages"][0]["kv_pool_bytes"]
        == math.floor(free * 93 / 100) - report["stages"][0]["weights_bytes"]
    )
    tokens = sglang["max_total_num_tokens"]
    assert tokens == report["stages"][0]["kv_pool_bytes"] // 70_272
    assert abs(tokens - 712_400) / 712_400 < 0.01
    assert tokens - 712_400 == 612  # +0.086 %: the estimated 1.5 GiB in use before load is 0.03 GiB light
    assert sglang["estimate"] is True and report["estimated_inputs"] == ["preload"]
    # SGLang's max_running_requests: int(713,012 ÷ 163,840 × 512) = 2,228, within [2,048, 4,096]
    assert sglang["max_running_requests"] == 2_228


def test_the_h20_is_in_the_table():
    gpus = plan_json(*R1_H20)["gpus"]
    assert (gpus["type"], gpus["memory_bytes"], gpus["cuda_memory_bytes"]) == ("H20", 97_871 * MIB, H20_CUDA)


def test_sglang_output_names_its_rule_and_its_gb():
    out = flat(invoke("plan", "--detail", *R1_H20).stdout)
    assert "TP16 (SGLang 0.5.8.post1):" in out
    assert "mem_fraction_static 0.93 (--mem-fraction-static)." in out
    assert "before load 1.5 GiB (an estimate: CUDA context, NCCL, custom all-reduce) = 1,610,612,736 B" in out
    assert (
        "SGLang 0.5.8.post1 would print: mem_fraction_static=0.93; max_total_num_tokens=713012, "
        "max_running_requests=2228, context_len=163840; KV Cache is allocated. #tokens: 713012, KV size: 46.66 GB"
        in out
    )
    assert 'its memory figures are GiB though it writes "GB"' in out
    assert "SGLang's BF16 w_kc, w_vc" in out


def test_default_mem_fraction_static_by_hand():
    # H200, TP8: 512 + 8,192 × 1.5 + 512 × 2 + 8 × 1 ÷ 8 × 1,024 = 14,848 MiB; 1 − 14,848 ÷ 143,771 = 0.897
    h200 = plan_json("--config", K25, "--text-only", "--gpus", "8xH200", "--engine", "sglang")["sglang"]
    assert (h200["mem_fraction_static"], h200["mem_fraction_static_given"]) == (0.897, False)
    assert round((143_771 - (512 + 8_192 * 1.5 + 512 * 2 + 1_024)) / 143_771, 3) == 0.897
    # H20, TP16: 512 + 12,288 + 1,024 + 2,048 = 15,872; 1 − 15,872 ÷ 97,871 = 0.838
    h20 = plan_json("--config", V3, "--gpus", "16xH20", "--engine", "sglang")["sglang"]
    assert h20["mem_fraction_static"] == round((97_871 - 15_872) / 97_871, 3) == 0.838
    # DP attention adds cuda_graph_max_bs × dp × 3 and, past 300, × 1.5 more: 512 × 8 × 4.5 = 18,432
    dp = plan_json(
        "--config",
        K25,
        "--text-only",
        "--gpus",
        "8xH200",
        "--engine",
        "sglang",
        "--tp",
        "8",
        "--dp",
        "8",
        "--enable-dp-attention",
        "--ep",
        "8",
    )["sglang"]
    assert dp["mem_fraction_static"] == round((143_771 - (14_848 + 18_432)) / 143_771, 3) == 0.769


def test_pages_round_the_tokens_down():
    page1 = plan_json(*R1_H20)
    page64 = plan_json(*R1_H20, "--page-size", "64")
    pool = page1["stages"][0]["kv_pool_bytes"]
    assert page64["sglang"]["max_total_num_tokens"] == pool // (64 * 70_272) * 64 == 712_960
    assert page64["kv_cache"]["block_size"] == 64


def test_fp8_and_nsa_cells():
    fp8 = plan_json(*R1_H20, "--kv-dtype", "fp8")["kv_cache"]
    assert fp8["bytes_per_token_per_layer"] == 576  # (512 + 64) × 1
    # DeepSeek-V3.2's NSA cell: the bf16 latent and the indexer's 128 fp8 keys + one F32 scale
    nsa = plan_json("--config", V32, "--gpus", "8xH200", "--engine", "sglang")["kv_cache"]
    assert nsa["bytes_per_token_per_layer"] == 1_152 + 128 + 128 // 128 * 4 == 1_284


def test_sglang_dp_attention_lays_out_dense_parts_over_all_gpus():
    args = ("--config", K25, "--text-only", "--gpus", "8xH200", "--kv-memory", "20GiB")
    sglang = plan_json(
        *args, "--engine", "sglang", "--tp", "8", "--dp", "8", "--enable-dp-attention", "--ep", "8"
    )
    vllm = plan_json(*args, "--dp", "8", "--ep", "8")
    assert sglang["parallel"]["label"] == "TP8 + DP8 attention + EP8"
    assert (sglang["parallel"]["tp"], sglang["parallel"]["dp"], sglang["parallel"]["dense_tp"]) == (1, 8, 8)
    whole = {c["name"]: c["model_bytes"] for c in sglang["weights"]}
    s, v = per_gpu(sglang), per_gpu(vllm)
    for name in ("Dense MLP", "Shared expert", "Output head"):  # an eighth of the model on each GPU
        assert s[name] * 8 == whole[name] and v[name] == whole[name]
    for name in ("Token embedding", "Causal attention", "Query heads"):  # whole on every GPU in both
        assert s[name] == v[name] == whole[name]
    # each DP rank its own pool: 20 GiB ÷ 70,272 B per token, × 8 ranks
    assert sglang["kv_cache"]["tokens_total"] == 20 * GIB // 70_272 * 8


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--engine", "tgi"], ["--engine tgi", "vllm, sglang"]),
        (["--engine", "sglang", "--mem-fraction-static", "1.5"], ["--mem-fraction-static 1.5", "(0, 1]"]),
        (["--mem-fraction-static", "0.9"], ["--mem-fraction-static is SGLang's", "--gpu-memory-utilization"]),
        (["--page-size", "64"], ["--page-size is SGLang's", "--block-size"]),
        (["--max-running-requests", "64"], ["--max-running-requests is SGLang's", "--max-num-seqs"]),
        (["--dp", "8", "--enable-dp-attention"], ["--enable-dp-attention is SGLang's"]),
        (
            ["--engine", "sglang", "--dp", "2"],
            ["--dp 2 without --enable-dp-attention", "independent servers"],
        ),
        (["--engine", "sglang", "--dcp", "8"], ["--dcp 8", "modelled from 0.5.18"]),
        (["--engine", "sglang", "--page-size", "0"], ["--page-size 0", "positive"]),
        (["--engine", "sglang", "--gpu-memory-utilization", "0.95"], ["vLLM's", "--mem-fraction-static"]),
        (["--engine", "sglang", "--block-size", "128"], ["--block-size is vLLM's", "--page-size"]),
        (
            ["--engine", "sglang", "--max-num-seqs", "64"],
            ["--max-num-seqs is vLLM's", "--max-running-requests"],
        ),
        (
            ["--engine", "sglang", "--tp", "8", "--dp", "3", "--enable-dp-attention"],
            ["--dp 3", "must divide"],
        ),
    ],
)
def test_engine_options_fail_in_one_line(args, needles):
    fails_cleanly(invoke("plan", "--gpus", "8xH200", *args), *needles)


def test_given_max_running_requests_is_per_dp_rank():
    args = ("--config", K25, "--text-only", "--gpus", "8xH200", "--engine", "sglang", "--kv-memory", "20GiB")
    dp = plan_json(*args, "--tp", "8", "--dp", "8", "--enable-dp-attention", "--max-running-requests", "512")
    assert dp["sglang"]["max_running_requests"] == 512 // 8


def test_deepep_buffer_is_an_estimate_with_its_formula():
    # DeepEP's LowLatencyLayout for Kimi K2 (H = 7,168, 56 scales), 384 + 8 experts, 128 tokens per rank:
    # dispatch message 16 + max(14,336, 7,168 + 224) = 14,352 B; combine 224 + 14,336 = 14,560 B
    args = (
        "--config",
        K25,
        "--text-only",
        "--gpus",
        "8xH200",
        "--dp",
        "8",
        "--ep",
        "8",
        "--kv-memory",
        "1GiB",
    )
    buffer = plan_json(*args, "--num-redundant-experts", "8")["deepep_buffer"]
    send = max(128 * 14_352, 392 * 128 * 14_560)
    assert buffer["bytes"] == 2 * send + 2 * 392 * 128 * 14_560 == 2_922_250_240
    assert (buffer["estimate"], buffer["in_pool"]) == (True, False)
    assert "LowLatencyLayout" in buffer["source"]
    assert plan_json("--gpus", "8xH200", "--kv-memory", "1GiB")["deepep_buffer"] is None  # no EP


def test_the_same_deployment_under_both_engines():
    # docs/engines.md's side by side: K2-Thinking's language model on 8 × H200, TP8, defaults
    args = ("--config", K25, "--text-only", "--gpus", "8xH200")
    vllm, sglang = plan_json(*args), plan_json(*args, "--engine", "sglang")
    weights = 76_183_146_496  # tests/test_plan.py's hand table
    assert vllm["stages"][0]["weights_bytes"] == sglang["stages"][0]["weights_bytes"] == weights
    # vLLM: ceil(143,156 MiB × 0.9) − weights − 9,428,795,392 (the reserve estimate), pages of 64
    assert vllm["stages"][0]["kv_pool_bytes"] == 135_098_951_271 - weights - 9_428_795_392 == 49_487_009_383
    assert vllm["kv_cache"]["tokens_per_gpu"] == 49_487_009_383 // (64 * 70_272) * 64 == 704_192
    # SGLang: floor((143,156 MiB − 1.5 GiB) × 0.897) − weights, pages of 1
    free = 143_156 * MIB - PRELOAD
    assert sglang["stages"][0]["kv_pool_bytes"] == math.floor(free * 897 / 1000) - weights == 57_020_755_312
    assert sglang["kv_cache"]["tokens_per_gpu"] == 57_020_755_312 // 70_272 == 811_429


def test_reserve_and_kv_memory_are_exact_routes_for_sglang():
    # --reserve gives the memory in use before the weights load: nothing is estimated then
    given = plan_json(*R1_H20, "--reserve", "1.54GiB")
    assert given["estimated_inputs"] == [] and given["sglang"]["estimate"] is False
    free = H20_CUDA - 1_653_562_408  # floor(1.54 × 2^30)
    pool = math.floor(free * 93 / 100) - given["stages"][0]["weights_bytes"]
    assert given["stages"][0]["kv_pool_bytes"] == pool
    assert given["sglang"]["max_total_num_tokens"] == pool // 70_272
    # --kv-memory starts from the pool SGLang logged: 712,400 tokens × 70,272 B holds exactly 712,400
    printed = plan_json(*R1_H20, "--kv-memory", str(712_400 * 70_272))
    assert printed["sglang"]["max_total_num_tokens"] == 712_400 and printed["reserve"] is None


def test_pipeline_stages_size_from_the_fullest_one():
    # SGLang measures the free memory after loading as the minimum over all ranks, so both stages start
    # from the fuller stage's weights; each then divides by its own layers' cell
    report = plan_json("--config", V3, "--gpus", "16xH20", "--engine", "sglang", "--tp", "8", "--pp", "2")
    first, last = report["stages"]
    assert first["weights_bytes"] != last["weights_bytes"]  # 31 and 30 layers, embedding and head apart
    heavier = max(first["weights_bytes"], last["weights_bytes"])
    for stage in (first, last):
        assert stage["kv_pool_bytes"] + heavier + stage["reserve_bytes"] == H20_CUDA
    assert first["kv_tokens"] == first["kv_pool_bytes"] // (31 * 1_152)
    assert last["kv_tokens"] == last["kv_pool_bytes"] // (30 * 1_152)


# --- the published MI355X run: Kimi-K2.5, SGLang v0.5.8.post1 (ROCm), every memory setting its default ----

#: github.com/ajith-sirra-amd/Issues, Kimi-K2.5-MI355X-SGLANG-ERROR.md: `sglang serve --model-path
#: moonshotai/Kimi-K2.5 --tp 8 --trust-remote-code --tool-call-parser kimi_k2 --reasoning-parser kimi_k2` in
#: rocm/sgl-dev:v0.5.8.post1-rocm720-mi35x-20260218 on 8 × MI355X. It printed server_args with
#: `mem_fraction_static=0.8260405859375` (chunked_prefill_size=16384, cuda_graph_max_bs=512, page_size=1,
#: kv_cache_dtype='auto'), `Load weight begin. avail mem=283.56 GB` (TP0; 283.53 on TP3, the fullest),
#: `mem usage=73.58 GB` on every rank, and `KV Cache is allocated. #tokens: 2454421, KV size: 160.63 GB`.
MI355X_RUN = ("--config", K25, "--gpus", "8xMI355X", "--engine", "sglang==0.5.8.post1", "--tp", "8")
MI355X_TOKENS = 2_454_421
#: rocm-smi's VRAM total of an MI355X, public `rocm-smi --showmeminfo vram --csv` prints: 309,220,868,096 B.
MI355X_MIB = 309_220_868_096 // MIB


def test_mi355x_kimi_k25_default_fraction_is_the_one_sglang_printed():
    # server_args.py _handle_gpu_memory_settings at v0.5.8.post1, by hand: a GPU over 160 GiB gets
    # chunked_prefill_size 16,384 and cuda_graph_max_bs 512 (the log's own values); reserved =
    # 512 + 16,384 × 1.5 + 512 × 2 + 8 × 1 ÷ 8 × 1,024 = 27,136 MiB, above the 10,240 floor
    assert MI355X_MIB == 294_896
    base = round((MI355X_MIB - 27_136) / MI355X_MIB, 3)
    assert base == 0.908
    # adjust_mem_fraction_for_vlm: Kimi-K2.5's vision tower, 27 layers of 1,152 (its config's vt_*), is
    # 27 × 1,152² ÷ (24 × 1,024²) = 1.423828125 ViT-L/14s: × 0.95 × (1 − 0.1 × 0.423828125)
    assert 0.908 * (0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1))) == 0.8260405859375
    sglang = plan_json(*MI355X_RUN)["sglang"]
    assert sglang["mem_fraction_static_printed"] == "0.8260405859375"
    assert sglang["mem_fraction_static"] == 0.8260405859375
    assert sglang["mem_fraction_static_given"] is False
    why = " ".join(sglang["mem_fraction_static_why"])
    assert "sets aside 27,136 of the 294,896 MiB" in why and "24,576 for the activations" in why
    assert "1,024 for CUDA graphs up to batch 512" in why and "multimodal" in why


def test_mi355x_kimi_k25_tokens_within_half_a_percent_of_sglangs_log():
    report = plan_json(*MI355X_RUN)
    tokens = report["sglang"]["max_total_num_tokens"]
    assert report["kv_cache"]["bytes_per_token_per_gpu"] == (512 + 64) * 2 * 61 == 70_272
    assert abs(tokens - MI355X_TOKENS) / MI355X_TOKENS < 0.005
    assert tokens - MI355X_TOKENS == 6_642  # +0.27 %
    # what it rests on: only the estimated memory in use before the weights load (4.5 GiB on ROCm, from
    # the published GLM-5-FP8 run on the same MI355X image: 283.48 GiB free of 287.98); HIP's total is
    # rocm-smi's, not estimated
    assert report["estimated_inputs"] == ["preload"] and report["sglang"]["estimate"] is True
    assert report["gpus"]["cuda_memory_estimated"] is False
    terms = {term["name"]: term["bytes"] for term in report["reserve"]["terms"]}
    assert terms["before load"] == 9 * GIB // 2
    # the weights: SGLang's "mem usage=73.58 GB" is the checkpoint's shards plus, on ROCm, the int32
    # g_idx and sort indices its INT4 MoE keeps (60 MoE layers × 2 × 384 experts × (7,168 + 256) × 4 B)
    rows = {c["name"]: c["bytes_per_gpu"][0] for c in report["weights"]}
    assert rows["SGLang's INT4 MoE g_idx buffers (ROCm)"] == 60 * 2 * 384 * (7_168 + 256) * 4 == 1_368_391_680
    assert abs(report["stages"][0]["weights_bytes"] / GIB - 73.58) < 0.5


def test_mi355x_kimi_k25_pool_sglang_printed_gives_its_tokens_to_the_printed_precision():
    # --kv-memory 160.63GiB: floor(160.63 GiB ÷ 70,272 B) = 2,454,393; SGLang's "160.63 GB" is 2,454,421
    # × 70,272 B rounded to 0.01 GiB, which holds 0.005 GiB ÷ 70,272 B = 76 tokens either way
    tokens = plan_json(*MI355X_RUN, "--kv-memory", "160.63GiB")["sglang"]["max_total_num_tokens"]
    assert tokens == int(160.63 * GIB) // 70_272 == 2_454_393
    assert abs(tokens - MI355X_TOKENS) <= 0.005 * GIB / 70_272
    assert f"{MI355X_TOKENS * 70_272 / GIB:.2f}" == "160.63"


def test_mi355x_run_pasted_with_its_image_follows_that_release():
    args = (
        "--gpus", "8xMI355X", "--", "docker", "run", "--device=/dev/kfd", "--ipc=host",
        "rocm/sgl-dev:v0.5.8.post1-rocm720-mi35x-20260218", "sglang", "serve", "--model-path", K25, "--tp", "8",
        "--trust-remote-code", "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2",
    )  # fmt: skip
    report = plan_json(*args)
    assert (report["engine"], report["engine_release"]) == ("sglang", "0.5.8.post1")
    assert report["serve_command"]["image"] == "rocm/sgl-dev:v0.5.8.post1-rocm720-mi35x-20260218"
    assert (
        report["sglang"]["max_total_num_tokens"] == plan_json(*MI355X_RUN)["sglang"]["max_total_num_tokens"]
    )
    out = flat(invoke("plan", "--detail", *args).stdout)
    assert "kimi-k2.5 on 8 × MI355X, TP8 (SGLang 0.5.8.post1):" in out
    assert "SGLang 0.5.8.post1 would print: mem_fraction_static=0.8260405859375;" in out
