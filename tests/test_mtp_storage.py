"""The multi-token-prediction layer as DeepSeek's real FP8 checkpoints (V3, R1, V3.1, V3.2) store it:
its attention and experts in FP8 with block scales like the main layers, its eh_proj, embedding copy,
head copy and norms unquantized (BF16 with no scale; V3.2's norms F32). Checked on full-size,
header-only layouts written from those facts by tests/checkpoints.py, not by kimicount."""

from __future__ import annotations

import json
import math

import pytest

from .checkpoints import BYTES_PER_ELEMENT, deepseek_fp8_layout, deepseek_fp8_listing
from .helpers import FIXTURES, invoke

V3 = FIXTURES / "deepseek-v3"
V32 = FIXTURES / "deepseek-v3.2-exp"

# DeepSeek-V3 by hand: hidden 7,168, 128 heads, q_lora 1,536, kv_lora 512, nope 128, rope 64, v 128,
# 256 routed experts + 1 shared of 2,048, dense MLP 18,432, vocab 129,280; FP8 blocks of 128 × 128.
V3_SCALES_ATTENTION = (12 * 56) + (192 * 12) + (5 * 56) + (256 * 4) + (56 * 128)  # q_a q_b kv_a kv_b o
V3_SCALES_DENSE = 3 * (144 * 56)
V3_SCALES_MOE = 257 * 3 * (16 * 56)
V3_MTP_OWN = 11_610_068_224  # its block, enorm + hnorm, eh_proj 7,168 × 14,336, shared_head.norm
V3_COPIES = 2 * 129_280 * 7_168  # the embedding and head it stores again


def _json(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def _bytes(entries) -> int:
    return sum(math.prod(shape) * BYTES_PER_ELEMENT[dtype] for shape, dtype in entries)


@pytest.fixture(scope="module")
def v3_layout(tmp_path_factory):
    return deepseek_fp8_layout(tmp_path_factory.mktemp("v3"), V3 / "config.json")


@pytest.fixture(scope="module")
def v32_layout(tmp_path_factory):
    return deepseek_fp8_layout(tmp_path_factory.mktemp("v32"), V32 / "config.json")


def test_the_listing_holds_the_facts():
    listing = deepseek_fp8_listing(json.loads((V3 / "config.json").read_text()))
    assert listing["model.layers.61.eh_proj.weight"] == ((7168, 14336), "BF16")
    assert "model.layers.61.eh_proj.weight_scale_inv" not in listing
    assert listing["model.layers.61.shared_head.head.weight"] == ((129280, 7168), "BF16")
    assert listing["model.layers.61.enorm.weight"] == ((7168,), "BF16")
    assert listing["model.layers.61.self_attn.o_proj.weight"] == ((7168, 16384), "F8_E4M3")
    assert listing["model.layers.61.mlp.experts.255.down_proj.weight_scale_inv"] == ((56, 16), "F32")
    v32 = deepseek_fp8_listing(json.loads((V32 / "config.json").read_text()))
    assert v32["model.layers.61.hnorm.weight"] == ((7168,), "F32")
    assert v32["model.layers.0.input_layernorm.weight"] == ((7168,), "F32")
    assert v32["model.layers.61.eh_proj.weight"] == ((7168, 14336), "BF16")


def test_deepseek_v3_checkpoint_verifies_mtp_layer_included(v3_layout):
    report = _json("verify", "--path", str(v3_layout))
    assert report["ok"] and report["mismatches"] == []
    assert report["parameters"] == {"expected": 671_026_419_200, "found": 671_026_419_200}
    assert report["mtp"]["expected"] == report["mtp"]["found"] == V3_MTP_OWN + V3_COPIES == 13_463_426_304
    # 62 attentions (61 + MTP), 3 dense MLPs, 59 MoE layers (58 + MTP); eh_proj has no scale
    scales = 62 * V3_SCALES_ATTENTION + 3 * V3_SCALES_DENSE + 59 * V3_SCALES_MOE
    assert report["fp8_scales"]["elements"] == scales == 41_540_496
    # every element in the headers: main + MTP with its copies (684,489,845,504), and the scales
    elements = sum(tally["elements"] for tally in report["by_dtype"].values())
    assert elements == 684_489_845_504 + scales == 684_531_386_000
    # unquantized in BF16: embedding, head, gates, norms, and the MTP layer's eh_proj and copies
    bf16 = 2 * 129_280 * 7_168 + 59 * 256 * 7_168 + (62 * (2 * 7_168 + 1_536 + 512) + 7_168)
    mtp_bf16 = V3_COPIES + 7_168 * 14_336 + 3 * 7_168
    assert report["by_dtype"]["BF16"]["elements"] == bf16 + mtp_bf16


def test_deepseek_v32_checkpoint_verifies_with_f32_norms(v32_layout):
    report = _json("verify", "--path", str(v32_layout))
    assert report["ok"] and report["mismatches"] == []
    indexer = 64 * 128 * 1536 + 128 * 7168 + 64 * 7168 + 2 * 128  # wq_b, wk, weights_proj, k_norm
    assert report["parameters"]["found"] == 671_026_419_200 + 61 * indexer
    assert report["mtp"]["expected"] == report["mtp"]["found"] == V3_MTP_OWN + indexer + V3_COPIES


@pytest.mark.parametrize("config, fixture", [(V3, "v3_layout"), (V32, "v32_layout")])
def test_stored_bytes_are_the_checkpoint_bytes(config, fixture, request):
    """`params --by memory` and the byte counts follow the same storage rule as verify: the model's
    and the MTP layer's bytes are those of the header-only checkpoint's tensors."""
    listing = deepseek_fp8_listing(json.loads((config / "config.json").read_text()))
    mtp = [entry for name, entry in listing.items() if name.startswith("model.layers.61.")]
    main = [entry for name, entry in listing.items() if not name.startswith("model.layers.61.")]
    report = _json("params", "--config", str(config))
    assert report["memory"]["stored_bytes"] == _bytes(main)
    assert report["mtp"]["tree"]["stored_bytes"] == _bytes(mtp)
    folder = request.getfixturevalue(fixture)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == _bytes(main) + _bytes(mtp)


def test_v3_mtp_bytes_by_hand():
    """eh_proj in BF16 (205,520,896 B) instead of FP8 + scales (102,760,448 + 56 × 112 × 4 B)."""
    report = _json("params", "--config", str(V3))
    block = next(c for c in report["mtp"]["tree"]["children"] if c["name"] == "Hidden projection")
    assert block["stored_bytes"] == 7168 * 14336 * 2 == 205_520_896


def test_fp8_eh_proj_is_reported(tmp_path):
    """An eh_proj stored like the main layers' Linears (FP8 with a scale) is not what the real
    checkpoints hold: verify names it."""
    listing = deepseek_fp8_listing(json.loads((V3 / "config.json").read_text()))
    listing["model.layers.61.eh_proj.weight"] = ((7168, 14336), "F8_E4M3")
    listing["model.layers.61.eh_proj.weight_scale_inv"] = ((56, 112), "F32")
    folder = deepseek_fp8_layout(tmp_path / "fp8-eh-proj", V3 / "config.json", listing)
    result = invoke("verify", "--path", str(folder), "--json")
    assert result.exit_code == 1
    found = {(m["tensor"], m["kind"]) for m in json.loads(result.stdout)["mismatches"]}
    assert found == {
        ("model.layers.61.eh_proj.weight", "dtype"),
        ("model.layers.61.eh_proj.weight_scale_inv", "scale"),
    }
