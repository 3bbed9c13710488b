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


#: llama-server's slots when -np is not given: n_parallel −1 ("auto by default", common/arg.cpp line
#: 1401 @ 3af988f) becomes 4 with a unified KV cache (tools/server/server.cpp lines 152–156).
SERVER_SLOTS = 4
#: The recurrent state's types: llama_model::create_memory passes GGML_TYPE_F32 for both r and s to
#: the hybrid memory (src/llama-model.cpp lines 2399–2400 @ 3af988f); no flag changes them (-ctk and
#: -ctv are the attention cache's).
STATE_TYPE = "f32"


@dataclass(frozen=True)
class RecurrentState:
    """llama.cpp's recurrent memory of a hybrid (Kimi Linear's KDA layers): per layer one r tensor
    [n_embd_r, cells] (the short convolutions' windows) and one s tensor [n_embd_s, cells] (the delta
    rule's state), F32, with one cell per sequence: rs_size = max(1, n_seq_max) rows × (1 + n_rs_seq),
    n_rs_seq 0 for an arch without recurrent rollback (src/llama-memory-recurrent.cpp lines 99–101,
    src/llama-context.cpp lines 104–108 @ 3af988f). n_embd_r and n_embd_s are the family's state
    tensors (kimicount.cache_groups): for KDA 3 × (d_conv − 1) × n_head × head_dim and
    head_dim² × n_head, as llama-hparams.cpp n_embd_r / n_embd_s give them (lines 183–220)."""

    layers: tuple[int, ...]  # 0-based, the recurrent layers
    r_elements: int  # n_embd_r
    s_elements: int  # n_embd_s
    cells: int  # n_seq_max: --parallel
    formula: str  # n_embd_r + n_embd_s in config keys

    @property
    def sequence_bytes(self) -> int:
        """One sequence's state in one layer. [bytes/sequence/layer]"""
        return row_bytes(STATE_TYPE, self.r_elements) + row_bytes(STATE_TYPE, self.s_elements)

    @property
    def layer_bytes(self) -> int:
        """One layer's r and s for every cell, unpadded (what "RS buffer size" sums). [bytes]"""
        return self.sequence_bytes * self.cells

    def layer_device_bytes(self, cuda: bool) -> int:
        """One layer's r and s as a device buffer holds them (each tensor aligned). [bytes]"""
        return sum(
            device_bytes(STATE_TYPE, row_bytes(STATE_TYPE, n) * self.cells, None, cuda)
            for n in (self.r_elements, self.s_elements)
        )


def recurrent_state(spec: ModelSpec, cells: int) -> RecurrentState | None:
    """The recurrent memory of a hybrid's state layers at `cells` sequences; None for a model without
    per-sequence state. The sizes are the family's state group's (one formula, kimicount.cache_groups).

    >>> from kimicount.models import known_model
    >>> state = recurrent_state(known_model("kimi-linear-48b-a3b").spec(), 4)
    >>> state.r_elements, state.s_elements, state.sequence_bytes, len(state.layers)
    (36864, 524288, 2244608, 20)
    """
    from kimicount.cache_groups import CONV, state_groups
    from kimicount.families import cache_groups

    groups = state_groups(cache_groups(spec))
    if not groups:
        return None
    (group,) = groups
    r = sum(t.elements() for t in group.state if t.holds == CONV)
    s = sum(t.elements() for t in group.state if t.holds != CONV)
    formula = " + ".join(t.formula for t in group.state)
    return RecurrentState(group.layers, r, s, cells, formula)


def kv_layers(spec: ModelSpec) -> tuple[int, ...]:
    """The layers that get KV cells: the per-token MLA group's (a hybrid's attention layers only: the
    hybrid memory filters the rest out, src/llama-memory-hybrid.cpp lines 48–50, !is_recr(il)).

    >>> from kimicount.models import known_model
    >>> kv_layers(known_model("kimi-linear-48b-a3b").spec())
    (3, 7, 11, 15, 19, 23, 26)
    """
    from kimicount.cache_groups import per_token_group
    from kimicount.families import cache_groups

    return per_token_group(cache_groups(spec)).layers


@dataclass(frozen=True)
class Cache:
    """The cache of a run: its layout and why, types, cells, the tensors of one layer, the layers that
    have them, and a hybrid's recurrent state (None for the DeepSeek-V3 family)."""

    choice: CacheChoice
    type_k: str
    type_v: str
    cells: int
    tensors: tuple[CacheTensor, ...]
    layers: tuple[int, ...] = ()  # the layers with KV cells
    state: RecurrentState | None = None

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
    spec: ModelSpec,
    choice: CacheChoice,
    type_k: str,
    type_v: str,
    context: int,
    *,
    ik: bool,
    sequences: int = SERVER_SLOTS,
) -> Cache:
    """The cache for `context` tokens (one unified buffer the sequences share) and, for a hybrid, the
    recurrent state of `sequences` sequences."""
    tensors = layer_tensors(spec, choice.layout, type_k, type_v, rows=choice.rows, ik=ik)
    state = recurrent_state(spec, sequences)
    layers = kv_layers(spec) if state is not None else tuple(range(spec.num_hidden_layers))
    return Cache(choice, type_k, type_v, padded_cells(context, choice.pad), tensors, layers, state)
