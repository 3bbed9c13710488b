"""Kimi K3 in llama.cpp's kimi-k3 arch: the GGUF KimiK3Model writes, checked by `kimicount gguf`, and the
plan's two pools (KV cells for the 24 MLA layers, recurrent state for the 69 KDA layers).

The tensors are written here by hand from llama.cpp's loader (src/models/kimi-k3.cpp @ 3af988f,
load_arch_tensors: names and GGUF dims, ne0 first) and converter (conversion/kimi_k3.py: the
attention-residual norm ⊙ proj fused into one [n_embd] score, ssm_a = −exp(A_log[:n_head]), g_proj as
ssm_g in KDA layers and attn_gate in MLA ones, the MXFP4 experts kept MXFP4), with the sizes of the
bundled config (kimicount/data/kimi-k3.json text_config: hidden 7168, 93 layers, MLA at 1-based 4, 8,
…, 92 and 93, 96 heads, KDA head_dim 128, conv 4, q_lora 1536, kv_lora 512, qk_nope 128, qk_rope 64,
v_head 128, 896 experts of 3072 in a latent of 3584, 2 shared, the first layer dense with 33,792,
vocab 163,840).
"""

from __future__ import annotations

import json

from gguf import GGUFValueType

from .gguf_files import MapTensor, write_gguf
from .helpers import invoke

MLA = [n - 1 for n in (*range(4, 93, 4), 93)]
KDA = [i for i in range(93) if i not in MLA]
HID, HEADS, D, E, LATENT, FF, V = 7168, 96, 128, 896, 3584, 3072, 163_840
assert len(MLA) == 24 and len(KDA) == 69


