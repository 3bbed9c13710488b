"""verify on the rest of the family and on the edges: real tiny checkpoints written with safetensors
(DeepSeek-V3.2's indexer, V2-Lite's plain query projection, tied embeddings, no shared experts), the
scale and index mismatch kinds, and a Hub that is offline or ignores Range."""

from __future__ import annotations

import json
import struct
from collections import Counter

import pytest

from .checkpoints import (
    TINY_FP8_CONFIG,
    store_bf16,
    write_checkpoint,
    write_header_only,
    write_index,
)
from .fakehub import FakeHub
from .helpers import invoke, run_kimicount

V32 = {**TINY_FP8_CONFIG, "model_type": "deepseek_v32", "index_n_heads": 4, "index_head_dim": 64}
V2_LITE = {
    **{k: v for k, v in TINY_FP8_CONFIG.items() if k != "quantization_config"},
    "model_type": "deepseek_v2",
    "q_lora_rank": None,
    "n_shared_experts": 2,
    "topk_method": "greedy",
    "num_nextn_predict_layers": 0,
}
TIED_NO_SHARED = {**TINY_FP8_CONFIG, "tie_word_embeddings": True, "n_shared_experts": 0}


def verify(folder, *args: str) -> tuple[int, dict]:
    result = invoke("verify", "--path", str(folder), *args, "--json")
    return result.exit_code, json.loads(result.stdout)


def test_deepseek_v32_indexer_checkpoint(tmp_path):
    pytest.importorskip("torch")  # the checkpoint is written for real
    # wq_b and wk in FP8 with scales, weights_proj in BF16 without one, k_norm weight and bias
    code, report = verify(write_checkpoint(tmp_path / "v32", V32))
    assert report["mismatches"] == [] and code == 0
    indexer = 4 * 64 * 192 + 64 * 256 + 4 * 256 + 2 * 64  # wq_b, wk, weights_proj, k_norm
    assert report["parameters"]["expected"] == 1_450_884 + 2 * indexer  # the tiny FP8 model + 2 layers
    assert report["mtp"]["expected"] == report["mtp"]["found"]


def test_unquantized_v2_lite_shape_checkpoint(tmp_path):
    pytest.importorskip("torch")  # the checkpoint is written for real
    code, report = verify(write_checkpoint(tmp_path / "lite", V2_LITE, store_bf16))
    assert report["mismatches"] == [] and code == 0
    assert report["fp8_scales"]["tensors"] == 0
    assert "model.layers.0.self_attn.q_proj.weight" not in {m["tensor"] for m in report["mismatches"]}


def test_tied_embeddings_and_no_shared_experts(tmp_path):
    pytest.importorskip("torch")  # the checkpoint is written for real
    code, report = verify(write_checkpoint(tmp_path / "tied", TIED_NO_SHARED))
    assert report["mismatches"] == [] and code == 0
    expert = 3 * 256 * 160
    assert report["parameters"]["expected"] == 1_450_884 - 300 * 256 - expert  # no lm_head, no shared


def _single(tmp_path, tensors, name="ckpt"):
    folder = tmp_path / name
    folder.mkdir()
    write_header_only(folder / "model.safetensors", tensors)
    (folder / "config.json").write_text(json.dumps(TINY_FP8_CONFIG))
    return folder


