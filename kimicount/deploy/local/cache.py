"""The KV cache llama.cpp and ik_llama.cpp allocate for a deepseek2 model: the tensors per layer, bytes per
token, and the buffer each device gets.

Per layer, per cell (one token), in elements (llama.cpp src/llama-kv-cache.cpp, llama_kv_cache's
constructor; n_embd_k_gqa / n_embd_v_gqa from src/llama-hparams.cpp; ik_llama.cpp src/llama.cpp,
llama_kv_cache_init):

| layout | K | V |
|---|---|---|
| per-head | n_head × (qk_nope + qk_rope) | n_head × v_head_dim |
| latent+v | kv_lora_rank + qk_rope (the GGUF's key_length 576) | kv_lora_rank (value_length 512) |
| latent | kv_lora_rank + qk_rope | none: V is a view of K (#19067) |

A row of n elements of a cache type takes n ÷ block × block bytes (the gguf package's
GGML_QUANT_SIZES, the table ggml's type traits give). A device's buffer is its layers' tensors, each
padded to the backend's alignment (ggml-alloc.c, ggml_backend_alloc_ctx_tensors_from_buft: 128 B on
CUDA, ggml-cuda.cu; 32 B on the CPU, TENSOR_ALIGNMENT), after CUDA adds to a quantized tensor the
bytes of MATRIX_ROW_PADDING − ne0 % 512 more elements when its rows do not fill 512
(ggml_backend_cuda_buffer_type_get_alloc_size): a 2-D q8_0 cache of 576-element rows gets 448
elements (476 B) more per layer.

    >>> per_token_bytes(k2, CacheLayout.latent_v, "f16", "f16")  # llama.cpp b5137 to b7831
    132736
"""

from __future__ import annotations

from dataclasses import dataclass

from kimicount.deploy.local.builds import CacheChoice, CacheLayout
from kimicount.errors import UsageError
from kimicount.spec import ModelSpec

#: The cache types llama.cpp's -ctk / -ctv accept (common/arg.cpp, kv_cache_types).
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

#: ggml-cuda.cu: quantized rows are padded to a multiple of this many elements; buffers align to 128 B.
MATRIX_ROW_PADDING = 512
CUDA_ALIGNMENT = 128
#: ggml.h TENSOR_ALIGNMENT: the CPU buffer's alignment.
CPU_ALIGNMENT = 32

_FLOAT_TYPES = ("F32", "F16", "BF16")


def parse_cache_type(text: str, option: str) -> str:
    """A cache type as llama.cpp names it (f16, q8_0, …), any case.

    >>> parse_cache_type("Q8_0", "-ctk")
    'q8_0'
    """
    name = text.strip().lower()
    if name not in CACHE_TYPES:
        raise UsageError(f"{option} '{text}': unknown cache type (expected one of: {', '.join(CACHE_TYPES)})")
    return name


def row_bytes(ggml_type: str, elements: int) -> int:
    """Bytes of `elements` values of a ggml type (GGML_QUANT_SIZES: elements per block, bytes per block).
    [bytes]

    >>> row_bytes("q8_0", 576), row_bytes("F16", 576), row_bytes("Q4_K", 7168)
    (612, 1152, 4032)
    """
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type.upper()]]
    except KeyError:
        raise UsageError(f"unknown ggml type '{ggml_type}'") from None
    if elements % block:
        raise UsageError(f"a row of {elements} elements does not divide into {ggml_type}'s blocks of {block}")
    return elements // block * size


