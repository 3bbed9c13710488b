"""GLM-5, 5.1 and 5.2 (glm_moe_dsa): the tree by hand, the real GLM-5.1 BF16 GGUF to the byte, the
published 744B / 40B, the caches (bf16 latent + indexer, FlashMLA's fp8 record + indexer), GLM-5.2's
shared indexers, vLLM's printed KV pool of GLM-5-FP8 on 8 × H200, and verify of full-size
header-only checkpoints built from the GGUF listing."""

from __future__ import annotations

import json
import math
import re

import pytest

from .checkpoints import write_header_only, write_index
from .gguf_files import MapTensor, glm_dsa_metadata, read_map, write_gguf
from .helpers import FIXTURES, fails_cleanly, invoke

GLM51 = FIXTURES / "glm-5.1"
GLM52 = FIXTURES / "glm-5.2"
GLM5_FP8 = FIXTURES / "glm-5-fp8"
GIB = 2**30

# --- GLM-5's sizes by hand, from its config.json -------------------------------------------------------
# hidden 6144, 64 heads, q_lora_rank 2048, kv_lora_rank 512, qk_nope 192, qk_rope 64, v 256,
# intermediate 12288, moe_intermediate 2048, 256 routed experts (8 per token) + 1 shared, vocab 154880,
# 78 layers of which 3 dense, 1 MTP layer; indexer 32 heads of 128.
H, VOCAB = 6144, 154880
ATTENTION = (
    H * 2048 + 2048  # q_a_proj + q_a_layernorm
    + H * (512 + 64) + 512  # kv_a_proj_with_mqa + kv_a_layernorm
    + 2048 * 64 * (192 + 64)  # q_b_proj
    + 512 * 64 * (192 + 256)  # kv_b_proj
    + 64 * 256 * H  # o_proj
)  # fmt: skip
INDEXER = 2048 * 32 * 128 + H * 128 + H * 32 + 2 * 128  # wq_b, wk, weights_proj, k_norm weight + bias
EXPERT = 3 * H * 2048
DENSE_LAYER = 2 * H + ATTENTION + INDEXER + 3 * H * 12288
MOE_LAYER = 2 * H + ATTENTION + INDEXER + (256 * H + 256) + 256 * EXPERT + EXPERT
MAIN = 2 * VOCAB * H + H + 3 * DENSE_LAYER + 75 * MOE_LAYER
MTP = 2 * H + 2 * H * H + MOE_LAYER + H  # enorm, hnorm, eh_proj, the block, shared_head.norm
ACTIVATED = MAIN - 75 * (256 - 8) * EXPERT


def json_of(*args: str, code: int = 0) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def glm51_map() -> list[MapTensor]:
    return read_map("glm-5.1")


def test_the_hand_counts_are_the_real_gguf_listings(glm51_map):
    # every element of the real GLM-5.1 BF16 GGUF: blk.78 is the MTP layer, the rest the main model
    mtp = sum(t.elements for t in glm51_map if t.name.startswith("blk.78."))
    main = sum(t.elements for t in glm51_map) - mtp
    assert (main, mtp) == (MAIN, MTP) == (743_911_218_432, 9_952_920_576)
    # no embedding or head copy in the MTP layer: GLM-5's shares the main model's
    assert not [t.name for t in glm51_map if ".nextn.embed_tokens" in t.name or "shared_head_head" in t.name]


def test_glm5_tree(glm51_map):
    for name in ("glm-5", "glm-5.1", "zai-org/GLM-5.1", "glm-5-fp8"):
        report = json_of("params", name)
        assert (report["total"], report["activated"]) == (MAIN, ACTIVATED), name
        assert report["mtp"]["total"] == MTP
    report = json_of("params", "glm-5.1")
    blocks = {c["name"]: c for c in report["tree"]["children"][1]["children"]}
    assert list(blocks) == ["3 dense blocks (layers 0–2)", "75 MoE blocks (layers 3–77)"]
    moe = {c["name"]: c for c in blocks["75 MoE blocks (layers 3–77)"]["children"]}
    attention = {c["name"]: c for c in moe["Latent attention"]["children"]}
    assert attention["Lightning indexer"]["params_per_instance"] == INDEXER == 9_371_904
    heads = {c["name"]: c for c in attention["Key heads"]["children"]}
    assert heads["Key content up-projection"]["params_per_instance"] == 512 * 64 * 192
    assert attention["Value heads"]["params_per_instance"] == 512 * 64 * 256
    names = [t["name"] for t in attention["Lightning indexer"]["tensors"]]
    assert [n.rsplit(".", 2)[-2] + "." + n.rsplit(".", 1)[-1] for n in names] == [
        "wq_b.weight",
        "wk.weight",
        "weights_proj.weight",
        "k_norm.weight",
        "k_norm.bias",
    ]
    assert [c["name"] for c in report["mtp"]["tree"]["children"]] == [
        "Input norms",
        "Hidden projection",
        "1 MoE block (layer 78)",
        "Output norm",
    ]