def test_scale_mismatch_kinds(tmp_path):
    pytest.importorskip("torch")  # the checkpoint is written for real
    folder = write_checkpoint(tmp_path / "real", TINY_FP8_CONFIG)
    raw = (folder / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    header.pop("__metadata__", None)
    listing = {name: (tuple(e["shape"]), e["dtype"]) for name, e in header.items()}
    scale = "model.layers.1.self_attn.o_proj.weight_scale_inv"
    del listing[scale]  # missing
    listing["model.layers.0.self_attn.q_b_proj.weight_scale_inv"] = ((2, 2), "BF16")  # wrong dtype
    listing["model.norm.weight_scale_inv"] = ((1, 1), "F32")  # a scale for a weight that has none
    code, report = verify(_single(tmp_path, listing))
    assert code == 1
    assert {(m["tensor"], m["kind"], m["found"]) for m in report["mismatches"]} == {
        (scale, "scale", "absent"),
        ("model.layers.0.self_attn.q_b_proj.weight_scale_inv", "scale", "[2, 2] BF16"),
        ("model.norm.weight_scale_inv", "scale", "[1, 1] F32"),
    }


def test_a_tensor_in_two_files_is_a_duplicate(tmp_path):
    folder = tmp_path / "dup"
    folder.mkdir()
    shards = {
        "a.safetensors": {"model.norm.weight": ((256,), "BF16")},
        "b.safetensors": {"model.norm.weight": ((256,), "BF16")},
    }
    for file, tensors in shards.items():
        write_header_only(folder / file, tensors)
    (folder / "config.json").write_text(json.dumps(TINY_FP8_CONFIG))
    code, report = verify(folder)
    assert code == 1
    assert ("model.norm.weight", "duplicate") in {(m["tensor"], m["kind"]) for m in report["mismatches"]}
    assert report["by_dtype"]["BF16"]["tensors"] == 2  # both stored copies are counted
    assert report["index"]["header_data_bytes"] == 2 * 256 * 2


def _three_files(tmp_path, shards):
    from kimicount.checkpoint import read_folder

    folder = tmp_path / "three"
    folder.mkdir()
    for file, tensors in shards.items():
        write_header_only(folder / file, tensors)
    return read_folder(folder)


def test_kinds_looked_up_file_by_file_are_the_kinds_of_every_name(tmp_path):
    # Runs of names in one file, a name alone between them, names in no file: each name's kind as
    # written here (None: absent), without the dict of every name being made.
    checkpoint = _three_files(
        tmp_path,
        {
            "a.safetensors": {f"a.{i}": ((2, i + 1), "BF16") for i in range(200)},
            "b.safetensors": {"b.0": ((3,), "F32"), "b.1": ((4,), "U8")},
            "c.safetensors": {f"c.{i}": ((i + 1,), "F8_E4M3") for i in range(70)},
        },
    )
    names = [f"a.{i}" for i in range(150)] + ["b.1", "nowhere", "c.69", "a.199", "c.0", "b.0", "b.9"]
    names += [f"c.{i}" for i in range(70)] + [f"a.{i}" for i in range(150, 200)]
    expected = [f"[2, {i + 1}] BF16" for i in range(150)]
    expected += ["[4] U8", None, "[70] F8_E4M3", "[2, 200] BF16", "[1] F8_E4M3", "[3] F32", None]
    expected += [f"[{i + 1}] F8_E4M3" for i in range(70)] + [f"[2, {i + 1}] BF16" for i in range(150, 200)]
    assert checkpoint.kinds_of(names) == expected
    assert checkpoint.kinds_of([]) == [] and checkpoint.kinds_of(["nowhere"]) == [None]
    # counted a block at a time: the same kinds, as many of each
    assert checkpoint.kind_counts(names) == Counter(expected)
    assert checkpoint.kind_counts(names[:150]) == {f"[2, {i + 1}] BF16": 1 for i in range(150)}
    same = [f"a.{i}" for i in range(200)] * 3  # long runs of one file, its blocks doubling
    assert sum(checkpoint.kind_counts(same).values()) == 600 and len(checkpoint.kind_counts(same)) == 200
    assert checkpoint.kind_counts([]) == {} and checkpoint.kind_counts(["nowhere", "b.9"]) == {None: 2}
    assert "kinds" not in checkpoint.__dict__  # looked up in each file's own names
    assert len(checkpoint.tensor_names) == 272 and not checkpoint.duplicates


def test_a_name_in_two_files_has_the_last_files_kind(tmp_path):
    # as `kinds` says (and a `duplicate` mismatch): b.safetensors, read last, holds it in F32
    checkpoint = _three_files(
        tmp_path,
        {
            "a.safetensors": {"x": ((2,), "BF16"), "y": ((1,), "BF16")},
            "b.safetensors": {"x": ((2,), "F32")},
        },
    )
    assert checkpoint.duplicates == ("x",)
    assert checkpoint.kinds_of(["x", "y", "z"]) == ["[2] F32", "[1] BF16", None]
    assert checkpoint.kind_counts(["x", "y", "z", "x"]) == {"[2] F32": 2, "[1] BF16": 1, None: 1}
    assert len(checkpoint.tensor_names) == 2


def test_a_checkpoint_verified_whole_makes_no_dict_of_every_name(tmp_path):
    # its names spread over two files, one by one (write_tiny_fp8_checkpoint deals them out in turn)
    pytest.importorskip("torch")  # the checkpoint is written for real
    from kimicount.anatomy import build_anatomy
    from kimicount.checkpoint import read_folder
    from kimicount.spec import spec_from_path
    from kimicount.verify import verify as verify_checkpoint

    from .checkpoints import write_tiny_fp8_checkpoint

    folder = write_tiny_fp8_checkpoint(tmp_path / "tiny")
    checkpoint = read_folder(folder)
    report = verify_checkpoint(build_anatomy(spec_from_path(folder)), checkpoint)
    assert report.ok and report.tensors == len(checkpoint.files[0].names) + len(checkpoint.files[1].names)
    assert "kinds" not in checkpoint.__dict__


def test_an_index_with_no_tensors_is_bad_input(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    write_index(folder, {}, 0)
    (folder / "config.json").write_text(json.dumps(TINY_FP8_CONFIG))
    result = invoke("verify", "--path", str(folder))
    assert result.exit_code == 2 and "the weight_map names no tensors" in result.stderr


@pytest.fixture
def tiny_repo(tmp_path):
    pytest.importorskip("torch")  # the checkpoint is written for real
    folder = write_checkpoint(tmp_path / "tiny", TINY_FP8_CONFIG)
    return {
        "config.json": (folder / "config.json").read_bytes(),
        "model.safetensors": folder / "model.safetensors",
    }


def test_a_server_that_ignores_range(httpserver, tmp_path, tiny_repo):
    fake = FakeHub(ignore_range=True)
    fake.add_repo("org/tiny", tiny_repo)
    env = fake.client_env(httpserver, tmp_path)
    result = run_kimicount("verify", "--repo", "org/tiny", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["parameters"]["found"] == 1_450_884


def test_offline_after_the_config_was_cached(httpserver, tmp_path, tiny_repo):
    fake = FakeHub()
    fake.add_repo("org/tiny", tiny_repo)
    env = fake.client_env(httpserver, tmp_path)
    assert (
        run_kimicount("params", "--repo", "org/tiny", "--json", env=env).returncode == 0
    )  # caches config.json
    result = run_kimicount("verify", "--repo", "org/tiny", env={**env, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2, result.stderr
    # the index is read at the commit of the cached config
    assert result.stderr.startswith("kimicount: error: org/tiny@0123456789ab: HF_HUB_OFFLINE is set")
    assert result.stderr.count("\n") == 1
