"""The forward pass: shapes, FLOPs per component, the three ways of running MLA, and the speed floor.

Independent figures: FLOPs written out by hand (a matmul of in × out is 2 × in × out per token) from
Kimi K2's config; the absorbed decode 2 × H × (576 + 512) × L plus its two absorption matmuls; the
expected distinct experts E × (1 − (1 − k/E)^B) at B = 1 is exactly k; DeepSeek's inference-system
overview (Open Source Week, day 6, 2025): decode on H800 with routed experts EP144 and attention DP144,
2 routed experts per GPU (with 32 redundant ones), about 14.8k output tokens/s per H800 node at an
average KV length of 4,989.
"""

from __future__ import annotations

import importlib.util
import json
from fractions import Fraction

import pytest

from kimicount.flow import Mla, absorbed_crossover, attention_flops, expected_experts, prefill_attention_flops
from kimicount.spec import bundled_spec

from .helpers import FIXTURES, ROOT, fails_cleanly, invoke
from .test_plan import K2_THINKING_TP8, K2_TP8

K25 = str(FIXTURES / "kimi-k2.5")
V3 = str(FIXTURES / "deepseek-v3")
H, L = 64, 4096  # Kimi K2's heads; a context


def cli_json(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def find(node: dict, *path: str) -> dict:
    for name in path:
        node = next(c for c in node["children"] if c["name"] == name)
    return node


# --- shapes -----------------------------------------------------------------------------------------


def test_shapes_view_names_the_dimensions():
    out = invoke("params", "--detail", "shapes", "--depth", "all").stdout
    assert "Shapes" in out.splitlines()[1]
    for text in (
        "x [B, T, 7,168] → c_Q [B, T, 1,536]",
        "c_Q [B, T, 1,536] → q [B, T, 64 × 192]",
        "c_KV [B, T, 512] → k_C [B, T, 64 × 128]",
        "x [B, T, 7,168] → k_R [B, T, 64]",
        "c_KV [B, T, 512] → v [B, T, 64 × 128]",
        "o [B, T, 64 × 128] → h [B, T, 7,168]",
        "x [B, T, 7,168] → g·u [B, T, 18,432] → y [B, T, 7,168]",
        "x [B, T, 7,168] → g·u, top 8 of 384 [B·T·8, 2,048] → y [B, T, 7,168]",
        "x [B, T, 7,168] → logits [B, T, 163,840]",
        "x [B, T, 7,168] → h [B, T, 7,168]; reads c_KV [B, L, 512], k_R [B, L, 64]",
    ):
        assert text in out, text


def test_shapes_in_json():
    tree = cli_json("params")["tree"]
    attention = find(tree, "61 transformer blocks", "60 MoE blocks (layers 1–60)", "Latent attention")
    key = find(attention, "Key heads", "Key content up-projection")["flow"]
    assert key["inputs"] == [
        {"name": "c_KV", "shape": ["B", "T", 512], "dims": ["batch", "positions", "key–value latent"]}
    ]
    assert key["outputs"][0]["shape"] == ["B", "T", 64 * 128]
    assert key["outputs"][0]["dims"][2] == "64 heads × 128"
    assert attention["flow"]["reads"][0]["shape"] == ["B", "L", 512]
    assert tree["flow"] is None  # groups of blocks have no one flow


def test_shapes_without_query_compression():
    out = invoke(
        "params", "--detail", "shapes", "--depth", "all", "--config", str(FIXTURES / "deepseek-v2-lite")
    ).stdout
    assert "h [B, T, 2,048] → q [B, T, 16 × 192]" in out  # q_proj straight from the hidden state


# --- FLOPs per component, by hand ---------------------------------------------------------------------

# Per token, one MoE layer of Kimi K2: 2 × in × out for every matmul
MOE_LAYER = {
    "Query compression": 2 * 7_168 * 1_536,
    "Key–value compression": 2 * 7_168 * 512,
    "Query heads": 2 * 1_536 * 64 * 192,
    "Key content up-projection": 2 * 512 * 64 * 128,
    "Shared rotary key": 2 * 7_168 * 64,
    "Value heads": 2 * 512 * 64 * 128,
    "Causal attention": 2 * 64 * 128 * 7_168,
    "Router": 2 * 7_168 * 384,
    "Routed experts": 8 * 3 * 2 * 7_168 * 2_048,  # 8 of 384 experts, each gate, up and down
    "Shared expert": 3 * 2 * 7_168 * 2_048,
}
DENSE_MLP = 3 * 2 * 7_168 * 18_432
HEAD = 2 * 7_168 * 163_840


def test_flops_per_token_of_every_kimi_k2_component():
    report = cli_json("flops")
    tree = report["tree"]
    moe = find(tree, "61 transformer blocks", "60 MoE blocks (layers 1–60)")
    attention = find(moe, "Latent attention")
    for name in (
        "Query compression",
        "Key–value compression",
        "Query heads",
        "Value heads",
        "Causal attention",
    ):
        assert find(attention, name)["flops_per_token"] == 60 * MOE_LAYER[name], name
    for name in ("Key content up-projection", "Shared rotary key"):
        assert find(attention, "Key heads", name)["flops_per_token"] == 60 * MOE_LAYER[name], name
    for name in ("Router", "Routed experts", "Shared expert"):
        assert find(moe, "Mixture of experts", name)["flops_per_token"] == 60 * MOE_LAYER[name], name
    dense = find(tree, "61 transformer blocks", "1 dense block (layer 0)")
    assert find(dense, "Dense MLP")["flops_per_token"] == DENSE_MLP
    assert find(tree, "Output head")["flops_per_token"] == HEAD
    assert find(tree, "Token embedding")["flops_per_token"] == 0  # a lookup
    assert find(moe, "Attention RMSNorm")["flops_per_token"] == 0  # not a matmul
    attention_layer = sum(
        v for k, v in MOE_LAYER.items() if k not in ("Router", "Routed experts", "Shared expert")
    )
    total = (
        61 * attention_layer
        + DENSE_MLP
        + 60 * (MOE_LAYER["Router"] + MOE_LAYER["Routed experts"] + MOE_LAYER["Shared expert"])
        + HEAD
    )
    assert report["matmul_flops_per_token"] == tree["flops_per_token"] == total
    assert (
        find(moe, "Mixture of experts", "Routed experts")["calculation"] == "2 × 3 × 7,168 × 2,048 × 8 of 384"
    )
    assert find(attention, "Query heads")["compute"] == "fp8"
    assert find(tree, "Output head")["compute"] == "bf16"


def test_the_three_ways_of_running_mla_in_decode():
    report = cli_json("flops", "--context", str(L))
    ways = {entry["way"]: entry for entry in report["attention"]}
    naive = 2 * H * (128 + 64 + 128) * L
    absorbed = 2 * H * (576 + 512) * L  # scores over the 576-wide latent, values over its 512
    reexpanded = naive + 2 * 512 * H * (128 + 128) * (L - 1)  # kv_b_proj over the L − 1 cached latents
    assert ways["naive"]["decode_flops_per_token_per_layer"] == naive
    assert ways["absorbed"]["decode_flops_per_token_per_layer"] == absorbed
    assert ways["reexpanded"]["decode_flops_per_token_per_layer"] == reexpanded
    # the absorbed way's two absorption matmuls, W_UK (128 -> 512 per head) on the query and W_UV
    # (512 -> 128) on the output, are kv_b_proj's own FLOPs, counted in its rows
    moe = find(report["tree"], "61 transformer blocks", "60 MoE blocks (layers 1–60)", "Latent attention")
    assert find(moe, "Key heads", "Key content up-projection")["flops_per_token"] == 60 * 2 * H * 128 * 512
    assert find(moe, "Value heads")["flops_per_token"] == 60 * 2 * H * 512 * 128
    matmuls = report["matmul_flops_per_token"]
    assert ways["absorbed"]["decode_flops_per_token"] == matmuls + 61 * absorbed


def test_prefill_attention_is_the_causal_average():
    # token t of T attends to t positions: Σ 2·H·320·t over t = 1 … T, per token
    for tokens in (1, 7, 4096):
        assert prefill_attention_flops(bundled_spec(), Mla.naive, tokens) == Fraction(
            sum(2 * H * 320 * t for t in range(1, tokens + 1)), tokens
        )
    ways = {e["way"]: e for e in cli_json("flops", "--tokens", "4096")["attention"]}
    assert ways["naive"]["prefill_flops_per_token_per_layer"] == H * 320 * 4097
    assert (
        ways["reexpanded"]["prefill_flops_per_token_per_layer"] == H * 320 * 4097
    )  # expanded once in prefill
    assert ways["absorbed"]["prefill_flops_per_token_per_layer"] == H * 1_088 * 4097


def test_absorbed_beats_reexpanding_from_two_positions():
    # absorbed 2·64·1,088·L against 2·64·320·L + 2·512·64·256·(L − 1): cheaper once L > 1.006
    e, n, a = 2 * 512 * 64 * 256, 2 * 64 * 320, 2 * 64 * 1_088
    assert e / (n + e - a) == pytest.approx(1.0059, abs=1e-4)
    spec = bundled_spec()
    assert absorbed_crossover(spec) == 2
    assert attention_flops(spec, Mla.absorbed, 1).flops > attention_flops(spec, Mla.reexpanded, 1).flops
    assert attention_flops(spec, Mla.absorbed, 2).flops < attention_flops(spec, Mla.reexpanded, 2).flops
    assert cli_json("flops")["absorbed_cheaper_than_reexpanded_from"] == 2
    out = invoke("flops").stdout
    assert "Absorbed takes fewer FLOPs than re-expanding the latent from L = 2 on" in out
    assert "= 2 × 64 × (512 + 64 + 512) × 4,096 = 570,425,344" in out


def test_expected_distinct_experts():
    assert expected_experts(384, 8, 1) == 8  # one token: exactly its k experts
    assert expected_experts(384, 8, 0) == 0
    assert expected_experts(384, 8, 2) == 384 * (1 - Fraction(376, 384) ** 2) == 8 + 8 - Fraction(64, 384)
    previous = 0
    for tokens in (1, 2, 8, 64, 512, 4096):
        value = expected_experts(384, 8, tokens)
        assert previous < value < 384
        previous = value
    assert 384 - expected_experts(384, 8, 4096) < Fraction(1, 10**30)


# --- the speed floor, by hand -----------------------------------------------------------------------


def test_decode_floor_of_k2_thinking_at_batch_1_by_hand():
    report = cli_json(
        "plan", "--config", K25, "--text-only", "--gpus", "8xH200", "--batch", "1", "--context", str(L)
    )
    step = report["decode"]
    stage = step["stages"][0]
    routed = K2_THINKING_TP8["Routed experts"]
    whole = sum(K2_THINKING_TP8.values()) - K2_THINKING_TP8["Token embedding"] - routed
    assert stage["weight_bytes"] == whole
    assert stage["expected_expert_bytes"] == round(Fraction(routed * 8, 384))  # one token's 8 of 384
    assert stage["kv_bytes"] == L * 70_272
    replicated = 61 * (2 * 7_168 * 1_536 + 2 * 7_168 * 576) + 60 * 2 * 7_168 * 384  # q_a, kv_a, router
    split = (  # over 8 GPUs: q_b, kv_b, o_proj, dense MLP, shared expert, head
        61 * (2 * 1_536 * 12_288 + 2 * 512 * 16_384 + 2 * 8_192 * 7_168)
        + DENSE_MLP
        + 60 * 3 * 2 * 7_168 * 2_048
        + HEAD
    )
    experts = 60 * 8 * 3 * 2 * 7_168 * 2_048  # one token's experts, an eighth of each on this GPU
    attention = 61 * 2 * H * (576 + 512) * L
    flops = replicated + Fraction(split + experts + attention, 8)
    assert stage["expected_flops"] == {"bf16": round(flops)}  # INT4 and BF16 weights: bf16
    memory = (whole + routed * 8 / 384 + L * 70_272) / 4.8e12
    compute = float(flops) / 989.5e12
    assert stage["memory_time_s"] == pytest.approx(memory, rel=1e-12)
    assert stage["compute_time_s"] == pytest.approx(compute, rel=1e-12)
    assert step["floor_s"] == pytest.approx(max(memory, compute), rel=1e-12)
    assert step["bound"] == "memory"
    assert step["tokens_per_s_per_gpu"] == pytest.approx(1 / max(memory, compute) / 8, rel=1e-12)


def test_fp8_weights_compute_at_the_fp8_peak():
    step = cli_json("plan", "--gpus", "16xH200", "--batch", "1", "--context", str(L))["decode"]
    flops = step["stages"][0]["expected_flops"]
    # bf16: the router (replicated), the head (split), the attention itself, and the absorbed decode's
    # W_UK, W_UV (kv_b_proj's FLOPs, 2 × 512 × 64 × 256 per layer), which vLLM runs on BF16 copies
    bf16 = 60 * 2 * 7_168 * 384 + Fraction(HEAD + 61 * 2 * H * 1_088 * L + 61 * 2 * 512 * 64 * 256, 16)
    assert flops["bf16"] == round(bf16)
    assert step["stages"][0]["compute_time_s"] == pytest.approx(
        flops["bf16"] / 989.5e12 + flops["fp8"] / 1979e12
    )


def test_absorbed_decode_reads_vllms_bf16_copies_and_prefill_the_fp8_kv_b_proj():
    # Kimi K2 at TP8, by the hand table of test_plan: a decode step reads every weight but the
    # embedding and the routed experts, with vLLM's BF16 W_UK, W_UV in place of the FP8 kv_b_proj
    # (Key content up-projection and Value heads); a prefill reads kv_b_proj and not the copies
    report = cli_json("plan", "--gpus", "8xH200", "--kv-memory", "1GiB", "--context", "1024")
    unread = K2_TP8["Token embedding"] + K2_TP8["Routed experts"]
    kv_b_proj = K2_TP8["Key content up-projection"] + K2_TP8["Value heads"]
    copies = K2_TP8["vLLM's BF16 W_UK, W_UV"]
    assert copies == 2 * 61 * 8 * 128 * 512 * 2 > kv_b_proj  # BF16 against FP8 with scales
    whole = sum(K2_TP8.values()) - unread
    assert report["decode"]["stages"][0]["weight_bytes"] == whole - kv_b_proj
    assert report["prefill"]["stages"][0]["weight_bytes"] == whole - copies


def test_pipeline_throughput_is_bounded_by_the_slowest_stage():
    # K2-Thinking at TP4 × PP2, batch 1 at L = 4,096: both stages memory-bound. One GPU of each stage
    # reads, by hand (TP4: 16 of 64 heads, experts 512 of 2,048 wide, head 40,960 rows):
    attention = (
        7_168 * 2 * 2  # the two RMSNorms
        + (1_536 * 7_168 + 1_536) * 2
        + (576 * 7_168 + 512) * 2
        + (12_288 // 4 * 1_536 + 16_384 // 4 * 512 + 7_168 * 8_192 // 4) * 2
    )
    moe = 384 * 7_168 * 2 + 384 * 4 + 3 * 512 * 7_168 * 2  # router (+ bias), shared expert
    experts = 384 * 3 * (512 * 7_168 // 8 * 4 + 512 * 7_168 // 32 * 2 + 8)  # a layer's, INT4
    touched = Fraction(8, 384)  # one token's experts
    first = 31 * attention + 3 * 4_608 * 7_168 * 2 + 30 * (moe + experts * touched) + L * 31 * 1_152
    last = 30 * (attention + moe + experts * touched) + 40_960 * 7_168 * 2 + 7_168 * 2 + L * 30 * 1_152
    report = cli_json(
        "plan", "--config", K25, "--text-only", "--gpus", "8xH200", "--tp", "4", "--pp", "2",
        "--batch", "1", "--context", str(L),
    )  # fmt: skip
    step = report["decode"]
    assert [s["expected_bytes"] for s in step["stages"]] == [round(first), round(last)]
    assert [s["bound"] for s in step["stages"]] == ["memory", "memory"]
    times = [float(first) / 4.8e12, float(last) / 4.8e12]
    # a token crosses both stages; with one micro-batch per stage in flight, one leaves every slowest time
    assert step["floor_s"] == pytest.approx(sum(times), rel=1e-12)
    assert step["interval_s"] == pytest.approx(max(times), rel=1e-12)
    assert step["tokens_per_s"] == pytest.approx(1 / max(times), rel=1e-12)  # not 2 / sum(times)
    assert step["tokens_per_s_per_sequence"] == pytest.approx(1 / sum(times), rel=1e-12)


def test_prefill_floor_by_hand():
    prefill = cli_json("plan", "--config", K25, "--text-only", "--gpus", "8xH200", "--context", "1024")[
        "prefill"
    ]
    tokens = 1_024
    replicated = 61 * (2 * 7_168 * 1_536 + 2 * 7_168 * 576) + 60 * 2 * 7_168 * 384
    split = (
        61 * (2 * 1_536 * 12_288 + 2 * 512 * 16_384 + 2 * 8_192 * 7_168)
        + DENSE_MLP
        + 60 * 6 * 7_168 * 2_048
        + HEAD
    )
    experts = 60 * 8 * 3 * 2 * 7_168 * 2_048
    attention = 61 * H * 320 * (tokens + 1)  # expanded, averaged over the causal pass
    flops = tokens * (replicated + Fraction(split + experts + attention, 8))
    stage = prefill["stages"][0]
    assert stage["expected_flops"]["bf16"] == round(flops)
    # it still reads every weight on the GPU, all 384 experts' slices: 1,024 tokens touch them all
    assert stage["weight_bytes"] + stage["expected_expert_bytes"] == pytest.approx(
        sum(K2_THINKING_TP8.values()) - K2_THINKING_TP8["Token embedding"], rel=1e-9
    )
    assert prefill["floor_s"] == pytest.approx(
        max(stage["memory_time_s"], float(flops) / 989.5e12), rel=1e-12
    )
    # one 1,024-token prompt: its tokens over that time, and its KV (16 pages) fits the pool
    assert prefill["tokens_per_s"] == pytest.approx(1_024 / prefill["floor_s"], rel=1e-12)
    assert prefill["kv_fits"] is True


def test_sweep_marks_what_fits_and_where_decode_turns_compute_bound():
    report = cli_json(
        "plan", "--config", V3, "--gpus", "144xH800", "--dp", "144", "--ep", "144", "--context", "4989"
    )
    sweep = report["sweep"]
    assert [s["batch"] for s in sweep] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    # 9,859 pages per GPU (by hand in the DeepSeek test below), 78 per sequence of 4,989 tokens
    assert [s["kv_fits"] for s in sweep] == [s["batch"] * 78 <= 9_859 for s in sweep]
    assert [s["batch"] for s in sweep if s["kv_fits"]][-1] == 64
    for s in sweep:
        assert s["bound"] == (
            "compute" if s["stages"][0]["compute_time_s"] > s["stages"][0]["memory_time_s"] else "memory"
        )
    turn = report["compute_bound_from_batch"]
    assert turn == next((s["batch"] for s in sweep if s["bound"] == "compute"), None)


def _fp8(rows: int, columns: int) -> int:
    """An FP8 Linear [rows, columns] with its F32 scale per 128 × 128 block. [bytes]"""
    return rows * columns + -(-rows // 128) * -(-columns // 128) * 4


# DeepSeek-V3 (FP8) on one GPU of DP144 + EP144: every GPU holds the whole attention, dense MLP, shared
# expert, embedding and head, and ceil(256 / 144) = 2 routed experts of each of the 58 MoE layers
DS_ATTENTION = (
    2 * 7_168 * 2  # the two RMSNorms
    + _fp8(1_536, 7_168) + 1_536 * 2  # q_a_proj, q_a_layernorm
    + _fp8(576, 7_168) + 512 * 2  # kv_a_proj_with_mqa, kv_a_layernorm
    + _fp8(24_576, 1_536)  # q_b_proj: 128 heads × 192
    + _fp8(7_168, 16_384)  # o_proj
)  # fmt: skip
DS_KV_B = _fp8(32_768, 512)  # kv_b_proj: 128 heads × 256 rows
DS_COPIES = 32_768 * 512 * 2  # vLLM's BF16 W_UK, W_UV
DS_DENSE = 3 * 3 * _fp8(18_432, 7_168)  # layers 0–2: gate, up and down
DS_ROUTER = 256 * 7_168 * 2 + 256 * 4
DS_EXPERT = 3 * _fp8(2_048, 7_168)  # one expert, or the shared one
DS_VOCAB = 129_280 * 7_168 * 2  # embedding, head


def test_deepseeks_published_decode_throughput_is_under_the_ceiling():
    # DeepSeek-V3 on H800, routed experts EP144, attention DP144: "each GPU manages 2 routed experts"
    report = cli_json(
        "plan", "--config", V3, "--gpus", "144xH800", "--dp", "144", "--ep", "144", "--context", "4989",
        "--batch", "126",
    )  # fmt: skip
    rules = {w["name"]: w["rule"] for w in report["weights"]}
    assert rules["Routed experts"].startswith("whole experts: 2 of 256")
    # the pool, by hand: ceil(CUDA's 81,090 MiB × 0.9) − weights − the reserve estimate
    weights = 61 * (DS_ATTENTION + DS_KV_B + DS_COPIES) + DS_DENSE + 58 * (DS_ROUTER + 3 * DS_EXPERT)
    weights += 2 * DS_VOCAB + 7_168 * 2
    # (activations; the sampler's 38 B per vocabulary entry over 1,024 rows; 1.5 GiB outside torch)
    reserve = 8_192 * (8 * 7_168 + 8 * 2_048 + 4 * 7_168) * 2 + 1_024 * 129_280 * 38 + 3 * 2**30 // 2
    pool = -(-81_090 * 2**20 * 9 // 10) - weights - reserve
    pages = pool // (64 * 70_272)
    assert report["stages"][0]["weights_bytes"] == weights
    assert report["kv_cache"]["pages_per_gpu"] == pages == 9_331
    # a sequence of 4,989 tokens takes ceil(4,989 / 64) = 78 pages: 119 fit (9,282), 120 do not (9,360);
    # under vLLM's estimated reserve DeepSeek's 126 fall 7 short (its own engine keeps less back)
    assert 119 * 78 <= pages < 120 * 78
    step = report["decode"]
    assert step["kv_fits"] is False
    assert next(s for s in report["sweep"] if s["batch"] == 64)["kv_fits"] is True
    # the floor at batch 126, by hand: 126 × 144 tokens touch 1 − (1 − 8/256)^18,144 of the experts
    touched = 1 - (1 - Fraction(8, 256)) ** (126 * 144)
    read = 61 * (DS_ATTENTION + DS_COPIES) + DS_DENSE + 58 * (DS_ROUTER + DS_EXPERT) + DS_VOCAB + 7_168 * 2
    read += 58 * 2 * DS_EXPERT * touched + 126 * 4_989 * 70_272
    fp8 = 126 * (
        61 * 2 * (7_168 * 1_536 + 7_168 * 576 + 1_536 * 24_576 + 16_384 * 7_168)
        + 3 * 2 * 3 * 7_168 * 18_432
        + 58 * 2 * 3 * 7_168 * 2_048  # the shared expert
    ) + 126 * 144 * 58 * 8 * 2 * 3 * 7_168 * 2_048 * Fraction(2, 256)  # this GPU's share of the routed
    bf16 = 126 * (
        58 * 2 * 7_168 * 256  # router
        + 2 * 7_168 * 129_280  # head
        + 61 * 2 * 512 * 32_768  # W_UK, W_UV on BF16 copies
        + 61 * 2 * 128 * (576 + 512) * 4_989  # absorbed attention
    )
    memory, compute = float(read) / 3.35e12, float(bf16) / 989.5e12 + float(fp8) / 1979e12
    floor = max(memory, compute)
    assert step["stages"][0]["expected_bytes"] == round(read)
    assert step["floor_s"] == pytest.approx(floor, rel=1e-12)
    ceiling = step["tokens_per_s_per_gpu"]
    assert ceiling == pytest.approx(126 / floor, rel=1e-12)
    published = 14_800 / 8  # about 14.8k output tokens/s per 8-GPU node
    assert ceiling > published
    # README quotes these, from the hand floor: per GPU, per node, times DeepSeek's, per sequence
    by_hand = (
        round(126 / floor),
        round(8 * 126 / floor),
        f"{126 / floor / published:.1f}",
        f"{1 / floor:.1f}",
    )
    assert by_hand == (6_250, 50_000, "3.4", "49.6")
    assert step["tokens_per_s_per_sequence"] == pytest.approx(1 / floor, rel=1e-12)


def test_decode_fits_in_whole_pages_of_block_size_times_dcp():
    # 46.80 GiB holds 11,173 pages per GPU (test_plan). Under DCP 8 a sequence at 4,097 positions takes
    # ceil(4,097 / (64 × 8)) = 9 pages on each GPU: 1,241 sequences fit (11,169 pages), 1,242 do not
    # (11,178). Counting tokens instead, 715,072 ÷ (4,160 ÷ 8) would let 1,375 in.
    args = (
        "plan",
        "--config",
        K25,
        "--text-only",
        "--gpus",
        "8xH200",
        "--dcp",
        "8",
        "--kv-memory",
        "46.80GiB",
    )
    assert cli_json(*args, "--batch", "1241", "--context", "4097")["decode"]["kv_fits"] is True
    assert cli_json(*args, "--batch", "1242", "--context", "4097")["decode"]["kv_fits"] is False


def test_speed_text_output():
    out = invoke(
        "plan", "--config", K25, "--text-only", "--gpus", "8xH200", "--batch", "64", "--context", "4096"
    ).stdout
    assert (
        "Decode floor: 64 sequences per replica at context 4,096, latent cache, attention absorbed latent"
        in out
    )
    assert "These are floors: time ≥ max(bytes ÷ HBM bandwidth, Σ FLOPs ÷ dense peak of their dtype)" in out
    assert "Decode floor against batch, context 4,096" in out
    assert "▒" in out  # the chart
    assert "Prefill floor (time to first token) for a prompt of 4,096 tokens" in out
    assert max(len(line) for line in out.splitlines()) <= 100


@pytest.mark.parametrize(
    "args, needles",
    [
        (["plan", "--gpus", "8xH200", "--batch", "0"], ["--batch 0", "positive"]),
        (["plan", "--gpus", "8xH200", "--context", "0"], ["--context 0", "positive"]),
        (
            ["plan", "--gpus", "8", "--gpu-memory", "96GB", "--config", K25, "--batch", "1"],
            ["--hbm-bandwidth", "--peak-bf16"],
        ),
        (["flops", "--tokens", "0"], ["--tokens 0", "positive"]),
    ],
)
def test_bad_speed_options_fail_in_one_line(args, needles):
    fails_cleanly(invoke(*args), *needles)


# --- benchmarks/measure_gpu.py: measured ÷ floor -------------------------------------------------------


def _measure_gpu():
    spec = importlib.util.spec_from_file_location("measure_gpu", ROOT / "benchmarks" / "measure_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_measure_gpu_sets_each_decode_step_beside_its_floor():
    bench = _measure_gpu()
    assert bench.floor_gpu(None, "NVIDIA H200").name == "H200"  # not the H20
    assert bench.floor_gpu(None, "NVIDIA H20").name == "H20"
    assert bench.floor_gpu(None, "NVIDIA H100 80GB HBM3").name == "H100"
    report = {  # the shape of measure_json, at T = 32,768 and batch 8
        "dtype": "bf16",
        "tokens": 32_768,
        "batch": 8,
        "layers": 1,
        "layouts": [{"layout": "naive", "decode_ms": 2.0}, {"layout": "latent", "decode_ms": 1.0}],
    }
    rows = {row["layout"]: row for row in bench.floors(bundled_spec(), bench.ACCELERATORS["H200"], report)}
    weights = 2 * (7_168 * 1_536 + 1_536 * 12_288 + 7_168 * 576 + 512 * 16_384 + 8_192 * 7_168)
    context = 32_769  # the cached positions and the new token
    latent_bytes = weights + 8 * context * 1_152
    naive_bytes = weights + 8 * context * 40_960
    assert (rows["latent"]["floor_bytes"], rows["naive"]["floor_bytes"]) == (latent_bytes, naive_bytes)
    matmuls = weights // 2
    assert rows["latent"]["floor_flops"] == 8 * (2 * matmuls + 2 * 64 * 1_088 * context)
    assert rows["naive"]["floor_flops"] == 8 * (2 * matmuls + 2 * 64 * 320 * context)
    assert rows["latent"]["floor_ms"] == pytest.approx(latent_bytes / 4.8e12 * 1e3)  # memory-bound
    assert rows["latent"]["measured_over_floor"] == pytest.approx(1.0 / rows["latent"]["floor_ms"])


@pytest.mark.parametrize(
    "args",
    [
        ["flops"],
        ["plan", "--gpus", "8xH200", "--config", K25, "--text-only", "--batch", "64"],
        ["plan", "--gpus", "8xH200", "--config", K25, "--tp", "4", "--pp", "2", "--min-gpus", "--dp", "1"],
        ["plan", "--gpus", "8xH200", "--dp", "8", "--ep", "8", "--context", "4096"],
    ],
)
def test_80_columns_cut_no_number(args):
    out = invoke(*args, env={"COLUMNS": "80"}).stdout
    assert "…" not in out  # rich's mark of a cut cell
    assert max(len(line) for line in out.splitlines()) <= 80
