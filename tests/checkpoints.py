"""Builders of test checkpoints, written independently of kimicount's own reader.

`write_header_only` lays out a full-size safetensors file the cheap way: the real header, then a sparse
hole as long as the tensor data (`truncate`), so 61 shards of a 1 TB checkpoint cost a few MB of disk.
`kimi_k2_layout` writes the real Kimi-K2-Instruct tensor listing (fixtures/) as 61 such shards with an
index. Tests tamper with copies of the listing to make broken checkpoints.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from pathlib import Path

from .helpers import KIMI_K2, real_kimi_k2_tensors

BYTES_PER_ELEMENT = {
    "F8_E4M3": 1,
    "BF16": 2,
    "F16": 2,
    "F32": 4,
    "I32": 4,
    "I64": 8,
    "U8": 1,
    "I8": 1,
    "F8_E8M0": 1,
}

Listing = dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, dtype)


def header_bytes(tensors: Listing, metadata: dict[str, str] | None = None) -> tuple[bytes, int]:
    """The JSON header as safetensors writes it (compact, padded with spaces to 8 bytes) and the data size."""
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, (shape, dtype) in tensors.items():
        size = math.prod(shape) * BYTES_PER_ELEMENT[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return raw, offset


def write_header_only(path: Path, tensors: Listing, *, raw_header: bytes | None = None) -> int:
    """Write a safetensors file whose data is a sparse hole; returns the data size in bytes."""
    raw, data_size = header_bytes(tensors)
    raw = raw if raw_header is None else raw_header
    with path.open("wb") as file:
        file.write(struct.pack("<Q", len(raw)))
        file.write(raw)
        file.truncate(8 + len(raw) + data_size)
    return data_size


def kimi_k2_shards(listing: Listing) -> dict[str, Listing]:
    """The listing split into 61 shards, one per layer, the embedding with layer 0, norm and head last."""
    shards: dict[str, Listing] = {}
    for name, entry in sorted(listing.items()):
        if name.startswith("model.layers."):
            shard = int(name.split(".")[2]) + 1
        else:
            shard = 1 if name.startswith("model.embed_tokens") else 61
        shards.setdefault(f"model-{shard:05d}-of-00061.safetensors", {})[name] = entry
    return dict(sorted(shards.items()))


def write_index(folder: Path, shards: dict[str, Listing], total_size: int) -> None:
    weight_map = {name: file for file, tensors in shards.items() for name in tensors}
    index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def kimi_k2_layout(folder: Path, listing: Listing | None = None, config: Path | None = None) -> Path:
    """A full-size, header-only Kimi-K2-Instruct checkpoint (61 shards + index + config.json)."""
    folder.mkdir(parents=True, exist_ok=True)
    shards = kimi_k2_shards(listing if listing is not None else real_kimi_k2_tensors())
    total = sum(write_header_only(folder / file, tensors) for file, tensors in shards.items())
    write_index(folder, shards, total)
    if config is not None:
        (folder / "config.json").write_bytes(config.read_bytes())
    return folder


def relink(source: Path, target: Path) -> Path:
    """A copy of a checkpoint folder made of symlinks (the shards are 16 GB each, if sparse)."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        (target / path.name).symlink_to(path)
    return target


def rewrite_shard(folder: Path, file: str, tensors: Listing) -> None:
    """Replace one shard of a relinked folder by a fresh header-only file."""
    (folder / file).unlink()
    write_header_only(folder / file, tensors)


def tampered_kimi_k2(base: Path, target: Path, listing: Listing) -> Path:
    """A relinked copy of the `base` layout where the shards that `listing` changes, and the index,
    are rewritten: the copy differs from the real checkpoint only by the tampering."""
    relink(base, target)
    original = kimi_k2_shards(real_kimi_k2_tensors())
    shards = kimi_k2_shards(listing)
    total = 0
    for file, tensors in shards.items():
        if tensors != original.get(file):
            rewrite_shard(target, file, tensors)
        total += sum(math.prod(s) * BYTES_PER_ELEMENT[d] for s, d in tensors.values())
    (target / "model.safetensors.index.json").unlink()
    write_index(target, shards, total)
    return target


# --- a tiny real FP8 checkpoint, written with safetensors ------------------------------------------