def device_bytes(ggml_type: str, nbytes: int, row: int | None, cuda: bool) -> int:
    """What a tensor of `nbytes` takes in a device buffer: on CUDA, a quantized tensor whose rows of
    `row` elements (None: 1-D) do not fill MATRIX_ROW_PADDING gets that many more, then the alignment.
    [bytes]

    >>> device_bytes("q8_0", 2048 * 612, 576, cuda=True)  # 1,253,376 + 476, padded to 128
    1253888
    """
    alignment = CUDA_ALIGNMENT if cuda else CPU_ALIGNMENT
    size = nbytes
    if cuda and ggml_type.upper() not in _FLOAT_TYPES and row is not None and row % MATRIX_ROW_PADDING:
        size += row_bytes(ggml_type, MATRIX_ROW_PADDING - row % MATRIX_ROW_PADDING)
    return -(-size // alignment) * alignment


@dataclass(frozen=True)
class CacheTensor:
    """One cache tensor of a layer: `elements` per cell, of `cache_type`; `row` is its first dimension
    when the tensor is 2-D (CUDA pads quantized rows), None when it is 1-D."""

    name: str  # "K" or "V"
    elements: int
    cache_type: str
    row: int | None

    def bytes(self, cells: int) -> int:
        """The tensor for `cells` cells. [bytes]"""
        return row_bytes(self.cache_type, self.elements) * cells


def layer_tensors(
    spec: ModelSpec, layout: CacheLayout, type_k: str, type_v: str, *, rows: bool = True, ik: bool = False
) -> tuple[CacheTensor, ...]:
    """The cache tensors of one layer (see the module table). `rows`: the build makes them 2-D; ik_llama.cpp
    keeps its per-head K 2-D by head (rows of qk_nope + qk_rope) and its V^T 1-D."""
    heads = spec.num_attention_heads
    latent = spec.kv_lora_rank + spec.qk_rope_head_dim
    if layout is CacheLayout.per_head:
        k_elements = heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim)
        v_elements = heads * spec.v_head_dim
        k_row: int | None
        v_row: int | None
        if ik:
            k_row, v_row = spec.qk_nope_head_dim + spec.qk_rope_head_dim, None
        else:
            k_row, v_row = (k_elements, v_elements) if rows else (None, None)
        return (CacheTensor("K", k_elements, type_k, k_row), CacheTensor("V", v_elements, type_v, v_row))
    k = CacheTensor("K", latent, type_k, latent if rows else None)
    if layout is CacheLayout.latent:
        return (k,)
    v_row = None if ik else (spec.kv_lora_rank if rows else None)
    return (k, CacheTensor("V", spec.kv_lora_rank, type_v, v_row))


def per_token_bytes(spec: ModelSpec, layout: CacheLayout, type_k: str, type_v: str) -> int:
    """Bytes per token over all layers. [bytes/token]

    >>> per_token_bytes(k2, CacheLayout.per_head, "f16", "f16"), per_token_bytes(k2, CacheLayout.latent, "q8_0", "f16")
    (2498560, 37332)
    """
    tensors = layer_tensors(spec, layout, type_k, type_v)
    return spec.num_hidden_layers * sum(row_bytes(t.cache_type, t.elements) for t in tensors)


def padded_cells(context: int, pad: int) -> int:
    """The cells a context of `context` tokens gets: rounded up to the build's padding (256, or 32 in
    older builds without flash attention; src/llama-context.cpp, GGML_PAD(n_ctx, …)). [cells]

    >>> padded_cells(65536, 256), padded_cells(5000, 256), padded_cells(5000, 32)
    (65536, 5120, 5024)
    """
    return -(-context // pad) * pad


@dataclass(frozen=True)
class Cache:
    """The cache of a run: its layout and why, types, cells, and the tensors of one layer."""

    choice: CacheChoice
    type_k: str
    type_v: str
    cells: int
    tensors: tuple[CacheTensor, ...]

    @property
    def layer_bytes(self) -> int:
        """One layer's tensors at `cells`, unpadded (what llama.cpp's "KV self size" sums). [bytes]"""
        return sum(t.bytes(self.cells) for t in self.tensors)

    def layer_device_bytes(self, cuda: bool) -> int:
        """One layer's tensors as a device buffer holds them. [bytes]"""
        return sum(device_bytes(t.cache_type, t.bytes(self.cells), t.row, cuda) for t in self.tensors)

    def token_bytes(self) -> int:
        """One layer's bytes per token. [bytes/token/layer]"""
        return sum(row_bytes(t.cache_type, t.elements) for t in self.tensors)

    def part_bytes(self, name: str) -> int:
        """One layer's K or V at `cells`. [bytes]"""
        return sum(t.bytes(self.cells) for t in self.tensors if t.name == name)


def make_cache(
    spec: ModelSpec, choice: CacheChoice, type_k: str, type_v: str, context: int, *, ik: bool
) -> Cache:
    """The cache for `context` tokens."""
    tensors = layer_tensors(spec, choice.layout, type_k, type_v, rows=choice.rows, ik=ik)
    return Cache(choice, type_k, type_v, padded_cells(context, choice.pad), tensors)