def _t(name: str, shape: tuple[int, ...], dtype: str = "bf16") -> MapTensor:
    elements = 1
    for d in shape:
        elements *= d
    size = {"f32": elements * 4, "bf16": elements * 2, "mxfp4": elements // 32 * 17}[dtype]
    return MapTensor(name, shape, dtype, elements, size)


def k3_tensors() -> list[MapTensor]:
    inner = HEADS * D  # 12,288
    out = [
        _t("token_embd.weight", (HID, V)),
        _t("output_norm.weight", (HID,), "f32"),
        _t("output_res_score.weight", (HID,), "f32"),
        _t("output.weight", (HID, V)),
    ]
    for i in range(93):
        b = f"blk.{i}."
        out += [_t(b + n, (HID,), "f32") for n in ("attn_norm.weight", "ffn_norm.weight",
                                                   "attn_res_score.weight", "ffn_res_score.weight")]  # fmt: skip
        if i in KDA:
            for part in "qkv":
                out.append(_t(b + f"ssm_conv1d_{part}.weight", (4, 1, inner, 1), "f32"))
                out.append(_t(b + f"attn_{part}.weight", (HID, inner)))
            out += [
                _t(b + "ssm_f_a.weight", (HID, D)),
                _t(b + "ssm_f_b.weight", (D, inner)),
                _t(b + "ssm_beta.weight", (HID, HEADS)),
                _t(b + "ssm_a", (HEADS,), "f32"),
                _t(b + "ssm_dt.bias", (inner,), "f32"),
                _t(b + "ssm_g.weight", (HID, inner)),
                _t(b + "ssm_norm.weight", (D,), "f32"),
                _t(b + "attn_output.weight", (inner, HID)),
            ]
        else:
            out += [
                _t(b + "attn_q_a_norm.weight", (1536,), "f32"),
                _t(b + "attn_kv_a_norm.weight", (512,), "f32"),
                _t(b + "attn_q_a.weight", (HID, 1536)),
                _t(b + "attn_q_b.weight", (1536, HEADS * 192)),
                _t(b + "attn_kv_a_mqa.weight", (HID, 576)),
                _t(b + "attn_k_b.weight", (128, 512, HEADS)),
                _t(b + "attn_v_b.weight", (512, 128, HEADS)),
                _t(b + "attn_gate.weight", (HID, HEADS * 128)),
                _t(b + "attn_output.weight", (HEADS * 128, HID)),
            ]
        if i == 0:
            out += [_t(b + "ffn_gate.weight", (HID, 33_792)), _t(b + "ffn_down.weight", (33_792, HID)),
                    _t(b + "ffn_up.weight", (HID, 33_792))]  # fmt: skip
        else:
            out += [
                _t(b + "ffn_gate_inp.weight", (HID, E), "f32"),
                _t(b + "exp_probs_b.bias", (E,), "f32"),
                _t(b + "ffn_gate_exps.weight", (LATENT, FF, E), "mxfp4"),
                _t(b + "ffn_down_exps.weight", (FF, LATENT, E), "mxfp4"),
                _t(b + "ffn_up_exps.weight", (LATENT, FF, E), "mxfp4"),
                _t(b + "ffn_routed_down.weight", (HID, LATENT)),
                _t(b + "ffn_routed_up.weight", (LATENT, HID)),
                _t(b + "ffn_routed_norm.weight", (LATENT,), "f32"),
                _t(b + "ffn_gate_shexp.weight", (HID, 2 * FF)),
                _t(b + "ffn_down_shexp.weight", (2 * FF, HID)),
                _t(b + "ffn_up_shexp.weight", (HID, 2 * FF)),
            ]
    return out


def k3_metadata() -> dict[str, tuple[object, GGUFValueType]]:
    """What KimiK3Model.set_gguf_parameters writes, from the config."""
    u32 = GGUFValueType.UINT32
    keys: dict[str, tuple[object, GGUFValueType]] = {
        "block_count": (93, u32),
        "context_length": (1_048_576, u32),
        "embedding_length": (HID, u32),
        "feed_forward_length": (33_792, u32),
        "attention.head_count": (HEADS, u32),
        "attention.head_count_kv": ([1 if i in MLA else 0 for i in range(93)], GGUFValueType.ARRAY),
        "expert_count": (E, u32),
        "expert_used_count": (16, u32),
        "expert_feed_forward_length": (FF, u32),
        "expert_shared_count": (2, u32),
        "leading_dense_block_count": (1, u32),
        "expert_gating_func": (2, u32),
        "expert_latent_length": (LATENT, u32),
        "attn_res.block_size": (12, u32),
        "attention.q_lora_rank": (1536, u32),
        "attention.kv_lora_rank": (512, u32),
        "rope.dimension_count": (64, u32),
        "attention.key_length": (576, u32),
        "attention.value_length": (512, u32),
        "attention.key_length_mla": (192, u32),
        "attention.value_length_mla": (128, u32),
        "ssm.conv_kernel": (4, u32),
        "kda.head_dim": (D, u32),
        "kda.gate_lower_bound": (-5.0, GGUFValueType.FLOAT32),
        "vocab_size": (V, u32),
    }
    return {f"kimi-k3.{k}": v for k, v in keys.items()}


def write_k3(path, tensors=None):
    (file,) = write_gguf(
        path, tensors or k3_tensors(), lambda t: t.dtype.upper(), k3_metadata(), arch="kimi-k3"
    )
    return file


def test_a_kimi_k3_gguf_checks_clean(tmp_path):
    tensors = k3_tensors()
    # 4 top; per KDA layer 18, per MLA layer 13; the dense layer's 3 and each MoE layer's 11
    assert len(tensors) == 4 + 69 * 18 + 24 * 13 + 3 + 92 * 11 == 2_573
    report = json.loads(invoke("gguf", str(write_k3(tmp_path / "k3.gguf")), "--json").stdout)
    assert report["ok"] and report["mismatches"] == []
    assert (
        report["parameters"]["expected"] == report["parameters"]["found"] == sum(t.elements for t in tensors)
    )
    assert report["by_type"]["MXFP4"]["tensors"] == 3 * 92
    # against the checkpoint: K3's language model has 2,779,484,478,208 parameters (kimicount params,
    # whose storage model gives the released shards' bytes: tests/test_kimi_linear.py); the GGUF holds
    # one score for each norm + proj pair (93 × 2 + 1 pairs of 7,168) and 96 of A_log's 128 values
    assert sum(t.elements for t in tensors) == 2_779_484_478_208 - (93 * 2 + 1) * 7_168 - 69 * (128 - 96)


def test_a_kimi_k3_gguf_without_its_gate_is_named(tmp_path):
    tensors = [t for t in k3_tensors() if t.name != "blk.0.ssm_g.weight"]
    result = invoke("gguf", str(write_k3(tmp_path / "bad.gguf", tensors)), "--json")
    assert result.exit_code == 1
    mismatches = json.loads(result.stdout)["mismatches"]
    assert [(m["tensor"], m["kind"], m["expected"]) for m in mismatches] == [
        ("blk.0.ssm_g.weight", "missing", "[7168, 12288]")
    ]


def test_plan_of_kimi_k3_sizes_both_pools():
    # per KDA layer per cell: r = 3 × (4 − 1) × 96 × 128 = 110,592 F32, s = 128 × 128 × 96 = 1,572,864
    # F32; per token: 24 MLA layers × 576 × 2 B
    per_sequence = 69 * 4 * (3 * 3 * 96 * 128 + 128 * 128 * 96)
    assert per_sequence == 464_633_856
    result = invoke("plan", "kimi-k3", "--engine", "llama.cpp", "--quant", "Q2_K", "--gpus", "8xH200",
                    "--context", "131072", "--parallel", "2", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["kv_cache"]["bytes_per_token"] == 24 * 576 * 2 == 27_648
    assert plan["kv_cache"]["total_bytes"] == 131_072 * 27_648
    state = plan["per_sequence_state"]
    assert state["bytes_per_sequence"] == per_sequence and state["total_bytes"] == 2 * per_sequence
    assert state["limit"] == "context"  # 3,456 MiB of KV against 886.22 MiB of state
    assert "the state (886.22 MiB for --parallel 2)" in state["limit_words"]