TINY_FP8_CONFIG = {
    "model_type": "deepseek_v3",
    "vocab_size": 300,
    "hidden_size": 256,
    "intermediate_size": 384,
    "moe_intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "q_lora_rank": 192,
    "kv_lora_rank": 128,
    "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32,
    "v_head_dim": 64,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 1024,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}


def fp8_block_quantize(weight, block: int = 128):
    """DeepSeek's FP8 format: one scale per block×block tile (the tile's absmax / 448), the weight
    divided by it in float8_e4m3fn; the scale is stored as weight_scale_inv (multiply to dequantize)."""
    import torch

    out_features, in_features = weight.shape
    rows, cols = -(-out_features // block), -(-in_features // block)
    scale = torch.empty(rows, cols, dtype=torch.float32)
    quantized = torch.empty_like(weight, dtype=torch.float8_e4m3fn)
    for i in range(rows):
        for j in range(cols):
            tile = weight[i * block : (i + 1) * block, j * block : (j + 1) * block]
            scale[i, j] = tile.abs().max().clamp(min=1e-12) / 448.0
            quantized[i * block : (i + 1) * block, j * block : (j + 1) * block] = (tile / scale[i, j]).to(
                torch.float8_e4m3fn
            )
    return quantized, scale


def store_fp8(name: str, weight) -> dict:
    """DeepSeek's FP8 checkpoints: every Linear weight in FP8 with its block scale."""
    quantized, scale = fp8_block_quantize(weight)
    return {f"{name}.weight": quantized, f"{name}.weight_scale_inv": scale}


def tiny_tensors(config: dict, store_linear=store_fp8) -> dict:
    """Every tensor of a DeepSeek-V3-style checkpoint for `config`, named as the real ones are, seeded;
    `store_linear(name, float weight)` says how each Linear is stored (FP8 by default)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    tensors = {}

    def bf16(name, *shape):
        tensors[name] = torch.randn(*shape, generator=generator).to(torch.bfloat16)

    def linear(name, out_features, in_features):
        weight = torch.randn(out_features, in_features, generator=generator) / in_features**0.5
        tensors.update(store_linear(name, weight))

    c = config
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]

    def block(p, moe):
        bf16(f"{p}.input_layernorm.weight", hidden)
        bf16(f"{p}.post_attention_layernorm.weight", hidden)
        if c["q_lora_rank"] is None:  # DeepSeek-V2-Lite: one plain query projection
            linear(f"{p}.self_attn.q_proj", heads * qk, hidden)
        else:
            linear(f"{p}.self_attn.q_a_proj", c["q_lora_rank"], hidden)
            bf16(f"{p}.self_attn.q_a_layernorm.weight", c["q_lora_rank"])
            linear(f"{p}.self_attn.q_b_proj", heads * qk, c["q_lora_rank"])
        linear(f"{p}.self_attn.kv_a_proj_with_mqa", c["kv_lora_rank"] + c["qk_rope_head_dim"], hidden)
        bf16(f"{p}.self_attn.kv_a_layernorm.weight", c["kv_lora_rank"])
        linear(
            f"{p}.self_attn.kv_b_proj", heads * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]
        )
        linear(f"{p}.self_attn.o_proj", hidden, heads * c["v_head_dim"])
        tensors[f"{p}.self_attn.rotary_emb.inv_freq"] = torch.ones(c["qk_rope_head_dim"] // 2)
        if "index_n_heads" in c:  # DeepSeek-V3.2's lightning indexer; weights_proj stays in BF16
            n, d = c["index_n_heads"], c["index_head_dim"]
            linear(f"{p}.self_attn.indexer.wq_b", n * d, c["q_lora_rank"])
            linear(f"{p}.self_attn.indexer.wk", d, hidden)
            bf16(f"{p}.self_attn.indexer.weights_proj.weight", n, hidden)
            bf16(f"{p}.self_attn.indexer.k_norm.weight", d)
            bf16(f"{p}.self_attn.indexer.k_norm.bias", d)
        mlps = [(f"{p}.mlp", c["intermediate_size"])]
        if moe:
            bf16(f"{p}.mlp.gate.weight", c["n_routed_experts"], hidden)
            if c.get("topk_method", "noaux_tc") == "noaux_tc":
                tensors[f"{p}.mlp.gate.e_score_correction_bias"] = torch.zeros(c["n_routed_experts"])
            mlps = [
                (f"{p}.mlp.experts.{e}", c["moe_intermediate_size"]) for e in range(c["n_routed_experts"])
            ]
            if c["n_shared_experts"]:
                mlps.append((f"{p}.mlp.shared_experts", c["n_shared_experts"] * c["moe_intermediate_size"]))
        for module, width in mlps:
            linear(f"{module}.gate_proj", width, hidden)
            linear(f"{module}.up_proj", width, hidden)
            linear(f"{module}.down_proj", hidden, width)

    bf16("model.embed_tokens.weight", c["vocab_size"], hidden)
    for layer in range(c["num_hidden_layers"]):
        block(f"model.layers.{layer}", moe=layer >= c["first_k_dense_replace"])
    bf16("model.norm.weight", hidden)
    if not c.get("tie_word_embeddings"):
        bf16("lm_head.weight", c["vocab_size"], hidden)
    if not c.get("num_nextn_predict_layers"):
        return tensors
    mtp = f"model.layers.{c['num_hidden_layers']}"
    block(mtp, moe=True)
    bf16(f"{mtp}.embed_tokens.weight", c["vocab_size"], hidden)
    bf16(f"{mtp}.enorm.weight", hidden)
    bf16(f"{mtp}.hnorm.weight", hidden)
    bf16(f"{mtp}.eh_proj.weight", hidden, 2 * hidden)  # never quantized: BF16, no scale, as DeepSeek's
    bf16(f"{mtp}.shared_head.norm.weight", hidden)
    bf16(f"{mtp}.shared_head.head.weight", c["vocab_size"], hidden)
    return tensors


def write_tiny_fp8_checkpoint(folder: Path, shards: int = 2) -> Path:
    """The tiny FP8 checkpoint, saved with safetensors in `shards` files with an index and config."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = tiny_tensors(TINY_FP8_CONFIG)
    names = sorted(tensors)
    weight_map, total = {}, 0
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n].contiguous() for n in names[i::shards]}
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
        total += sum(t.numel() * t.element_size() for t in part.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps(TINY_FP8_CONFIG))
    return folder


