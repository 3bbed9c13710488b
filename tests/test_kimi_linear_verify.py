"""verify on Kimi-Linear-48B-A3B: a header-only checkpoint and an index written by the test with the real
structure (the names of the real index's windows, fixtures/kimi-linear-48b-a3b; the shapes of vLLM's
kimi_linear.py and layers/kda.py, written out here; A_log and dt_bias F32, the rest BF16)."""

from __future__ import annotations

import json

from .checkpoints import BYTES_PER_ELEMENT, Listing, write_header_only, write_index
from .helpers import fails_cleanly, invoke
from .test_kimi_linear import LINEAR, index_excerpt

H, P, D, HEADS, E = 2304, 4096, 128, 32, 256


def kimi_linear_listing() -> Listing:
    """Every tensor of the real checkpoint: layers 3, 7, ..., 23 and 26 MLA (1-based 4, 8, ..., 27)."""
    t: Listing = {
        "model.embed_tokens.weight": ((163_840, H), "BF16"),
        "model.norm.weight": ((H,), "BF16"),
        "lm_head.weight": ((163_840, H), "BF16"),
    }
    for i in range(27):
        layer = f"model.layers.{i}."
        t[layer + "input_layernorm.weight"] = ((H,), "BF16")
        t[layer + "post_attention_layernorm.weight"] = ((H,), "BF16")
        a = layer + "self_attn."
        if i in (3, 7, 11, 15, 19, 23, 26):
            t[a + "q_proj.weight"] = ((HEADS * 192, H), "BF16")
            t[a + "kv_a_proj_with_mqa.weight"] = ((576, H), "BF16")
            t[a + "kv_a_layernorm.weight"] = ((512,), "BF16")
            t[a + "kv_b_proj.weight"] = ((HEADS * 256, 512), "BF16")
            t[a + "o_proj.weight"] = ((H, HEADS * 128), "BF16")
        else:
            for x in "qkv":
                t[a + f"{x}_proj.weight"] = ((P, H), "BF16")
                t[a + f"{x}_conv1d.weight"] = ((P, 1, 4), "BF16")
            t[a + "A_log"] = ((1, 1, HEADS, 1), "F32")
            t[a + "dt_bias"] = ((P,), "F32")
            t[a + "f_a_proj.weight"] = ((D, H), "BF16")
            t[a + "f_b_proj.weight"] = ((P, D), "BF16")
            t[a + "g_a_proj.weight"] = ((D, H), "BF16")
            t[a + "g_b_proj.weight"] = ((P, D), "BF16")
            t[a + "b_proj.weight"] = ((HEADS, H), "BF16")
            t[a + "o_norm.weight"] = ((D,), "BF16")
            t[a + "o_proj.weight"] = ((H, P), "BF16")
        if i == 0:
            for name, shape in (("gate_proj", (9216, H)), ("up_proj", (9216, H)), ("down_proj", (H, 9216))):
                t[layer + f"mlp.{name}.weight"] = (shape, "BF16")
            continue
        moe = layer + "block_sparse_moe."
        t[moe + "gate.weight"] = ((E, H), "BF16")
        t[moe + "gate.e_score_correction_bias"] = ((E,), "BF16")
        for e in range(E):
            for name, shape in (("w1", (1024, H)), ("w2", (H, 1024)), ("w3", (1024, H))):
                t[moe + f"experts.{e}.{name}.weight"] = (shape, "BF16")
        for name, shape in (("gate_proj", (1024, H)), ("up_proj", (1024, H)), ("down_proj", (H, 1024))):
            t[moe + f"shared_experts.{name}.weight"] = (shape, "BF16")
    return t


def size_of(listing: Listing) -> int:
    return sum(BYTES_PER_ELEMENT[dtype] * _prod(shape) for shape, dtype in listing.values())


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_the_listing_is_the_real_index():
    """The written listing has the real index's names (its windows), count and byte total."""
    metadata, names = index_excerpt()
    listing = kimi_linear_listing()
    assert set(names) <= set(listing) and len(listing) == 20_493
    assert size_of(listing) == metadata["total_size"] == 98_245_528_576


