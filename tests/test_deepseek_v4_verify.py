"""verify on DeepSeek V4: header-only checkpoints of a small V4 config, written here tensor by tensor in
the real V4-Flash layout (fixtures/deepseek-v4: FP8 E4M3 Linears with one F8_E8M0 `.scale` per 128 × 128
block, FP4 experts as I8 [out, in / 2] with an F8_E8M0 scale per 32 inputs, BF16 compressors, F32 sinks,
position biases and hyper-connections, I64 hash tables) and in transformers' names (its
conversion_mapping.py renames, the experts fused, no MTP layer)."""

from __future__ import annotations

import json
import math
import re

from .checkpoints import BYTES_PER_ELEMENT, Listing, write_header_only, write_index
from .helpers import invoke
from .test_deepseek_v4 import flash

V, H, LAYERS, HEADS, D, Q, G, R, E, I, K, N, DI, M = 512, 256, 4, 4, 128, 128, 2, 64, 4, 64, 2, 2, 32, 2
RATIOS = [0, 4, 128, 4, 0]  # three main kinds, the MTP layer last


def mini_config(quantized: bool = True) -> dict:
    config = {
        **flash_config(),
        "vocab_size": V,
        "hidden_size": H,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "head_dim": D,
        "qk_rope_head_dim": 32,
        "q_lora_rank": Q,
        "o_groups": G,
        "o_lora_rank": R,
        "moe_intermediate_size": I,
        "n_routed_experts": E,
        "num_experts_per_tok": K,
        "num_hash_layers": 1,
        "index_n_heads": N,
        "index_head_dim": DI,
        "hc_mult": M,
        "sliding_window": 16,
        "compress_ratios": RATIOS,
    }
    if not quantized:
        del config["quantization_config"]
    return config


def flash_config() -> dict:
    from kimicount.models import known_model

    return known_model("deepseek-v4-flash").config()


