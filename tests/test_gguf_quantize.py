"""kimicount.gguf.quantize: llama-quantize's per-tensor rules, each case read off src/llama-quant.cpp by
hand (llama.cpp b10572: llama_tensor_get_type_impl, lines 424–675, and tensor_type_fallback, 374–421),
and the bytes of a few tensors from ggml's block structs (ggml/src/ggml-common.h, the static_asserts:
block_iq1_s = 2 + 256/8 + 256/16 = 50 B per 256, block_iq1_m = 32 + 16 + 8 = 56, block_iq2_xxs =
2 + 32 × 2 = 66, block_iq2_xs = 2 + 64 + 8 = 74, block_iq2_s = 2 + 64 + 16 = 82, block_iq3_xxs =
2 + 3 × 32 = 98, block_iq3_s = 2 + 13 × 8 + 4 = 110, block_iq4_xs = 2 + 2 + 4 + 128 = 136,
block_iq4_nl = 2 + 16 = 18 per 32, block_q2_K = 4 + 16 + 64 = 84, block_q5_K = 4 + 12 + 128 + 32 = 176)."""

from __future__ import annotations

import pytest

from kimicount.errors import UsageError
from kimicount.gguf.quantize import estimate_uniform, listing_types, parse_quant, tensor_type
from kimicount.spec import bundled_spec
from tests.gguf_files import read_map

K_B = ("blk.5.attn_k_b.weight", (128, 512, 64))  # Kimi K2: rows of 128