# --- DeepSeek-V3 / V3.2 as their real FP8 checkpoints store them, header-only ------------------------


def deepseek_fp8_listing(config: dict) -> Listing:
    """Every tensor of a DeepSeek FP8 checkpoint (V3, R1, V3.1; V3.2 with its lightning indexer) for
    `config`, named, shaped and typed as the real ones are, from these facts:

    - every Linear of attention, dense MLP and experts, the MTP layer's included: F8_E4M3 with a
      `weight_scale_inv` F32 [ceil(out/128), ceil(in/128)]; V3.2's indexer weights_proj: BF16;
    - the embedding, lm_head and router gate: BF16; `e_score_correction_bias`: F32;
    - norms: BF16; V3.2 keeps every norm (the indexer's LayerNorm bias too) in F32;
    - the MTP layer (61): `embed_tokens`, `shared_head.head` and `eh_proj` BF16 with no scale,
      `enorm`, `hnorm` and `shared_head.norm` as the other norms;
    - no rotary buffers.
    """
    c = config
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    norm_dtype = "F32" if c["model_type"] == "deepseek_v32" else "BF16"
    listing: Listing = {}

    def fp8(name, out_features, in_features):
        listing[f"{name}.weight"] = ((out_features, in_features), "F8_E4M3")
        listing[f"{name}.weight_scale_inv"] = ((-(-out_features // 128), -(-in_features // 128)), "F32")

    def norm(name, width):
        listing[name] = ((width,), norm_dtype)

    def block(p, moe):
        norm(f"{p}.input_layernorm.weight", hidden)
        norm(f"{p}.post_attention_layernorm.weight", hidden)
        fp8(f"{p}.self_attn.q_a_proj", c["q_lora_rank"], hidden)
        norm(f"{p}.self_attn.q_a_layernorm.weight", c["q_lora_rank"])
        qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        fp8(f"{p}.self_attn.q_b_proj", heads * qk, c["q_lora_rank"])
        fp8(f"{p}.self_attn.kv_a_proj_with_mqa", c["kv_lora_rank"] + c["qk_rope_head_dim"], hidden)
        norm(f"{p}.self_attn.kv_a_layernorm.weight", c["kv_lora_rank"])
        fp8(f"{p}.self_attn.kv_b_proj", heads * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"])
        fp8(f"{p}.self_attn.o_proj", hidden, heads * c["v_head_dim"])
        if "index_n_heads" in c:
            n, d = c["index_n_heads"], c["index_head_dim"]
            fp8(f"{p}.self_attn.indexer.wq_b", n * d, c["q_lora_rank"])
            fp8(f"{p}.self_attn.indexer.wk", d, hidden)
            listing[f"{p}.self_attn.indexer.weights_proj.weight"] = ((n, hidden), "BF16")
            norm(f"{p}.self_attn.indexer.k_norm.weight", d)
            norm(f"{p}.self_attn.indexer.k_norm.bias", d)
        mlps = [(f"{p}.mlp", c["intermediate_size"])]
        if moe:
            listing[f"{p}.mlp.gate.weight"] = ((c["n_routed_experts"], hidden), "BF16")
            listing[f"{p}.mlp.gate.e_score_correction_bias"] = ((c["n_routed_experts"],), "F32")
            experts = range(c["n_routed_experts"])
            mlps = [(f"{p}.mlp.experts.{e}", c["moe_intermediate_size"]) for e in experts]
            mlps.append((f"{p}.mlp.shared_experts", c["n_shared_experts"] * c["moe_intermediate_size"]))
        for module, width in mlps:
            fp8(f"{module}.gate_proj", width, hidden)
            fp8(f"{module}.up_proj", width, hidden)
            fp8(f"{module}.down_proj", hidden, width)

    vocab = (c["vocab_size"], hidden)
    listing["model.embed_tokens.weight"] = (vocab, "BF16")
    for layer in range(c["num_hidden_layers"]):
        block(f"model.layers.{layer}", moe=layer >= c["first_k_dense_replace"])
    norm("model.norm.weight", hidden)
    listing["lm_head.weight"] = (vocab, "BF16")
    for layer in range(c["num_hidden_layers"], c["num_hidden_layers"] + c["num_nextn_predict_layers"]):
        mtp = f"model.layers.{layer}"
        block(mtp, moe=True)
        listing[f"{mtp}.embed_tokens.weight"] = (vocab, "BF16")
        norm(f"{mtp}.enorm.weight", hidden)
        norm(f"{mtp}.hnorm.weight", hidden)
        listing[f"{mtp}.eh_proj.weight"] = ((hidden, 2 * hidden), "BF16")
        norm(f"{mtp}.shared_head.norm.weight", hidden)
        listing[f"{mtp}.shared_head.head.weight"] = (vocab, "BF16")
    return listing


def layer_shards(listing: Listing, layers: int) -> dict[str, Listing]:
    """One shard per layer (the MTP layers included), the embedding with layer 0, norm and head last."""
    shards: dict[str, Listing] = {}
    for name, entry in sorted(listing.items()):
        if name.startswith("model.layers."):
            shard = int(name.split(".")[2]) + 1
        else:
            shard = 1 if name.startswith("model.embed_tokens") else layers
        shards.setdefault(f"model-{shard:05d}-of-{layers:05d}.safetensors", {})[name] = entry
    return dict(sorted(shards.items()))


def deepseek_fp8_layout(folder: Path, config_file: Path, listing: Listing | None = None) -> Path:
    """A full-size, header-only DeepSeek FP8 checkpoint: `deepseek_fp8_listing` of the config (or the
    given listing) in one shard per layer, an index and the config."""
    config = json.loads(config_file.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    listing = deepseek_fp8_listing(config) if listing is None else listing
    shards = layer_shards(listing, config["num_hidden_layers"] + config["num_nextn_predict_layers"])
    total = sum(write_header_only(folder / file, tensors) for file, tensors in shards.items())
    write_index(folder, shards, total)
    (folder / "config.json").write_bytes(config_file.read_bytes())
    return folder


# --- Kimi K2.5: INT4 routed experts (compressed-tensors pack-quantized) and the vision side ---------

K25_VISION = {  # from the real K2.5 vision_config: vt_hidden 1152, 27 blocks, MLP 4304, patch 14, ...
    "vision_tower.patch_embed.proj.weight": ((1152, 3, 14, 14), "BF16"),
    "vision_tower.patch_embed.proj.bias": ((1152,), "BF16"),
    "vision_tower.patch_embed.pos_emb.weight": ((64, 64, 1152), "BF16"),
    "vision_tower.encoder.final_layernorm.weight": ((1152,), "BF16"),
    "vision_tower.encoder.final_layernorm.bias": ((1152,), "BF16"),
    "mm_projector.pre_norm.weight": ((1152,), "BF16"),
    "mm_projector.pre_norm.bias": ((1152,), "BF16"),
    "mm_projector.proj.0.weight": ((4608, 4608), "BF16"),  # m = 1152 × 2 × 2
    "mm_projector.proj.0.bias": ((4608,), "BF16"),
    "mm_projector.proj.2.weight": ((7168, 4608), "BF16"),
    "mm_projector.proj.2.bias": ((7168,), "BF16"),
    **{
        f"vision_tower.encoder.blocks.{i}.{name}": entry
        for i in range(27)
        for name, entry in {
            "norm0.weight": ((1152,), "BF16"),
            "norm0.bias": ((1152,), "BF16"),
            "wqkv.weight": ((3456, 1152), "BF16"),
            "wqkv.bias": ((3456,), "BF16"),
            "wo.weight": ((1152, 1152), "BF16"),
            "wo.bias": ((1152,), "BF16"),
            "norm1.weight": ((1152,), "BF16"),
            "norm1.bias": ((1152,), "BF16"),
            "mlp.fc0.weight": ((4304, 1152), "BF16"),
            "mlp.fc0.bias": ((4304,), "BF16"),
            "mlp.fc1.weight": ((1152, 4304), "BF16"),
            "mlp.fc1.bias": ((1152,), "BF16"),
        }.items()
    },
}


def packed_int4(shape: tuple[int, int]) -> dict[str, tuple[tuple[int, ...], str]]:
    """compressed-tensors pack-quantized, 4 bits, groups of 32: a Linear [out, in] as its three tensors."""
    out_features, in_features = shape
    return {
        "weight_packed": ((out_features, -(-in_features // 8)), "I32"),
        "weight_scale": ((out_features, -(-in_features // 32)), "BF16"),
        "weight_shape": ((2,), "I32"),
    }


def kimi_k25_listing(experts: Callable[[tuple[int, int]], Listing] | None = None) -> Listing:
    """Kimi K2.5's tensors, derived from the real Kimi-K2-Instruct listing (the same language model):
    under `language_model.`, without FP8 scales or rotary buffers, routed experts packed in INT4 (or as
    `experts` stores each Linear) and every other weight in BF16, plus the vision tower and projector."""
    listing: Listing = {}
    for name, (shape, dtype) in real_kimi_k2_tensors().items():
        if name.endswith((".weight_scale_inv", ".inv_freq")):
            continue
        if ".mlp.experts." in name:
            base = name.removesuffix(".weight")
            for suffix, entry in (experts or packed_int4)(shape).items():
                listing[f"language_model.{base}.{suffix}"] = entry
        else:
            listing[f"language_model.{name}"] = (shape, "BF16" if dtype == "F8_E4M3" else dtype)
    return {**listing, **K25_VISION}


def modelopt_nvfp4(shape: tuple[int, int]) -> dict[str, tuple[tuple[int, ...], str]]:
    """NVIDIA ModelOpt NVFP4: a Linear [out, in] as its four tensors, as a real NVFP4 checkpoint's
    headers list them (`weight` U8 [out, in/2], `weight_scale` F8_E4M3 [out, in/16], `weight_scale_2`
    and `input_scale` F32 [])."""
    out_features, in_features = shape
    return {
        "weight": ((out_features, in_features // 2), "U8"),
        "weight_scale": ((out_features, in_features // 16), "F8_E4M3"),
        "weight_scale_2": ((), "F32"),
        "input_scale": ((), "F32"),
    }


def kimi_nvfp4_listing() -> Listing:
    """Kimi K2.6-NVFP4's tensors: K2.5's (above) with the routed experts of layers 1–60 in ModelOpt's
    NVFP4 instead of INT4 (the release's exclude_modules keep layer 0, attention, shared experts and
    lm_head in BF16)."""
    return kimi_k25_listing(modelopt_nvfp4)


def kimi_k25_layout(folder: Path, listing: Listing | None = None, config: Path | None = None) -> Path:
    """A full-size, header-only Kimi K2.5 checkpoint: one shard per language-model layer, the vision
    side in a last shard, an index and the real config.json (or every .json of the folder `config`)."""
    folder.mkdir(parents=True, exist_ok=True)
    shards: dict[str, Listing] = {}
    for name, entry in sorted((listing if listing is not None else kimi_k25_listing()).items()):
        parts = name.split(".")
        shard = int(parts[3]) + 1 if name.startswith("language_model.model.layers.") else 62
        shards.setdefault(f"model-{shard:05d}-of-00062.safetensors", {})[name] = entry
    total = sum(write_header_only(folder / file, tensors) for file, tensors in sorted(shards.items()))
    write_index(folder, shards, total)
    for json_file in (config or KIMI_K2.parent / "kimi-k2.5").glob("*.json"):
        (folder / json_file.name).write_bytes(json_file.read_bytes())
    return folder


# --- a tiny real INT4 checkpoint, written with safetensors -----------------------------------------

TINY_INT4_CONFIG = {
    **{k: v for k, v in TINY_FP8_CONFIG.items() if k != "quantization_config"},
    "model_type": "kimi_k2",
    "num_nextn_predict_layers": 0,
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "group_size": 32,
                    "strategy": "group",
                    "symmetric": True,
                    "type": "int",
                },
            }
        },
        "ignore": [
            "lm_head",
            "re:.*self_attn.*",
            "re:.*shared_experts.*",
            r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
        ],
    },
}


def pack_int4(weight, group_size: int = 32):
    """compressed-tensors' symmetric INT4 pack-quantization of a float weight [out, in]: one scale per
    group of 32 inputs (absmax / 7), values rounded to [-8, 7], offset by 8 to [0, 15] and packed eight
    to an int32 along the input dimension, value 8j + i in bits 4i..4i+3 of int32 j."""
    import torch

    out_features, in_features = weight.shape
    groups = -(-in_features // group_size)
    padded = torch.nn.functional.pad(weight, (0, groups * group_size - in_features))
    scale = padded.view(out_features, groups, group_size).abs().amax(dim=2).clamp(min=1e-8) / 7
    quantized = (padded.view(out_features, groups, group_size) / scale[..., None]).round().clamp(-8, 7)
    unsigned = (quantized.view(out_features, -1)[:, :in_features] + 8).to(torch.int64)
    unsigned = torch.nn.functional.pad(unsigned, (0, -in_features % 8))
    packed = torch.zeros(out_features, unsigned.shape[1] // 8, dtype=torch.int64)
    for i in range(8):
        packed |= unsigned[:, i::8] << (4 * i)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)  # the bits, as int32
    return packed, scale.to(torch.bfloat16), torch.tensor([out_features, in_features], dtype=torch.int32)


def unpack_int4(packed, in_features: int):
    """The inverse of pack_int4's packing: the signed 4-bit values [out, in]."""
    import torch

    bits = packed.to(torch.int64) & 0xFFFFFFFF
    columns = [((bits >> (4 * i)) & 0xF) - 8 for i in range(8)]
    return torch.stack(columns, dim=2).reshape(packed.shape[0], -1)[:, :in_features]


def store_bf16(name: str, weight) -> dict:
    """Unquantized checkpoints: every Linear weight in BF16."""
    import torch

    return {f"{name}.weight": weight.to(torch.bfloat16)}


def write_checkpoint(folder: Path, config: dict, store_linear=store_fp8) -> Path:
    """`tiny_tensors(config)` saved with safetensors as one model.safetensors, with its config.json."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = tiny_tensors(config, store_linear)
    save_file({n: t.contiguous() for n, t in tensors.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def store_int4_experts(name: str, weight) -> dict:
    """K2.5's checkpoint: routed experts packed in INT4, every other Linear in BF16."""
    import torch

    if ".mlp.experts." not in name:
        return {f"{name}.weight": weight.to(torch.bfloat16)}
    packed, scale, shape = pack_int4(weight)
    return {f"{name}.weight_packed": packed, f"{name}.weight_scale": scale, f"{name}.weight_shape": shape}


def write_tiny_int4_checkpoint(folder: Path) -> Path:
    """A tiny Kimi-K2-style checkpoint with its routed experts packed in INT4 for real, the rest BF16."""
    return write_checkpoint(folder, TINY_INT4_CONFIG, store_int4_experts)
