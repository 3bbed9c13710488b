"""Kimi K2.5 and native INT4 (compressed-tensors pack-quantized): params, weight memory and verify."""

from __future__ import annotations

import json

import pytest

from kimicount.anatomy import build_anatomy
from kimicount.errors import ConfigError
from kimicount.spec import spec_from_path

from .checkpoints import (
    kimi_k25_layout,
    kimi_k25_listing,
    pack_int4,
    packed_int4,
    unpack_int4,
    write_tiny_int4_checkpoint,
)
from .helpers import FIXTURES, KIMI_K2, invoke, real_kimi_k2_tensors

K25 = FIXTURES / "kimi-k2.5"

# The K2.5 vision side by hand, from its vision_config: vt_hidden 1152, vt_intermediate 4304,
# 27 blocks, patch 14, position embedding 64 × 64, mm_hidden 1152, merge 2 × 2, text hidden 7168.
PATCH_EMBEDDING = 1152 * 3 * 14 * 14 + 1152  # conv weight and bias: 678,528
POSITION_EMBEDDING = 64 * 64 * 1152  # 4,718,592
VISION_BLOCK = (
    2 * 1152  # norm0 weight and bias
    + 3 * 1152 * 1152 + 3 * 1152  # wqkv and its bias
    + 1152 * 1152 + 1152  # wo and its bias
    + 2 * 1152  # norm1
    + 4304 * 1152 + 4304  # mlp.fc0
    + 1152 * 4304 + 1152  # mlp.fc1
)  # fmt: skip
TOWER = PATCH_EMBEDDING + POSITION_EMBEDDING + 27 * VISION_BLOCK + 2 * 1152  # + final LayerNorm
M = 1152 * 2 * 2  # the merged patch width, 4,608
PROJECTOR = 2 * 1152 + (M * M + M) + (7168 * M + 7168)  # pre_norm, proj.0, proj.2


def test_k25_language_model_is_kimi_k2_and_the_vision_side_is_apart():
    report = json.loads(invoke("params", "--config", str(K25), "--json").stdout)
    assert (report["total"], report["activated"]) == (1_026_408_232_448, 32_861_500_928)
    assert report["model_type"] == "kimi_k25"
    assert VISION_BLOCK == 15_239_504 and TOWER == 416_866_032 and PROJECTOR == 54_277_888
    assert report["vision"]["tower"] == TOWER
    assert report["vision"]["projector"] == PROJECTOR
    assert report["vision"]["total"] == TOWER + PROJECTOR == 471_143_920
    tree = report["vision"]["tree"]
    assert [c["name"] for c in tree["children"]] == ["Vision tower", "Projector"]


def test_k25_params_output():
    out = invoke("params", "--config", str(K25), "--depth", "2").stdout
    assert "Vision: 416,866,032 in the tower + 54,277,888 in the projector = 471,143,920 parameters" in out


def test_weight_memory_of_kimi_k2_is_the_real_checkpoints_bytes():
    # The real checkpoint's data bytes (the listing's own total) less its 61 BF16 rotary buffers of 56.
    listing = json.loads((KIMI_K2 / "tensors.json").read_text())["totals"]
    report = json.loads(invoke("params", "--json").stdout)
    assert report["memory"]["stored_bytes"] == listing["data_bytes"] - 61 * 56 * 2 == 1_029_173_249_888
    assert report["memory"]["bf16_bytes"] == 2 * 1_026_408_232_448  # the same parameters, all in BF16


def test_weight_memory_of_kimi_k25_by_hand():
    report = json.loads(invoke("params", "--config", str(K25), "--json").stdout)
    # each routed expert Linear [2048, 7168] or [7168, 2048], packed: I32 [out, in/8], BF16 scales
    # [out, in/32], I32 shape [2]
    expert_linear = 2048 * 7168 // 8 * 4 + 2048 * 7168 // 32 * 2 + 8
    routed = 60 * 384 * 3 * expert_linear
    rest = (1_026_408_232_448 - 60 * 384 * 3 * 2048 * 7168) * 2 + 60 * 384 * 2  # BF16; router bias F32
    assert report["memory"]["stored_bytes"] == routed + rest == 594_205_904_896
    assert report["vision"]["tree"]["stored_bytes"] == 2 * 471_143_920


