"""`kimicount verify --path`: the real Kimi K2 checkpoint layout, tampered copies, a tiny real FP8
checkpoint, and every kind of broken safetensors file."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kimicount.anatomy import build_anatomy
from kimicount.spec import spec_from_path
from kimicount.verify import _components, expected_groups

from .checkpoints import (
    kimi_k2_layout,
    tampered_kimi_k2,
    write_header_only,
    write_tiny_fp8_checkpoint,
)
from .helpers import FIXTURES, KIMI_K2, invoke, real_kimi_k2_tensors

LISTING_TOTALS = json.loads((KIMI_K2 / "tensors.json").read_text())["totals"]


@pytest.fixture(scope="session")
def kimi_k2_checkpoint(tmp_path_factory) -> Path:
    """The real Kimi-K2-Instruct tensor listing as 61 full-size, header-only shards (a few MB of disk)."""
    return kimi_k2_layout(tmp_path_factory.mktemp("kimi-k2"), config=KIMI_K2 / "config.json")


def verify_json(*args: str) -> tuple[int, dict]:
    result = invoke("verify", *args, "--json")
    return result.exit_code, json.loads(result.stdout)


def test_full_size_kimi_k2_checkpoint_verifies(kimi_k2_checkpoint):
    code, report = verify_json("--path", str(kimi_k2_checkpoint))
    assert code == 0 and report["ok"] and report["mismatches"] == []
    assert report["files"] == 61
    assert report["tensors"] == LISTING_TOTALS["tensors"] == 139_644
    assert report["parameters"] == {"expected": 1_026_408_232_448, "found": 1_026_408_232_448}
    assert report["fp8_scales"]["elements"] == 62_495_192
    assert report["fp8_scales"]["tensors"] == 69_608  # one per FP8 Linear weight
    assert report["rotary_buffers"] == {"tensors": 61, "elements": 3_416, "bytes": 61 * 56 * 2}
    assert report["mtp"]["tensors"] == 0
    assert {d: t["elements"] for d, t in report["by_dtype"].items()} == LISTING_TOTALS["elements_by_dtype"]
    assert sum(t["bytes"] for t in report["by_dtype"].values()) == LISTING_TOTALS["data_bytes"]
    assert report["index"] == {"total_size": 1_029_173_256_720, "header_data_bytes": 1_029_173_256_720}


def test_only_headers_are_read(kimi_k2_checkpoint):
    _, report = verify_json("--path", str(kimi_k2_checkpoint))
    headers = sum(
        8 + struct.unpack("<Q", p.open("rb").read(8))[0] for p in kimi_k2_checkpoint.glob("*.safetensors")
    )
    assert report["read"]["header_bytes"] == headers < 40 * 2**20  # of a 1,029 GB checkpoint


def test_per_component_and_per_layer_counts(kimi_k2_checkpoint):
    _, report = verify_json("--path", str(kimi_k2_checkpoint))
    components = {c["name"]: c for c in report["components"]}
    experts = components["Routed experts"]
    assert experts["expected_tensors"] == experts["verified_tensors"] == 3 * 384 * 60
    assert experts["expected_elements"] == experts["verified_elements"] == 384 * 60 * 3 * 7168 * 2048
    attention = next(c for c in report["components"] if c["name"] == "Latent attention")  # the dense block's
    # q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj: split
    # tensors count once
    assert attention["expected_tensors"] == attention["verified_tensors"] == 7
    layers = {row["index"]: row for row in report["layers"]}
    assert len(layers) == 61
    assert layers[0]["expected_tensors"] == 12 and layers[0]["verified_elements"] == 497_500_160
    assert layers[60]["expected_tensors"] == 1_166  # 10 attention/norm + 2 router + 3 × 385 experts
    assert layers[60]["verified_elements"] == 17_059_365_248


def test_terminal_report(kimi_k2_checkpoint):
    result = invoke("verify", "--path", str(kimi_k2_checkpoint))
    assert result.exit_code == 0
    out = result.stdout
    assert "61 files, 139,644 tensors" in out
    assert "1,026,408,232,448  1,026,408,232,448" in out
    assert "FP8 block scales (not parameters)" in out and "62,495,192" in out
    assert "1–60 moe (each)" in out
    assert "OK: every tensor has the name, shape and dtype the anatomy predicts." in out


TAMPERINGS = {
    "missing expert": (
        lambda t: t.pop("model.layers.5.mlp.experts.17.up_proj.weight"),
        "model.layers.5.mlp.experts.17.up_proj.weight",
        "missing",
    ),
    "wrong shape": (
        lambda t: t.update({"model.layers.3.self_attn.kv_b_proj.weight": ((16384, 511), "F8_E4M3")}),
        "model.layers.3.self_attn.kv_b_proj.weight",
        "shape",
    ),
    "wrong scale shape": (
        lambda t: t.update({"model.layers.7.self_attn.o_proj.weight_scale_inv": ((56, 63), "F32")}),
        "model.layers.7.self_attn.o_proj.weight_scale_inv",
        "scale",
    ),
    "unknown tensor": (
        lambda t: t.update({"model.layers.2.mlp.extra_gate.weight": ((384, 7168), "BF16")}),
        "model.layers.2.mlp.extra_gate.weight",
        "unexpected",
    ),
    "wrong dtype": (
        lambda t: t.update({"model.layers.9.mlp.experts.3.down_proj.weight": ((7168, 2048), "BF16")}),
        "model.layers.9.mlp.experts.3.down_proj.weight",
        "dtype",
    ),
}


@pytest.mark.parametrize("case", TAMPERINGS)
def test_tampered_checkpoint_exits_1_and_names_the_tensor(kimi_k2_checkpoint, tmp_path, case):
    tamper, tensor, kind = TAMPERINGS[case]
    listing = real_kimi_k2_tensors()
    tamper(listing)
    folder = tampered_kimi_k2(kimi_k2_checkpoint, tmp_path / "tampered", listing)

    code, report = verify_json("--path", str(folder))
    assert code == 1 and not report["ok"]
    assert [(m["tensor"], m["kind"]) for m in report["mismatches"]] == [(tensor, kind)]

    result = invoke("verify", "--path", str(folder))
    assert result.exit_code == 1
    assert "1 mismatches" in result.stdout and tensor in result.stdout


def test_mismatch_details(kimi_k2_checkpoint, tmp_path):
    listing = real_kimi_k2_tensors()
    listing["model.layers.7.self_attn.o_proj.weight_scale_inv"] = ((56, 63), "F32")
    listing["model.layers.3.self_attn.kv_b_proj.weight"] = ((16384, 511), "F8_E4M3")
    folder = tampered_kimi_k2(kimi_k2_checkpoint, tmp_path / "t", listing)
    _, report = verify_json("--path", str(folder))
    by_tensor = {m["tensor"]: m for m in report["mismatches"]}
    assert by_tensor["model.layers.7.self_attn.o_proj.weight_scale_inv"]["expected"] == "[56, 64] F32"
    assert by_tensor["model.layers.7.self_attn.o_proj.weight_scale_inv"]["found"] == "[56, 63] F32"
    assert by_tensor["model.layers.3.self_attn.kv_b_proj.weight"]["expected"] == "[16384, 512]"
    assert by_tensor["model.layers.3.self_attn.kv_b_proj.weight"]["found"] == "[16384, 511]"
    model = report["components"][0]
    assert model["expected_tensors"] == 69_975
    assert model["verified_tensors"] == 69_975 - 1  # the wrong-shaped kv_b_proj


def test_index_disagreements_are_mismatches(kimi_k2_checkpoint, tmp_path):
    from .checkpoints import relink

    folder = relink(kimi_k2_checkpoint, tmp_path / "index")
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index_path.unlink()
    index["metadata"]["total_size"] += 1
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00061.safetensors"
    index["weight_map"]["model.layers.0.mlp.ghost.weight"] = "model-00001-of-00061.safetensors"
    index_path.write_text(json.dumps(index))
    code, report = verify_json("--path", str(folder))
    assert code == 1
    kinds = {(m["tensor"], m["kind"]) for m in report["mismatches"]}
    assert kinds == {
        ("model.safetensors.index.json", "total_size"),
        ("model.norm.weight", "index"),
        ("model.layers.0.mlp.ghost.weight", "index"),
    }


# --- a tiny real checkpoint: FP8 weights with real block scales, written with safetensors ---------


def test_tiny_real_fp8_checkpoint(tmp_path):
    pytest.importorskip("torch")
    folder = write_tiny_fp8_checkpoint(tmp_path / "tiny")
    code, report = verify_json("--path", str(folder))
    assert report["mismatches"] == [] and code == 0
    # by hand (hidden 256, 2 heads, q_lora 192, kv_lora 128, nope 64, rope 32, v 64, 4 experts of 160)
    attention = (256 * 192 + 192) + (256 * 160 + 128) + 192 * 2 * 96 + 128 * 2 * 128 + 2 * 64 * 256
    assert attention == 192_832
    dense = 2 * 256 + attention + 3 * 256 * 384
    moe = 2 * 256 + attention + (256 * 4 + 4) + 5 * 3 * 256 * 160
    total = 2 * 300 * 256 + dense + moe + 256
    assert total == 1_450_884
    assert report["parameters"] == {"expected": total, "found": total}
    # scales: one F32 per 128×128 block of each Linear, e.g. kv_a_proj_with_mqa [160, 256] -> [2, 2]
    per_attention = 4 + 4 + 4 + 2 + 2  # q_a, q_b, kv_a, kv_b, o_proj
    per_expert_mlp = 4 + 4 + 4  # gate [160,256] -> 2×2, up 2×2, down [256,160] -> 2×2
    scales = (per_attention + 6 + 6 + 6) + 2 * (per_attention + 5 * per_expert_mlp)  # eh_proj: BF16, no scale
    assert report["fp8_scales"]["elements"] == scales
    mtp_unique = 2 * 256 + 256 * 512 + moe + 256
    assert report["mtp"]["expected"] == report["mtp"]["found"] == mtp_unique + 2 * 300 * 256
    assert report["rotary_buffers"]["tensors"] == 3


def test_tiny_config_is_used_from_the_folder(tmp_path):
    pytest.importorskip("torch")
    folder = write_tiny_fp8_checkpoint(tmp_path / "tiny")
    # the bundled Kimi K2 config does not describe this checkpoint: every tensor differs
    code, report = verify_json("--path", str(folder), "--config", str(KIMI_K2 / "config.json"))
    assert code == 1 and len(report["mismatches"]) > 100
    assert report["parameters"]["expected"] == 1_026_408_232_448


@pytest.mark.parametrize("model", sorted(path.parent.name for path in FIXTURES.glob("*/config.json")))
def test_no_two_expected_tensors_share_a_name(model):
    # verify counts a checkpoint whose every tensor was claimed as fully checked (kimicount.verify
    # `_unclaimed`) only because each name is claimed once: weights, their FP8 scales and the packed
    # INT4 triples, over all groups, are distinct.
    anatomy = build_anatomy(spec_from_path(FIXTURES / model))
    names = []
    for group in expected_groups(anatomy, _components(anatomy)):
        names += group.names
        if group.fp8_scale is not None:
            names += [name + "_scale_inv" for name in group.names]
        if group.packable:
            names += [
                name[: -len("weight")] + part
                for name in group.names
                for part in ("weight_packed", "weight_scale", "weight_shape")
            ]
    assert len(names) == len(set(names)) > 1000


# --- bad input: exit 2, one line naming the file and what is wrong --------------------------------


def _fails_cleanly(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kimicount: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _single_file(folder: Path, raw: bytes) -> Path:
    folder.mkdir()
    (folder / "config.json").write_bytes((KIMI_K2 / "config.json").read_bytes())
    (folder / "model.safetensors").write_bytes(raw)
    return folder


def _with_header(header: dict, data: int = 0, length: int | None = None) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + b"\0" * data


NORM = {"dtype": "BF16", "shape": [7168], "data_offsets": [0, 14336]}
BAD_FILES = {
    "empty file": (b"", ["0 bytes, too short for a safetensors header"]),
    "length past the end": (
        _with_header({}, length=4096),
        ["header length 4,096 bytes runs past the end of the file"],
    ),
    "absurd length": (struct.pack("<Q", 2**62), ["over safetensors' limit of 100,000,000"]),
    "not JSON": (struct.pack("<Q", 5) + b"{oops", ["header is not valid JSON"]),
    "not an object": (_with_header([1, 2]), ["header is a JSON list, expected an object"]),  # type: ignore[arg-type]
    "unknown dtype": (
        _with_header({"w": {**NORM, "dtype": "F12"}}, 14336),
        ["tensor 'w': unknown dtype \"F12\""],
    ),
    "negative shape": (
        _with_header({"w": {**NORM, "shape": [-7168]}}, 14336),
        ["tensor 'w': shape [-7168] is not a list of non-negative integers"],
    ),
    "non-integer shape": (
        _with_header({"w": {**NORM, "shape": [7168.0]}}, 14336),
        ["tensor 'w': shape [7168.0] is not a list"],
    ),
    "offsets disagree with dtype and shape": (
        _with_header({"w": {**NORM, "data_offsets": [0, 14000]}}, 14000),
        ["tensor 'w': data_offsets [0, 14000] hold 14,000 bytes, but BF16 [7168] needs 14,336"],
    ),
    "overlap": (
        _with_header({"a": NORM, "b": {**NORM, "data_offsets": [14000, 28336]}}, 28336),
        ["tensor 'b' at data_offsets [14000, 28336] overlaps the tensor before it"],
    ),
    "past the end of the file": (
        _with_header({"w": NORM}, 100),
        ["tensors end at byte 14,336 of the data, past the end of the file (the data area holds 100 bytes)"],
    ),
    "missing field": (
        _with_header({"w": {"dtype": "BF16"}}),
        ["tensor 'w': expected an object with dtype, shape"],
    ),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_broken_safetensors_file_exits_2(tmp_path, case):
    raw, needles = BAD_FILES[case]
    folder = _single_file(tmp_path / "ckpt", raw)
    _fails_cleanly(invoke("verify", "--path", str(folder)), str(folder / "model.safetensors"), *needles)


def test_index_naming_a_missing_shard(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    write_header_only(folder / "a.safetensors", {"model.norm.weight": ((7168,), "BF16")})
    index = {"weight_map": {"model.norm.weight": "a.safetensors", "lm_head.weight": "b.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    _fails_cleanly(invoke("verify", "--path", str(folder)), "names shard 'b.safetensors', which is not in")


def test_folders_without_a_checkpoint(tmp_path):
    _fails_cleanly(invoke("verify", "--path", str(tmp_path / "nowhere")), "no such folder")
    _fails_cleanly(
        invoke("verify", "--path", str(tmp_path)), "no model.safetensors.index.json, model.safetensors"
    )
    write_header_only(tmp_path / "model.safetensors", {"model.norm.weight": ((7168,), "BF16")})
    _fails_cleanly(invoke("verify", "--path", str(tmp_path)), "no config.json here; give --config")


def test_naming_the_checkpoint_once():
    _fails_cleanly(invoke("verify"), "name one checkpoint: --path DIR or --repo ORG/NAME")
    _fails_cleanly(invoke("verify", "--path", ".", "--repo", "a/b"), "name one checkpoint")