def test_glm5_headline_figures_explained():
    # "744B parameters (40B active)": the main model without its MTP layer, rounded; the activated
    # count less the input embedding, cut; with the MTP layer's own parameters, 753.9B
    report = json_of("params", "glm-5")
    table = {c["name"]: c for c in report["conventions"]}
    explained = {(c["name"], e["figure"], e["reading"]) for c in report["conventions"] for e in c["explains"]}
    assert explained == {
        ("parameters", "744B", "rounded"),
        ("activated_without_embedding", "40B", "truncated"),
    }
    assert report["unexplained_figures"] == []
    assert table["parameters"]["value"] == MAIN
    assert table["parameters_with_mtp"]["value"] == MAIN + MTP == 753_864_139_008
    assert table["activated_without_embedding"]["value"] == ACTIVATED - VOCAB * H == 40_833_146_112
    assert "parameters_with_mtp_copies" not in table  # no copies to count
    assert table["mtp_activated"]["value"] == 2 * H + 2 * H * H + MOE_LAYER - 248 * EXPERT + H


# --- GLM-5.2: indexer_types -------------------------------------------------------------------------


def glm52_full_layers() -> list[int]:
    types = json.loads((GLM52 / "config.json").read_text())["indexer_types"]
    return [i for i, kind in enumerate(types) if kind == "full"]


def test_glm52_layers_that_share_an_indexer_carry_none():
    full = glm52_full_layers()
    assert len(full) == 21 and full[:4] == [0, 1, 2, 6] and full[-1] == 74
    report = json_of("params", "--config", str(GLM52))
    assert report["total"] == MAIN - 57 * INDEXER == 743_377_019_904
    assert report["mtp"]["total"] == MTP  # the MTP layer keeps its indexer (vLLM builds it full)
    groups = [c["name"] for c in report["tree"]["children"][1]["children"]]
    moe_full = [i for i in full if i >= 3]
    assert groups[0] == "3 dense blocks (layers 0–2)"
    assert groups[1].startswith(f"{len(moe_full)} MoE blocks (layers 6, 10, ")
    assert groups[2].startswith("57 MoE blocks sharing an indexer (layers 3–5, 7–9, ")


def test_glm52_caches_indexer_keys_only_where_there_is_an_indexer():
    kv = json_of("kv-cache", "--config", str(GLM52), "--tokens", "1", "--layout", "latent")
    assert kv["indexer"]["layers"] == 21
    assert kv["layouts"][0]["bytes_per_token"] == 78 * 1152 + 21 * 132
    with_mtp = json_of(
        "kv-cache", "--config", str(GLM52), "--tokens", "1", "--layout", "latent", "--include-mtp"
    )
    assert with_mtp["indexer"]["layers"] == 22
    assert with_mtp["layouts"][0]["bytes_per_token"] == 79 * 1152 + 22 * 132


