"""FP4 storage: NVIDIA ModelOpt NVFP4 (Kimi K2.6 and K2.7-Code's NVIDIA releases), compressed-tensors
nvfp4-pack-quantized and mxfp4-pack-quantized (Kimi K3's quantization_config on Kimi K2's layout):
bytes per component by hand, scales apart from parameters, per-GPU weights in plan, verify of full-size
header-only checkpoints built from the real Kimi K2 listing, and bad configs as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .checkpoints import kimi_k2_layout, kimi_k25_layout, kimi_nvfp4_listing, write_header_only
from .helpers import FIXTURES, KIMI_K2, fails_cleanly, invoke, real_kimi_k2_tensors

K26 = FIXTURES / "kimi-k2.6-nvfp4"
K27 = FIXTURES / "kimi-k2.7-code-nvfp4"
K3_QUANTIZATION = FIXTURES / "kimi-k3.quantization_config.json"

K2_TOTAL = 1_026_408_232_448
EXPERT_LINEARS = 60 * 384 * 3  # gate, up, down of the 384 routed experts of layers 1–60
EXPERT_ELEMENTS = 2048 * 7168  # each of them, [2048, 7168] or [7168, 2048]
# NVFP4 by hand: two E2M1 values per U8 byte, one F8_E4M3 scale per 16 inputs, and two F32 scalars
# (weight_scale_2, input_scale); an [2048, 7168] up_proj: 2048 × 3584 + 2048 × 448 + 8 bytes, and the
# [7168, 2048] down_proj 7168 × 1024 + 7168 × 128 + 8, the same
NVFP4_LINEAR = EXPERT_ELEMENTS // 2 + EXPERT_ELEMENTS // 16 + 2 * 4
# everything else in BF16 as K2.5 stores it, the router's correction bias in F32
REST = (K2_TOTAL - EXPERT_LINEARS * EXPERT_ELEMENTS) * 2 + 60 * 384 * 2


def json_of(*args: str, code: int = 0) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_nvfp4_releases_count_as_k25_and_store_only_the_routed_experts_in_fp4():
    for args in (
        ("kimi-k2.6-nvfp4",),
        ("nvidia/Kimi-K2.7-Code-NVFP4",),
        ("--config", str(K26)),
        ("--config", str(K27)),
    ):
        report = json_of("params", *args)
        assert (report["total"], report["activated"]) == (K2_TOTAL, 32_861_500_928), args
        assert report["memory"]["stored_bytes"] == EXPERT_LINEARS * NVFP4_LINEAR + REST == 594_205_904_896
        assert (
            report["vision"]["tree"]["stored_bytes"] == 2 * 471_143_920
        )  # vision_tower*, mm_projector*: BF16


def test_nvfp4_bytes_per_component():
    report = json_of("params", "kimi-k2.6-nvfp4")
    moe = report["tree"]["children"][1]["children"][1]
    assert moe["name"] == "60 MoE blocks (layers 1–60)"
    parts = {c["name"]: c for c in moe["children"]}
    experts = {c["name"]: c for c in parts["Mixture of experts"]["children"]}
    assert experts["Routed experts"]["stored_bytes"] == EXPERT_LINEARS * NVFP4_LINEAR
    # excluded: self_attn* and shared_experts* of every layer, all of layer 0 (exclude_modules)
    assert experts["Shared expert"]["stored_bytes"] == 60 * 3 * EXPERT_ELEMENTS * 2
    assert parts["Latent attention"]["stored_bytes"] == 60 * 101_124_096 * 2
    dense = report["tree"]["children"][1]["children"][0]
    assert dense["stored_bytes"] == 497_500_160 * 2


def test_nvfp4_scales_are_not_parameters():
    table = {c["name"]: c["value"] for c in json_of("params", "kimi-k2.6-nvfp4")["conventions"]}
    # what tools that count header elements count: the U8 pairs (half the FP4 values), the F8 scales and
    # the scalars, everything else itself
    fp4_elements = EXPERT_LINEARS * (EXPERT_ELEMENTS // 2 + EXPERT_ELEMENTS // 16 + 2)
    rest = K2_TOTAL - EXPERT_LINEARS * EXPERT_ELEMENTS + 471_143_920
    assert table["stored_elements"] == fp4_elements + rest
    assert table["parameters"] == K2_TOTAL


def test_hf_quant_config_beside_a_config_without_quantization(tmp_path):
    # ModelOpt's own file: read when config.json declares no quantization, as vLLM reads it
    config = json.loads((K26 / "config.json").read_text())
    del config["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "hf_quant_config.json").write_bytes((K26 / "hf_quant_config.json").read_bytes())
    report = json_of("params", "--config", str(tmp_path))
    assert report["memory"]["stored_bytes"] == EXPERT_LINEARS * NVFP4_LINEAR + REST
    # without it, the same config is all BF16
    (tmp_path / "hf_quant_config.json").unlink()
    assert (
        json_of("params", "--config", str(tmp_path))["memory"]["stored_bytes"] == 2 * K2_TOTAL + 60 * 384 * 2
    )


def test_nvfp4_per_gpu_weights_in_plan():
    def routed(*args):
        report = json_of("plan", "kimi-k2.6-nvfp4", "--gpus", "8xB200", "--kv-memory", "1GiB", *args)
        return {c["name"]: c["bytes_per_gpu"][0] for c in report["weights"]}["Routed experts"]

    # TP8: every expert split along its 2,048-wide intermediate, 256 per GPU: gate and up [256, 7168],
    # down [7168, 256], each with its scales and its two scalars
    gate = 256 * 7168 // 2 + 256 * 7168 // 16 + 8
    down = 7168 * 256 // 2 + 7168 * 256 // 16 + 8
    assert routed() == 60 * 384 * (2 * gate + down) == 71_345_664_000
    # EP8: 48 whole experts per GPU
    assert routed("--ep", "8") == 60 * 48 * 3 * NVFP4_LINEAR


@pytest.fixture(scope="module")
def k26_checkpoint(tmp_path_factory):
    return kimi_k25_layout(tmp_path_factory.mktemp("k26"), kimi_nvfp4_listing(), K26)


def test_full_size_k26_nvfp4_checkpoint_verifies(k26_checkpoint):
    report = json_of("verify", "--path", str(k26_checkpoint))
    assert report["ok"] and report["mismatches"] == []
    assert report["parameters"] == {"expected": K2_TOTAL, "found": K2_TOTAL}
    # weight_scale, weight_scale_2 and input_scale of each FP4 Linear: counted apart, with their bytes
    assert report["fp4_scales"] == {
        "tensors": 3 * EXPERT_LINEARS,
        "elements": EXPERT_LINEARS * (EXPERT_ELEMENTS // 16 + 2),
        "bytes": EXPERT_LINEARS * (EXPERT_ELEMENTS // 16 + 8),
    }
    assert report["fp8_scales"]["tensors"] == report["int4_metadata"]["tensors"] == 0
    assert report["by_dtype"]["U8"]["elements"] == EXPERT_LINEARS * EXPERT_ELEMENTS // 2


@pytest.mark.parametrize(
    "tamper, tensor, found",
    [
        ("bf16 expert", "language_model.model.layers.7.mlp.experts.3.up_proj.weight", "[2048, 7168] BF16"),
        ("no scale", "language_model.model.layers.7.mlp.experts.3.up_proj.weight_scale", "absent"),
        ("scalar as [1]", "language_model.model.layers.7.mlp.experts.3.up_proj.weight_scale_2", "[1] F32"),
    ],
)
def test_a_wrong_fp4_linear_is_named(tmp_path, tamper, tensor, found):
    listing = kimi_nvfp4_listing()
    if tamper == "bf16 expert":
        listing[tensor] = ((2048, 7168), "BF16")
    elif tamper == "no scale":
        del listing[tensor]
    else:
        listing[tensor] = ((1,), "F32")
    folder = kimi_k25_layout(tmp_path / "k26", listing, K26)
    report = json_of("verify", "--path", str(folder), code=1)
    assert [(m["tensor"], m["kind"], m["found"]) for m in report["mismatches"]] == [(tensor, "fp4", found)]


# --- compressed-tensors: MXFP4 (Kimi K3's quantization_config) and NVFP4 ------------------------------


def k2_with(quantization: dict, folder) -> str:
    config = json.loads((KIMI_K2 / "config.json").read_text())
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps({**config, "quantization_config": quantization}))
    return str(path)


def test_mxfp4_of_kimi_k3_on_kimi_k2(tmp_path):
    config = k2_with(json.loads(K3_QUANTIZATION.read_text()), tmp_path / "mx")
    report = json_of("params", "--config", config)
    # MXFP4: U8 pairs and one U8 E8M0 exponent per 32 inputs, no global scale, no input scale
    # (input_activations null); ignore keeps attention, shared experts, the dense MLP and lm_head
    mxfp4_linear = EXPERT_ELEMENTS // 2 + EXPERT_ELEMENTS // 32
    assert report["memory"]["stored_bytes"] == EXPERT_LINEARS * mxfp4_linear + REST


def test_full_size_mxfp4_checkpoint_verifies(tmp_path):
    listing = {}
    for name, (shape, dtype) in real_kimi_k2_tensors().items():
        if name.endswith((".weight_scale_inv", ".inv_freq")):
            continue
        if ".mlp.experts." in name:  # compressed-tensors' MXFP4 names and shapes, by hand
            stem = name.removesuffix(".weight")
            listing[f"{stem}.weight_packed"] = ((shape[0], shape[1] // 2), "U8")
            listing[f"{stem}.weight_scale"] = ((shape[0], shape[1] // 32), "U8")
        else:
            listing[name] = (shape, "BF16" if dtype == "F8_E4M3" else dtype)
    config = k2_with(json.loads(K3_QUANTIZATION.read_text()), tmp_path / "cfg")
    folder = kimi_k2_layout(tmp_path / "mx", listing, config=Path(config))
    report = json_of("verify", "--path", str(folder))
    assert report["ok"] and report["parameters"]["found"] == K2_TOTAL
    assert report["fp4_scales"] == {
        "tensors": EXPERT_LINEARS,
        "elements": EXPERT_LINEARS * EXPERT_ELEMENTS // 32,
        "bytes": EXPERT_LINEARS * EXPERT_ELEMENTS // 32,
    }


def nvfp4_compressed_tensors(static_input: bool) -> dict:
    """compressed-tensors' NVFP4 config as llm-compressor writes it (a tensor_group scheme, groups of 16)."""
    activations = {
        "num_bits": 4,
        "type": "float",
        "strategy": "tensor_group",
        "group_size": 16,
        "dynamic": not static_input,
    }
    quantization = json.loads(K3_QUANTIZATION.read_text())
    group = quantization["config_groups"]["group_0"]
    group["weights"] = {**group["weights"], "group_size": 16, "strategy": "tensor_group", "scale_dtype": None}
    group["input_activations"] = activations
    return {**quantization, "format": "nvfp4-pack-quantized"}