def test_by_memory_view():
    out = invoke("params", "--by", "memory", "--depth", "1").stdout
    assert "Kimi-K2-Instruct" in out and "1,029,173,249,888" in out and "958 GiB" in out


@pytest.fixture(scope="module")
def k25_checkpoint(tmp_path_factory):
    return kimi_k25_layout(tmp_path_factory.mktemp("k25"))


def test_full_size_k25_int4_checkpoint_verifies(k25_checkpoint):
    result = invoke("verify", "--path", str(k25_checkpoint), "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["mismatches"] == []
    assert report["parameters"] == {"expected": 1_026_408_232_448, "found": 1_026_408_232_448}
    experts = 60 * 384 * 3  # packed Linears
    assert report["packed_linears"] == {
        "packed": experts,
        "plain": 61 * 5 + 3 + 60 * 3 + 1,  # attention, the dense MLP, shared experts, lm_head
        "packed_against_config": 0,
        "plain_against_config": 0,
    }
    # scales and shapes: not parameters, counted apart with their bytes
    scales = 2 * 2048 * (7168 // 32) + 7168 * (2048 // 32)  # gate, up, down per expert
    assert report["int4_metadata"] == {
        "tensors": 2 * experts,
        "elements": 60 * 384 * (scales + 3 * 2),
        "bytes": 60 * 384 * (2 * scales + 3 * 8),
    }
    assert report["fp8_scales"]["tensors"] == 0
    assert report["vision"]["expected"] == report["vision"]["found"] == 471_143_920
    # what a tool that counts stored elements would call "parameters": packed int32s, scales and all
    assert sum(t["elements"] for t in report["by_dtype"].values()) == 170_738_182_128


def test_k25_listing_is_built_from_the_real_k2_listing():
    listing = kimi_k25_listing()
    k2 = real_kimi_k2_tensors()
    assert "language_model.model.layers.60.mlp.experts.383.down_proj.weight_packed" in listing
    assert listing["language_model.model.layers.1.mlp.experts.0.up_proj.weight_scale"] == (
        (2048, 224),
        "BF16",
    )
    assert len(listing) == len(k2) - 69_608 - 61 + 2 * 69_120 + 335  # no scales/rotary; triples; vision


@pytest.mark.parametrize(
    "case, kind, tensor",
    [
        ("both ways", "storage", "language_model.model.layers.4.mlp.experts.9.up_proj"),
        ("half-packed", "storage", "language_model.model.layers.4.mlp.experts.9.up_proj"),
        ("packed shape", "packed", "language_model.model.layers.4.mlp.experts.9.up_proj.weight_packed"),
        ("vision shape", "shape", "vision_tower.encoder.blocks.3.wqkv.weight"),
        # every group verified whole, and one tensor more than they claim
        ("unexpected", "unexpected", "language_model.model.layers.4.mlp.experts.9.up_proj.bias"),
        ("stray scale", "scale", "language_model.model.layers.4.mlp.experts.9.up_proj.weight_scale_inv"),
    ],
)
def test_tampered_int4_checkpoint(tmp_path, case, kind, tensor):
    listing = kimi_k25_listing()
    base = "language_model.model.layers.4.mlp.experts.9.up_proj"
    if case == "both ways":
        listing[f"{base}.weight"] = ((2048, 7168), "BF16")
    elif case == "half-packed":
        del listing[f"{base}.weight_scale"]
    elif case == "packed shape":
        listing[f"{base}.weight_packed"] = ((2048, 895), "I32")
    elif case == "unexpected":
        listing[f"{base}.bias"] = ((2048,), "BF16")
    elif case == "stray scale":
        listing[f"{base}.weight_scale_inv"] = ((16, 56), "F32")
    else:
        listing["vision_tower.encoder.blocks.3.wqkv.weight"] = ((3456, 1151), "BF16")
    folder = kimi_k25_layout(tmp_path / case.replace(" ", "-"), listing)
    result = invoke("verify", "--path", str(folder), "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1
    assert [(m["tensor"], m["kind"]) for m in report["mismatches"]] == [(tensor, kind)]


def test_tiny_real_int4_checkpoint(tmp_path):
    pytest.importorskip("torch")
    folder = write_tiny_int4_checkpoint(tmp_path / "tiny")
    report = json.loads(invoke("verify", "--path", str(folder), "--json").stdout)
    assert report["mismatches"] == [] and report["ok"]
    # hidden 256, 4 routed experts of 160 in the one MoE layer: 12 packed Linears
    assert report["packed_linears"]["packed"] == 12
    gate_up = packed_int4((160, 256))  # I32 [160, 32], BF16 [160, 8]
    down = packed_int4((256, 160))  # I32 [256, 20], BF16 [256, 5]
    assert gate_up["weight_packed"][0] == (160, 32) and down["weight_scale"][0] == (256, 5)
    scale_elements = 4 * (2 * 160 * 8 + 256 * 5)
    assert report["int4_metadata"]["elements"] == scale_elements + 12 * 2
    assert report["parameters"]["found"] == report["parameters"]["expected"]


def test_int4_packing_round_trips():
    torch = pytest.importorskip("torch")
    weight = torch.randn(6, 70)
    packed, scale, shape = pack_int4(weight)
    assert (packed.shape, scale.shape, shape.tolist()) == ((6, 9), (6, 3), [6, 70])
    values = unpack_int4(packed, 70).float()
    restored = torch.nn.functional.pad(values, (0, 26)).view(6, 3, 32) * scale.float()[..., None]
    assert (restored.view(6, -1)[:, :70] - weight).abs().max() <= 0.51 * scale.float().max()


@pytest.mark.parametrize(
    "change, needle",
    [
        (
            lambda q: q.update(format="float-quantized"),
            "unsupported compressed-tensors format 'float-quantized'",
        ),
        (
            lambda q: q["config_groups"]["group_0"]["weights"].update(num_bits=3),
            "'num_bits': 3 cannot be packed",
        ),
        (lambda q: q.update(ignore="lm_head"), "key 'ignore': expected a list of strings"),
    ],
)
def test_bad_quantization_config(write_config, change, needle):
    config = json.loads((K25 / "config.json").read_text())
    change(config["text_config"]["quantization_config"])
    path = write_config(config)
    result = invoke("params", "--config", str(path))
    assert result.exit_code == 2 and needle in result.stderr and result.stderr.count("\n") == 1


def test_a_quantization_kimicount_does_not_model(write_config, kimi_config):
    # Parameters and caches do not depend on it; weight bytes and verification do.
    path = write_config({**kimi_config, "quantization_config": {"quant_method": "gptq", "bits": 4}})
    result = invoke("params", "--config", str(path))
    assert result.exit_code == 0 and "Weights            not sized  quantization 'gptq'" in result.stdout
    assert (
        json.loads(invoke("params", "--config", str(path), "--json").stdout)["memory"]["stored_bytes"] is None
    )
    memory = invoke("params", "--config", str(path), "--by", "memory")
    assert memory.exit_code == 2 and "quantization 'gptq' is not modelled" in memory.stderr


def test_text_config_missing_keys(write_config):
    config = json.loads((K25 / "config.json").read_text())
    del config["text_config"]["hidden_size"]
    with pytest.raises(ConfigError, match=r"text_config: key 'hidden_size': missing"):
        spec_from_path(write_config(config))
    config["text_config"] = "kimi_k2"
    result = invoke("params", "--config", str(write_config(config)))
    assert result.exit_code == 2 and "key 'text_config': expected an object" in result.stderr


def test_fp8_kimi_k2_is_unchanged_by_the_int4_rules():
    anatomy = build_anatomy(spec_from_path(KIMI_K2))
    assert (anatomy.total, anatomy.activated, anatomy.vision) == (1_026_408_232_448, 32_861_500_928, None)
