"""`kimicount plan`: memory per GPU for a deployment, against figures from outside the code.

- vLLM's published Kimi-K2-Thinking runs on 8 × H200 (vllm-project/recipes, moonshotai/Kimi-K2-Think.md,
  startup logs of 2025-11-06): TP8 "Available KV cache memory: 46.80 GiB", "GPU KV cache size: 715,072
  tokens"; TP8 + DCP8 "GPU KV cache size: 5,721,088 tokens"; vLLM's own "Maximum concurrency for
  262,144 tokens per request" is tokens ÷ 262,144 = 2.73×.
- Moonshot's deploy guidance for Kimi-K2-Instruct: "The smallest deployment unit for Kimi-K2 FP8
  weights with 128k seqlen on mainstream H200 or H20 platform is a cluster with 16 GPUs".
- The weights on one GPU, component by component, written out by hand below from the shapes of the
  real checkpoints (Kimi-K2-Instruct: FP8 with F32 scales per 128 × 128 block; K2-Thinking / K2.5:
  INT4 routed experts packed 8 per int32 with a BF16 scale per 32 inputs and an I32[2] shape).
- nvidia-smi on an H200 reports 143,771 MiB; a program sees 143,156 MiB (torch.cuda.get_device_properties
  on an H200, a public log: "total_memory=143156MB"), and vLLM sizes itself against that CUDA total:
  its request_memory is ceil(MemorySnapshot.total_memory × gpu_memory_utilization), the total from
  torch.cuda.mem_get_info().
- vLLM's maximum concurrency is num_blocks ÷ cdiv(max_model_len, block_size) (its
  get_max_concurrency_for_kv_cache_config), DCP dividing max_model_len first.
- vLLM keeps BF16 copies of W_UK and W_UV beside an FP8 kv_b_proj ("we just store fp16/bf16 copies",
  the MLA layer's process_weights_after_loading): kv_b_proj's shard again at 2 bytes an element.
"""

from __future__ import annotations

import json
import math

import pytest

from kimicount.deploy.hardware import ACCELERATORS, find_accelerator, parse_gpus
from kimicount.deploy.placement import pipeline_stages

from .helpers import FIXTURES, fails_cleanly, heavy_imports, imported_modules, invoke, run_kimicount

K25 = str(FIXTURES / "kimi-k2.5")  # K2-Thinking's language model and quantization (+ a vision tower)
V3 = str(FIXTURES / "deepseek-v3")
V32 = str(FIXTURES / "deepseek-v3.2-exp")
GIB = 2**30
MIB = 2**20
H200_MEMORY = 143_771 * MIB  # nvidia-smi's total on an H200
H200_CUDA = 143_156 * MIB  # what CUDA reports of it to a program
H200_USABLE = 135_098_951_271  # ceil(143,156 × 1,048,576 × 0.9) = ceil(135,098,951,270.4)


