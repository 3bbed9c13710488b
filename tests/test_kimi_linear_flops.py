"""`kimicount flops` for the Kimi Linear family: Kimi Delta Attention's state in a chunked prefill and a
recurrent decode, K3's gated MLA and LatentMoE; shapes of the new components.

Independent figures, written out by hand from the configs (fixtures/kimi-k3, fixtures/kimi-linear-48b-a3b)
and the arithmetic of the kernels the engines run (fla-org/flash-linear-attention @ bc3b101d, which vLLM
carries: vllm/model_executor/layers/kda.py @ 01a7e5d runs chunk_kda in a prefill and fused_recurrent_kda
in a decode step):
- recurrent, per head and token (fla/ops/kda/fused_recurrent.py lines 178–200): S ⊙ exp(g), d²; k^T S,
  2d²; S += k ⊗ β(v − k^T S), 2d²; q^T S, 2d²: 7d²;
- chunked, per head and chunk of C = 64 (chunk_fwd.py line 33; naive.py naive_chunk_kda lines 127–163):
  A_kk, A_qk, w = A·(e^g k), u = A·v and A_qk·v', five C × C × d products of 2C²d; the solve of
  lines 134–135, Σ_{i<C} 2·C·i = C²(C − 1); v' = u − w S, q e^g S, k^T v', three of 2Cd²; S's decay, d².
A matmul of in × out is 2 × in × out FLOPs per token; a depthwise convolution of kernel K, 2K per
channel.
"""

from __future__ import annotations

import json

from .helpers import FIXTURES, fails_cleanly, invoke

K3 = FIXTURES / "kimi-k3"
D, C = 128, 64  # KDA head_dim, chunk


