"""How a checkpoint stores each tensor under the config's quantization, and the bytes that costs.

- DeepSeek's FP8 (`quant_method: fp8`, Kimi-K2-Instruct, DeepSeek-V3): a Linear weight [out, in] in
  F8_E4M3 with one F32 scale per `weight_block_size` block, `weight_scale_inv` [ceil(out/128),
  ceil(in/128)].
- compressed-tensors `pack-quantized` (Kimi-K2-Thinking, K2.5): a Linear the config targets is stored as
  `weight_packed` I32 [out, ceil(in / (32/bits))], `weight_scale` [out, ceil(in / group_size)] in the
  model dtype and `weight_shape` I32 [2], and no `.weight`. Which Linears a real checkpoint packs is
  decided by its tensor names (verification); the config's `targets` and `ignore` say what was meant,
  and are what `params` sizes from.
- FP4 (kimicount.spec.Fp4Quantization: NVIDIA ModelOpt NVFP4, the Kimi K2.6 / K2.7-Code releases; and
  compressed-tensors `nvfp4-pack-quantized` / `mxfp4-pack-quantized`, Kimi K3's experts): a Linear the
  config quantizes holds its E2M1 values two to a U8 byte, [out, ceil(in / 2)], one scale per group of
  inputs, [out, ceil(in / group_size)] (F8_E4M3 for NVFP4, a U8 E8M0 exponent for MXFP4), and per tensor
  NVFP4's F32 global scale and a static F32 input scale when the activations are quantized too; the
  names are each producer's (fp4_layout). The config decides which Linears (ModelOpt's exclude_modules
  wildcards, compressed-tensors' targets and ignore).
- Everything else in the model dtype (`torch_dtype`); the router's `e_score_correction_bias` in F32;
  norms may be F32, and DeepSeek-V3.2 keeps every norm so.
- The multi-token-prediction layer (DeepSeek-V3, R1, V3.1, V3.2: layer 61): its attention and experts
  like the main layers', and its `eh_proj`, embedding copy, head copy and norms unquantized (BF16 with
  no scale; V3.2's norms F32), as the real checkpoints store them (the anatomy gives eh_proj the
  UNQUANTIZED role).

- DeepSeek V4 (`kimicount.families.deepseek_v4`): the same FP8 blocks with one F8_E8M0 scale each,
  named `X.scale`; routed experts in FP4 (`fp4_e2m1_layout`); int64 hash-routing tables (Role.INDEX).

Scales and packed shapes are quantization metadata, not parameters: counted apart, with their bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat

from kimicount.anatomy import Node, Role, RowPart, TensorRef
from kimicount.errors import ConfigError
from kimicount.headers import DTYPE_BITS
from kimicount.spec import (
    MODEL_DTYPES,
    Fp4Quantization,
    Fp8Quantization,
    ModelSpec,
    OtherQuantization,
    PackedQuantization,
)

#: safetensors dtype -> bytes per element (the whole-byte dtypes of the format)
DTYPE_BYTES = {dtype: bits // 8 for dtype, bits in DTYPE_BITS.items() if bits % 8 == 0}
_FP8_DTYPES = {"e4m3": "F8_E4M3", "e5m2": "F8_E5M2"}

FP8_SCALE_SUFFIX = "_scale_inv"  # X.weight -> X.weight_scale_inv
PACKED_SUFFIXES = ("weight_packed", "weight_scale", "weight_shape")  # X.weight -> X.weight_packed, …
#: Roles that are nn.Linear modules, which compressed-tensors' "Linear" target matches
_LINEAR_MODULES = (Role.LINEAR, Role.HEAD)
#: Model types whose checkpoints keep every norm in F32: DeepSeek-V3.2's RMSNorm and LayerNorm
#: weights (and LayerNorm biases) are float32 parameters in its reference inference code.
_F32_NORM_MODEL_TYPES = ("deepseek_v32",)


def model_dtype(spec: ModelSpec) -> str:
    """The safetensors dtype of unquantized tensors (config torch_dtype).

    >>> model_dtype(k2)
    'BF16'
    """
    return MODEL_DTYPES[spec.torch_dtype]


def plain_dtypes(spec: ModelSpec, role: Role) -> tuple[str, ...]:
    """The dtypes a tensor stored as itself (not packed) may have; the first is how the config's own
    checkpoints store it (what byte counts assume).

    >>> plain_dtypes(k2, Role.LINEAR), plain_dtypes(k2, Role.NORM), plain_dtypes(k2, Role.ROUTER_BIAS)
    (('F8_E4M3',), ('BF16', 'F32'), ('F32',))
    >>> plain_dtypes(k2, Role.UNQUANTIZED)  # e.g. DeepSeek-V3's eh_proj: never FP8, no scale
    ('BF16',)
    """
    base = model_dtype(spec)
    if role in (Role.ROUTER_BIAS, Role.F32):
        return ("F32",)
    if role is Role.INDEX:
        return ("I64",)
    if role is Role.NORM:
        if base == "F32":
            return (base,)
        return ("F32", base) if spec.model_type in _F32_NORM_MODEL_TYPES else (base, "F32")
    if role is Role.LINEAR and isinstance(spec.quantization, Fp8Quantization):
        return (_FP8_DTYPES.get(spec.quantization.fmt, "F8_E4M3"),)
    return (base,)


def fp8_quantized(spec: ModelSpec, role: Role) -> bool:
    """Stored in FP8 with a block scale: the Linear weights of an FP8 checkpoint."""
    return role is Role.LINEAR and isinstance(spec.quantization, Fp8Quantization)


def fp4_quantized(spec: ModelSpec, ref: TensorRef) -> bool:
    """A routed expert's weight that the config stores in FP4 (`expert_dtype: fp4`, DeepSeek V4)."""
    quantization = spec.quantization
    return (
        bool(ref.experts)
        and ref.role is Role.LINEAR
        and isinstance(quantization, Fp8Quantization)
        and quantization.expert_dtype == "fp4"
    )


