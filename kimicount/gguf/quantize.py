"""What a GGUF of the model would weigh at one llama-quantize type, from the config alone: an estimate,
before anything is downloaded. (Dynamic quants, unsloth's UD-* and the like, choose per tensor: only
their header says what they hold; read it with `kimicount gguf --repo ... --include ...`.)

The rules are llama.cpp's, read at release b10572 (commit 3af988f, 2026-08-21), src/llama-quant.cpp,
applied to the tensors convert_hf_to_gguf.py writes (kimicount.gguf.layout; for GLM-5, arch glm-dsa,
its MTP layer and indexers too, and n_layer is glm-dsa's block_count, which counts the MTP layer):

- Stays F32: what the converter writes in F32 and llama-quantize leaves alone (tensor_allows_quantization,
  lines 289–365): 1-D tensors (every norm, exp_probs_b.bias: "quantize only 2D and 3D tensors"), the
  router ffn_gate_inp.weight ("do not quantize expert gating tensors"), and for Kimi Linear (arch
  kimi-linear) a name not ending in "weight" (ssm_a, line 299) and the short convolutions ssm_conv1d_*
  ("do not quantize Mamba/Kimi's small conv1d weights", line 326; convert forces them F32 too,
  conversion/base.py lines 934–972).
- BF16, F16, F32: every other tensor in that type (convert_hf_to_gguf.py --outtype); llama_tensor_get_type
  (679–721) applies the rules below only when the ftype's default type is quantized.
- A quantized type: the ftype's default type (llama_ftype_get_default_type, 810–854), then
  llama_tensor_get_type_impl's rules (424–675) by the tensor's category (tensor_get_category, 116–154:
  output, token_embd, attn_k / attn_q, attn_output, ffn_up / ffn_gate / ffn_down by substring; MLA's
  attn_q_a, attn_q_b, attn_kv_a_mqa, attn_k_b, attn_v_b are none of them), then the fallback where a row
  (ne0) does not divide the type's block (tensor_type_fallback, 374–421): the IQ types of 256 → IQ4_NL,
  Q2_K and Q3_K → Q4_0 (IQ4_NL before #19770, b8266: the same 18 bytes a block of 32), Q4_K → Q5_0,
  Q5_K → Q5_1, Q6_K → Q8_0, F16 if that does not divide either. Kimi K2's attn_k_b rows are 128 long:
  at Q6_K it falls back to Q8_0, at IQ2_XXS to IQ4_NL.
- The ffn_down rules of the IQ1/IQ2 ftypes (505–530) count ffn_down tensors in load order, not layers:
  the first n_layer ÷ 8 of them (dense, routed and shared alike) in llama_model_loader's weights_map
  order, by block number then name (src/llama-model-loader.h, weight_name_comparer, lines 52–64), get
  Q2_K (IQ3_S under IQ2_S and IQ2_M). Every other ffn_down rule reads the layer from the name.
- An importance matrix: llama-quantize refuses to write IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S or IQ3_XXS
  tensors, or Q2_K ones in a Q2_K_S file, without one (tensor_requires_imatrix, 785–805): an ftype that
  would write any is sized as made with an imatrix (the rules that read has_imatrix then apply); the
  others as made without.

- attn_v.weight (Kimi Linear's KDA layers; 505–566): the rules of category_is_attn_v by ftype, with
  n_gqa() read at layer 0 (llama-hparams.cpp n_gqa: 0 where n_head_kv is 0, as in Kimi Linear's first,
  KDA, layer), n_expert, and i_attention_wv, the attn_v tensors before this one in load order, of
  n_attention_wv in all (init_quantize_state_counters, 856–869).

Not modelled (they do not apply to deepseek2 / glm-dsa / kimi-linear or need an input we do not have):
the attn_qkv / attn_kv_b rules (the MLA layout writes attn_k_b and attn_v_b instead), the n_expert == 8
rules (Mixtral), the LLM_TYPE_70B rule, --pure, --tensor-type, --output-tensor-type and
--token-embedding-type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import MappingProxyType
from typing import TYPE_CHECKING

from kimicount.errors import UsageError
from kimicount.gguf.reader import GGUFListing, GGUFTensor
from kimicount.reading import shorten

if TYPE_CHECKING:
    from kimicount.spec import ModelSpec

#: The ftypes llama-quantize (and convert_hf_to_gguf.py for the float ones) offers that we size, with
#: their default ggml type (llama_ftype_get_default_type), largest first within each kind.
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
    "IQ4_NL": "IQ4_NL",
    "IQ4_XS": "IQ4_XS",
    "Q3_K_L": "Q3_K",
    "Q3_K_M": "Q3_K",
    "Q3_K_S": "Q3_K",
    "IQ3_M": "IQ3_S",
    "IQ3_S": "IQ3_S",
    "IQ3_XS": "IQ3_S",
    "IQ3_XXS": "IQ3_XXS",
    "Q2_K": "Q2_K",
    "Q2_K_S": "Q2_K",
    "IQ2_M": "IQ2_S",
    "IQ2_S": "IQ2_XS",
    "IQ2_XS": "IQ2_XS",
    "IQ2_XXS": "IQ2_XXS",
    "IQ1_M": "IQ1_M",
    "IQ1_S": "IQ1_S",
}
#: llama-quantize's aliases (tools/quantize/quantize.cpp, QUANT_OPTIONS): "Q3_K" is Q3_K_M, and so on.
ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}
_FLOATS = ("F32", "F16", "BF16")
#: tensor_type_fallback's table, when a row does not divide the block.
_FALLBACK = {
    **dict.fromkeys(("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"), "IQ4_NL"),
    **dict.fromkeys(("Q2_K", "Q3_K"), "Q4_0"),
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
}
#: The ftypes whose own rules form the IQ1/IQ2 branch of llama_tensor_get_type_impl (505–530).
_IQ12 = frozenset({"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"})
#: The output.weight rule's IQ ftypes, which give it Q5_K (452–474).
_OUTPUT_Q5_K = _IQ12 | {"IQ3_XXS"}
#: The types llama-quantize writes only with an importance matrix (tensor_requires_imatrix).
_NEEDS_IMATRIX = frozenset({"IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_M", "IQ1_S"})


def _block(ggml_type: str) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    return GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]][0]


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's use_more_bits: the first and last eighth of the layers, and every third between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def _ffn_down(ftype: str, new_type: str, i_layer: int, n_layer: int, imatrix: bool) -> str:
    """The ffn_down rules of llama_tensor_get_type_impl (586–630) for a non-Falcon model whose n_expert is
    not 8 (n_layer: n_layer_all; the layer is read from the tensor name, as for every MoE model)."""
    eighth = i_layer < n_layer // 8
    if ftype == "Q2_K":
        return "Q3_K"
    if ftype == "Q2_K_S":
        return "Q4_K" if eighth else new_type
    if ftype == "IQ3_XXS" and not imatrix:
        return "Q4_K" if eighth else "Q3_K"
    if ftype == "Q3_K_M":
        return "Q5_K" if i_layer < n_layer // 16 else "Q4_K"
    if ftype == "IQ3_M" and eighth:
        return "Q4_K"
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype == "Q4_K_M":
        return "Q6_K" if _use_more_bits(i_layer, n_layer) else new_type
    if eighth and ftype in ("IQ4_NL", "IQ4_XS") and not imatrix:
        return "Q5_K"
    if ftype == "Q5_K_M" and _use_more_bits(i_layer, n_layer):
        return "Q6_K"
    if ftype == "Q4_K_S" and eighth:
        return "Q5_K"
    if ftype in ("Q4_0", "Q5_0") and imatrix and eighth:
        return "Q4_1" if ftype == "Q4_0" else "Q5_1"
    return new_type


#: attn_output.weight (631–656) for a non-Falcon model whose n_expert is not 8, outside the IQ1/IQ2 branch.
_ATTN_OUTPUT = {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K", "IQ3_M": "Q4_K"}
#: attn_k.weight and attn_q.weight (567–585): GLM-5's indexer.attn_k, DeepSeek-V2-Lite's plain attn_q.
_ATTN_K_Q = {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.")


def _attn_v(ftype: str, new_type: str, seen: int, total: int, n_gqa: int, imatrix: bool) -> str:
    """attn_v.weight outside the IQ1/IQ2 branch (llama-quant.cpp 528–566) for a model whose n_expert is
    not 8 and whose type is not LLM_TYPE_70B; `seen` is i_attention_wv, `total` n_attention_wv."""
    wide = n_gqa >= 4
    if ftype == "Q2_K":
        return "Q4_K" if wide else "Q3_K"
    if ftype == "Q2_K_S":
        return "Q4_K" if wide else new_type
    if ftype == "IQ3_XXS":
        return "Q4_K" if wide else "IQ3_XXS" if imatrix else "IQ3_S"
    if ftype in ("IQ3_XS", "IQ3_S"):
        return "Q4_K" if wide else new_type
    if ftype == "IQ3_M":
        return "Q4_K"
    if ftype == "Q3_K_M":
        return "Q5_K" if seen < 2 else "Q4_K"
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype in ("IQ4_NL", "IQ4_XS"):
        return "Q5_K" if wide else new_type
    if ftype in ("Q4_K_M", "Q5_K_M") and _use_more_bits(seen, total):
        return "Q6_K"
    if ftype == "Q4_K_S" and seen < 4:
        return "Q5_K"
    return new_type


def kept_f32(name: str, shape: tuple[int, ...]) -> bool:
    """A tensor convert writes in F32 and llama-quantize does not quantize (see the module docstring).

    >>> kept_f32("blk.0.ssm_a", (1, 32, 1, 1)), kept_f32("blk.0.ssm_conv1d_q.weight", (4, 1, 4096, 1))
    (True, True)
    """
    return (
        len(shape) < 2
        or name.endswith("ffn_gate_inp.weight")
        or not name.endswith("weight")
        or "ssm_conv1d" in name
    )


def tensor_type(
    ftype: str,
    name: str,
    shape: tuple[int, ...],
    n_layer: int,
    *,
    ffn_down_seen: int = 0,
    imatrix: bool = False,
    attn_v: tuple[int, int, int] = (0, 0, 0),
) -> str:
    """The ggml type llama.cpp gives one tensor of a deepseek2 or glm-dsa GGUF at `ftype` (see the module
    docstring). `ffn_down_seen`: the ffn_down tensors before this one in load order (the IQ1/IQ2 rule
    counts them); `imatrix`: quantized with an importance matrix; `attn_v`: (attn_v tensors before this
    one, attn_v tensors in all, n_gqa at layer 0), which the attn_v rules read.

    >>> tensor_type("IQ1_S", "blk.9.attn_output.weight", (8192, 7168), 61), tensor_type("Q2_K", "output.weight", (7168, 163840), 61)
    ('IQ2_XXS', 'Q6_K')
    """
    if kept_f32(name, shape):
        return "F32"
    new_type = FTYPES[ftype]
    if ftype in _FLOATS:
        return new_type
    if name == "output.weight":
        if shape[0] % _block(new_type):
            new_type = "Q8_0"
        elif ftype in _OUTPUT_Q5_K:
            new_type = "Q5_K"
        elif new_type != "Q8_0":
            new_type = "Q6_K"
    elif name == "token_embd.weight":
        new_type = {"IQ2_XXS": "Q2_K", "IQ2_XS": "Q2_K", "IQ1_S": "Q2_K", "IQ1_M": "Q2_K"}.get(
            ftype, "IQ3_S" if ftype in ("IQ2_S", "IQ2_M", "IQ3_XXS") else new_type
        )
    elif ftype in _IQ12:
        if "ffn_down" in name and ffn_down_seen < n_layer // 8:
            new_type = "IQ3_S" if ftype in ("IQ2_S", "IQ2_M") else "Q2_K"
        elif "attn_v.weight" in name:  # n_expert >= 4 in every model here (508)
            new_type = "Q4_K"
        elif "attn_output.weight" in name:
            new_type = (
                "IQ2_XXS"
                if ftype in ("IQ1_S", "IQ1_M")
                else "IQ3_S"
                if ftype in ("IQ2_S", "IQ2_M")
                else new_type
            )
    elif "attn_v.weight" in name:
        seen, total, n_gqa = attn_v
        new_type = _attn_v(ftype, new_type, seen, total, n_gqa, imatrix)
    elif "attn_k.weight" in name or "attn_q.weight" in name:
        new_type = _ATTN_K_Q.get(ftype, new_type)
    elif "attn_output.weight" in name:
        new_type = _ATTN_OUTPUT.get(ftype, new_type)
    elif "ffn_up" in name or "ffn_gate" in name:
        if ftype == "IQ3_XS" and n_layer // 8 <= block_number(name) < 7 * n_layer // 8:
            new_type = "IQ3_XXS"
    elif "ffn_down" in name:
        new_type = _ffn_down(ftype, new_type, block_number(name), n_layer, imatrix)
    if shape[0] % _block(new_type):
        if new_type not in _FALLBACK:
            raise UsageError(
                f"{name}: rows of {shape[0]} do not divide {new_type}'s blocks, and llama-quantize has no fallback"
            )
        new_type = _FALLBACK[new_type]
        if shape[0] % _block(new_type):
            new_type = "F16"
    return new_type


def block_number(name: str) -> int:
    """The block a tensor's name gives (blk.N.…), -1 for the others, as sscanf("blk.%d.") leaves it.

    >>> block_number("blk.12.ffn_down_exps.weight"), block_number("output.weight")
    (12, -1)
    """
    match = _BLOCK_NAME.match(name)
    return int(match[1]) if match else -1


def load_order(name: str) -> tuple[int, str]:
    """Where llama-quantize takes a tensor: llama_model_loader's weights_map sorts by block, then name.

    >>> sorted(["blk.10.ffn_down_exps.weight", "blk.2.ffn_up_exps.weight", "output.weight"], key=load_order)
    ['output.weight', 'blk.2.ffn_up_exps.weight', 'blk.10.ffn_down_exps.weight']
    """
    return block_number(name), name


def listing_types(
    ftype: str, tensors: Iterable[tuple[str, tuple[int, ...]]], n_layer: int, n_gqa: int = 0
) -> tuple[dict[str, str], bool]:
    """Every tensor's type at `ftype`, in load order (the IQ1/IQ2 ffn_down rule and the attn_v rules
    count), and whether the file needs an importance matrix: when the types made without one include a
    type llama-quantize only writes with one (tensor_requires_imatrix), they are made again with one."""
    ordered = sorted(tensors, key=lambda tensor: load_order(tensor[0]))
    values = sum("attn_v.weight" in name for name, _ in ordered)

    def types(imatrix: bool) -> dict[str, str]:
        out, seen, seen_v = {}, 0, 0
        for name, shape in ordered:
            out[name] = tensor_type(
                ftype,
                name,
                shape,
                n_layer,
                ffn_down_seen=seen,
                imatrix=imatrix,
                attn_v=(seen_v, values, n_gqa),
            )
            seen += "ffn_down" in name and len(shape) >= 2
            seen_v += "attn_v.weight" in name and not kept_f32(name, shape)
        return out

    plain = types(False)
    needs = any(
        ggml_type in _NEEDS_IMATRIX or (ggml_type == "Q2_K" and ftype == "Q2_K_S")
        for name, ggml_type in plain.items()
        if name not in ("token_embd.weight", "output.weight")
    )
    return (types(True), True) if needs else (plain, False)


def nbytes(ggml_type: str, elements: int) -> int:
    """ggml_nbytes: elements / block size × block bytes (gguf-py GGML_QUANT_SIZES).

    >>> nbytes("IQ1_S", 256), nbytes("IQ4_NL", 32)  # ggml-common.h: block_iq1_s 2 + 32 + 16, block_iq4_nl 2 + 16
    (50, 18)
    """
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]]
    return elements // block * size


def parse_quant(text: str) -> str:
    """An ftype name as llama-quantize spells it (case aside; its aliases Q3_K, Q4_K, Q5_K too).

    >>> parse_quant("iq2_xxs"), parse_quant("Q4_K")
    ('IQ2_XXS', 'Q4_K_M')
    """
    ftype = text.strip().upper()
    ftype = ALIASES.get(ftype, ftype)
    if ftype not in FTYPES:
        raise UsageError(f"--quant '{shorten(text, 80)}': expected one of {', '.join(FTYPES)}")
    return ftype


#: Said with every figure estimate_uniform gives.
ESTIMATE = (
    "estimate: the tensors convert_hf_to_gguf.py writes (MLA layout), typed by llama-quantize's rules "
    "for {quant} (src/llama-quant.cpp); dynamic quants (UD-*, imatrix mixes) differ: read their header"
)
#: Said with the figures of an ftype that needs an importance matrix.
IMATRIX = "{quant} needs an importance matrix (llama-quantize --imatrix): sized as made with one"


def estimate_uniform(spec: ModelSpec, quant: str) -> GGUFListing:
    """The listing a `llama-quantize … {quant}` of the model would have: every tensor, its type and
    bytes; `file_bytes` is the data section (each tensor padded to 32 bytes), without the header
    (metadata and tokenizer: a few MB). An estimate: see ESTIMATE. Its metadata says, under
    `kimicount.imatrix`, whether the ftype needs an importance matrix.

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
    kimi = arch in ("kimi-linear", "kimi-k3")
    keys = _kimi_linear_metadata(spec, arch) if kimi else _deepseek2_metadata(spec, arch)
    n_layer = keys[f"{arch}.block_count"]  # hparams.n_layer_all: glm-dsa's counts the MTP layer
    assert isinstance(n_layer, int)
    # n_gqa() at layer 0: n_head / n_head_kv(0), 0 where that layer has no KV heads (a KDA layer)
    kda = getattr(spec, "kda_layers", ())  # a KimiLinearSpec's
    n_gqa = 0 if 0 in kda else spec.num_attention_heads
    shapes = ((name, want.shape) for name, want in expected.items())
    types, imatrix = listing_types(ftype, shapes, n_layer, n_gqa)
    metadata = MappingProxyType(
        {
            "general.architecture": arch,
            "general.name": spec.name,
            "kimicount.estimate": ESTIMATE.format(quant=ftype),
            "kimicount.imatrix": imatrix,
            **keys,
        }
    )
    tensors = tuple(
        GGUFTensor(name, want.shape, types[name], nbytes(types[name], want.elements))
        for name, want in expected.items()
    )
    data = sum(-(-t.nbytes // 32) * 32 for t in tensors)
    return GGUFListing(
        files=(f"{spec.name} at {ftype}",), metadata=metadata, tensors=tensors, file_bytes=data
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


def _kimi_linear_metadata(spec: ModelSpec, arch: str) -> dict[str, object]:
    """The kimi-linear.* keys KimiLinearModel.set_gguf_parameters writes (conversion/kimi_linear.py @
    3af988f): head_count_kv per block, 0 for a KDA layer and 1 for an MLA one; ssm.conv_kernel and
    kda.head_dim from linear_attn_config; key_length the latent 576, key_length_mla 192. kimi-k3's
    (conversion/kimi_k3.py, KimiK3Model) add expert_latent_length, attn_res.block_size and
    kda.gate_lower_bound."""
    from gguf import GGUFValueType

    from kimicount.gguf.reader import GGUFArray

    kda = set(spec.kda_layers)  # type: ignore[attr-defined]  # a KimiLinearSpec
    heads_kv = tuple(0 if layer in kda else 1 for layer in range(spec.num_hidden_layers))
    # the MLA and MoE keys are deepseek2's, written by the same add_* calls (value_length aside: a
    # kimi-linear file keeps TextModel's head_dim, 72, there; nothing kimicount reads)
    keys = {key.removeprefix(f"{arch}."): value for key, value in _deepseek2_metadata(spec, arch).items()}
    keys["attention.head_count_kv"] = GGUFArray(GGUFValueType.UINT32.name, len(heads_kv), heads_kv)
    keys["ssm.conv_kernel"] = spec.kda.conv_kernel  # type: ignore[attr-defined]
    keys["kda.head_dim"] = spec.kda.head_dim  # type: ignore[attr-defined]
    if arch == "kimi-k3":
        keys["expert_latent_length"] = spec.routed_expert_hidden_size  # type: ignore[attr-defined]
        keys["attn_res.block_size"] = spec.attn_res_block_size  # type: ignore[attr-defined]
        if spec.kda.gate_lower_bound is not None:  # type: ignore[attr-defined]
            keys["kda.gate_lower_bound"] = spec.kda.gate_lower_bound  # type: ignore[attr-defined]
    return {f"{arch}.{key}": value for key, value in keys.items()}