def flops(*args: str) -> dict:
    result = invoke("flops", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def chunk_per_head(d: int = D, c: int = C) -> int:
    return 5 * 2 * c * c * d + c * c * (c - 1) + 3 * 2 * c * d * d + d * d


def test_kda_state_flops_by_hand():
    report = flops("kimi-k3")
    state = report["state"]
    assert (state["layers"], state["heads"], state["key_dim"], state["chunk"]) == (69, 96, 128, 64)
    assert state["decode_flops_per_token_per_layer"] == 96 * 7 * 128 * 128 == 11_010_048
    assert state["prefill_flops_per_chunk_per_layer"] == 96 * chunk_per_head() == 1_133_641_728
    # 4,096 tokens: 64 chunks, each a 64th of the tokens
    assert state["prefill_flops_per_token_per_layer"] == 96 * chunk_per_head() / 64 == 17_713_152
    # a prompt of 100 tokens runs two chunks (the second padded, as the kernels' 64-wide tiles are)
    short = flops("kimi-k3", "--tokens", "100")["state"]
    assert short["prefill_flops_per_token_per_layer"] == 2 * 96 * chunk_per_head() / 100
    linear = flops("kimi-linear")["state"]
    assert (linear["layers"], linear["decode_flops_per_token_per_layer"]) == (20, 32 * 7 * 128 * 128)


def kimi_linear_matmuls() -> int:
    """Kimi-Linear-48B-A3B's matmul FLOPs per token, by hand: hidden 2,304, KDA 32 × 128 (low-rank
    gate), MLA 32 heads without query compression, 8 of 256 experts of 1,024 and one shared, layer 0
    dense (9,216), 20 KDA and 7 MLA layers, 26 MoE."""
    h, p, d = 2304, 32 * 128, 128
    kda = 3 * h * p + h * d + d * p + h * 32 + h * d + d * p + p * h + 3 * p * 4  # ..., the convolutions
    mla = h * 32 * 192 + h * 576 + 512 * 32 * 256 + 32 * 128 * h
    moe = h * 256 + 8 * 3 * h * 1024 + 3 * h * 1024
    return 2 * (20 * kda + 7 * mla + 3 * h * 9216 + 26 * moe + h * 163_840)


def test_kimi_linear_totals_by_hand():
    report = flops("kimi-linear")
    assert report["matmul_flops_per_token"] == kimi_linear_matmuls() == 6_213_500_928
    assert report["layers"] == 7  # the MLA layers attend over the cache; the other 20 run KDA
    absorbed = next(a for a in report["attention"] if a["way"] == "absorbed")
    per_layer = 2 * 32 * (512 + 64 + 512) * 4096
    assert absorbed["decode_flops_per_token_per_layer"] == per_layer
    assert absorbed["decode_flops_per_token"] == kimi_linear_matmuls() + 7 * per_layer + 20 * 32 * 7 * D * D


def k3_matmuls() -> int:
    """Kimi K3's matmul FLOPs per token, by hand: hidden 7,168; KDA 96 × 128 with the full-rank gate;
    MLA with query compression and K3's output gate g_proj [96 × 128, 7,168]; LatentMoE: router
    [896, 7,168], down to 3,584, 16 experts of 3,072 in the latent, back up, two shared experts (6,144
    wide) in the hidden space; the attention residuals' two [1, 7,168] projections a layer and the
    output one."""
    h, p, z = 7168, 96 * 128, 3584
    kda = 4 * h * p + p * h + h * D + D * p + h * 96 + 3 * p * 4
    mla = h * 1536 + 1536 * 96 * 192 + h * 576 + 512 * 96 * 256 + h * p + p * h
    moe = h * 896 + h * z + 16 * 3 * z * 3072 + z * h + 3 * h * 6144
    residuals = 93 * 2 * h + h
    return 2 * (69 * kda + 24 * mla + 3 * h * 33_792 + 92 * moe + residuals + h * 163_840)


def test_k3_gated_mla_and_latent_moe_by_hand():
    report = flops("kimi-k3")
    assert report["matmul_flops_per_token"] == k3_matmuls()
    blocks = report["tree"]["children"][1]["children"]
    mla = next(b for b in blocks if b["name"] == "24 MLA MoE blocks")
    gate = next(c for c in mla["children"] if c["name"] == "Latent attention")["children"]
    assert [c["name"] for c in gate][-2:] == ["Output gate", "Causal attention"]
    assert gate[-2]["flops_per_token"] == 24 * 2 * 7168 * 96 * 128
    moe = next(c for c in mla["children"] if c["name"] == "Latent mixture of experts")
    parts = {c["name"]: c["flops_per_token"] for c in moe["children"]}
    assert parts["Latent down-projection"] == parts["Latent up-projection"] == 24 * 2 * 7168 * 3584
    assert parts["Routed experts"] == 24 * 2 * 16 * 3 * 3584 * 3072  # in the latent, 16 of 896
    assert parts["Shared experts"] == 24 * 2 * 3 * 7168 * 6144
    kda = next(b for b in blocks if b["name"] == "68 KDA MoE blocks")
    convs = next(c for c in kda["children"] if c["name"] == "Kimi Delta Attention")["children"]
    assert (
        next(c for c in convs if c["name"] == "Short convolutions")["flops_per_token"]
        == 68 * 2 * 3 * 12_288 * 4
    )
    # no rotary position: the shared key's rows, cached unrotated; the naive attention formula alike
    naive = next(a for a in report["attention"] if a["way"] == "naive")
    assert naive["decode_flops_per_token_per_layer"] == 2 * 96 * (128 + 64 + 128) * 4096


def test_flops_view_shows_the_state_beside_mla():
    out = invoke("flops", "kimi-k3", "--depth", "1", env={"COLUMNS": "120"}).stdout
    assert "× 24 MLA layers" in out
    assert "The 69 KDA layers keep no cache" in out
    assert "decode, recurrent             11,010,048" in out
    assert "= 7 × 96 × 128 × 128 = 11,010,048" in out


def test_shapes_of_the_new_components():
    out = invoke("params", "kimi-k3", "--detail", "shapes", "--depth", "all", env={"COLUMNS": "260"}).stdout
    for text in (
        "x [B, T, 7,168] → q [B, T, 96 × 128]",
        "x [B, T, 7,168] → f [B, T, 128] → g [B, T, 96 × 128]",  # the decay's two projections
        "x [B, T, 7,168] → β [B, T, 96]",
        "x [B, T, 7,168] → h [B, T, 7,168]; reads S [B, 96, 128, 128], conv windows [B, 3, 36,864]",
        "x [B, T, 7,168] → z [B, T, 3,584]",
        "z [B, T, 3,584] → g·u, top 16 of 896 [B·T·16, 3,072] → y_z [B, T, 3,584]",
        "y_z [B, T, 3,584] → y [B, T, 7,168]",
    ):
        assert text in out, text
    linear = invoke("params", "kimi-linear", "--detail", "shapes", "--depth", "all", env={"COLUMNS": "260"})
    assert "x [B, T, 2,304] → g_a [B, T, 128] → g_o [B, T, 32 × 128]" in linear.stdout  # the low-rank gate


def test_flops_of_a_bad_count_is_one_line():
    fails_cleanly(invoke("flops", "--config", str(K3), "--tokens", "0"), "--tokens")