@pytest.mark.parametrize("static_input", [True, False])
def test_nvfp4_pack_quantized(tmp_path, static_input):
    report = json_of("params", "--config", k2_with(nvfp4_compressed_tensors(static_input), tmp_path))
    # weight_packed U8 [out, in/2], weight_scale F8_E4M3 [out, in/16], weight_global_scale F32 [1], and
    # input_global_scale F32 [1] when the input scale is static
    linear = EXPERT_ELEMENTS // 2 + EXPERT_ELEMENTS // 16 + 4 + (4 if static_input else 0)
    assert report["memory"]["stored_bytes"] == EXPERT_LINEARS * linear + REST


def test_fp8_and_int4_stay_as_they_were():
    # the real Kimi-K2-Instruct checkpoint's data bytes less its 61 rotary buffers, and K2.5's INT4
    assert json_of("params")["memory"]["stored_bytes"] == 1_029_173_249_888
    int4 = EXPERT_ELEMENTS // 8 * 4 + EXPERT_ELEMENTS // 32 * 2 + 8
    assert json_of("params", "kimi-k2.5")["memory"]["stored_bytes"] == EXPERT_LINEARS * int4 + REST


@pytest.mark.parametrize(
    "change, needles",
    [
        (
            lambda q: q["config_groups"]["group_0"]["weights"].update(group_size=16),
            ["group_size", "16", "32"],
        ),
        (lambda q: q["config_groups"]["group_0"]["weights"].update(type="int"), ["type", "4-bit float"]),
        (lambda q: q["config_groups"]["group_0"]["weights"].update(symmetric=False), ["symmetric"]),
        (
            lambda q: q["config_groups"]["group_0"]["weights"].update(scale_dtype="torch.int8"),
            ["scale_dtype"],
        ),
        (lambda q: q.update(ignore=["re:(unclosed"]), ["ignore", "re:(unclosed"]),
        (lambda q: q["config_groups"]["group_0"]["weights"].update(scale_dtype=["u8"]), ["scale_dtype"]),
        (lambda q: q.update(format=["mxfp4-pack-quantized"]), ["format", "expected a string"]),
    ],
)
def test_bad_mxfp4_configs_are_one_line(tmp_path, change, needles):
    quantization = json.loads(K3_QUANTIZATION.read_text())
    change(quantization)
    path = k2_with(quantization, tmp_path)
    fails_cleanly(invoke("params", "--config", path), path, *needles)