@pytest.mark.parametrize(
    "change, needles",
    [
        ({"indexer_types": ["full"] * 77}, ["indexer_types", "77 entries", "78"]),
        ({"indexer_types": ["shared"] + ["full"] * 77}, ["indexer_types", "layer 0"]),
        ({"indexer_types": ["full"] * 77 + ["partial"]}, ["indexer_types", "layer 77", '"partial"']),
        ({"mlp_layer_types": ["sparse"] * 78}, ["mlp_layer_types", "layer 0", "dense"]),
        ({"indexer_types": "full"}, ["indexer_types", "list of strings"]),
    ],
)
def test_bad_per_layer_lists_are_one_line(tmp_path, change, needles):
    config = {**json.loads((GLM52 / "config.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    fails_cleanly(invoke("params", "--config", str(path)), str(path), *needles)


# --- caches and vLLM's printed pool ---------------------------------------------------------------------


def test_glm5_caches_in_every_layout():
    kv = json_of("kv-cache", "glm-5", "--tokens", "1", "--layout", "latent", "--layout", "flashmla-fp8")
    latent, fp8 = kv["layouts"]
    assert latent["bytes_per_token"] == 78 * ((512 + 64) * 2 + (128 + 4)) == 78 * (1152 + 132) == 100_152
    assert fp8["bytes_per_token"] == 78 * ((512 + 4 * 4 + 64 * 2) + 132) == 78 * (656 + 132) == 61_464


def test_vllm_glm5_fp8_on_8_h200_kv_pool():
    # vLLM issue #44545: GLM-5-FP8, 8 × H200, --kv-cache-dtype fp8: "434,048 tokens(24.85 GiB)".
    # vLLM (v1/core/kv_cache_utils.py at 001cabc, get_kv_cache_config_from_groups) holds all 78 layers' specs in
    # one group (UniformTypeKVCacheSpecs: the 656-byte fp8_ds_mla record and the 132-byte indexer key,
    # 64-token blocks) and takes available_memory // (64 × 78 × 788) blocks: 434,048 tokens are 6,782
    # blocks, so the pool was at least 6,782 × 3,933,696 B, under 6,783 × that; both print as 24.85 GiB.
    page = 64 * 78 * (656 + 132)
    assert page == 3_933_696 and 434_048 == 6_782 * 64
    pool = 6_782 * page
    assert f"{pool / GIB:.2f}" == f"{(6_783 * page - 1) / GIB:.2f}" == "24.85"
    args = ("plan", "glm-5-fp8", "--gpus", "8xH200", "--kv-cache-dtype", "fp8")
    kv = json_of(*args, "--kv-memory", str(pool))["kv_cache"]
    assert (kv["layout"], kv["bytes_per_token_per_gpu"]) == ("flashmla-fp8", 61_464)
    assert (kv["pages_per_gpu"], kv["tokens_per_gpu"]) == (6_782, 434_048)
    # 24.85 GiB itself (26,682,468,761 B) is over 6,783 pages: the printed figure is rounded
    assert json_of(*args, "--kv-memory", "24.85GiB")["kv_cache"]["tokens_per_gpu"] == 6_783 * 64


# --- the GLM-5.1 BF16 GGUF, to the byte -------------------------------------------------------------------


@pytest.fixture(scope="module")
def glm51_gguf(glm51_map, tmp_path_factory):
    folder = tmp_path_factory.mktemp("glm51")
    (path,) = write_gguf(
        folder / "GLM-5.1-BF16.gguf", glm51_map, lambda t: t.dtype.upper(), glm_dsa_metadata(), arch="glm-dsa"
    )
    return path


def test_glm51_bf16_gguf_every_tensor_and_the_totals(glm51_map, glm51_gguf):
    from kimicount.gguf.reader import read_gguf

    listing = read_gguf(glm51_gguf)
    assert {t.name: (t.shape, t.nbytes) for t in listing.tensors} == {
        t.name: (t.shape, t.nbytes) for t in glm51_map
    }
    report = json_of("gguf", str(glm51_gguf))
    assert report["ok"] and report["mismatches"] == [] and report["tensors"] == 1809
    assert report["file_size"]["bytes"] == sum(t.nbytes for t in glm51_map) == 1_507_969_827_840
    assert report["parameters"] == {"expected": MAIN + MTP, "found": MAIN + MTP}
    assert report["by_type"]["F32"] == {"tensors": 630, "elements": 120_774_912, "bytes": 483_099_648}
    assert report["kv_b"] == "attn_k_b + attn_v_b"
    rows = {(c["name"], c["depth"]): c for c in report["components"]}
    mtp = rows["Multi-token prediction", 1]
    assert mtp["bytes"] == sum(t.nbytes for t in glm51_map if t.name.startswith("blk.78."))
    assert mtp["tensors"] == sum(1 for t in glm51_map if t.name.startswith("blk.78."))
    indexer = [t for t in glm51_map if ".indexer." in t.name]
    assert len(indexer) == 79 * 5
    indexers = [c for c in report["components"] if c["name"] == "Lightning indexer"]  # dense, MoE, MTP
    assert sum(c["bytes"] for c in indexers) == sum(t.nbytes for t in indexer)
    assert sum(c["tensors"] for c in indexers) == len(indexer)


def test_glm51_bf16_estimate_is_the_real_listing(glm51_map):
    # --quant BF16 from the config: the tensors convert_hf_to_gguf.py writes at llama.cpp's types
    # (norms, exp_probs_b and the router F32, the rest BF16) are the real file's, byte for byte
    from kimicount.gguf.quantize import estimate_uniform
    from kimicount.models import known_model

    listing = estimate_uniform(known_model("glm-5.1").spec(), "BF16")
    assert {t.name: (t.shape, t.ggml_type, t.nbytes) for t in listing.tensors} == {
        t.name: (t.shape, t.dtype.upper(), t.nbytes) for t in glm51_map
    }
    assert listing.metadata["glm-dsa.block_count"] == 79


def test_glm52_shaped_gguf_has_indexers_on_its_full_layers_only(glm51_map, tmp_path):
    # a GLM-5.2 conversion without the shared layers' indexers: the tensors say which layers have one
    shared = set(range(78)) - set(glm52_full_layers())
    kept = [
        t
        for t in glm51_map
        if not (re.match(r"blk\.(\d+)\.indexer\.", t.name) and int(t.name.split(".")[1]) in shared)
    ]
    assert len(glm51_map) - len(kept) == 57 * 5
    (path,) = write_gguf(
        tmp_path / "glm52.gguf", kept, lambda t: t.dtype.upper(), glm_dsa_metadata(), arch="glm-dsa"
    )
    report = json_of("gguf", str(path))
    assert report["ok"] and report["parameters"]["expected"] == MAIN - 57 * INDEXER + MTP
    # one layer short of its indexer keys is not a "shared" layer: layer 0 must be full
    broken = [t for t in glm51_map if not t.name.startswith("blk.0.indexer.")]
    (path,) = write_gguf(
        tmp_path / "broken.gguf", broken, lambda t: t.dtype.upper(), glm_dsa_metadata(), arch="glm-dsa"
    )
    fails_cleanly(invoke("gguf", str(path)), "blk.0.indexer.attn_k.weight", "missing")


def test_glm_dsa_gguf_with_a_wrong_indexer_shape_is_a_mismatch(glm51_map, tmp_path):
    wrong = [
        MapTensor(t.name, (6144, 64), t.dtype, 6144 * 64, 6144 * 64 * 2)
        if t.name == "blk.5.indexer.proj.weight"
        else t
        for t in glm51_map
    ]
    (path,) = write_gguf(
        tmp_path / "wrong.gguf", wrong, lambda t: t.dtype.upper(), glm_dsa_metadata(), arch="glm-dsa"
    )
    report = json_of("gguf", str(path), code=1)
    assert report["mismatches"] == [
        {
            "tensor": "blk.5.indexer.proj.weight",
            "kind": "shape",
            "expected": "[6144, 32]",
            "found": "[6144, 64] BF16",
        }
    ]


def test_glm5_quant_estimate_from_the_name():
    report = json_of("gguf", "--quant", "Q8_0", "--config", "glm-5")
    assert report["ok"] and report["tensors"] == 1809
    # Q8_0: 34 bytes per 32 elements, every tensor of 2 or 3 dimensions but the F32 router
    f32 = 630  # the 1-D norms, exp_probs_b and k_norm, and ffn_gate_inp: as the BF16 file has them
    assert report["by_type"]["F32"]["tensors"] == f32
    assert report["by_type"]["Q8_0"]["tensors"] == 1809 - f32


# --- verify: full-size header-only checkpoints from the GGUF listing -------------------------------------

#: llama.cpp tensor (after blk.N.) -> the Hugging Face module it was converted from (gguf-py
#: tensor_mapping.py), by hand; attn_k_b and attn_v_b come from kv_b_proj, the 3-D experts from each expert
_HF = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q_a.weight": "self_attn.q_a_proj.weight",
    "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
    "attn_q_b.weight": "self_attn.q_b_proj.weight",
    "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "indexer.attn_q_b.weight": "self_attn.indexer.wq_b.weight",
    "indexer.attn_k.weight": "self_attn.indexer.wk.weight",
    "indexer.proj.weight": "self_attn.indexer.weights_proj.weight",
    "indexer.k_norm.weight": "self_attn.indexer.k_norm.weight",
    "indexer.k_norm.bias": "self_attn.indexer.k_norm.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
    "ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
    "nextn.eh_proj.weight": "eh_proj.weight",
    "nextn.enorm.weight": "enorm.weight",
    "nextn.hnorm.weight": "hnorm.weight",
    "nextn.shared_head_norm.weight": "shared_head.norm.weight",
}
_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
#: The Linears DeepSeek's FP8 stores as F8_E4M3 with a 128 × 128 block scale: all but the router, the
#: indexer's weights_proj and the MTP layer's eh_proj (GLM-5-FP8's modules_to_not_convert), the
#: embedding and the head
_FP8 = (
    "q_a_proj",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_b_proj",
    "o_proj",
    "wq_b",
    "wk",
    "gate_proj",
    "up_proj",
    "down_proj",
)


def glm_checkpoint_listing(glm51_map, fp8: bool = False) -> dict:
    """The GLM-5.1 checkpoint's tensors as Hugging Face names them, from the GGUF listing: shapes back to
    [out, in], attn_k_b + attn_v_b joined into kv_b_proj [64 × (192 + 256), 512], the experts unstacked.
    BF16 (F32 bias); with `fp8`, the _FP8 Linears in F8_E4M3 with their weight_scale_inv."""
    listing: dict = {}

    def add(name, shape):
        dtype = "F32" if name.endswith("e_score_correction_bias") else "BF16"
        module = name.rsplit(".", 2)[-2]
        if fp8 and module in _FP8 and len(shape) == 2:
            listing[name] = (shape, "F8_E4M3")
            listing[name + "_scale_inv"] = ((math.ceil(shape[0] / 128), math.ceil(shape[1] / 128)), "F32")
        else:
            listing[name] = (shape, dtype)

    for t in glm51_map:
        if t.name in _TOP:
            add(_TOP[t.name], tuple(reversed(t.shape)))
            continue
        _, layer, rest = t.name.split(".", 2)
        prefix = f"model.layers.{layer}."
        if rest == "attn_k_b.weight":
            add(prefix + "self_attn.kv_b_proj.weight", (64 * (192 + 256), 512))
        elif rest == "attn_v_b.weight":
            continue
        elif rest.endswith("_exps.weight"):
            proj = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}[
                rest[:-7]
            ]
            for expert in range(t.shape[2]):
                add(f"{prefix}mlp.experts.{expert}.{proj}.weight", (t.shape[1], t.shape[0]))
        else:
            add(prefix + _HF[rest], tuple(reversed(t.shape)))
    return listing


def write_glm_checkpoint(folder, listing, config):
    folder.mkdir()
    shards: dict = {}
    for name, entry in sorted(listing.items()):
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else 79
        shards.setdefault(f"model-{layer + 1:05d}-of-00080.safetensors", {})[name] = entry
    total = sum(write_header_only(folder / file, tensors) for file, tensors in shards.items())
    write_index(folder, shards, total)
    (folder / "config.json").write_bytes((config / "config.json").read_bytes())
    return folder


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_full_size_glm5_checkpoint_verifies(glm51_map, tmp_path, fp8):
    listing = glm_checkpoint_listing(glm51_map, fp8)
    folder = write_glm_checkpoint(tmp_path / "glm", listing, GLM5_FP8 if fp8 else GLM51)
    report = json_of("verify", "--path", str(folder))
    assert report["ok"] and report["mismatches"] == []
    assert report["parameters"] == {"expected": MAIN, "found": MAIN}
    assert report["mtp"]["expected"] == report["mtp"]["found"] == MTP
    scales = [name for name in listing if name.endswith("_scale_inv")]
    assert (
        report["fp8_scales"]["tensors"] == len(scales) == (79 * (7 + 256 * 3 + 3) - 3 * 256 * 3 if fp8 else 0)
    )
    # a shared layer of GLM-5.2 has no indexer: the GLM-5.1 listing against GLM-5.2's config finds the
    # 57 shared layers' 5 indexer tensors each unexpected
    if not fp8:
        (folder / "config.json").write_bytes((GLM52 / "config.json").read_bytes())
        report = json_of("verify", "--path", str(folder), code=1)
        unexpected = [m for m in report["mismatches"] if m["kind"] == "unexpected"]
        assert len(unexpected) == len(report["mismatches"]) == 57 * 5
        assert all(".self_attn.indexer." in m["tensor"] for m in unexpected)


def test_glm52_indexer_page_offline_by_name():
    page = json_of("show", "--config", "glm-5.2", "Lightning indexer")
    where = {w["where"].split(" (")[0]: w["instances"] for w in page["parameters"]["where"]}
    assert where == {"3 dense blocks": 3, "18 MoE blocks": 18}  # none in the 57 that share one
    assert page["parameters"]["total"] == 21 * INDEXER
    # the main model's 21 layers with their own indexer (the MTP layer 78's is its own page)
    tensors = {t["name"] for t in page["parameters"]["tensors"]}
    assert (
        "model.layers.{0..2,6,10,14,18,22,26,30,34,38,42,46,50,54,58,62,66,70,74}.self_attn.indexer.wk.weight"
        in tensors
    )
