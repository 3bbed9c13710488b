"""Full-size, header-only GGUF files for tests, written with gguf-py's own GGUFWriter from the real
tensor listings in fixtures/gguf/ (every tensor of Kimi-K2-Thinking, DeepSeek-V3.1-Terminus and
GLM-5.1 as llama.cpp and ik_llama.cpp converted them): the header is GGUFWriter's, the data a sparse hole (truncate) as long as
the tensors at the types a test chooses, so a 784 GiB file costs a few kB of disk.

The metadata written is what llama.cpp's convert_hf_to_gguf.py DeepseekV2Model.set_gguf_parameters
writes for these models (the `deepseek2.*` keys), with values copied from the models' config.json by
hand below: independent of the code under test.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFValueType, GGUFWriter
from gguf import GGMLQuantizationType as T

#: Verbatim copies of the shared data's GGUF listings (fixtures/gguf/README.md says where they come from).
GGUF_DATA = Path(__file__).resolve().parents[1] / "fixtures" / "gguf"

_LINE = re.compile(r"^[^:]*:[0-9a-f]{64}:(?P<name>[^:]+):shape=\((?P<shape>[0-9, ]+)\):dtype=(?P<dtype>\w+):"
                   r"elements=(?P<elements>[0-9]+):bytes=(?P<bytes>[0-9]+)(?::imatrix=[0-9a-f]{64})?$")  # fmt: skip


@dataclass(frozen=True)
class MapTensor:
    name: str
    shape: tuple[int, ...]  # GGUF order, ne0 first
    dtype: str  # "bf16", "f32"
    elements: int
    nbytes: int


def read_map(name: str) -> list[MapTensor]:
    """Every tensor of a listing (kimi-k2-thinking, deepseek-v3.1-terminus, glm-5.1), in its order."""
    tensors = []
    for line in (GGUF_DATA / f"{name}.bf16.map").read_text().splitlines():
        m = _LINE.match(line)
        assert m, line
        shape = tuple(int(d) for d in m["shape"].replace(" ", "").strip(",").split(","))
        tensors.append(MapTensor(m["name"], shape, m["dtype"], int(m["elements"]), int(m["bytes"])))
    return tensors


#: The deepseek2.* metadata convert_hf_to_gguf.py writes, from each model's config.json:
#: hidden_size 7168, intermediate_size 18432, moe_intermediate_size 2048, num_hidden_layers 61,
#: first_k_dense_replace 1 (K2) / 3 (V3), n_routed_experts 384 / 256, num_experts_per_tok 8,
#: n_shared_experts 1, num_attention_heads 64 / 128, q_lora_rank 1536, kv_lora_rank 512,
#: qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, vocab_size 163840 / 129280.
#: With MLA (llama.cpp PR #12801 on): head_count_kv 1, key_length = kv_lora_rank + rope = 576,
#: value_length = kv_lora_rank = 512, key_length_mla = 192, value_length_mla = 128.
def deepseek2_metadata(model: str) -> dict[str, tuple[object, GGUFValueType]]:
    k2 = model == "kimi-k2-thinking"
    u32 = GGUFValueType.UINT32
    return {
        "general.name": ("Kimi-K2-Thinking" if k2 else "DeepSeek-V3.1-Terminus", GGUFValueType.STRING),
        "deepseek2.block_count": (61, u32),
        "deepseek2.context_length": (262144 if k2 else 163840, u32),
        "deepseek2.embedding_length": (7168, u32),
        "deepseek2.feed_forward_length": (18432, u32),
        "deepseek2.attention.head_count": (64 if k2 else 128, u32),
        "deepseek2.attention.head_count_kv": (1, u32),
        "deepseek2.leading_dense_block_count": (1 if k2 else 3, u32),
        "deepseek2.vocab_size": (163840 if k2 else 129280, u32),
        "deepseek2.attention.q_lora_rank": (1536, u32),
        "deepseek2.attention.kv_lora_rank": (512, u32),
        "deepseek2.attention.key_length": (576, u32),
        "deepseek2.attention.value_length": (512, u32),
        "deepseek2.attention.key_length_mla": (192, u32),
        "deepseek2.attention.value_length_mla": (128, u32),
        "deepseek2.expert_feed_forward_length": (2048, u32),
        "deepseek2.expert_count": (384 if k2 else 256, u32),
        "deepseek2.expert_shared_count": (1, u32),
        "deepseek2.expert_used_count": (8, u32),
        "deepseek2.expert_weights_norm": (True, GGUFValueType.BOOL),
        "deepseek2.expert_gating_func": (2, u32),
        "deepseek2.rope.dimension_count": (64, u32),
    }


#: The glm-dsa.* metadata convert_hf_to_gguf.py's GlmMoeDsaModel writes (DeepseekV2Model's keys under
#: the glm-dsa prefix, block_count with the MTP layer, nextn_predict_layers, the indexer keys), from
#: GLM-5.1's config.json by hand: hidden_size 6144, intermediate_size 12288, moe_intermediate_size 2048,
#: num_hidden_layers 78 + num_nextn_predict_layers 1, first_k_dense_replace 3, n_routed_experts 256,
#: num_experts_per_tok 8, n_shared_experts 1, num_attention_heads 64, q_lora_rank 2048, kv_lora_rank
#: 512, qk_nope_head_dim 192, qk_rope_head_dim 64, v_head_dim 256, vocab_size 154880,
#: max_position_embeddings 202752, index_n_heads 32, index_head_dim 128, index_topk 2048.
def glm_dsa_metadata() -> dict[str, tuple[object, GGUFValueType]]:
    u32 = GGUFValueType.UINT32
    values = {
        "block_count": 79,
        "context_length": 202752,
        "embedding_length": 6144,
        "feed_forward_length": 12288,
        "attention.head_count": 64,
        "attention.head_count_kv": 1,
        "leading_dense_block_count": 3,
        "vocab_size": 154880,
        "attention.q_lora_rank": 2048,
        "attention.kv_lora_rank": 512,
        "attention.key_length": 576,
        "attention.value_length": 512,
        "attention.key_length_mla": 256,
        "attention.value_length_mla": 256,
        "expert_feed_forward_length": 2048,
        "expert_count": 256,
        "expert_shared_count": 1,
        "expert_used_count": 8,
        "expert_gating_func": 2,
        "rope.dimension_count": 64,
        "nextn_predict_layers": 1,
        "attention.indexer.head_count": 32,
        "attention.indexer.key_length": 128,
        "attention.indexer.top_k": 2048,
    }
    return {
        "general.name": ("GLM-5.1", GGUFValueType.STRING),
        **{f"glm-dsa.{key}": (value, u32) for key, value in values.items()},
    }


def pad(n: int, alignment: int = 32) -> int:
    return -(-n // alignment) * alignment


def quantized(tensor: MapTensor, ggml_type: str) -> int:
    """The bytes of the tensor at `ggml_type`: elements / block × block bytes (ggml_nbytes)."""
    block, size = GGML_QUANT_SIZES[T[ggml_type]]
    assert tensor.elements % block == 0
    return tensor.elements // block * size


def write_gguf(
    path: Path,
    tensors: list[MapTensor],
    type_of: Callable[[MapTensor], str],
    metadata: dict[str, tuple[object, GGUFValueType]],
    *,
    split_max_tensors: int = 0,
    tokens: int = 0,
    arch: str = "deepseek2",
) -> list[Path]:
    """Write the header of a GGUF holding `tensors` at type_of(tensor) with GGUFWriter, then make each
    file as long as its data (a sparse hole). `split_max_tensors` splits it as gguf-split does; `tokens`
    writes a tokenizer.ggml.tokens array of that many strings. Returns the files written."""
    writer = GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    for key, (value, vtype) in metadata.items():
        writer.add_key_value(key, value, vtype)
    if tokens:
        writer.add_token_list([f"t{i}" for i in range(tokens)])
    for t in tensors:
        ggml_type = type_of(t)
        writer.add_tensor_info(t.name, tuple(reversed(t.shape)), np.dtype(np.float16), quantized(t, ggml_type),
                               raw_dtype=T[ggml_type])  # fmt: skip
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None
    ends = [
        pad(f.tell()) + sum(pad(ti.nbytes) for ti in shard.values())
        for f, shard in zip(writer.fout, writer.tensors)
    ]
    files = [Path(f.name) for f in writer.fout]
    writer.close()
    for file, end in zip(files, ends):
        os.truncate(file, end)
    return files
