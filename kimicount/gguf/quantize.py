"""What a GGUF of the model would weigh at one llama-quantize type, from the config alone: an estimate,
before anything is downloaded. (Dynamic quants, unsloth's UD-* and the like, choose per tensor: only
their header says what they hold; read it with `kimicount gguf --repo ... --include ...`.)

The rules are llama.cpp's (src/llama-quant.cpp, llama_model_quantize_impl and llama_tensor_get_type),
applied to the tensors convert_hf_to_gguf.py writes (kimicount.gguf.layout; for GLM-5, arch glm-dsa,
its MTP layer and indexers too, and n_layer is glm-dsa's block_count, which counts the MTP layer):

- Stays F32: what the converter writes in F32 and llama-quantize leaves alone: 1-D tensors (every norm,
  exp_probs_b.bias: "quantize only 2D and 3D tensors") and the router ffn_gate_inp.weight ("do not
  quantize expert gating tensors").
- BF16, F16, F32: every other tensor in that type (convert_hf_to_gguf.py --outtype).
- A quantized type: the default type of the ftype, then llama_tensor_get_type's rules for the tensor:
  output.weight becomes Q6_K (Q8_0 stays Q8_0); for the _M/_S/_L mixes, ffn_down (dense, shared and
  routed, by layer: use_more_bits(i, n_layer)) and attn_output as listed in _MIXES; then the fallback
  where a row (ne0) does not divide the type's block: Q6_K → Q8_0, Q5_K → Q5_1, Q4_K → Q5_0,
  Q3_K/Q2_K → IQ4_NL, F16 if that does not divide either. Kimi K2's attn_k_b rows are 128 long:
  at Q6_K it falls back to Q8_0.

Not modelled (they do not apply to deepseek2 / glm-dsa or need an input we do not have): the attn_v / attn_qkv
rules (MLA has neither), the n_expert == 8 rules (Mixtral), imatrix-dependent choices, --pure,
--output-tensor-type and --token-embedding-type.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from kimicount.errors import UsageError
from kimicount.gguf.reader import GGUFListing, GGUFTensor
from kimicount.reading import shorten

if TYPE_CHECKING:
    from kimicount.spec import ModelSpec

#: The ftypes llama-quantize (and convert_hf_to_gguf.py for the float ones) offers that we size, with
#: their default ggml type (llama_ftype_get_default_type).
FTYPES = {
    "F32": "F32",
    "F16": "F16",
    "BF16": "BF16",
    "Q8_0": "Q8_0",
    "Q6_K": "Q6_K",
    "Q5_K_M": "Q5_K",
    "Q5_K_S": "Q5_K",
    "Q5_1": "Q5_1",
    "Q5_0": "Q5_0",
    "Q4_K_M": "Q4_K",
    "Q4_K_S": "Q4_K",
    "Q4_1": "Q4_1",
    "Q4_0": "Q4_0",
    "Q3_K_L": "Q3_K",
    "Q3_K_M": "Q3_K",
    "Q3_K_S": "Q3_K",
    "Q2_K": "Q2_K",
}
_FLOATS = ("F32", "F16", "BF16")
#: llama_tensor_get_type's fallback when a row does not divide the block (convert_incompatible_tensor).
_FALLBACK = {"Q6_K": "Q8_0", "Q5_K": "Q5_1", "Q4_K": "Q5_0", "Q3_K": "IQ4_NL", "Q2_K": "IQ4_NL"}


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's use_more_bits: the first and last eighth of the layers, and every third between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def _ffn_down(ftype: str, new_type: str, i_layer: int, n_layer: int) -> str:
    """The ffn_down rules of llama_tensor_get_type for a non-Falcon model (n_layer: hparams.n_layer;
    the layer is read from the tensor name, as for every MoE model)."""
    if ftype == "Q2_K":
        return "Q3_K"
    if ftype == "Q3_K_M":
        return "Q5_K" if i_layer < n_layer // 16 else "Q4_K"
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i_layer, n_layer):
        return "Q6_K"
    if ftype == "Q4_K_S" and i_layer < n_layer // 8:
        return "Q5_K"
    return new_type


#: attn_output.weight for a model whose n_expert is not 8.
_ATTN_OUTPUT = {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}


def tensor_type(ftype: str, name: str, shape: tuple[int, ...], n_layer: int) -> str:
    """The ggml type llama.cpp gives one tensor of a deepseek2 or glm-dsa GGUF at `ftype`."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    def block(ggml_type: str) -> int:
        return GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]][0]

    if len(shape) < 2 or name.endswith("ffn_gate_inp.weight"):
        return "F32"
    new_type = FTYPES[ftype]
    if ftype in _FLOATS:
        return new_type
    if name == "output.weight":
        if shape[0] % block(new_type):
            return "Q8_0"
        return new_type if new_type == "Q8_0" else "Q6_K"
    if "ffn_down" in name:
        new_type = _ffn_down(ftype, new_type, int(name.split(".")[1]), n_layer)
    elif "attn_output.weight" in name:
        new_type = _ATTN_OUTPUT.get(ftype, new_type)
    if shape[0] % block(new_type):
        new_type = _FALLBACK.get(new_type, "F16")
        if shape[0] % block(new_type):
            new_type = "F16"
    return new_type