def plan_json(*args: str) -> dict:
    result = invoke("plan", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def flat(text: str) -> str:
    """Text with its wrapped lines joined: prose wraps at 100 columns wherever the numbers fall."""
    return " ".join(text.split())


def per_gpu(report: dict) -> dict[str, int]:
    """Component name -> bytes on one GPU (single stage)."""
    return {c["name"]: c["bytes_per_gpu"][0] for c in report["weights"]}


# --- vLLM's published Kimi-K2-Thinking run ---------------------------------------------------------


def test_vllms_kimi_k2_thinking_kv_cache_on_8_h200_tp8():
    report = plan_json("--config", K25, "--gpus", "8xH200", "--kv-memory", "46.80GiB")
    kv = report["kv_cache"]
    # 46.80 GiB over 64-token pages of 70,272 B per token: 11,173 pages
    assert kv["bytes_per_token_per_gpu"] == 70_272
    assert kv["tokens_per_gpu"] == 715_072 == 11_173 * 64
    assert math.floor(46.80 * GIB / 70_272) == 715_094  # unrounded; pages round it down
    assert kv["max_model_len"] == 262_144
    assert f"{kv['max_concurrency']:.2f}" == "2.73"
    out = invoke("plan", "--detail", "--config", K25, "--gpus", "8xH200", "--kv-memory", "46.80GiB").stdout
    assert "Pages of 64 tokens: floor(50,251,117,363 B ÷ (64 × 70,272 B)) = 11,173" in out
    assert "Tokens: 11,173 × 64 = 715,072 per GPU" in out
    assert (
        "Maximum concurrency for 262,144 tokens per request: 11,173 pages ÷ 4,096 (ceil(262,144 ÷ 64)) = 2.73×"
        in flat(out)
    )


def test_max_concurrency_is_vllms_pages_over_pages_per_sequence():
    # vLLM: num_blocks ÷ cdiv(max_model_len, block_size). 46.80 GiB holds 11,173 pages of 64 tokens
    # (above); a 1,000-token sequence takes cdiv(1,000, 64) = 16 of them: 11,173 ÷ 16 = 698.3125. The
    # token ratio 715,072 ÷ 1,000 = 715.07 would count the unused tail of each sequence's last page.
    args = ("--config", K25, "--gpus", "8xH200", "--kv-memory", "46.80GiB", "--max-model-len", "1000")
    kv = plan_json(*args)["kv_cache"]
    assert (kv["pages_per_gpu"], kv["sequence_pages"]) == (11_173, 16)
    assert kv["max_concurrency"] == 11_173 / 16 == 698.3125
    assert kv["sequences_per_replica"] == 11_173 // 16 == 698
    assert "11,173 pages ÷ 16 (ceil(1,000 ÷ 64)) = 698.31×" in flat(invoke("plan", "--detail", *args).stdout)
    # under DCP 8 a sequence's tokens split over the 8 ranks first: cdiv(cdiv(262,144, 8), 64) = 512
    dcp = plan_json("--config", K25, "--gpus", "8xH200", "--dcp", "8", "--kv-memory", "46.80GiB")["kv_cache"]
    assert (dcp["sequence_pages"], dcp["max_concurrency"]) == (512, 11_173 / 512)


def test_vllms_kimi_k2_thinking_kv_cache_with_decode_context_parallel():
    # vLLM printed 46.80 GiB again and 5,721,088 = 8 × 715,136 tokens: one page more per GPU than the
    # TP8 run, so that run's pool was a little larger, still printing as 46.80 GiB.
    assert 5_721_088 == 8 * 715_136 == 8 * 11_174 * 64
    pool = 11_174 * 64 * 70_272  # the smallest pool that holds 11,174 pages
    assert f"{pool / GIB:.2f}" == "46.80"
    report = plan_json("--config", K25, "--gpus", "8xH200", "--dcp", "8", "--kv-memory", str(pool))
    assert report["kv_cache"]["tokens_per_replica"] == 5_721_088
    assert report["parallel"]["label"] == "TP8 + DCP8"
    # and the TP8 run's pool gives 8 × its 715,072
    report = plan_json("--config", K25, "--gpus", "8xH200", "--dcp", "8", "--kv-memory", "46.80GiB")
    assert report["kv_cache"]["tokens_per_replica"] == 8 * 715_072


def test_latent_bytes_per_token_of_every_deepseek_v3_shaped_model():
    for config in (None, K25, V3):
        args = ("--config", config) if config else ()
        bf16 = plan_json(*args, "--gpus", "8xH200", "--kv-memory", "40GiB")["kv_cache"]
        fp8 = plan_json(*args, "--gpus", "8xH200", "--kv-memory", "40GiB", "--kv-dtype", "fp8")["kv_cache"]
        assert (
            (bf16["layout"], bf16["bytes_per_token_per_gpu"])
            == ("latent", (512 + 64) * 2 * 61)
            == ("latent", 70_272)
        )
        assert (fp8["layout"], fp8["bytes_per_token_per_gpu"]) == ("latent", 35_136)


def test_fp8_on_deepseek_v32_is_flashmlas_656_byte_record_plus_the_indexer_keys():
    # vLLM turns an fp8 cache into fp8_ds_mla (512 fp8 + 4 F32 scales + 64 bf16) for DeepSeek-V3.2 only
    kv = plan_json("--config", V32, "--gpus", "8xH200", "--kv-memory", "40GiB", "--kv-dtype", "fp8")[
        "kv_cache"
    ]
    assert kv["layout"] == "flashmla-fp8"
    assert kv["bytes_per_token_per_layer"] == 656 + (128 + 4) == 788
    assert kv["bytes_per_token_per_gpu"] == 788 * 61
    forced = plan_json("--gpus", "8xH200", "--kv-memory", "40GiB", "--kv-layout", "flashmla-fp8")["kv_cache"]
    assert forced["bytes_per_token_per_gpu"] == 656 * 61


# --- the accelerator table -----------------------------------------------------------------------


def test_h200_is_what_the_device_reports():
    gpus = plan_json("--gpus", "8xH200", "--kv-memory", "1GiB")["gpus"]
    assert (gpus["memory_bytes"], gpus["memory_source"]) == (H200_MEMORY, "nvidia-smi")
    assert (gpus["cuda_memory_bytes"], gpus["cuda_memory_estimated"]) == (H200_CUDA, False)
    assert "total_memory=143156MB" in gpus["cuda_memory_source"]
    assert (gpus["hbm_bandwidth_bytes_per_s"], gpus["bf16_flops"], gpus["fp8_flops"]) == (
        4_800 * 10**9,
        989_500 * 10**9,  # dense: half the datasheet's 1,979 TFLOPS with sparsity
        1_979_000 * 10**9,
    )
    assert "143,771 MiB" in gpus["source"]


def test_the_table_has_every_accelerator_with_a_source():
    names = {"A100-80GB", "H100", "H800", "H20", "H200", "B200", "GB200", "MI300X", "MI325X"}
    assert names <= ACCELERATORS.keys()
    for gpu in ACCELERATORS.values():
        assert gpu.source and "\n" not in gpu.source
        assert gpu.memory_bytes > 0 and gpu.hbm_bandwidth > 0 and gpu.bf16_flops > 0
        # dense FP8 is twice BF16 on every part with FP8 (the datasheets round: AMD's MI300X 2,614.9 = 2 ×
        # 1,307.45, NVIDIA's L40 362 against 2 × 181.05)
        assert gpu.fp8_flops is None or abs(gpu.fp8_flops - 2 * gpu.bf16_flops) <= gpu.fp8_flops // 1_000
    assert ACCELERATORS["A100-80GB"].fp8_flops is None
    assert ACCELERATORS["MI300X"].memory_bytes == 206_141_652_992  # rocm-smi's VRAM total


@pytest.mark.parametrize(
    "text, count, name",
    [
        ("8xH200", 8, "H200"),
        ("8×H200", 8, "H200"),
        ("16xh100", 16, "H100"),
        ("2 x MI300X", 2, "MI300X"),
        ("4xA100", 4, "A100-80GB"),
    ],
)
def test_gpus_option(text, count, name):
    parsed_count, gpu = parse_gpus(text)
    assert (parsed_count, gpu.name) == (count, name)


#: The accelerators of published runs: (as the tools print the name, the table's entry, the memory the
#: driver's tool reports in MiB). Names and totals from public nvidia-smi / rocm-smi prints: B300 SXM6 AC
#: "275040MiB", GB300 "284208MiB", GH200 480GB "97871MiB", GH200 144G HBM3e "146831 MiB", H20-3e "143771
#: MiB", L20 and L40 "46068MiB" (ECC on), H100 NVL "95830MiB", RTX PRO 6000 Blackwell Server Edition "97887
#: MiB"; rocm-smi's "VRAM Total Memory (B)" of an MI355X and an MI350X: 309,220,868,096.
PUBLISHED = [
    ("AMD Instinct MI355X", "MI355X", 309_220_868_096 // MIB),
    ("MI350X", "MI350X", 309_220_868_096 // MIB),
    ("MI308X", "MI308X", 196_592),
    ("NVIDIA B300 SXM6 AC", "B300", 275_040),
    ("NVIDIA GB300", "GB300", 284_208),
    ("NVIDIA GH200 480GB", "GH200-96GB", 97_871),
    ("NVIDIA GH200 144G HBM3e", "GH200-144GB", 146_831),
    ("NVIDIA H20-3e", "H20-3e", 143_771),
    ("NVIDIA L20", "L20", 46_068),
    ("NVIDIA L40", "L40", 46_068),
    ("NVIDIA H100 NVL", "H100-NVL", 95_830),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTXPRO6000", 97_887),
    ("NVIDIA H100 80GB HBM3", "H100", 81_559),
    ("H100-80GB", "H100", 81_559),  # issue 27: --gpus 8xH100-80GB was refused
]


@pytest.mark.parametrize("printed, name, mib", PUBLISHED)
def test_accelerators_answer_to_the_names_the_tools_print(printed, name, mib):
    count, gpu = parse_gpus(f"8x{printed}")
    assert (count, gpu.name, gpu.memory_bytes) == (8, name, mib * MIB)
    assert plan_json("--gpus", f"8x{printed}", "--kv-memory", "1GiB")["gpus"]["type"] == name


def test_amd_cdna4_peaks_are_their_compute_units_at_their_clock():
    # 256 CUs (ROCm's GPU specifications) × 4,096 dense BF16 FLOPs per CU per clock (8,192 FP8; AMD at
    # ISSCC 2026) × 2.4 GHz (MI355X) or 2.2 GHz (MI350X, Hot Chips 2025): AMD's 2.5 / 5.0 and 2.3 / 4.6 PF
    mi355x, mi350x = ACCELERATORS["MI355X"], ACCELERATORS["MI350X"]
    assert (mi355x.bf16_flops, mi355x.fp8_flops) == (256 * 4096 * 2_400_000_000, 256 * 8192 * 2_400_000_000)
    assert (mi350x.bf16_flops, mi350x.fp8_flops) == (256 * 4096 * 2_200_000_000, 256 * 8192 * 2_200_000_000)
    assert mi355x.platform == mi350x.platform == ACCELERATORS["MI300X"].platform == "rocm"
    assert ACCELERATORS["H200"].platform == "cuda"


def test_dgx_spark_is_unified_memory_that_no_driver_reports_apart():
    spark = find_accelerator("NVIDIA GB10")
    assert spark.name == "DGX-Spark" and spark.unified_memory
    # nvidia-smi reports [N/A] on a GB10 (NVIDIA's known issues); the system's memory, sysinfo's totalram
    # as gpud logged it on one: 128,501,256,192 B
    assert spark.memory_bytes == 128_501_256_192 and spark.cuda_memory_estimated
    assert "N/A" in spark.memory_source and spark.hbm_bandwidth == 273 * 10**9


def test_a_cuda_total_no_print_gives_is_estimated_and_says_from_what():
    for name in ("B300", "GB300", "GH200-96GB", "H20-3e", "H100-NVL", "L20", "L40", "MI308X"):
        gpu = ACCELERATORS[name]
        assert gpu.cuda_memory_estimated and gpu.cuda_memory_source, name
    # B300: nvidia-smi's 275,040 MiB less the 717 a B200's driver keeps (183,359 − 182,642)
    assert ACCELERATORS["B300"].cuda_memory_bytes == (275_040 - (183_359 - 182_642)) * MIB


def test_overrides_replace_the_tables_figures():
    report = plan_json(
        "--gpus", "8xH200", "--gpu-memory", "141GiB", "--hbm-bandwidth", "5TB/s", "--kv-memory", "1GiB"
    )
    gpus = report["gpus"]
    assert (gpus["memory_bytes"], gpus["hbm_bandwidth_bytes_per_s"]) == (141 * GIB, 5 * 10**12)
    assert gpus["overridden"] == ["memory", "hbm"]
    custom = plan_json(
        "--gpus", "4", "--gpu-memory", "96GB", "--config", K25, "--text-only", "--kv-memory", "1GiB"
    )
    assert (custom["gpus"]["count"], custom["gpus"]["memory_bytes"]) == (4, 96 * 10**9)


# --- weights on one GPU, by hand -----------------------------------------------------------------

# Kimi-K2-Instruct (FP8): a Linear [out, in] is out × in bytes + ceil(out/128) × ceil(in/128) × 4 of
# scales; embedding, head, norms and router weight BF16; the router's bias F32. 61 layers, layer 0 dense.
K2_TP8 = {
    "Token embedding": 163_840 // 8 * 7_168 * 2,
    "Attention RMSNorm": 61 * 7_168 * 2,
    "Query compression": 61 * (1_536 * 7_168 + 12 * 56 * 4 + 1_536 * 2),  # q_a_proj + q_a_layernorm
    "Key–value compression": 61 * (512 * 7_168 + 4 * 56 * 4 + 512 * 2),  # rows 0–511 + 4 scale rows
    "Query heads": 61 * (1_536 * 1_536 + 12 * 12 * 4),  # 8 of 64 heads × 192 rows of q_b_proj
    "Key content up-projection": 61 * (8 * 128 * 512 + 8 * 4 * 4),  # 8 heads' rows 0–127 of 256
    "Shared rotary key": 61 * (64 * 7_168 + 1 * 56 * 4),
    "Value heads": 61 * (8 * 128 * 512 + 8 * 4 * 4),
    "Causal attention": 61 * (7_168 * 1_024 + 56 * 8 * 4),  # o_proj: 8 heads × 128 input columns
    "MLP RMSNorm": 61 * 7_168 * 2,
    "Dense MLP": 3 * (2_304 * 7_168 + 18 * 56 * 4),  # 18,432 / 8 wide
    "Router": 60 * (384 * 7_168 * 2 + 384 * 4),
    "Routed experts": 60 * 384 * 3 * (256 * 7_168 + 2 * 56 * 4),  # each expert 2,048 / 8 wide
    "Shared expert": 60 * 3 * (256 * 7_168 + 2 * 56 * 4),
    "Final RMSNorm": 7_168 * 2,
    "Output head": 163_840 // 8 * 7_168 * 2,
    # vLLM's BF16 W_UK, W_UV: 8 heads × (128 + 128) rows × 512 of kv_b_proj at 2 B, in every layer
    "vLLM's BF16 W_UK, W_UV": 61 * 8 * 256 * 512 * 2,
}
K2_DP8_EP8 = {
    **K2_TP8,
    "Token embedding": 163_840 * 7_168 * 2,
    "Query heads": 61 * (12_288 * 1_536 + 96 * 12 * 4),
    "Key content up-projection": 61 * (64 * 128 * 512 + 64 * 4 * 4),
    "Value heads": 61 * (64 * 128 * 512 + 64 * 4 * 4),
    "Causal attention": 61 * (7_168 * 8_192 + 56 * 64 * 4),
    "Dense MLP": 3 * (18_432 * 7_168 + 144 * 56 * 4),
    "Routed experts": 60 * 48 * 3 * (2_048 * 7_168 + 16 * 56 * 4),  # 384 / 8 whole experts
    "Shared expert": 60 * 3 * (2_048 * 7_168 + 16 * 56 * 4),
    "Output head": 163_840 * 7_168 * 2,
    "vLLM's BF16 W_UK, W_UV": 61 * 64 * 256 * 512 * 2,
}

# Kimi-K2-Thinking / K2.5 (INT4 routed experts; attention, dense MLP, shared expert, head in BF16).
# A packed [out, in] is out × in/8 int32 + out × in/32 BF16 scales + an I32[2] shape: 8 bytes.
K2_THINKING_TP8 = {
    "Token embedding": 163_840 // 8 * 7_168 * 2,
    "Attention RMSNorm": 61 * 7_168 * 2,
    "Query compression": 61 * (1_536 * 7_168 + 1_536) * 2,
    "Key–value compression": 61 * (512 * 7_168 + 512) * 2,
    "Query heads": 61 * 1_536 * 1_536 * 2,
    "Key content up-projection": 61 * 8 * 128 * 512 * 2,
    "Shared rotary key": 61 * 64 * 7_168 * 2,
    "Value heads": 61 * 8 * 128 * 512 * 2,
    "Causal attention": 61 * 7_168 * 1_024 * 2,
    "MLP RMSNorm": 61 * 7_168 * 2,
    "Dense MLP": 3 * 2_304 * 7_168 * 2,
    "Router": 60 * (384 * 7_168 * 2 + 384 * 4),
    "Routed experts": 60
    * 384
    * (
        2 * (256 * 7_168 // 8 * 4 + 256 * 7_168 // 32 * 2 + 8)  # gate_proj, up_proj [256, 7,168]
        + (7_168 * 256 // 8 * 4 + 7_168 * 256 // 32 * 2 + 8)  # down_proj [7,168, 256]
    ),
    "Shared expert": 60 * 3 * 256 * 7_168 * 2,
    "Final RMSNorm": 7_168 * 2,
    "Output head": 163_840 // 8 * 7_168 * 2,
}
K2_THINKING_DP8_EP8 = {
    **K2_THINKING_TP8,
    "Token embedding": 163_840 * 7_168 * 2,
    "Query heads": 61 * 12_288 * 1_536 * 2,
    "Key content up-projection": 61 * 64 * 128 * 512 * 2,
    "Value heads": 61 * 64 * 128 * 512 * 2,
    "Causal attention": 61 * 7_168 * 8_192 * 2,
    "Dense MLP": 3 * 18_432 * 7_168 * 2,
    "Routed experts": 60 * 48 * 3 * (2_048 * 7_168 // 8 * 4 + 2_048 * 7_168 // 32 * 2 + 8),
    "Shared expert": 60 * 3 * 2_048 * 7_168 * 2,
    "Output head": 163_840 * 7_168 * 2,
}


@pytest.mark.parametrize(
    "args, expected",
    [
        ((), K2_TP8),
        (("--dp", "8", "--ep", "8"), K2_DP8_EP8),
        (("--config", K25, "--text-only"), K2_THINKING_TP8),
        (("--config", K25, "--text-only", "--dp", "8", "--ep", "8"), K2_THINKING_DP8_EP8),
    ],
    ids=["kimi-k2-tp8", "kimi-k2-dp8-ep8", "k2-thinking-tp8", "k2-thinking-dp8-ep8"],
)
def test_weights_per_gpu_component_by_component(args, expected):
    report = plan_json("--gpus", "8xH200", *args)
    assert per_gpu(report) == expected
    assert report["stages"][0]["weights_bytes"] == sum(expected.values())


def test_the_whole_model_column_adds_up_to_the_checkpoint():
    report = plan_json("--gpus", "8xH200")
    # Kimi-K2-Instruct's tensor data less its 61 rotary buffers (README, `params --by memory`)
    assert sum(c["model_bytes"] for c in report["weights"]) == 1_029_173_249_888
    copies = next(c for c in report["weights"] if c["name"] == "vLLM's BF16 W_UK, W_UV")
    assert (copies["in_checkpoint"], copies["model_bytes"], copies["kind"]) == (False, 0, "absorption copies")


def test_vllms_bf16_copies_only_beside_a_quantized_kv_b_proj():
    # K2-Thinking's kv_b_proj is BF16 already: vLLM only views it, nothing is added
    assert "vLLM's BF16 W_UK, W_UV" not in per_gpu(
        plan_json("--gpus", "8xH200", "--config", K25, "--text-only")
    )
    out = invoke("plan", "--detail", "--gpus", "8xH200").stdout
    assert "vLLM's BF16 W_UK, W_UV: vLLM's MLA layer keeps BF16 copies of an FP8 kv_b_proj" in out


def test_k25_vision_tower_is_replicated_and_text_only_drops_it():
    with_vision = per_gpu(plan_json("--gpus", "8xH200", "--config", K25))
    assert with_vision["Vision tower and projector"] == (416_866_032 + 54_277_888) * 2  # BF16
    assert "Vision tower and projector" not in per_gpu(
        plan_json("--gpus", "8xH200", "--config", K25, "--text-only")
    )


def test_rules_are_stated_per_component():
    rules = {c["name"]: c["rule"] for c in plan_json("--gpus", "8xH200")["weights"]}
    assert rules["Query compression"] == "replicated"
    assert rules["Query heads"] == "by heads: 8 of 64"
    assert rules["Causal attention"] == "by heads, input side: 8 of 64"
    assert rules["Dense MLP"] == "by width: 2,304 of 18,432"
    assert rules["Routed experts"] == "each expert by width: 256 of 2,048"
    assert rules["Token embedding"] == "by vocabulary: 20,480 of 163,840 rows"
    ep = {c["name"]: c["rule"] for c in plan_json("--gpus", "8xH200", "--dp", "8", "--ep", "8")["weights"]}
    assert ep["Routed experts"] == "whole experts: 48 of 384"
    assert ep["Query heads"] == "whole on every GPU"
    uneven = {c["name"]: c for c in plan_json("--gpus", "10xH200", "--dp", "10", "--ep", "10")["weights"]}
    assert uneven["Routed experts"]["rule"] == "whole experts: 39 of 384 (the fullest GPU)"  # ceil(384 / 10)


def test_ep_1_is_expert_parallelism_off():
    # --ep 1 is no expert parallelism: the routed experts split by width as with no --ep at all
    for args in ((), ("--ep", "1")):
        report = plan_json("--gpus", "8xH200", *args)
        assert (report["parallel"]["label"], report["parallel"]["ep"]) == ("TP8", 1)
        assert per_gpu(report)["Routed experts"] == K2_TP8["Routed experts"]
    # with DP attention and EP off, every expert is split over all TP × DP = 8 GPUs: 2,048 / 8 wide
    report = plan_json("--gpus", "8xH200", "--dp", "8", "--ep", "1")
    assert report["parallel"]["label"] == "DP8"
    assert per_gpu(report)["Routed experts"] == 60 * 384 * 3 * (256 * 7_168 + 2 * 56 * 4)
    rules = {c["name"]: c["rule"] for c in report["weights"]}
    assert rules["Routed experts"] == "each expert by width: 256 of 2,048"
    fails_cleanly(invoke("plan", "--gpus", "8xH200", "--ep", "0"), "--ep 0: expected a positive integer")


def test_vocabulary_is_padded_to_a_multiple_of_64_then_split(write_config, kimi_config):
    # vLLM's VocabParallelEmbedding: pad_vocab_size(vocab, 64) rows (DEFAULT_VOCAB_PADDING_SIZE), then
    # divide(padded, tp_size), which asserts the division is exact; it does not pad to 64 × TP.
    # A vocabulary of 163,842: ceil(163,842 / 64) × 64 = 2,561 × 64 = 163,904 rows; over TP8, 20,488.
    path = str(write_config({**kimi_config, "vocab_size": 163_842}))
    weights = per_gpu(plan_json("--config", path, "--gpus", "8xH200", "--kv-memory", "1GiB"))
    assert weights["Token embedding"] == weights["Output head"] == 20_488 * 7_168 * 2
    rules = {c["name"]: c["rule"] for c in plan_json("--config", path, "--gpus", "8xH200")["weights"]}
    assert rules["Output head"] == "by vocabulary: 20,488 of 163,904 rows, padded from 163,842"
    # over 16 GPUs, 163,904 / 16 = 10,244 rows each; padding to 64 × 16 = 1,024 would have given
    # ceil(163,842 / 1,024) × 1,024 / 16 = 164,864 / 16 = 10,304
    weights16 = per_gpu(plan_json("--config", path, "--gpus", "16xH200", "--kv-memory", "1GiB"))
    assert weights16["Output head"] == 10_244 * 7_168 * 2
    # 163,904 rows do not split over 3 GPUs (48 heads, so that the heads do): vLLM's divide asserts
    path3 = str(write_config({**kimi_config, "vocab_size": 163_842, "num_attention_heads": 48}, "h48.json"))
    fails_cleanly(
        invoke("plan", "--config", path3, "--gpus", "3xH200", "--kv-memory", "1GiB"),
        "--tp 3",
        "163,904 rows",
    )


def test_pipeline_stages_split_layers_as_vllm_does():
    # vLLM's get_pp_indices: 61 // pp per stage, the remainder to the stages before the last
    assert [len(s) for s in pipeline_stages(61, 2)] == [31, 30]
    assert [len(s) for s in pipeline_stages(61, 4)] == [15, 15, 16, 15]
    assert [len(s) for s in pipeline_stages(61, 3)] == [20, 21, 20]
    report = plan_json("--gpus", "8xH200", "--config", K25, "--text-only", "--tp", "4", "--pp", "2")
    first, last = report["stages"]
    assert (first["layers"][0], first["layers"][-1], last["layers"][0], last["layers"][-1]) == (0, 30, 31, 60)
    weights = {c["name"]: c["bytes_per_gpu"] for c in report["weights"]}
    assert weights["Token embedding"] == [163_840 // 4 * 7_168 * 2, 0]
    assert weights["Output head"] == [0, 163_840 // 4 * 7_168 * 2]
    assert weights["Dense MLP"] == [3 * 4_608 * 7_168 * 2, 0]  # layer 0 is on the first stage
    assert (first["kv_layers"], last["kv_layers"]) == (31, 30)
    assert report["kv_cache"]["tokens_per_gpu"] == min(first["kv_tokens"], last["kv_tokens"])


# --- the pool, the reserve and the verdict -----------------------------------------------------------


def test_pool_is_usable_memory_less_weights_and_the_given_reserve():
    report = plan_json("--gpus", "8xH200", "--config", K25, "--text-only", "--reserve", "8GiB")
    stage = report["stages"][0]
    usable = H200_USABLE  # from CUDA's total, not nvidia-smi's
    assert report["usable_bytes"] == usable
    assert stage["kv_pool_bytes"] == usable - sum(K2_THINKING_TP8.values()) - 8 * GIB
    assert stage["kv_tokens"] == stage["kv_pool_bytes"] // (64 * 70_272) * 64
    assert report["reserve"] == {
        "bytes": 8 * GIB,
        "estimate": False,
        "formula": "",
        "terms": [],
        "assumes": "",
    }


def test_reserve_estimate_is_labelled_and_shows_its_formula():
    report = plan_json("--gpus", "8xH200")
    reserve = report["reserve"]
    assert reserve["estimate"] is True
    terms = {t["name"]: t["bytes"] for t in reserve["terms"]}
    # 8,192 tokens × (8 top-k copies × max(2 × 256, 7,168) + 8 × 256 + 4 × 7,168) bf16 elements
    assert terms["activations"] == 8_192 * (8 * 7_168 + 8 * 256 + 4 * 7_168) * 2 == 1_442_840_576
    # the sampler's dummy run over 1,024 rows, at its sort: bf16 logits 2 + fp32 copy 4 + int64 iota 8 +
    # sorted values 4 and indices 8 + CUB's alternate key and value buffers 4 + 8 = 38 B per entry
    assert terms["sampler"] == 1_024 * 163_840 * (2 + 4 + 8 + 4 + 8 + 4 + 8)
    assert terms["non-torch"] == 3 * GIB // 2
    assert reserve["bytes"] == sum(terms.values())
    out = invoke("plan", "--detail", "--gpus", "8xH200").stdout
    assert "− reserve (an estimate, below)" in out
    assert "Reserve, an estimate of vLLM V1's start-up profile" in out
    assert reserve["assumes"].startswith("vLLM V1's start-up profile (gpu_worker.determine_available_memory)")
    assert "8,192 × (8 × max(2 × 256, 7,168) + 8 × 256 + 4 × 7,168) × 2 B" in out
    smaller = plan_json("--gpus", "8xH200", "--max-batched-tokens", "2048", "--max-num-seqs", "256")
    assert {t["name"]: t["bytes"] for t in smaller["reserve"]["terms"]}["sampler"] == 256 * 163_840 * 38


def test_kimi_k2_fp8_does_not_fit_8_h200_and_fits_16():
    # Moonshot: the smallest unit for K2 FP8 at 128K on H200 is 16 GPUs (TP or DP + EP)
    for args in ((), ("--dp", "8", "--ep", "8")):
        report = plan_json("--gpus", "8xH200", *args)
        assert report["fits"] is False and report["short_by_bytes"] > 0
        assert report["kv_cache"]["tokens_per_gpu"] == 0
    for args in ((), ("--dp", "16", "--ep", "16")):
        report = plan_json("--gpus", "16xH200", *args)
        assert report["fits"] is True and report["short_by_bytes"] == 0
    out = invoke("plan", "--gpus", "8xH200").stdout
    # 121 GiB of weights fit the 126 GiB vLLM may use; with the reserve no KV page is left
    assert (
        "on 8 × H200, TP8 (vLLM 0.22.0): does not fit: the weights and the reserve leave no room for KV cache"
        in flat(out.split("\nKV cache:")[0])
    )
    assert plan_json("--gpus", "8xH200")["answer"]["verdict"] == "weights_do_not_fit"


def test_short_by_is_what_one_sequence_lacks():
    # with the pool given, one GPU lacks a 131,072-token sequence's latent less the pool
    report = plan_json("--gpus", "8xH200", "--kv-memory", "1GiB")
    assert report["fits"] is False
    assert report["short_by_bytes"] == 131_072 * 70_272 - GIB


def test_k2_thinking_fits_8_h200_at_tp8_and_dp8_ep8():
    for args in ((), ("--dp", "8", "--ep", "8")):
        report = plan_json("--gpus", "8xH200", "--config", K25, "--text-only", *args)
        assert report["fits"] is True
        kv = report["kv_cache"]
        assert kv["tokens_total"] == kv["tokens_per_gpu"] * report["parallel"]["dp"]


def test_min_gpus_finds_a_layout_that_holds_it():
    report = plan_json("--gpus", "8xH200", "--config", K25, "--text-only", "--min-gpus")
    count, parallel = report["min_gpus"]["count"], report["min_gpus"]["parallel"]
    whole = sum(c["model_bytes"] for c in report["weights"])
    assert count >= -(-whole // report["usable_bytes"])  # at least the weights' share of usable memory
    args = ["--tp", str(parallel["tp"]), "--pp", str(parallel["pp"]), "--dp", str(parallel["dp"])]
    if parallel["ep"] > 1:
        args += ["--ep", str(parallel["ep"])]
    assert plan_json("--gpus", f"{count}xH200", "--config", K25, "--text-only", *args)["fits"] is True
    out = invoke("plan", "--gpus", "8xH200", "--config", K25, "--text-only", "--min-gpus").stdout
    assert f"--min-gpus: {count} × H200 ({parallel['label']})" in out


# K2-Thinking's layers at TP1, by hand (BF16 but for the INT4 routed experts; see K2_THINKING_TP8)
K2_THINKING_ATTENTION = (
    7_168 * 2  # attention RMSNorm
    + (1_536 * 7_168 + 1_536) * 2  # q_a_proj + q_a_layernorm
    + (576 * 7_168 + 512) * 2  # kv_a_proj_with_mqa (latent and rotary key) + kv_a_layernorm
    + 12_288 * 1_536 * 2  # q_b_proj
    + 16_384 * 512 * 2  # kv_b_proj
    + 7_168 * 8_192 * 2  # o_proj
    + 7_168 * 2  # MLP RMSNorm
)
K2_THINKING_MOE = (
    384 * 7_168 * 2
    + 384 * 4  # router and its F32 bias
    + 384 * 3 * (2_048 * 7_168 // 8 * 4 + 2_048 * 7_168 // 32 * 2 + 8)  # INT4 experts
    + 3 * 2_048 * 7_168 * 2  # shared expert
)
K2_THINKING_WHOLE = (
    61 * K2_THINKING_ATTENTION
    + 3 * 18_432 * 7_168 * 2  # dense MLP
    + 60 * K2_THINKING_MOE
    + 2 * 163_840 * 7_168 * 2  # embedding and head
    + 7_168 * 2  # final norm
)


def test_min_gpus_is_the_fewest_that_hold_it():
    args = ("--config", K25, "--text-only", "--reserve", "4GiB", "--max-model-len", "1000")
    report = plan_json("--gpus", "8xH200", *args, "--min-gpus")
    assert K2_THINKING_WHOLE == 594_205_904_896  # README, `params --config fixtures/kimi-k2.5 --by memory`
    # 4 GPUs cannot: the weights alone exceed their usable memory, whatever the layout
    assert 4 * H200_USABLE < K2_THINKING_WHOLE
    assert (report["min_gpus"]["count"], report["min_gpus"]["parallel"]["label"]) == (5, "TP1 × PP5")
    # 5 can: vLLM splits 61 layers into stages of 12, 12, 12, 13 and 12; the fourth holds 13 MoE layers
    # and the KV of a 1,000-token sequence there, 16 pages of 64 tokens × 13 layers × 1,152 B
    assert pipeline_stages(61, 5)[3] == tuple(range(36, 49))
    fourth = 13 * (K2_THINKING_ATTENTION + K2_THINKING_MOE)
    assert H200_USABLE - fourth - 4 * GIB >= 16 * 64 * 13 * 1_152
    five = plan_json("--gpus", "5xH200", *args, "--tp", "1", "--pp", "5")
    assert five["stages"][3]["weights_bytes"] == fourth and five["fits"] is True


def test_min_gpus_search_ends_in_bounded_time_and_says_why_none_fits():
    # issue 26: these searched every count up to 3,904 GPUs, each with every layout (minutes); the
    # search is a binary search per family of layouts now, about a hundred plans
    for gpus, name, memory, short in (
        ("xH200", "H200", ("--reserve", "125GiB"), "480 MiB"),
        ("", "GPU", ("--gpu-memory", "4GiB"), "1.01 GiB"),
    ):
        report = plan_json("--gpus", f"8{gpus}", *memory, "--min-gpus")
        search = report["min_gpus_search"]
        assert report["min_gpus"] is None
        # TP × PP ends at 64 heads × 61 layers (search_limit); 7 TP sizes (the divisors of 64), each with
        # and without EP past TP1, and DP + EP: 14 families of at most 3,904 layouts, each searched in
        # at most 12 plans (2**12 > 3,904)
        assert search["largest_tried"] == 64 * 61
        assert search["layouts_planned"] <= 14 * 12
        # the closest: one layer a stage (PP61) at TP16, the widest TP that splits K2's 2,048-wide expert
        # matrices into whole 128-wide FP8 blocks (config.json: moe_intermediate_size, weight_block_size)
        closest = search["closest"]
        assert (closest["count"], closest["parallel"]["label"]) == (16 * 61, "TP16 × PP61")
        again = plan_json("--gpus", f"976{gpus}", *memory, "--tp", "16", "--pp", "61")
        assert again["short_by_bytes"] == closest["short_by_bytes"] > 0
        out = flat(invoke("plan", "--gpus", f"8{gpus}", *memory, "--min-gpus").stdout)
        assert (
            f"it tried up to 3,904 × {name}; the closest, 976 × {name} (TP16 × PP61), is short by {short}"
            in out
        )
    # a reserve larger than a GPU's usable memory: no count is tried, and the line says why
    report = plan_json("--gpus", "8xH200", "--reserve", "140GiB", "--min-gpus")
    assert report["min_gpus_search"]["largest_tried"] == 0
    out = flat(invoke("plan", "--gpus", "8xH200", "--reserve", "140GiB", "--min-gpus").stdout)
    assert "so it tried no count" in out and "each H200 has 126 GiB usable" in out  # 135,098,951,271 B


def test_what_rests_on_an_estimate_is_labelled():
    # the default reserve is an estimate: the pool and all that follows from it are too
    report = plan_json("--gpus", "8xH200", "--config", K25, "--text-only", "--min-gpus")
    assert report["estimated_inputs"] == ["reserve"]
    assert report["estimate"] is report["kv_cache"]["estimate"] is report["min_gpus"]["estimate"] is True
    assert all(stage["estimate"] for stage in report["stages"])
    out = invoke("plan", "--detail", "--gpus", "8xH200", "--config", K25, "--text-only").stdout
    assert "Estimated: the reserve; --kv-memory with the pool the engine logs is exact" in flat(out)
    assert "= KV cache pool (an estimate)" in out
    # a given reserve on a GPU whose CUDA total is known: nothing estimated
    given = plan_json("--gpus", "8xH200", "--config", K25, "--text-only", "--reserve", "4GiB")
    assert (given["estimated_inputs"], given["estimate"], given["kv_cache"]["estimate"]) == ([], False, False)
    # the MI325X's memory is nominal and its CUDA total estimated: labelled, even with a given reserve
    mi325x = plan_json("--gpus", "8xMI325X", "--config", K25, "--text-only", "--reserve", "4GiB")
    assert (mi325x["gpus"]["memory_source"], mi325x["gpus"]["cuda_memory_estimated"]) == ("nominal", True)
    assert (mi325x["estimated_inputs"], mi325x["estimate"]) == (["cuda_memory"], True)
    out = invoke(
        "plan", "--detail", "--gpus", "8xMI325X", "--config", K25, "--text-only", "--reserve", "4GiB"
    ).stdout
    assert "262,144 MiB nominal (no device report found)" in flat(out)
    assert "CUDA's total, an estimated 262,128 MiB" in flat(out)
    # a pool an engine printed rests on nothing estimated, but --min-gpus still sizes every layout from
    # usable memory less the estimated reserve
    printed = plan_json("--gpus", "8xH200", "--kv-memory", "40GiB", "--min-gpus")
    assert printed["estimate"] is False
    assert (printed["min_gpus"]["estimate"], printed["min_gpus"]["estimated_inputs"]) == (True, ["reserve"])
    # a memory the user gives is the user's: labelled as given, not estimated
    custom = plan_json(
        "--gpus", "8", "--gpu-memory", "141GiB", "--config", K25, "--text-only", "--reserve", "4GiB"
    )
    assert (custom["gpus"]["memory_source"], custom["estimate"]) == ("--gpu-memory", False)
    out = invoke(
        "plan", "--detail", "--gpus", "8", "--gpu-memory", "141GiB", "--config", K25, "--text-only"
    ).stdout
    assert "141 GiB (151,397,597,184 B) as given by --gpu-memory, used as the total CUDA reports" in flat(out)


def test_mtp_layer_is_loaded_only_when_asked():
    without = plan_json("--gpus", "8xH200", "--config", V3, "--kv-memory", "10GiB")
    with_mtp = plan_json("--gpus", "8xH200", "--config", V3, "--kv-memory", "10GiB", "--mtp")
    assert "Multi-token prediction" not in per_gpu(without)
    assert per_gpu(with_mtp)["Multi-token prediction"] > 0
    assert with_mtp["kv_cache"]["layers"] == 62  # its own attention layer caches too
    assert with_mtp["kv_cache"]["bytes_per_token_per_gpu"] == 62 * 1_152


def test_text_output_has_the_tables_and_the_bar():
    out = invoke("plan", "--detail", "--gpus", "8xH200", "--config", K25, "--text-only").stdout
    assert "on 8 × H200, TP8 (vLLM 0.22.0): fits" in out.splitlines()[0]
    assert (
        "H200: NVIDIA H200 SXM 141GB, 143,771 MiB as nvidia-smi reports it; the plan uses CUDA's total, "
        "143,156 MiB, which vLLM sizes against" in flat(out)
    )
    assert "Routed experts" in out and "each expert by width: 256 of 2,048" in out
    assert "█" in out and "▓ reserve" in out and "▒ KV cache" in out
    assert "each of the 8 TP ranks holds all of it (the latent belongs to no head)" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_plan_imports_neither_torch_nor_the_hub():
    result = run_kimicount("plan", "--gpus", "8xH200", "--json", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    imported = imported_modules(result.stderr)
    assert "kimicount.deploy.plan" in imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "huggingface_hub")}


def test_the_deployment_modules_import_neither_rich_nor_torch_nor_the_hub():
    assert (
        heavy_imports(
            "kimicount.deploy.hardware",
            "kimicount.deploy.placement",
            "kimicount.deploy.plan",
            "kimicount.deploy.reports",
        )
        == []
    )


# --- what no engine can run: one line, exit 2 ------------------------------------------------------


@pytest.mark.parametrize(
    "args, needles",
    [
        ([], ["Missing option '--gpus'"]),
        (["--gpus", "8xH300"], ["unknown accelerator 'H300'", "H200"]),
        (["--gpus", "eight"], ["--gpus 'eight'", "8xH200"]),
        (["--gpus", "8"], ["name the GPU type", "--gpu-memory"]),
        (["--gpus", "6xH200"], ["--tp 6", "64 attention heads"]),
        (["--gpus", "8xH200", "--dp", "8", "--ep", "4"], ["--ep 4", "TP × DP", "--ep 8"]),
        (["--gpus", "8xH200", "--dp", "3"], ["--gpus 8", "--dp 3"]),
        (["--gpus", "8xH200", "--tp", "4"], ["--tp 4 × --pp 1 × --dp 1 = 4 GPUs", "--gpus says 8"]),
        (["--gpus", "64xH200", "--pp", "64"], ["--pp 64", "more stages than the 61 layers"]),
        (["--gpus", "8xH200", "--dcp", "3"], ["--dcp 3", "must divide --tp 8"]),
        (
            ["--gpus", "32xH200"],
            ["--tp 32", "mlp.gate_proj", "576 rows per GPU (18,432 over 32)", "FP8 blocks"],
        ),
        (
            ["--gpus", "32xH200", "--tp", "16", "--dp", "2"],
            ["--tp 16 × --dp 2", "experts", "64 rows", "FP8 blocks"],
        ),
        (["--gpus", "64xH200", "--tp", "64"], ["q_b_proj", "192 rows", "FP8 blocks"]),
        (["--gpus", "8xH200", "--mtp"], ["--mtp", "no multi-token-prediction layer"]),
        (["--gpus", "8xH200", "--kv-dtype", "int4"], ["--kv-dtype 'int4'", "bf16"]),
        (["--gpus", "8xH200", "--kv-layout", "paged"], ["--kv-layout 'paged'", "latent"]),
        (["--gpus", "8xH200", "--kv-memory", "lots"], ["--kv-memory 'lots'", "GiB"]),
        (["--gpus", "8xH200", "--reserve", "0"], ["--reserve '0'", "at least 1 byte"]),
        (["--gpus", "8xH200", "--gpu-memory-utilization", "1.5"], ["--gpu-memory-utilization 1.5", "(0, 1]"]),
        (["--gpus", "8xH200", "--block-size", "0"], ["--block-size 0", "positive"]),
        (["--gpus", "8xH200", "--hbm-bandwidth", "fast"], ["--hbm-bandwidth 'fast'", "TB/s"]),
    ],
)
def test_bad_layouts_fail_in_one_line(args, needles):
    fails_cleanly(invoke("plan", *args), *needles)


def test_int4_groups_are_not_cut():
    # K2-Thinking's expert down_proj has 2,048 inputs in groups of 32: 128 GPUs would leave 16 each
    fails_cleanly(
        invoke("plan", "--config", K25, "--gpus", "128xH200", "--tp", "8", "--dp", "16"), "INT4 groups of 32"
    )


def test_the_dp_layout_is_said_to_be_vllms():
    # SGLang's DP attention splits the dense MLP and the head over the whole TP × DP group; vLLM's keeps
    # them whole in each DP replica, as the DP8 + EP8 hand table above has them
    args = ("--gpus", "8xH200", "--dp", "8", "--ep", "8", "--kv-memory", "1GiB")
    assert plan_json(*args)["parallel"]["engine"] == "vLLM"
    assert "DP8 is vLLM's data-parallel attention: each of the 8 replicas holds the whole attention" in flat(
        invoke("plan", "--detail", *args).stdout
    )


# --- redundant experts (EPLB) ---------------------------------------------------------------------------


def test_redundant_experts_add_whole_expert_slots_to_every_gpu():
    # vLLM --enable-eplb --num-redundant-experts 8 over EP8: (384 + 8) ÷ 8 = 49 slots per GPU, each a whole
    # expert; without them 384 ÷ 8 = 48. DeepSeek's EPLB asserts num_physical_experts % num_gpus == 0.
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
    plain, redundant = plan_json(*args), plan_json(*args, "--num-redundant-experts", "8")
    assert per_gpu(redundant)["Routed experts"] * 48 == per_gpu(plain)["Routed experts"] * 49
    rules = {c["name"]: c["rule"] for c in redundant["weights"]}
    assert rules["Routed experts"] == "whole experts: 49 of 384 + 8 redundant"
    assert redundant["parallel"]["redundant_experts"] == 8
    whole = {c["name"]: c["model_bytes"] for c in redundant["weights"]}
    assert (
        whole["Routed experts"] == {c["name"]: c["model_bytes"] for c in plain["weights"]}["Routed experts"]
    )
    out = flat(invoke("plan", "--detail", *args, "--num-redundant-experts", "8").stdout)
    assert "Redundant experts: 384 + 8 = 392 expert slots over EP8, 49 per GPU" in out
    # SGLang's spelling of the same option
    sglang = plan_json(
        *args[:-2],
        "--engine",
        "sglang",
        "--enable-dp-attention",
        "--ep-num-redundant-experts",
        "8",
        "--kv-memory",
        "1GiB",
    )
    assert per_gpu(sglang)["Routed experts"] == per_gpu(redundant)["Routed experts"]


def test_min_gpus_counts_redundant_experts():
    # without redundant experts the fewest H200s hold K2.5 as TP2 × PP3; with 8 redundant slots a layout
    # needs expert parallelism whose size divides 392, and the search finds one that holds them
    args = ("--config", K25, "--text-only", "--gpus", "8xH200", "--dp", "8", "--ep", "8", "--min-gpus")
    found = plan_json(*args, "--num-redundant-experts", "8")["min_gpus"]["parallel"]
    assert found["ep"] > 1 and 392 % found["ep"] == 0 and found["redundant_experts"] == 8
    assert plan_json(*args)["min_gpus"]["parallel"]["ep"] == 1


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--dp", "8", "--ep", "8", "--num-redundant-experts", "3"], ["387 slots do not divide over EP 8"]),
        (
            ["--num-redundant-experts", "8"],
            ["--num-redundant-experts 8", "turn on expert parallelism (--ep 8)"],
        ),
        (["--num-redundant-experts", "-1"], ["--num-redundant-experts"]),
    ],
)
def test_redundant_experts_that_do_not_divide_are_refused(args, needles):
    fails_cleanly(invoke("plan", "--gpus", "8xH200", *args), *needles)