def write_checkpoint(folder, listing: Listing):
    folder.mkdir()
    shards: dict[str, Listing] = {}
    for name, entry in listing.items():
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else 0
        shards.setdefault(f"model-{1 + layer * 20 // 27:05d}-of-00020.safetensors", {})[name] = entry
    total = sum(write_header_only(folder / file, tensors) for file, tensors in shards.items())
    write_index(folder, shards, total)
    (folder / "config.json").write_text((LINEAR / "config.json").read_text())
    return folder


def test_verify_a_kimi_linear_checkpoint(tmp_path):
    folder = write_checkpoint(tmp_path / "kimi-linear", kimi_linear_listing())
    result = invoke("verify", "--path", str(folder), "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0, report["mismatches"][:3]
    assert report["tensors"] == 20_493 and report["parameters"]["found"] == 49_122_681_728
    kinds = {row["kind"] for row in report["layers"]}
    assert kinds == {"kda-dense", "kda-moe", "mla-moe"}


def test_verify_finds_a_bf16_a_log(tmp_path):
    listing = kimi_linear_listing()
    listing["model.layers.1.self_attn.A_log"] = ((1, 1, HEADS, 1), "BF16")
    folder = write_checkpoint(tmp_path / "kimi-linear", listing)
    report = json.loads(invoke("verify", "--path", str(folder), "--json").stdout)
    assert [(m["tensor"], m["kind"], m["expected"]) for m in report["mismatches"]] == [
        ("model.layers.1.self_attn.A_log", "dtype", "F32")
    ]


def _index(tmp_path, listing: Listing, **metadata) -> str:
    path = tmp_path / "model.safetensors.index.json"
    weight_map = {name: "model-00001-of-00020.safetensors" for name in listing}
    path.write_text(json.dumps({"metadata": metadata, "weight_map": weight_map}))
    return str(path)


def test_verify_index_alone(tmp_path):
    """The real index's metadata (total_parameters 49,122,681,728, total_size 98,245,528,576) and the
    listing's names agree with the tree."""
    metadata, _ = index_excerpt()
    listing = kimi_linear_listing()
    result = invoke("verify", "kimi-linear", "--index", _index(tmp_path, listing, **metadata), "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0, report["mismatches"][:3]
    assert report["names"] == {"expected": 20_493, "found": 20_493, "rotary_buffers": 0}
    assert report["total_size"] == {"declared": 98_245_528_576, "expected": 98_245_528_576}
    assert report["total_parameters"] == {"declared": 49_122_681_728, "expected": 49_122_681_728}


def test_verify_index_names_what_is_wrong(tmp_path):
    metadata, _ = index_excerpt()
    listing = kimi_linear_listing()
    del listing["model.layers.0.self_attn.g_b_proj.weight"]
    listing["model.layers.0.self_attn.g_proj.weight"] = ((P, H), "BF16")  # K3's full-rank gate
    index = _index(tmp_path, listing, total_size=metadata["total_size"] + 2, total_parameters=1)
    result = invoke("verify", "kimi-linear", "--index", index, "--json")
    assert result.exit_code == 1
    found = {(m["tensor"], m["kind"]) for m in json.loads(result.stdout)["mismatches"]}
    assert found == {
        ("model.layers.0.self_attn.g_b_proj.weight", "missing"),
        ("model.layers.0.self_attn.g_proj.weight", "unexpected"),
        ("model.safetensors.index.json", "total_size"),
        ("model.safetensors.index.json", "total_parameters"),
    }
    table = invoke("verify", "kimi-linear", "--index", index, env={"COLUMNS": "150"}).stdout
    assert "4 mismatches" in table and "g_b_proj" in table


def test_verify_index_refuses_path(tmp_path):
    fails_cleanly(
        invoke("verify", "--index", "x.json", "--path", str(tmp_path)), "--index checks an index alone"
    )