def deepseek_listing() -> Listing:
    """Every tensor a V4 checkpoint of the mini config holds, in DeepSeek's names and storage."""
    t: Listing = {}

    def fp8(name, out, inp):
        t[name + ".weight"] = ((out, inp), "F8_E4M3")
        t[name + ".scale"] = ((math.ceil(out / 128), math.ceil(inp / 128)), "F8_E8M0")

    def fp4(name, out, inp):
        t[name + ".weight"] = ((out, inp // 2), "I8")
        t[name + ".scale"] = ((out, inp // 32), "F8_E8M0")

    def hc(p):
        t[p + "fn"] = (((2 + M) * M, M * H), "F32")
        t[p + "base"] = (((2 + M) * M,), "F32")
        t[p + "scale"] = ((3,), "F32")

    t["embed.weight"] = ((V, H), "BF16")
    t["head.weight"] = ((V, H), "BF16")
    t["norm.weight"] = ((H,), "BF16")
    t["hc_head_fn"], t["hc_head_base"], t["hc_head_scale"] = ((M, M * H), "F32"), ((M,), "F32"), ((1,), "F32")
    for i, ratio in enumerate(RATIOS):
        p = f"layers.{i}." if i < LAYERS else "mtp.0."
        hc(p + "hc_attn_")
        hc(p + "hc_ffn_")
        t[p + "attn_norm.weight"] = t[p + "ffn_norm.weight"] = ((H,), "BF16")
        t[p + "attn.q_norm.weight"] = ((Q,), "BF16")
        t[p + "attn.kv_norm.weight"] = ((D,), "BF16")
        t[p + "attn.attn_sink"] = ((HEADS,), "F32")
        fp8(p + "attn.wq_a", Q, H)
        fp8(p + "attn.wq_b", HEADS * D, Q)
        fp8(p + "attn.wkv", D, H)
        fp8(p + "attn.wo_a", G * R, HEADS * D // G)
        fp8(p + "attn.wo_b", H, G * R)
        if ratio:
            coff = 2 if ratio == 4 else 1
            t[p + "attn.compressor.ape"] = ((ratio, coff * D), "F32")
            t[p + "attn.compressor.norm.weight"] = ((D,), "BF16")
            t[p + "attn.compressor.wkv.weight"] = t[p + "attn.compressor.wgate.weight"] = (
                (coff * D, H),
                "BF16",
            )
        if ratio == 4:
            t[p + "attn.indexer.weights_proj.weight"] = ((N, H), "BF16")
            fp8(p + "attn.indexer.wq_b", N * DI, Q)
            t[p + "attn.indexer.compressor.ape"] = ((4, 2 * DI), "F32")
            t[p + "attn.indexer.compressor.norm.weight"] = ((DI,), "BF16")
            t[p + "attn.indexer.compressor.wkv.weight"] = ((2 * DI, H), "BF16")
            t[p + "attn.indexer.compressor.wgate.weight"] = ((2 * DI, H), "BF16")
        t[p + "ffn.gate.weight"] = ((E, H), "BF16")
        if i == 0:  # num_hash_layers 1
            t[p + "ffn.gate.tid2eid"] = ((V, K), "I64")
        else:
            t[p + "ffn.gate.bias"] = ((E,), "F32")
        for e in range(E):
            fp4(p + f"ffn.experts.{e}.w1", I, H)
            fp4(p + f"ffn.experts.{e}.w3", I, H)
            fp4(p + f"ffn.experts.{e}.w2", H, I)
        fp8(p + "ffn.shared_experts.w1", I, H)
        fp8(p + "ffn.shared_experts.w3", I, H)
        fp8(p + "ffn.shared_experts.w2", H, I)
    t["mtp.0.enorm.weight"] = t["mtp.0.hnorm.weight"] = t["mtp.0.norm.weight"] = ((H,), "BF16")
    fp8("mtp.0.e_proj", H, H)
    fp8("mtp.0.h_proj", H, H)
    t["mtp.0.hc_head_fn"], t["mtp.0.hc_head_base"], t["mtp.0.hc_head_scale"] = (
        ((M, M * H), "F32"),
        ((M,), "F32"),
        ((1,), "F32"),
    )
    return t


#: transformers' renames of DeepSeek's names, in its order (conversion_mapping.py @ 5.24.0, lines 711–768):
#: the mid-key renames first, then the leaf patterns.
RENAMES = [
    (r"\.attn\.", ".self_attn."),
    (r"\.ffn\.", ".mlp."),
    (r"\.indexer\.compressor\.", ".compressor.indexer."),
    (r"\.attn_norm\.", ".input_layernorm."),
    (r"\.ffn_norm\.", ".post_attention_layernorm."),
    (r"\.hc_attn_", ".attn_hc."),
    (r"\.hc_ffn_", ".ffn_hc."),
    (r"\.attn_sink", ".sinks"),
    (r"\.indexer\.weights_proj\.", ".compressor.indexer.scorer.weights_proj."),
    (r"\.indexer\.wq_b\.", ".compressor.indexer.q_b_proj."),
    (r"\.norm\.", ".kv_norm."),
    (r"\.ape", ".position_bias"),
    (r"\.wq_a\.", ".q_a_proj."),
    (r"\.self_attn\.wq_b\.", ".self_attn.q_b_proj."),
    (r"\.wkv\.", ".kv_proj."),
    (r"\.wgate\.", ".gate_proj."),
    (r"\.wo_a\.", ".o_a_proj."),
    (r"\.wo_b\.", ".o_b_proj."),
    (r"\.q_norm\.", ".q_a_norm."),
    (r"\.gate\.bias", ".gate.e_score_correction_bias"),
    (r"\.shared_experts\.w1\.", ".shared_experts.gate_proj."),
    (r"\.shared_experts\.w2\.", ".shared_experts.down_proj."),
    (r"\.shared_experts\.w3\.", ".shared_experts.up_proj."),
]


def transformers_listing() -> Listing:
    """The same model as transformers' save_pretrained writes it unquantized: its names, the routed
    experts fused per layer ([E, 2·I, H] and [E, H, I]), the modules it keeps in F32 saved in F32, no
    MTP layer (it drops mtp.* as it loads)."""
    top = {
        "embed.weight": "model.embed_tokens.weight",
        "head.weight": "lm_head.weight",
        "norm.weight": "model.norm.weight",
        "hc_head_fn": "model.hc_head.hc_fn",
        "hc_head_base": "model.hc_head.hc_base",
        "hc_head_scale": "model.hc_head.hc_scale",
    }
    t: Listing = {}
    for name, (shape, dtype) in deepseek_listing().items():
        if name.startswith("mtp.") or name.endswith(".scale") or ".experts." in name:
            continue
        dtype = "BF16" if dtype in ("F8_E4M3", "I8") else dtype
        if name in top:
            t[top[name]] = (shape, "F32" if name == "norm.weight" else dtype)
            continue
        for pattern, target in RENAMES:
            name = re.sub(pattern, target, name)
        if name.endswith("norm.weight"):
            dtype = "F32"  # _keep_in_fp32_modules_strict: input_layernorm, q_a_norm, kv_norm, ...
        t["model." + name] = (shape, dtype)
    for layer in range(LAYERS):
        t[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = ((E, 2 * I, H), "BF16")
        t[f"model.layers.{layer}.mlp.experts.down_proj"] = ((E, H, I), "BF16")
    return t


def write_checkpoint(folder, listing: Listing, config: dict) -> str:
    folder.mkdir()
    shards = {"model-00001-of-00001.safetensors": listing}
    total = write_header_only(folder / "model-00001-of-00001.safetensors", listing)
    write_index(folder, shards, total)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def expected_parameters(listing: Listing) -> int:
    """The logical elements of a listing: FP4 weights hold two values a byte; scales are not parameters."""
    total = 0
    for name, (shape, dtype) in listing.items():
        if name.endswith(".scale") and not name.endswith("_hc.scale"):  # a block scale, not hc's
            continue
        total += math.prod(shape) * (2 if dtype == "I8" else 1)
    return total


def test_a_v4_checkpoint_in_deepseeks_names_verifies_whole(tmp_path):
    listing = deepseek_listing()
    result = invoke("verify", "--path", write_checkpoint(tmp_path / "v4", listing, mini_config()), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["mismatches"] == []
    main = {n: e for n, e in listing.items() if not n.startswith("mtp.")}
    assert report["parameters"]["expected"] == report["parameters"]["found"] == expected_parameters(main)
    scales = sum(math.prod(s) for n, (s, _) in listing.items() if n.endswith(".scale"))
    assert report["fp8_scales"]["elements"] == scales
    assert report["fp8_scales"]["bytes"] == scales  # one byte each: E8M0
    data = sum(math.prod(s) * BYTES_PER_ELEMENT[d] for s, d in listing.values())
    assert report["index"]["header_data_bytes"] == data
    assert (
        report["mtp"]["expected"]
        == report["mtp"]["found"]
        == expected_parameters({n: e for n, e in listing.items() if n.startswith("mtp.")})
    )
    assert report["by_dtype"]["I64"]["elements"] == V * K  # layer 0's hash table


def test_a_v4_checkpoint_in_transformers_names_verifies_whole(tmp_path):
    listing = transformers_listing()
    path = write_checkpoint(tmp_path / "hf", listing, mini_config(quantized=False))
    result = invoke("verify", "--path", path, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"], report["mismatches"][:5]
    assert report["parameters"]["found"] == expected_parameters(listing)


def test_transformers_names_with_a_quantized_config_are_refused_in_one_line(tmp_path):
    path = write_checkpoint(tmp_path / "hf", transformers_listing(), mini_config())
    result = invoke("verify", "--path", path)
    assert result.exit_code == 2 and "transformers' tensor names" in result.stderr


def test_wrong_scale_dtypes_and_missing_experts_are_named(tmp_path):
    listing = deepseek_listing()
    listing["layers.1.attn.wq_a.scale"] = (listing["layers.1.attn.wq_a.scale"][0], "F32")
    del listing["layers.2.ffn.experts.3.w2.weight"]
    result = invoke("verify", "--path", write_checkpoint(tmp_path / "v4", listing, mini_config()), "--json")
    assert result.exit_code == 1
    found = {(m["tensor"], m["kind"]) for m in json.loads(result.stdout)["mismatches"]}
    assert ("layers.1.attn.wq_a.scale", "scale") in found
    assert ("layers.2.ffn.experts.3.w2.weight", "missing") in found


def test_index_alone_in_both_namings(tmp_path):
    folder = write_checkpoint(tmp_path / "v4", deepseek_listing(), mini_config())
    config = tmp_path / "v4" / "config.json"
    index = tmp_path / "v4" / "model.safetensors.index.json"
    result = invoke("verify", "--index", str(index), "--config", str(config), "--json")
    assert result.exit_code == 0, result.output
    assert folder
    hf = write_checkpoint(tmp_path / "hf", transformers_listing(), mini_config(quantized=False))
    result = invoke(
        "verify", "--index", f"{hf}/model.safetensors.index.json", "--config", f"{hf}/config.json"
    )
    assert result.exit_code == 0, result.output


def test_the_flash_tree_is_the_one_these_tests_write_for_its_own_sizes():
    """The listing writer above and the family agree on V4-Flash's own layer 2, as the real headers do
    (tests/test_deepseek_v4.py holds the tree to those headers)."""
    assert flash().compress_ratios[2] == 4