#: FP4 E2M1 values packed into one byte, and values per E8M0 scale (DeepSeek V4's routed experts).
FP4_PER_BYTE = 2
FP4_SCALE_GROUP = 32


def fp4_e2m1_layout(weight_shape: tuple[int, ...]) -> dict[str, tuple[tuple[int, int], str]]:
    """How DeepSeek V4 stores an FP4 expert weight [out, in]: E2M1 values two to a byte as I8 [out,
    in / 2] under `X.weight`, and one F8_E8M0 scale per 32 inputs [out, in / 32] under `X.scale`
    (vLLM vllm/model_executor/models/deepseek_v4.py @ 023da1f, DeepseekV4MegaMoEExperts: w13_weight
    [E, 2·I, H // 2] and w13_weight_scale [E, 2·I, H // 32], uint8; the real V4-Flash headers: w1 I8
    [2048, 2048], scale F8_E8M0 [2048, 128]). One function, for the FP4 storage of other checkpoints
    to fold in. [elements]

    >>> fp4_e2m1_layout((2048, 4096))  # V4-Flash's w1: 4,096 inputs
    {'weight': ((2048, 2048), 'I8'), 'scale': ((2048, 128), 'F8_E8M0')}
    """
    out_features, in_features = weight_shape
    return {
        "weight": ((out_features, in_features // FP4_PER_BYTE), "I8"),
        "scale": ((out_features, in_features // FP4_SCALE_GROUP), "F8_E8M0"),
    }


def block_scale_dtype(spec: ModelSpec) -> str:
    """The dtype of an FP8 weight's block scale: F32, or F8_E8M0 in DeepSeek V4's FP4 checkpoints."""
    quantization = spec.quantization
    return quantization.scale_dtype if isinstance(quantization, Fp8Quantization) else "F32"


def scale_suffix(spec: ModelSpec) -> str:
    """How the checkpoint names a weight's block scale: `_scale_inv` after `.weight`, or `.scale`."""
    quantization = spec.quantization
    return quantization.scale_suffix if isinstance(quantization, Fp8Quantization) else FP8_SCALE_SUFFIX


def scale_names(spec: ModelSpec, weight_names: Iterable[str]) -> list[str]:
    """The block scale's name of each weight: X.weight -> X.weight_scale_inv, or X.scale (DeepSeek V4).

    >>> scale_names(k2, ["model.layers.0.self_attn.q_a_proj.weight"])
    ['model.layers.0.self_attn.q_a_proj.weight_scale_inv']
    """
    return suffixed_scale_names(scale_suffix(spec), weight_names)


def suffixed_scale_names(suffix: str, weight_names: Iterable[str]) -> list[str]:
    """The block scale's names for a scale suffix: "_scale_inv" appended, ".scale" in place of ".weight".

    >>> suffixed_scale_names(".scale", ["layers.0.attn.wq_a.weight"])
    ['layers.0.attn.wq_a.scale']
    """
    if suffix.startswith("."):  # replaces ".weight" (map over str methods: 69,120 expert names)
        stems = map(str.removesuffix, weight_names, repeat(".weight"))
        return list(map(str.__add__, stems, repeat(suffix)))
    return list(map(str.__add__, weight_names, repeat(suffix)))


def packable(spec: ModelSpec, role: Role) -> bool:
    """A Linear that a pack-quantized checkpoint may store packed (whether it does, its names say)."""
    return role in _LINEAR_MODULES and isinstance(spec.quantization, PackedQuantization)


def fp8_scale_shape(spec: ModelSpec, weight_shape: tuple[int, ...]) -> tuple[int, int]:
    """One F32 scale per weight_block_size block: ceil(out / block_out) × ceil(in / block_in).

    >>> fp8_scale_shape(k2, (576, 7168))  # kv_a_proj_with_mqa
    (5, 56)
    """
    assert isinstance(spec.quantization, Fp8Quantization)
    return _blocks(spec.quantization.block, weight_shape)


@lru_cache(maxsize=256)  # a checkpoint has a handful of weight shapes and 70,000 scales
def _blocks(block: tuple[int, int], weight_shape: tuple[int, ...]) -> tuple[int, int]:
    return (-(-weight_shape[0] // block[0]), -(-weight_shape[1] // block[1]))


def packed_layout(spec: ModelSpec, weight_shape: tuple[int, ...]) -> dict[str, tuple[tuple[int, ...], str]]:
    """The tensors that store a packed Linear [out, in]: suffix -> (shape, dtype).

    Kimi K2.5's routed experts (4 bits, groups of 32): up_proj [2048, 7168] is weight_packed I32
    [2048, 896], weight_scale BF16 [2048, 224] and weight_shape I32 [2].
    """
    quantization = spec.quantization
    assert isinstance(quantization, PackedQuantization)
    out_features, in_features = weight_shape
    groups = 1 if quantization.group_size is None else math.ceil(in_features / quantization.group_size)
    return {
        "weight_packed": ((out_features, math.ceil(in_features / quantization.pack_factor)), "I32"),
        "weight_scale": ((out_features, groups), model_dtype(spec)),
        "weight_shape": ((2,), "I32"),
    }


# --- FP4 -----------------------------------------------------------------------------------------------


def fp4_quantizable(spec: ModelSpec, role: Role) -> bool:
    """A Linear an FP4 config may store in FP4 (whether it does, its targets and exclusions say)."""
    return role in _LINEAR_MODULES and isinstance(spec.quantization, Fp4Quantization)


def fp4_layout(spec: ModelSpec, weight_shape: tuple[int, ...]) -> dict[str, tuple[tuple[int, ...], str]]:
    """The tensors that store an FP4 Linear [out, in]: suffix -> (shape, dtype), the weight first.

    NVIDIA ModelOpt (vLLM's modelopt.py ModelOptNvFp4LinearMethod.create_weights, commit c9a5990: weight
    uint8 [out, in // 2], "2 fp4 data is packed in one uint8 in the input dimension"; weight_scale
    float8_e4m3fn [out, in // group_size]; weight_scale_2 and input_scale float32, one per Linear, stored
    as 0-d tensors): Kimi K2.6-NVFP4's routed expert up_proj [2048, 7168]:

    >>> from kimicount.models import known_model
    >>> fp4_layout(known_model("kimi-k2.6-nvfp4").spec(), (2048, 7168))  # doctest: +NORMALIZE_WHITESPACE
    {'weight': ((2048, 3584), 'U8'), 'weight_scale': ((2048, 448), 'F8_E4M3'), 'weight_scale_2': ((), 'F32'),
     'input_scale': ((), 'F32')}

    compressed-tensors (compressors/mxfp4 and nvfp4 compression_param_names; vLLM's
    CompressedTensorsW4A4Nvfp4.create_weights): weight_packed U8 [out, in // 2], weight_scale [out,
    in // group_size] (F8_E4M3, or MXFP4's U8 exponents), NVFP4's weight_global_scale F32 [1], and
    input_global_scale F32 [1] when the input activations have a static scale.
    """
    quantization = spec.quantization
    assert isinstance(quantization, Fp4Quantization)
    out_features, in_features = weight_shape
    pairs: tuple[int, ...] = (out_features, -(-in_features // 2))
    scales: tuple[int, ...] = (out_features, -(-in_features // quantization.group_size))
    if quantization.producer == "modelopt":
        return {
            "weight": (pairs, "U8"),
            "weight_scale": (scales, quantization.scale_dtype),
            "weight_scale_2": ((), "F32"),
            "input_scale": ((), "F32"),
        }
    layout: dict[str, tuple[tuple[int, ...], str]] = {
        "weight_packed": (pairs, "U8"),
        "weight_scale": (scales, quantization.scale_dtype),
    }
    if quantization.global_scale:
        layout["weight_global_scale"] = ((1,), "F32")
    if quantization.input_scale:
        layout["input_global_scale"] = ((1,), "F32")
    return layout


def config_fp4(spec: ModelSpec, tensor_names: Iterable[str]) -> list[bool]:
    """For each Linear weight name, whether the FP4 config stores it in FP4. ModelOpt's wildcards name
    modules as the checkpoint does (`language_model.model.layers.0*` on Kimi K2.6); compressed-tensors'
    patterns the language model's own modules, as for INT4 (config_packed)."""
    quantization = spec.quantization
    assert isinstance(quantization, Fp4Quantization)
    names: Iterable[str] = tensor_names
    if quantization.producer != "modelopt":
        names = map(str.removeprefix, names, repeat(spec.weight_prefix))
    return quantization.quantizes_each(map(str.removesuffix, names, repeat(".weight")))


def config_packed(spec: ModelSpec, tensor_names: Iterable[str]) -> int:
    """How many of these Linear weights the config's targets and ignore list mean to be packed. Module
    names are the language model's own (without the multimodal checkpoint's `language_model.` prefix)."""
    quantization = spec.quantization
    assert isinstance(quantization, PackedQuantization)
    # map over str methods: no Python frame per name (K2.5 asks about 69,120)
    modules = map(
        str.removesuffix, map(str.removeprefix, tensor_names, repeat(spec.weight_prefix)), repeat(".weight")
    )
    return sum(quantization.packs_each(modules))


# --- bytes -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    """Bytes of weights as the checkpoint stores them (quantization metadata included), and what the
    same parameters take in BF16."""

    stored: int = 0
    bf16: int = 0

    def __add__(self, other: Memory) -> Memory:
        return Memory(self.stored + other.stored, self.bf16 + other.bf16)


@dataclass(frozen=True)
class StoredPart:
    """One kind of tensor that a reference puts in the checkpoint, over every copy: the weight itself
    (FP8, packed int32s or plain) or its quantization metadata (FP8 block scales; packed scales and
    shapes)."""

    kind: str  # weight | scale | shape
    elements: int
    dtype: str

    @property
    def bytes(self) -> int:
        return self.elements * DTYPE_BYTES[self.dtype]


def stored_parts(spec: ModelSpec, ref: TensorRef) -> tuple[StoredPart, ...]:
    """What the checkpoint stores for every copy of a tensor reference: only the rows it owns of a
    shared tensor, the FP8 scale rows of the blocks that start in them, and a packed tensor's
    weight_shape with row 0. [elements]

    >>> from kimicount.anatomy import key_value_compression
    >>> latent_rows, norm = key_value_compression(k2, [0]).tensors
    >>> [(p.kind, p.elements, p.dtype) for p in stored_parts(k2, latent_rows)]  # kv_a_proj rows 0–511
    [('weight', 3670016, 'F8_E4M3'), ('scale', 224, 'F32')]
    """
    copies = ref.copies
    plain = plain_dtypes(spec, ref.role)[0]
    if fp4_quantized(spec, ref):
        (_, weight), dtype = fp4_e2m1_layout(ref.shape)["weight"]
        (_, groups), scale_dtype = fp4_e2m1_layout(ref.shape)["scale"]
        return (
            StoredPart("weight", ref.owned_rows * weight * copies, dtype),
            StoredPart("scale", ref.owned_rows * groups * copies, scale_dtype),
        )
    if fp4_quantizable(spec, ref.role):
        return _fp4_parts(spec, ref, plain)
    if fp8_quantized(spec, ref.role):
        scale_rows, scale_cols = fp8_scale_shape(spec, ref.shape)
        assert isinstance(spec.quantization, Fp8Quantization)  # fp8_quantized says so
        block = spec.quantization.block[0]
        owned_blocks = owned_scale_rows(ref.rows, scale_rows, block)
        return (
            StoredPart("weight", ref.elements * copies, plain),
            StoredPart("scale", owned_blocks * scale_cols * copies, block_scale_dtype(spec)),
        )
    if not packable(spec, ref.role):
        return (StoredPart("weight", ref.elements * copies, plain),)
    packed = config_packed(spec, ref.names())
    layout = packed_layout(spec, ref.shape)
    (_, packed_cols), packed_dtype = layout["weight_packed"]
    (_, groups), scale_dtype = layout["weight_scale"]
    (shape_elements,), shape_dtype = layout["weight_shape"]
    owns_row_0 = ref.rows is None or ref.rows.owns(0)
    parts = (
        StoredPart("weight", ref.elements * (copies - packed), plain),
        StoredPart("weight", ref.owned_rows * packed_cols * packed, packed_dtype),
        StoredPart("scale", ref.owned_rows * groups * packed, scale_dtype),
        StoredPart("shape", shape_elements * packed if owns_row_0 else 0, shape_dtype),
    )
    return tuple(part for part in parts if part.elements)


def _fp4_parts(spec: ModelSpec, ref: TensorRef, plain: str) -> tuple[StoredPart, ...]:
    """An FP4-quantizable reference: the copies the config keeps as themselves, then for those it
    quantizes the U8 pairs and scale groups of the rows it owns, and the per-tensor scalars with row 0."""
    fp4 = sum(config_fp4(spec, ref.names()))
    owns_row_0 = ref.rows is None or ref.rows.owns(0)
    parts = [StoredPart("weight", ref.elements * (ref.copies - fp4), plain)]
    for index, (shape, dtype) in enumerate(fp4_layout(spec, ref.shape).values()):
        if len(shape) == 2:
            elements = ref.owned_rows * shape[1] * fp4
        else:
            elements = math.prod(shape) * fp4 if owns_row_0 else 0
        parts.append(StoredPart("weight" if index == 0 else "scale", elements, dtype))
    return tuple(part for part in parts if part.elements)


def owned_scale_rows(rows: RowPart | None, scale_rows: int, block: int) -> int:
    """The FP8 scale rows charged to a component that owns `rows` of a weight: the blocks whose first
    row it owns (all of them for a whole weight). [scale rows]

    Counted without a loop over the blocks, which a config may make 2^56: row r is owned when
    (r mod period) − offset ∈ [0, width), that is when ⌊(r − offset)/period⌋ − ⌊(r − offset − width)/period⌋
    is 1 (it is 0 otherwise), so the count over r = b·block is a difference of two floor sums.

    >>> latent, rotary = RowPart(0, 512, 576), RowPart(512, 64, 576)  # kv_a_proj_with_mqa
    >>> owned_scale_rows(latent, 5, 128), owned_scale_rows(rotary, 5, 128)  # 5 blocks of 128 rows
    (4, 1)
    """
    if rows is None:
        return scale_rows
    return _floor_sum(scale_rows, block, -rows.offset, rows.period) - _floor_sum(
        scale_rows, block, -rows.offset - rows.width, rows.period
    )


def _floor_sum(n: int, a: int, b: int, m: int) -> int:
    """Σ_{i=0}^{n−1} ⌊(a·i + b) / m⌋ for a ≥ 0, m ≥ 1, in O(log m) steps (the Euclid-like reduction
    of the AtCoder Library's floor_sum).

    >>> _floor_sum(5, 128, -512, 576), sum((128 * i - 512) // 576 for i in range(5))
    (-4, -4)
    """
    total = 0
    quotient, b = divmod(b, m)  # b into [0, m)
    total += n * quotient
    while True:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return total
        n, b = divmod(y_max, m)
        m, a = a, m


def ref_memory(spec: ModelSpec, ref: TensorRef) -> Memory:
    """The bytes of every copy of a tensor reference (only the rows it owns of a shared tensor).

    >>> from kimicount.anatomy import key_value_compression
    >>> latent_rows, norm = key_value_compression(k2, [0]).tensors
    >>> ref_memory(k2, latent_rows)  # kv_a_proj rows 0–511 in FP8 + 4 of its 5 × 56 F32 scale rows
    Memory(stored=3670912, bf16=7340032)
    >>> 512 * 7168 + 4 * 56 * 4, ref_memory(k2, norm)
    (3670912, Memory(stored=1024, bf16=1024))
    """
    stored = sum(part.bytes for part in stored_parts(spec, ref))
    return Memory(stored, ref.elements * 2 * ref.copies)


#: The kinds of StoredPart: the weights themselves, then their quantization metadata.
ALL_PARTS = ("weight", "scale", "shape")
METADATA_PARTS = ("scale", "shape")


def stored_elements(spec: ModelSpec, node: Node, kinds: tuple[str, ...] = ALL_PARTS) -> int:
    """The elements a component's tensors take in the checkpoint's headers, as a tool that reads them
    counts: weights as stored (one element per FP8 value, one I32 per eight packed INT4 values), their
    scales and packed shapes; `kinds` picks some of these. [elements]

    >>> from kimicount.anatomy import build_anatomy
    >>> model = build_anatomy(k2).model  # the checkpoint's 1,026,470,731,056, less 61 rotary buffers of 56
    >>> stored_elements(k2, model), stored_elements(k2, model, METADATA_PARTS)
    (1026470727640, 62495192)
    """
    own = sum(part.elements for ref in node.tensors for part in stored_parts(spec, ref) if part.kind in kinds)
    return own + sum(stored_elements(spec, child, kinds) for child in node.children)


def node_memory(spec: ModelSpec, node: Node) -> Memory:
    """A component's weight bytes, all its instances, as stored and in BF16.

    >>> from kimicount.anatomy import build_anatomy
    >>> node_memory(k2, build_anatomy(k2).model)  # the checkpoint's 1,029,173,256,720 data bytes, less rotary buffers
    Memory(stored=1029173249888, bf16=2052816464896)
    """
    memory = Memory()
    for ref in node.tensors:
        memory += ref_memory(spec, ref)
    for child in node.children:
        memory += node_memory(spec, child)
    return memory


def modelled(spec: ModelSpec) -> bool:
    """Whether kimicount knows how this config's checkpoints store their tensors."""
    return not isinstance(spec.quantization, OtherQuantization)


def require_modelled(spec: ModelSpec) -> None:
    if not modelled(spec):
        assert isinstance(spec.quantization, OtherQuantization)  # the only kind not modelled
        raise ConfigError(
            f"{spec.name}: quantization '{spec.quantization.method}' is not modelled, so how its checkpoints "
            "store tensors is unknown (supported: fp8, compressed-tensors pack-quantized, "
            "nvfp4-pack-quantized and mxfp4-pack-quantized, modelopt NVFP4)"
        )


def memory_map(spec: ModelSpec, *roots: Node | None) -> dict[int, Memory] | None:
    """Every component's Memory, keyed by id(node), computed once bottom-up for reports to read;
    None when the config's quantization is not modelled."""
    if not modelled(spec):
        return None
    memory: dict[int, Memory] = {}

    def visit(node: Node) -> Memory:
        total = Memory()
        for ref in node.tensors:
            total += ref_memory(spec, ref)
        for child in node.children:
            total += visit(child)
        memory[id(node)] = total
        return total

    for root in roots:
        if root is not None:
            visit(root)
    return memory


def quantization_summary(spec: ModelSpec) -> str:
    """How the config says the weights are stored, in words.

    >>> quantization_summary(k2)
    'Linear weights in F8_E4M3 with one F32 scale per 128 × 128 block; the rest in BF16'
    """
    base = model_dtype(spec)
    quantization = spec.quantization
    if isinstance(quantization, Fp8Quantization):
        rows, cols = quantization.block
        fp8 = plain_dtypes(spec, Role.LINEAR)[0]
        text = f"Linear weights in {fp8} with one {quantization.scale_dtype} scale per {rows} × {cols} block"
        if quantization.expert_dtype == "fp4":
            text += (
                f"; routed experts in FP4 E2M1, {FP4_PER_BYTE} to an I8, one F8_E8M0 scale per "
                f"{FP4_SCALE_GROUP} inputs"
            )
        return f"{text}; the rest in {base}"
    if isinstance(quantization, PackedQuantization):
        group = "row" if quantization.group_size is None else f"{quantization.group_size} inputs"
        return (
            f"the Linears the config targets in INT{quantization.num_bits} packed into I32, one {base} scale "
            f"per {group}; the rest in {base}"
        )
    if isinstance(quantization, Fp4Quantization):
        scale = "an F8_E4M3" if quantization.scale_dtype == "F8_E4M3" else "a U8 E8M0"
        extra = " and an F32 global scale per tensor" if quantization.global_scale else ""
        return (
            f"the Linears the config quantizes in {quantization.scheme.upper()} (E2M1 pairs in U8, {scale} "
            f"scale per {quantization.group_size} inputs{extra}); the rest in {base}"
        )
    if isinstance(quantization, OtherQuantization):
        return f"quantization '{quantization.method}', which kimicount does not model"
    return f"all in {base}"
