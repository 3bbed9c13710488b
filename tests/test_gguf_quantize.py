"""kimicount.gguf.quantize: llama-quantize's per-tensor rules, each case read off src/llama-quant.cpp by
hand (llama_model_quantize_impl, llama_tensor_get_type and its fallback table)."""

from __future__ import annotations

import pytest

from kimicount.errors import UsageError
from kimicount.gguf.quantize import parse_quant, tensor_type

K_B = ("blk.5.attn_k_b.weight", (128, 512, 64))  # Kimi K2: rows of 128


@pytest.mark.parametrize(
    ("ftype", "expected"),
    [
        # a row of 128 does not divide the k-quants' blocks of 256: the fallback table
        ("Q6_K", "Q8_0"),
        ("Q5_K_M", "Q5_1"),
        ("Q5_K_S", "Q5_1"),
        ("Q4_K_M", "Q5_0"),
        ("Q4_K_S", "Q5_0"),
        ("Q3_K_M", "IQ4_NL"),
        ("Q2_K", "IQ4_NL"),
        # blocks of 32 divide it
        ("Q8_0", "Q8_0"),
        ("Q4_0", "Q4_0"),
        ("Q5_1", "Q5_1"),
        ("BF16", "BF16"),
    ],
)
def test_attn_k_b_fallback(ftype, expected):
    assert tensor_type(ftype, *K_B, n_layer=61) == expected


@pytest.mark.parametrize(
    ("name", "shape", "expected"),
    [
        ("blk.1.ffn_gate_inp.weight", (7168, 384), "F32"),  # "do not quantize expert gating tensors"
        ("blk.1.exp_probs_b.bias", (384,), "F32"),  # 1-D
        ("blk.1.attn_kv_a_norm.weight", (512,), "F32"),
        ("output.weight", (7168, 163840), "Q6_K"),  # the output head: Q6_K unless the type is Q8_0
        ("token_embd.weight", (7168, 163840), "Q4_0"),
        ("blk.1.ffn_down_exps.weight", (2048, 7168, 384), "Q4_0"),  # no mix for Q4_0 without imatrix
    ],
)
def test_q4_0(name, shape, expected):
    assert tensor_type("Q4_0", name, shape, n_layer=61) == expected


@pytest.mark.parametrize(
    ("layer", "expected"),
    # use_more_bits(i, 61): i < 61/8 = 7, i >= 7·61/8 = 53, or (i − 7) % 3 == 2
    [
        (0, "Q6_K"),
        (6, "Q6_K"),
        (7, "Q4_K"),
        (8, "Q4_K"),
        (9, "Q6_K"),
        (10, "Q4_K"),
        (52, "Q4_K"),
        (53, "Q6_K"),
    ],
)
def test_q4_k_m_ffn_down_by_layer(layer, expected):
    for name, shape in ((f"blk.{layer}.ffn_down_exps.weight", (2048, 7168, 384)),
                        (f"blk.{layer}.ffn_down_shexp.weight", (2048, 7168))):  # fmt: skip
        assert tensor_type("Q4_K_M", name, shape, n_layer=61) == expected
    assert tensor_type("Q4_K_M", f"blk.{layer}.ffn_up_exps.weight", (7168, 2048, 384), n_layer=61) == "Q4_K"


def test_q3_k_and_q2_k_mixes():
    # Q3_K_M: ffn_down Q5_K in the first n_layer/16 = 3 layers, Q4_K after; attn_output Q4_K
    assert tensor_type("Q3_K_M", "blk.2.ffn_down_exps.weight", (2048, 7168, 384), 61) == "Q5_K"
    assert tensor_type("Q3_K_M", "blk.3.ffn_down_exps.weight", (2048, 7168, 384), 61) == "Q4_K"
    assert tensor_type("Q3_K_M", "blk.3.attn_output.weight", (8192, 7168), 61) == "Q4_K"
    assert tensor_type("Q3_K_L", "blk.3.attn_output.weight", (8192, 7168), 61) == "Q5_K"
    # Q2_K: ffn_down and attn_output Q3_K, the rest Q2_K
    assert tensor_type("Q2_K", "blk.3.ffn_down_exps.weight", (2048, 7168, 384), 61) == "Q3_K"
    assert tensor_type("Q2_K", "blk.3.attn_output.weight", (8192, 7168), 61) == "Q3_K"
    assert tensor_type("Q2_K", "blk.3.ffn_gate_exps.weight", (7168, 2048, 384), 61) == "Q2_K"


def test_quant_names():
    assert parse_quant("q4_k_m") == "Q4_K_M"
    with pytest.raises(UsageError, match="--quant 'IQ2_XXS': expected one of F32, F16, BF16"):
        parse_quant("IQ2_XXS")