@pytest.mark.parametrize(
    ("ftype", "expected"),
    [
        # a row of 128 does not divide the k-quants' blocks of 256: the fallback table (Q3_K and Q2_K fell
        # back to IQ4_NL before #19770, b8266; Q4_0 since, 18 B a block of 32 as IQ4_NL)
        ("Q6_K", "Q8_0"),
        ("Q5_K_M", "Q5_1"),
        ("Q5_K_S", "Q5_1"),
        ("Q4_K_M", "Q5_0"),
        ("Q4_K_S", "Q5_0"),
        ("Q3_K_M", "Q4_0"),
        ("Q2_K", "Q4_0"),
        # the IQ types of 256 fall back to IQ4_NL
        ("IQ1_S", "IQ4_NL"),
        ("IQ2_XXS", "IQ4_NL"),
        ("IQ3_M", "IQ4_NL"),
        ("IQ4_XS", "IQ4_NL"),
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
    assert [parse_quant(name) for name in ("iq2_xxs", "IQ1_S", "Q3_K", "Q4_K", "Q5_K")] == [
        "IQ2_XXS", "IQ1_S", "Q3_K_M", "Q4_K_M", "Q5_K_M",
    ]  # fmt: skip
    with pytest.raises(UsageError, match="--quant 'IQ5_K': expected one of F32, F16, BF16"):
        parse_quant("IQ5_K")


# --- the IQ types ------------------------------------------------------------------------------------

EXPS = (7168, 2048, 384)  # Kimi K2's ffn_gate_exps: 5,637,144,576 elements
EMBD = (7168, 163840)  # token_embd and output: 1,174,405,120 elements


@pytest.mark.parametrize(
    ("ftype", "name", "shape", "ggml_type", "size"),
    [
        # the routed experts at the ftype's own type: 5,637,144,576 ÷ 256 = 22,020,096 blocks
        ("IQ1_S", "blk.9.ffn_gate_exps.weight", EXPS, "IQ1_S", 22_020_096 * 50),
        ("IQ1_M", "blk.9.ffn_up_exps.weight", EXPS, "IQ1_M", 22_020_096 * 56),
        ("IQ2_XXS", "blk.9.ffn_gate_exps.weight", EXPS, "IQ2_XXS", 22_020_096 * 66),
        ("IQ2_XS", "blk.9.ffn_gate_exps.weight", EXPS, "IQ2_XS", 22_020_096 * 74),
        ("IQ2_S", "blk.9.ffn_gate_exps.weight", EXPS, "IQ2_XS", 22_020_096 * 74),  # IQ2_S's default is IQ2_XS
        ("IQ2_M", "blk.9.ffn_gate_exps.weight", EXPS, "IQ2_S", 22_020_096 * 82),  # and IQ2_M's IQ2_S
        ("IQ3_XXS", "blk.9.ffn_gate_exps.weight", EXPS, "IQ3_XXS", 22_020_096 * 98),
        ("IQ3_S", "blk.9.ffn_gate_exps.weight", EXPS, "IQ3_S", 22_020_096 * 110),
        ("IQ4_XS", "blk.9.ffn_gate_exps.weight", EXPS, "IQ4_XS", 22_020_096 * 136),
        ("IQ4_NL", "blk.9.ffn_gate_exps.weight", EXPS, "IQ4_NL", 5_637_144_576 // 32 * 18),
        # IQ3_XS: ffn_gate and ffn_up IQ3_XXS in layers 61 ÷ 8 = 7 to 7 × 61 ÷ 8 = 53 (exclusive), else IQ3_S
        ("IQ3_XS", "blk.9.ffn_up_exps.weight", EXPS, "IQ3_XXS", 22_020_096 * 98),
        ("IQ3_XS", "blk.53.ffn_up_exps.weight", EXPS, "IQ3_S", 22_020_096 * 110),
        # the embedding: Q2_K under IQ1_S (1,174,405,120 ÷ 256 = 4,587,520 blocks), IQ3_S under IQ2_M
        ("IQ1_S", "token_embd.weight", EMBD, "Q2_K", 4_587_520 * 84),
        ("IQ2_M", "token_embd.weight", EMBD, "IQ3_S", 4_587_520 * 110),
        ("IQ4_XS", "token_embd.weight", EMBD, "IQ4_XS", 4_587_520 * 136),
        # the output head: Q5_K under the IQ1, IQ2 and IQ3_XXS ftypes, Q6_K under the others
        ("IQ1_S", "output.weight", EMBD, "Q5_K", 4_587_520 * 176),
        ("IQ3_XXS", "output.weight", EMBD, "Q5_K", 4_587_520 * 176),
        ("IQ3_M", "output.weight", EMBD, "Q6_K", 4_587_520 * 210),
        # attn_output: IQ2_XXS under IQ1_S and IQ1_M; IQ3_S under IQ2_S, IQ2_M, IQ3_XXS; Q4_K under IQ3_M
        # (8192 × 7168 = 58,720,256 elements, 229,376 blocks)
        ("IQ1_M", "blk.9.attn_output.weight", (8192, 7168), "IQ2_XXS", 229_376 * 66),
        ("IQ2_S", "blk.9.attn_output.weight", (8192, 7168), "IQ3_S", 229_376 * 110),
        ("IQ3_XXS", "blk.9.attn_output.weight", (8192, 7168), "IQ3_S", 229_376 * 110),
        ("IQ3_M", "blk.9.attn_output.weight", (8192, 7168), "Q4_K", 229_376 * 144),
        # attn_k_b's rows of 128: IQ4_NL (128 × 512 × 64 = 4,194,304 elements, 131,072 blocks of 32)
        ("IQ2_XXS", "blk.9.attn_k_b.weight", (128, 512, 64), "IQ4_NL", 131_072 * 18),
    ],
)
def test_iq_types_and_their_bytes(ftype, name, shape, ggml_type, size):
    from kimicount.gguf.quantize import nbytes

    elements = 1
    for n in shape:
        elements *= n
    assert tensor_type(ftype, name, shape, 61, imatrix=True) == ggml_type
    assert nbytes(ggml_type, elements) == size


def test_the_iq1_iq2_ffn_down_rule_counts_tensors_in_load_order():
    # llama_tensor_get_type_impl 515–520: the first n_ffn_down ÷ 8 = 61 ÷ 8 = 7 ffn_down tensors llama-quantize
    # takes get Q2_K; it takes them by block number, then name (llama-model-loader.h weight_name_comparer):
    # blk.0.ffn_down (the dense layer), then blk.1, 2 and 3's ffn_down_exps and ffn_down_shexp
    real = [(t.name, t.shape) for t in read_map("kimi-k2-thinking")]
    types, imatrix = listing_types("IQ2_XXS", real, 61)
    q2_k = sorted(name for name, ggml_type in types.items() if ggml_type == "Q2_K" and "ffn_down" in name)
    assert q2_k == sorted(
        ["blk.0.ffn_down.weight"]
        + [f"blk.{i}.ffn_down_{kind}.weight" for i in (1, 2, 3) for kind in ("exps", "shexp")]
    )
    assert types["blk.4.ffn_down_exps.weight"] == "IQ2_XXS" and types["token_embd.weight"] == "Q2_K"
    assert imatrix  # IQ2_XXS tensors: llama-quantize refuses them without an importance matrix
    # IQ2_S and IQ2_M give those seven IQ3_S
    types, _ = listing_types("IQ2_M", real, 61)
    assert sum(1 for name, t in types.items() if "ffn_down" in name and t == "IQ3_S") == 7


def test_which_ftypes_need_an_importance_matrix():
    # tensor_requires_imatrix (785–805): IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS tensors (not
    # token_embd, output) and Q2_K ones in a Q2_K_S file; IQ3_XS writes IQ3_XXS experts in layers 7–52
    real = [(t.name, t.shape) for t in read_map("kimi-k2-thinking")]
    needs = {ftype for ftype in ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS",
                                 "IQ3_S", "IQ3_M", "IQ4_XS", "IQ4_NL", "Q2_K", "Q2_K_S", "Q3_K_S", "Q4_K_M")
             if listing_types(ftype, real, 61)[1]}  # fmt: skip
    assert needs == {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "Q2_K_S"}
    # without an imatrix IQ4_XS gives the first 61 ÷ 8 = 7 layers' ffn_down Q5_K (626–628)
    types, imatrix = listing_types("IQ4_XS", real, 61)
    assert (
        not imatrix
        and types["blk.6.ffn_down_exps.weight"] == "Q5_K"
        and types["blk.7.ffn_down_exps.weight"] == "IQ4_XS"
    )


def test_the_estimate_types_the_real_kimi_k2_listing():
    # every tensor of the real Kimi-K2-Thinking conversion (fixtures/gguf), typed by the rules at each ftype,
    # is the estimate's: the same 1,096 names and shapes, so the same types and bytes
    real = read_map("kimi-k2-thinking")
    spec = bundled_spec()
    for ftype in ("IQ1_S", "IQ2_XXS", "IQ2_M", "IQ3_XS", "IQ4_XS", "Q2_K_S", "Q4_K_M"):
        estimated = estimate_uniform(spec, ftype)
        types, _ = listing_types(ftype, [(t.name, t.shape) for t in real], 61)
        assert {t.name: (t.shape, t.ggml_type) for t in estimated.tensors} == {
            t.name: (t.shape, types[t.name]) for t in real
        }
