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
from pathlib import Path

from .helpers import real_kimi_k2_tensors

BYTES_PER_ELEMENT = {"F8_E4M3": 1, "BF16": 2, "F16": 2, "F32": 4, "I32": 4, "I64": 8, "U8": 1}

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


def tiny_fp8_tensors(config: dict) -> dict:
    """Every tensor of a DeepSeek-V3-style FP8 checkpoint for `config`, named as the real ones are."""
    import torch

    generator = torch.Generator().manual_seed(0)
    tensors = {}

    def bf16(name, *shape):
        tensors[name] = torch.randn(*shape, generator=generator).to(torch.bfloat16)

    def linear(name, out_features, in_features):
        weight = torch.randn(out_features, in_features, generator=generator) / in_features**0.5
        tensors[name + ".weight"], tensors[name + ".weight_scale_inv"] = fp8_block_quantize(weight)

    c = config
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]

    def block(p, moe):
        bf16(f"{p}.input_layernorm.weight", hidden)
        bf16(f"{p}.post_attention_layernorm.weight", hidden)
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
        mlps = [(f"{p}.mlp", c["intermediate_size"])]
        if moe:
            bf16(f"{p}.mlp.gate.weight", c["n_routed_experts"], hidden)
            tensors[f"{p}.mlp.gate.e_score_correction_bias"] = torch.zeros(c["n_routed_experts"])
            mlps = [
                (f"{p}.mlp.experts.{e}", c["moe_intermediate_size"]) for e in range(c["n_routed_experts"])
            ]
            mlps.append((f"{p}.mlp.shared_experts", c["n_shared_experts"] * c["moe_intermediate_size"]))
        for module, width in mlps:
            linear(f"{module}.gate_proj", width, hidden)
            linear(f"{module}.up_proj", width, hidden)
            linear(f"{module}.down_proj", hidden, width)

    bf16("model.embed_tokens.weight", c["vocab_size"], hidden)
    for layer in range(c["num_hidden_layers"]):
        block(f"model.layers.{layer}", moe=layer >= c["first_k_dense_replace"])
    bf16("model.norm.weight", hidden)
    bf16("lm_head.weight", c["vocab_size"], hidden)
    mtp = f"model.layers.{c['num_hidden_layers']}"
    block(mtp, moe=True)
    bf16(f"{mtp}.embed_tokens.weight", c["vocab_size"], hidden)
    bf16(f"{mtp}.enorm.weight", hidden)
    bf16(f"{mtp}.hnorm.weight", hidden)
    linear(f"{mtp}.eh_proj", hidden, 2 * hidden)
    bf16(f"{mtp}.shared_head.norm.weight", hidden)
    bf16(f"{mtp}.shared_head.head.weight", c["vocab_size"], hidden)
    return tensors


def write_tiny_fp8_checkpoint(folder: Path, shards: int = 2) -> Path:
    """The tiny FP8 checkpoint, saved with safetensors in `shards` files with an index and config."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = tiny_fp8_tensors(TINY_FP8_CONFIG)
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