def nbytes(ggml_type: str, elements: int) -> int:
    """ggml_nbytes: elements / block size × block bytes (gguf-py GGML_QUANT_SIZES)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]]
    return elements // block * size


def parse_quant(text: str) -> str:
    """An ftype name as llama-quantize spells it (case aside)."""
    ftype = text.strip().upper()
    if ftype not in FTYPES:
        raise UsageError(f"--quant '{shorten(text, 80)}': expected one of {', '.join(FTYPES)}")
    return ftype


#: Said with every figure estimate_uniform gives.
ESTIMATE = (
    "estimate: the tensors convert_hf_to_gguf.py writes (MLA layout), typed by llama-quantize's rules "
    "for {quant} (src/llama-quant.cpp); dynamic quants (UD-*, imatrix mixes) differ: read their header"
)


def estimate_uniform(spec: ModelSpec, quant: str) -> GGUFListing:
    """The listing a `llama-quantize … {quant}` of the model would have: every tensor, its type and
    bytes; `file_bytes` is the data section (each tensor padded to 32 bytes), without the header
    (metadata and tokenizer: a few MB). An estimate: see ESTIMATE.

    >>> from kimicount.spec import bundled_spec
    >>> listing = estimate_uniform(bundled_spec(), "Q6_K")
    >>> f"{listing.tensor_bytes / 1024**3:.2f} GiB"  # llama.cpp printed 784.70 GiB for Kimi K2 Q6_K
    '784.70 GiB'
    """
    # imported here: parse_quant, which reads the option, needs neither
    from kimicount.anatomy import build_anatomy
    from kimicount.gguf.layout import expected_tensors, gguf_arch, gguf_tree

    ftype = parse_quant(quant)
    arch = gguf_arch(spec)
    tree = gguf_tree(build_anatomy(spec))
    expected, _ = expected_tensors(tree, spec, split_kv_b=True)
    metadata = MappingProxyType(
        {
            "general.architecture": arch,
            "general.name": spec.name,
            "kimicount.estimate": ESTIMATE.format(quant=ftype),
            **_deepseek2_metadata(spec, arch),
        }
    )
    n_layer = metadata[f"{arch}.block_count"]  # hparams.n_layer: glm-dsa's counts the MTP layer
    assert isinstance(n_layer, int)
    tensors = []
    for name, want in expected.items():
        ggml_type = tensor_type(ftype, name, want.shape, n_layer)
        tensors.append(GGUFTensor(name, want.shape, ggml_type, nbytes(ggml_type, want.elements)))
    data = sum(-(-t.nbytes // 32) * 32 for t in tensors)
    return GGUFListing(
        files=(f"{spec.name} at {ftype}",), metadata=metadata, tensors=tuple(tensors), file_bytes=data
    )


def _deepseek2_metadata(spec: ModelSpec, arch: str = "deepseek2") -> dict[str, object]:
    """The deepseek2.* keys convert_hf_to_gguf.py writes for the model (MLA conversion), under `arch`'s
    prefix; for glm-dsa (GlmMoeDsaModel) block_count with the MTP layers, nextn_predict_layers and the
    indexer's attention.indexer.head_count / key_length."""
    keys = {
        "block_count": spec.num_hidden_layers,
        "context_length": spec.max_position_embeddings,
        "embedding_length": spec.hidden_size,
        "feed_forward_length": spec.intermediate_size,
        "attention.head_count": spec.num_attention_heads,
        "attention.head_count_kv": 1,
        "leading_dense_block_count": spec.first_k_dense_replace,
        "vocab_size": spec.vocab_size,
        "attention.q_lora_rank": spec.q_lora_rank or 0,
        "attention.kv_lora_rank": spec.kv_lora_rank,
        "attention.key_length": spec.kv_lora_rank + spec.qk_rope_head_dim,
        "attention.value_length": spec.kv_lora_rank,
        "attention.key_length_mla": spec.qk_head_dim,
        "attention.value_length_mla": spec.v_head_dim,
        "expert_feed_forward_length": spec.moe_intermediate_size,
        "expert_count": spec.n_routed_experts,
        "expert_shared_count": spec.n_shared_experts,
        "expert_used_count": spec.num_experts_per_tok,
        "expert_gating_func": 2 if spec.router_bias else 1,
        "rope.dimension_count": spec.qk_rope_head_dim,
    }
    if arch != "deepseek2" and spec.indexer is not None:
        keys["block_count"] = spec.num_hidden_layers + spec.num_nextn_predict_layers
        keys["nextn_predict_layers"] = spec.num_nextn_predict_layers
        keys["attention.indexer.head_count"] = spec.indexer.n_heads
        keys["attention.indexer.key_length"] = spec.indexer.head_dim
    return {f"{arch}.{key}": value for key, value in keys.items()}