def test_bad_modelopt_configs(tmp_path):
    config = json.loads((K26 / "config.json").read_text())
    config["quantization_config"]["ignore"] = "lm_head"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    fails_cleanly(invoke("params", "--config", str(path)), str(path), "ignore", "list of strings")
    # another ModelOpt algorithm is counted but its storage is not modelled: verify refuses it
    config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "FP8"}
    path.write_text(json.dumps(config))
    assert json_of("params", "--config", str(path))["total"] == K2_TOTAL
    write_header_only(tmp_path / "model.safetensors", {"lm_head.weight": ((163840, 7168), "BF16")})
    fails_cleanly(
        invoke("verify", "--config", str(path), "--path", str(tmp_path)), "modelopt FP8", "not modelled"
    )


def test_a_wildcard_that_backtracks_without_end_is_cut_short(tmp_path):
    # 20 stars in a row before a character no name has: .*.*….*!, every way to share a name among them
    import time

    from .helpers import run_kimicount

    config = json.loads((K26 / "config.json").read_text())
    config["quantization_config"]["ignore"] = ["*" * 20 + "!"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    start = time.monotonic()
    result = run_kimicount("params", "--config", str(path), timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert (
        "quantization_config: key 'ignore'" in line
        and "take more than 5 s" in line
        and "Traceback" not in line
    )
    assert time.monotonic() - start < 30
