"""llama.cpp's tensor layout of arch `deepseek2` (Kimi K2, DeepSeek-V3/R1, V2), `glm-dsa` (GLM-5,
5.1, 5.2), `kimi-linear` (Kimi-Linear-48B-A3B) and `kimi-k3` (Kimi K3's language model), on the
component tree.

The names and shapes are those llama.cpp's convert_hf_to_gguf.py writes (DeepseekV2Model, whose
modify_tensors stacks each layer's experts into one 3-D tensor and, for MLA, splits kv_b_proj per head
into attn_k_b = k_b.transpose(1, 2), torch [H, kv_lora_rank, qk_nope], and attn_v_b, torch
[H, v_head_dim, kv_lora_rank]) under the names of gguf-py's constants.py TENSOR_NAMES / tensor_mapping.py
(MODEL_TENSOR.ATTN_Q_A "blk.{bid}.attn_q_a", ATTN_KV_A_MQA, ATTN_K_B, ATTN_V_B, FFN_GATE_EXP
"blk.{bid}.ffn_gate_exps", FFN_EXP_PROBS_B "blk.{bid}.exp_probs_b", ...). A GGUF shape lists ne0 (the
row length) first: a Linear weight [out, in] is (in, out), the stacked experts (in, out, E). Files
converted before MLA support (llama.cpp PR #12801) keep attn_kv_b whole.

`glm-dsa` is the same layout (convert_hf_to_gguf.py's GlmMoeDsaModel is a DeepseekV2Model with
model_arch GLM_DSA) plus the DSA indexer of every layer that has one (gguf-py MODEL_TENSOR.INDEXER_*:
blk.N.indexer.attn_q_b, attn_k, proj, k_norm) and the MTP layer, which it keeps (block_count =
num_hidden_layers + num_nextn_predict_layers; MODEL_TENSOR.NEXTN_*: blk.N.nextn.eh_proj, enorm, hnorm,
shared_head_norm). Its metadata keys are deepseek2's under the `glm-dsa.` prefix, with
nextn_predict_layers and attention.indexer.head_count / key_length / top_k.

`kimi-linear` and `kimi-k3` (conversion/kimi_linear.py, kimi_k3.py; src/models/kimi-linear.cpp,
kimi-k3.cpp @ 3af988f) keep the MLA tensors above in their MLA layers and the KDA ones (ssm_*, attn_q/k/v)
in the others, which the per-layer `attention.head_count_kv` marks 0.

Nothing here is written twice: the expected tensors are read off the anatomy's own tensor references
(kimicount.anatomy), each Hugging Face name translated to its GGUF tensor, so the component tree that
`params` prints is the one the GGUF is checked and sized against.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from kimicount.anatomy import Anatomy, Node, TensorRef, build_anatomy, group
from kimicount.errors import CheckpointError, ConfigError, UsageError
from kimicount.gguf.reader import GGUFArray, GGUFListing, GGUFTensor, value_text
from kimicount.spec import ModelSpec, spec_from_config
from kimicount.verify import Mismatch

ARCH = "deepseek2"
GLM_DSA = "glm-dsa"
KIMI_LINEAR = "kimi-linear"
KIMI_K3 = "kimi-k3"
#: The architectures read (general.architecture), each with the config model_type its metadata becomes
#: (a kimi-k3 GGUF holds K3's language model, whose text_config is a kimi_linear one).
ARCHS = {ARCH: "deepseek_v3", GLM_DSA: "glm_moe_dsa", KIMI_LINEAR: "kimi_linear", KIMI_K3: "kimi_linear"}


def gguf_arch(spec: ModelSpec) -> str:
    """The architecture convert_hf_to_gguf.py converts the model to: glm-dsa for GLM-5, kimi-linear for
    Kimi Linear (conversion/kimi_linear.py, KimiLinearModel), kimi-k3 for Kimi K3's language model
    (conversion/kimi_k3.py, KimiK3Model: the Kimi Linear layout with attention residuals, which only
    K3 has), else deepseek2.

    >>> gguf_arch(k2)
    'deepseek2'
    """
    if spec.model_type == "kimi_k3" or getattr(spec, "attn_res_block_size", None) is not None:
        return KIMI_K3
    if spec.model_type == "kimi_linear":
        return KIMI_LINEAR
    return GLM_DSA if spec.model_type == "glm_moe_dsa" else ARCH


def gguf_tree(anatomy: Anatomy) -> Node:
    """The components a GGUF of the model holds: the language model, and for glm-dsa its MTP layers
    too (GlmMoeDsaModel keeps them; deepseek2 conversions drop DeepSeek-V3's layer 61)."""
    model, mtp = anatomy.model, anatomy.mtp
    if mtp is None or gguf_arch(anatomy.spec) != GLM_DSA:
        return model
    return group(model.name, [*model.children, mtp])


#: Hugging Face module name (after model.layers.N.) → llama.cpp tensor (after blk.N.), as
#: gguf-py tensor_mapping.py maps them for DeepSeek-V2/V3 (and Kimi K2, which convert_hf_to_gguf.py
#: converts as DeepseekV2Model).
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_a_proj.weight": "attn_q_a.weight",
    "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight",
    "self_attn.q_b_proj.weight": "attn_q_b.weight",
    "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
    "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
    "self_attn.kv_b_proj.weight": "attn_kv_b.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.experts.{expert}.gate_proj.weight": "ffn_gate_exps.weight",
    "mlp.experts.{expert}.up_proj.weight": "ffn_up_exps.weight",
    "mlp.experts.{expert}.down_proj.weight": "ffn_down_exps.weight",
    # glm-dsa (gguf-py tensor_mapping.py: INDEXER_* "# DSA", NEXTN_*)
    "self_attn.indexer.wq_b.weight": "indexer.attn_q_b.weight",
    "self_attn.indexer.wk.weight": "indexer.attn_k.weight",
    "self_attn.indexer.weights_proj.weight": "indexer.proj.weight",
    "self_attn.indexer.k_norm.weight": "indexer.k_norm.weight",
    "self_attn.indexer.k_norm.bias": "indexer.k_norm.bias",
    "eh_proj.weight": "nextn.eh_proj.weight",
    "enorm.weight": "nextn.enorm.weight",
    "hnorm.weight": "nextn.hnorm.weight",
    "shared_head.norm.weight": "nextn.shared_head_norm.weight",
    "embed_tokens.weight": "nextn.embed_tokens.weight",
    "shared_head.head.weight": "nextn.shared_head_head.weight",
}
#: Kimi Linear's own modules (arch kimi-linear), as gguf-py tensor_mapping.py maps them ("# kimi",
#: "# Kimi Linear KDA": MODEL_TENSOR.SSM_CONV1D_Q "blk.{bid}.ssm_conv1d_q", SSM_F_A, SSM_F_B, SSM_BETA,
#: SSM_A, SSM_DT, SSM_G_A, SSM_G_B, SSM_NORM; block_sparse_moe.gate / shared_experts; experts w1 gate,
#: w2 down, w3 up stacked by KimiLinearModel.modify_tensors) and llama.cpp loads them
#: (src/models/kimi-linear.cpp @ 3af988f, load_arch_tensors, lines 35–190): conversion renames
#: dt_bias to dt_proj.bias (ssm_dt.bias) and stores -exp(A_log) as ssm_a, a name without ".weight".
_KIMI_LINEAR_NAMES = {
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_conv1d.weight": "ssm_conv1d_q.weight",
    "self_attn.k_conv1d.weight": "ssm_conv1d_k.weight",
    "self_attn.v_conv1d.weight": "ssm_conv1d_v.weight",
    "self_attn.f_a_proj.weight": "ssm_f_a.weight",
    "self_attn.f_b_proj.weight": "ssm_f_b.weight",
    "self_attn.A_log": "ssm_a",
    "self_attn.dt_bias": "ssm_dt.bias",
    "self_attn.b_proj.weight": "ssm_beta.weight",
    "self_attn.g_a_proj.weight": "ssm_g_a.weight",
    "self_attn.g_b_proj.weight": "ssm_g_b.weight",
    "self_attn.o_norm.weight": "ssm_norm.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.gate.e_score_correction_bias": "exp_probs_b.bias",
    "block_sparse_moe.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "block_sparse_moe.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "block_sparse_moe.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
    "block_sparse_moe.experts.{expert}.w1.weight": "ffn_gate_exps.weight",
    "block_sparse_moe.experts.{expert}.w3.weight": "ffn_up_exps.weight",
    "block_sparse_moe.experts.{expert}.w2.weight": "ffn_down_exps.weight",
}
#: Kimi K3's modules beyond Kimi Linear's (arch kimi-k3; gguf-py tensor_mapping.py "# Kimi K3 latent
#: MoE", src/models/kimi-k3.cpp @ 3af988f load_arch_tensors lines 55–170). KimiK3Model._try_fuse_res
#: writes each <x>_res_norm ⊙ <x>_res_proj as one [n_embd] score (attn_res_score, ffn_res_score,
#: output_res_score: the norm's elements, the projection's none); g_proj is ssm_g in a KDA layer and
#: attn_gate (the MLA output gate) in an MLA one; ssm_a keeps A_log's first n_head values.
_KIMI_K3_NAMES = {
    "self_attention_res_norm.weight": "attn_res_score.weight",
    "self_attention_res_proj.weight": "attn_res_score.weight",
    "mlp_res_norm.weight": "ffn_res_score.weight",
    "mlp_res_proj.weight": "ffn_res_score.weight",
    "block_sparse_moe.routed_expert_down_proj.weight": "ffn_routed_down.weight",
    "block_sparse_moe.routed_expert_up_proj.weight": "ffn_routed_up.weight",
    "block_sparse_moe.routed_expert_norm.weight": "ffn_routed_norm.weight",
    "self_attn.g_proj.weight": "ssm_g.weight",
}
_K3_TOP_NAMES = {
    "model.output_attn_res_norm.weight": "output_res_score.weight",
    "model.output_attn_res_proj.weight": "output_res_score.weight",
}
_FUSED_PART = "_res_proj.weight"  # the fused score's second factor: no elements of its own
#: KimiLinearModel.modify_tensors reshapes each short convolution [d_inner, 1, d_conv] to numpy
#: (1, d_inner, 1, d_conv): GGUF dims (d_conv, 1, d_inner, 1), what load_arch_tensors asks first.
_CONV_SUFFIX = "_conv1d.weight"
_TOP_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER = "model.layers.{layer}."


@dataclass
class ExpectedTensor:
    """One GGUF tensor the architecture implies: its shape and which components own how many of its
    elements (attn_kv_a_mqa: the key–value compression 512 rows, the shared rotary key 64)."""

    name: str
    shape: tuple[int, ...]
    owners: dict[int, int] = field(default_factory=dict)  # leaf id -> elements

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def _gguf_tensors(
    ref: TensorRef, spec: ModelSpec, split_kv_b: bool
) -> list[tuple[str, tuple[int, ...], int]]:
    """The GGUF tensors (name with {layer}, shape, elements owned) one copy of an anatomy reference
    stands for, per layer."""
    pattern = ref.pattern.removeprefix(spec.weight_prefix)
    arch = gguf_arch(spec)
    if pattern in _TOP_NAMES:
        return [(_TOP_NAMES[pattern], tuple(reversed(ref.shape)), ref.elements)]
    if arch == KIMI_K3 and pattern in _K3_TOP_NAMES:
        return [(_K3_TOP_NAMES[pattern], (spec.hidden_size,), _fused_elements(pattern, ref))]
    names = {
        KIMI_LINEAR: {**_LAYER_NAMES, **_KIMI_LINEAR_NAMES},
        KIMI_K3: {**_LAYER_NAMES, **_KIMI_LINEAR_NAMES, **_KIMI_K3_NAMES},
    }.get(arch, _LAYER_NAMES)
    indexer_outside_dsa = ".indexer." in pattern and arch != GLM_DSA  # llama.cpp: glm-dsa only
    if not pattern.startswith(_LAYER) or pattern[len(_LAYER) :] not in names or indexer_outside_dsa:
        # a part llama.cpp's layout has no tensor for (DeepSeek-V3.2's lightning indexer in deepseek2)
        raise UsageError(
            f"{spec.name}: {ref.pattern.replace('{layer}', 'N')} has no tensor in llama.cpp's "
            f"{arch} GGUF layout, the one kimicount sizes and checks; a GGUF of this model "
            "cannot be planned here"
        )
    module = pattern[len(_LAYER) :]
    name = "blk.{layer}." + names[module]
    if ref.experts:  # every expert of the layer in one tensor (in, out, E)
        return [(name, (*reversed(ref.shape), ref.experts), ref.elements * ref.experts)]
    if module == "self_attn.kv_b_proj.weight" and split_kv_b:
        heads, rank = spec.num_attention_heads, spec.kv_lora_rank
        if ref.rows.offset == 0:  # type: ignore[union-attr]  # the key content rows: k_b [H, rank, qk_nope] → (qk_nope, rank, H)
            return [("blk.{layer}.attn_k_b.weight", (spec.qk_nope_head_dim, rank, heads), ref.elements)]
        return [("blk.{layer}.attn_v_b.weight", (rank, spec.v_head_dim, heads), ref.elements)]
    if arch in (KIMI_LINEAR, KIMI_K3) and module.endswith(_CONV_SUFFIX):
        d_inner, _, d_conv = ref.shape
        return [(name, (d_conv, 1, d_inner, 1), ref.elements)]
    if arch == KIMI_K3:
        return _k3_tensor(module, name, ref, spec)
    return [(name, tuple(reversed(ref.shape)), ref.elements)]


def _fused_elements(pattern: str, ref: TensorRef) -> int:
    """The elements a fused attention-residual score takes from one of its two factors: the norm's."""
    return 0 if pattern.endswith(_FUSED_PART) else ref.elements


def _k3_tensor(
    module: str, name: str, ref: TensorRef, spec: ModelSpec
) -> list[tuple[str, tuple[int, ...], int]]:
    """A kimi-k3 tensor where K3's converter does more than rename (see _KIMI_K3_NAMES)."""
    if module.endswith(("_res_norm.weight", _FUSED_PART)):
        return [(name, (spec.hidden_size,), _fused_elements(module, ref))]
    if module == "self_attn.A_log":  # -exp(A_log[:n_head]), 1-D (kimi-k3.cpp: ssm_a {n_head})
        heads = spec.num_attention_heads
        return [(name, (heads,), heads)]
    if module == "self_attn.g_proj.weight" and not set(ref.layers or ()) <= set(spec.kda_layers):  # type: ignore[attr-defined]
        name = "blk.{layer}.attn_gate.weight"
    return [(name, tuple(reversed(ref.shape)), ref.elements)]


def expected_tensors(
    tree: Node, spec: ModelSpec, split_kv_b: bool
) -> tuple[dict[str, ExpectedTensor], list[Node]]:
    """Every GGUF tensor the tree implies, by name, with the leaves that own it; and the leaves."""
    leaves = [node for node in tree.walk() if node.tensors]
    expected: dict[str, ExpectedTensor] = {}
    for leaf_id, leaf in enumerate(leaves):
        for ref in leaf.tensors:
            for pattern, shape, owned in _gguf_tensors(ref, spec, split_kv_b):
                for layer in ref.layers or (None,):
                    name = pattern.format(layer=layer)
                    tensor = expected.setdefault(name, ExpectedTensor(name, shape))
                    tensor.owners[leaf_id] = tensor.owners.get(leaf_id, 0) + owned
    return expected, leaves


# --- the spec a GGUF's metadata implies -----------------------------------------------------------------

#: deepseek2.* key → the config.json key it was written from (convert_hf_to_gguf.py
#: DeepseekV2Model.set_gguf_parameters; gguf-py constants.py Keys.LLM / Keys.Attention).
_REQUIRED_KEYS = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_count": "n_routed_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_shared_count": "n_shared_experts",
    "leading_dense_block_count": "first_k_dense_replace",
    "attention.head_count": "num_attention_heads",
    "attention.kv_lora_rank": "kv_lora_rank",
    "rope.dimension_count": "qk_rope_head_dim",
}


#: glm-dsa's keys besides (GlmMoeDsaModel.set_gguf_parameters; gguf-py Keys.Attention.Indexer).
_INDEXER_KEYS = {
    "attention.indexer.head_count": "index_n_heads",
    "attention.indexer.key_length": "index_head_dim",
}


def _metadata_keys(arch: str) -> dict[str, str]:
    """Every config.json key the spec is built from, by the GGUF key it comes from (for error messages)."""
    return {
        **{f"{arch}.{key}": hf for key, hf in {**_REQUIRED_KEYS, **_INDEXER_KEYS}.items()},
        f"{arch}.attention.q_lora_rank": "q_lora_rank",
        f"{arch}.attention.key_length(_mla)": "qk_nope_head_dim",
        f"{arch}.attention.value_length(_mla)": "v_head_dim",
        f"{arch}.vocab_size": "vocab_size",
        f"{arch}.context_length": "max_position_embeddings",
        f"{arch}.nextn_predict_layers": "num_nextn_predict_layers",
    }


def _integer(metadata: Mapping[str, object], key: str, where: str, *, required: bool = True) -> int | None:
    value = metadata.get(key)
    if value is None:
        if required:
            raise CheckpointError(f"{where}: key '{key}': missing (required to check the tensors)")
        return None
    if type(value) is not int or value < 0:
        raise CheckpointError(f"{where}: key '{key}': {value_text(value)}, expected an integer >= 0")
    return value


def vocab_size(metadata: Mapping[str, object], where: str, arch: str = ARCH) -> int:
    """`deepseek2.vocab_size`, else the length of tokenizer.ggml.tokens (as llama.cpp's llama-vocab.cpp
    takes n_vocab from the token list)."""
    size = _integer(metadata, f"{arch}.vocab_size", where, required=False)
    if size is not None:
        return size
    tokens = metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, GGUFArray):
        return tokens.length
    raise CheckpointError(f"{where}: keys '{arch}.vocab_size' and 'tokenizer.ggml.tokens': both missing")


def spec_from_metadata(listing: GGUFListing, name: str | None = None) -> ModelSpec:
    """The ModelSpec the `deepseek2.*` (or `glm-dsa.*`) metadata implies, validated as a config.json is.

    Head widths: `attention.key_length_mla` / `value_length_mla` when the file has them (MLA GGUFs
    store the latent widths 576 / 512 in `key_length` / `value_length`); else `key_length` (192) and
    `value_length` (128), as non-MLA conversions wrote them. glm-dsa's block_count counts the MTP
    layers too (nextn_predict_layers); which layers have an indexer its tensors say (_indexer_types).
    """
    where = listing.files[0]
    metadata = listing.metadata
    arch = listing.architecture
    if arch not in ARCHS:
        value = metadata.get("general.architecture")
        found = "missing" if value is None else value_text(value)
        raise CheckpointError(
            f"{where}: key 'general.architecture': {found}, expected '{ARCH}', '{GLM_DSA}', "
            f"'{KIMI_LINEAR}' or '{KIMI_K3}'"
        )
    if arch in (KIMI_LINEAR, KIMI_K3):
        return _kimi_linear_spec(listing, name)
    config: dict[str, object] = {"model_type": ARCHS[arch], "moe_layer_freq": 1}
    for key, hf in _REQUIRED_KEYS.items():
        config[hf] = _integer(metadata, f"{arch}.{key}", where)
    q_lora = _integer(metadata, f"{arch}.attention.q_lora_rank", where, required=False)
    config["q_lora_rank"] = q_lora or None  # 0 or absent: a plain attn_q (DeepSeek-V2-Lite)
    rope = config["qk_rope_head_dim"]
    key_length = _integer(metadata, f"{arch}.attention.key_length_mla", where, required=False)
    value_length = _integer(metadata, f"{arch}.attention.value_length_mla", where, required=False)
    if key_length is None:
        key_length = _integer(metadata, f"{arch}.attention.key_length", where)
        value_length = _integer(metadata, f"{arch}.attention.value_length", where)
    if key_length <= rope:  # type: ignore[operator]  # required keys: ints
        raise CheckpointError(
            f"{where}: key '{arch}.attention.key_length(_mla)': {key_length} is not more than the rotary "
            f"dimensions ({rope})"
        )
    config["qk_nope_head_dim"] = key_length - rope  # type: ignore[operator]
    config["v_head_dim"] = value_length
    config["vocab_size"] = vocab_size(metadata, where, arch)
    config["max_position_embeddings"] = (
        _integer(metadata, f"{arch}.context_length", where, required=False) or 1
    )
    # expert_gating_func 2 is sigmoid (LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID): V3's router, with its
    # score-correction bias (exp_probs_b); 1 (softmax) is V2's, without. A file without the key is read
    # as llama.cpp reads it (gating_note): its router has the bias when the file holds exp_probs_b.
    gating = metadata.get(_gating_key(arch))
    biased = gating == 2 or (gating is None and _has_router_bias(listing))
    config["topk_method"] = "noaux_tc" if biased else "greedy"
    config["tie_word_embeddings"] = False
    config["torch_dtype"] = "bfloat16"
    if arch == GLM_DSA:
        config.update(_glm_dsa_config(listing, config, where))
    label = name or str(metadata.get("general.name") or where)
    try:
        return spec_from_config(config, name=label, where=where)
    except ConfigError as error:  # it names config.json's keys: say which GGUF key each came from
        message = str(error)
        for key, hf in _metadata_keys(arch).items():
            message = message.replace(f"key '{hf}'", f"key '{key}'")
        raise CheckpointError(message) from error


#: kimi-linear.* key → the config.json key KimiLinearModel.set_gguf_parameters wrote it from
#: (conversion/kimi_linear.py @ 3af988f; TextModel.set_gguf_parameters for the first eight).
_KIMI_LINEAR_KEYS = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_token",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_shared_count": "num_shared_experts",
    "leading_dense_block_count": "first_k_dense_replace",
    "attention.kv_lora_rank": "kv_lora_rank",
    "rope.dimension_count": "qk_rope_head_dim",
    "attention.key_length_mla": "qk_nope_head_dim",
    "attention.value_length_mla": "v_head_dim",
    "ssm.conv_kernel": "linear_attn_config.short_conv_kernel_size",
    "kda.head_dim": "linear_attn_config.head_dim",
}


def _kimi_linear_spec(listing: GGUFListing, name: str | None) -> ModelSpec:
    """The Kimi Linear spec the `kimi-linear.*` (or `kimi-k3.*`) metadata implies. Which layers are KDA
    the per-layer `attention.head_count_kv` array says: 0 for a KDA layer, 1 for an MLA one
    (KimiLinearModel and KimiK3Model write it from full_attn_layers; llama.cpp's load_arch_hparams
    marks is_recr where it is 0). The KDA heads are attention.head_count (llama.cpp sizes d_inner as
    n_head × kda.head_dim); key_length_mla is qk_nope + qk_rope (192), value_length_mla v_head_dim.
    kimi-k3 adds the latent MoE (expert_latent_length), the attention residuals (attn_res.block_size),
    the full-rank KDA gate (ssm_g) and, where the file has its tensors, the MLA output gate (attn_gate)
    and the latent norm (ffn_routed_norm), both TENSOR_NOT_REQUIRED in kimi-k3.cpp."""
    where, metadata = listing.files[0], listing.metadata
    arch = KIMI_K3 if listing.architecture == KIMI_K3 else KIMI_LINEAR
    values = {key: _integer(metadata, f"{arch}.{key}", where) for key in _KIMI_LINEAR_KEYS}
    layers, rope = values["block_count"], values["rope.dimension_count"]
    assert layers is not None and rope is not None  # required keys
    heads_kv = metadata.get(f"{arch}.attention.head_count_kv")
    kv = heads_kv.values if isinstance(heads_kv, GGUFArray) else None
    if kv is None or len(kv) != layers or any(type(v) is not int or v not in (0, 1) for v in kv):
        found = "missing" if heads_kv is None else value_text(heads_kv)
        raise CheckpointError(
            f"{where}: key '{arch}.attention.head_count_kv': {found}, expected one 0 (KDA) or 1 (MLA) "
            f"for each of the {layers} blocks"
        )
    key_length = values["attention.key_length_mla"]
    assert key_length is not None
    if key_length <= rope:
        raise CheckpointError(
            f"{where}: key '{arch}.attention.key_length_mla': {key_length} is not more than the rotary "
            f"dimensions ({rope})"
        )
    q_lora = _integer(metadata, f"{arch}.attention.q_lora_rank", where, required=False)
    config: dict[str, object] = {
        "model_type": "kimi_linear",
        "vocab_size": vocab_size(metadata, where, arch),
        "hidden_size": values["embedding_length"],
        "intermediate_size": values["feed_forward_length"],
        "num_hidden_layers": layers,
        "num_attention_heads": values["attention.head_count"],
        "q_lora_rank": q_lora or None,
        "kv_lora_rank": values["attention.kv_lora_rank"],
        "qk_nope_head_dim": key_length - rope,
        "qk_rope_head_dim": rope,
        "v_head_dim": values["attention.value_length_mla"],
        "mla_use_nope": True,  # Kimi Linear's MLA has no rotary position; no GGUF key records it
        "moe_intermediate_size": values["expert_feed_forward_length"],
        "num_experts": values["expert_count"],
        "num_experts_per_token": values["expert_used_count"],
        "num_shared_experts": values["expert_shared_count"],
        "first_k_dense_replace": values["leading_dense_block_count"],
        "model_max_length": _integer(metadata, f"{arch}.context_length", where, required=False) or 1,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "linear_attn_config": {
            "kda_layers": [i + 1 for i, v in enumerate(kv) if v == 0],
            "full_attn_layers": [i + 1 for i, v in enumerate(kv) if v == 1],
            "num_heads": values["attention.head_count"],
            "head_dim": values["kda.head_dim"],
            "short_conv_kernel_size": values["ssm.conv_kernel"],
        },
    }
    if arch == KIMI_K3:
        extra = _kimi_k3_config(listing, where)
        linear = extra.pop("linear_attn_config")
        config["linear_attn_config"].update(linear)  # type: ignore[attr-defined]
        config.update(extra)
    label = name or str(metadata.get("general.name") or where)
    try:
        return spec_from_config(config, name=label, where=where)
    except ConfigError as error:  # it names config.json's keys: say which GGUF key each came from
        message = str(error)
        for key, hf in _KIMI_LINEAR_KEYS.items():
            message = message.replace(f"key '{hf.rpartition('.')[2]}'", f"key '{arch}.{key}'")
        raise CheckpointError(message) from error


def _kimi_k3_config(listing: GGUFListing, where: str) -> dict[str, object]:
    """kimi-k3's config keys beyond kimi-linear's (KimiK3Model.set_gguf_parameters)."""
    metadata, names = listing.metadata, {t.name for t in listing.tensors}
    lower = metadata.get(f"{KIMI_K3}.kda.gate_lower_bound")
    if lower is not None and (isinstance(lower, bool) or not isinstance(lower, int | float)):
        raise CheckpointError(
            f"{where}: key '{KIMI_K3}.kda.gate_lower_bound': {value_text(lower)}, expected a number"
        )
    return {
        "routed_expert_hidden_size": _integer(metadata, f"{KIMI_K3}.expert_latent_length", where),
        "attn_res_block_size": _integer(metadata, f"{KIMI_K3}.attn_res.block_size", where),
        "hidden_act": "situ",
        "mla_use_output_gate": any(n.endswith(".attn_gate.weight") for n in names),
        "latent_moe_use_norm": any(n.endswith(".ffn_routed_norm.weight") for n in names),
        "linear_attn_config": {"use_full_rank_gate": True}
        | ({} if lower is None else {"gate_lower_bound": lower}),
    }


def _glm_dsa_config(listing: GGUFListing, config: dict[str, object], where: str) -> dict[str, object]:
    """glm-dsa's config keys beyond deepseek2's: the MTP layers (counted in block_count), the indexer's
    sizes and which main layers have one."""
    metadata = listing.metadata
    nextn = _integer(metadata, f"{GLM_DSA}.nextn_predict_layers", where, required=False) or 0
    blocks = config["num_hidden_layers"]  # block_count
    assert isinstance(blocks, int)
    if nextn > blocks:
        raise CheckpointError(
            f"{where}: key '{GLM_DSA}.nextn_predict_layers': {nextn} is more than block_count ({blocks})"
        )
    layers = blocks - nextn
    extra: dict[str, object] = {"num_hidden_layers": layers, "num_nextn_predict_layers": nextn}
    for key, hf in _INDEXER_KEYS.items():
        extra[hf] = _integer(metadata, f"{GLM_DSA}.{key}", where)
    extra["indexer_types"] = _indexer_types(listing, layers, where)
    return extra


def _indexer_types(listing: GGUFListing, layers: int, where: str) -> list[str] | None:
    """Which main layers have an indexer, as llama.cpp decides it: by the tensors (llama-model.cpp loads
    a layer's indexer when present, PR #24770; a GGUF of GLM-5.2 without the shared layers' indexers
    has none there, and then no indexer cache either, ik_llama.cpp PR #2093). None: all of them, or
    none (a file without any, which the check then reports)."""
    present = {int(m.group(1)) for t in listing.tensors if (m := _INDEXER_TENSOR.fullmatch(t.name))}
    main = present.intersection(range(layers))
    if not main or len(main) == layers:
        return None
    if 0 not in main:  # a layer without one reuses an earlier layer's top-k
        raise CheckpointError(
            f"{where}: tensor 'blk.0.indexer.attn_k.weight': missing, but {len(main)} later layers have "
            "an indexer (the first layer must have its own: the others reuse an earlier one's)"
        )
    return ["full" if layer in main else "shared" for layer in range(layers)]


_INDEXER_TENSOR = re.compile(r"blk\.([0-9]{1,6})\.indexer\.attn_k\.weight")


def _gating_key(arch: str) -> str:
    """The key of the router's gating function: deepseek2.expert_gating_func (glm-dsa's likewise)."""
    return f"{arch}.expert_gating_func"


def _has_router_bias(listing: GGUFListing) -> bool:
    return any(t.name.startswith("blk.") and t.name.endswith(".exp_probs_b.bias") for t in listing.tensors)


def gating_note(listing: GGUFListing) -> str | None:
    """What llama.cpp assumes of a file without `deepseek2.expert_gating_func` (None when it has the
    key). llama.cpp src/models/deepseek2.cpp, llama_model_deepseek2::load_arch_hparams (lines 22–32,
    earlier in src/llama-model.cpp load_hparams, case LLM_ARCH_DEEPSEEK2): "for compatibility with
    existing DeepSeek V2 and V2.5 GGUFs that have no expert_gating_func", the gating is softmax; and
    load_arch_tensors (line 137) loads each MoE layer's exp_probs_b as TENSOR_NOT_REQUIRED, which
    build_moe_ffn adds to the expert scores when it is there. So such a file is checked with the
    router bias when it holds exp_probs_b tensors, without when it holds none."""
    key = _gating_key(listing.architecture or ARCH)
    if key in listing.metadata:
        return None
    bias = (
        "it adds the exp_probs_b tensors to the expert scores"
        if _has_router_bias(listing)
        else "no exp_probs_b"
    )
    return f"key '{key}' is missing: llama.cpp takes softmax gating (DeepSeek-V2's), and {bias}"


# --- the check and the bytes per component ----------------------------------------------------------


@dataclass(frozen=True)
class ComponentBytes:
    """One node of the tree: its parameters and what its share of the GGUF tensors takes."""

    name: str
    depth: int
    params: int
    tensors: int  # GGUF tensors it owns all or part of
    bytes: int
    types: tuple[str, ...]  # the ggml types of those tensors
    id: str = ""  # its stable component id (kimicount.component_ids)

    @property
    def bits_per_weight(self) -> float:
        return self.bytes * 8 / self.params if self.params else 0.0


@dataclass(frozen=True)
class GGUFReport:
    source: str
    model: str
    files: tuple[str, ...]
    file_bytes: int
    tensors: int
    tensor_bytes: int  # llama.cpp's "file size"
    elements: int
    parameters_expected: int
    by_type: dict[str, tuple[int, int, int]]  # ggml type -> (tensors, elements, bytes)
    components: tuple[ComponentBytes, ...]
    mismatches: tuple[Mismatch, ...]
    kv_b: str  # how kv_b_proj is stored: "attn_k_b + attn_v_b", "attn_kv_b", or both
    estimate: str | None = None  # why the figures are an estimate (a --quant sizing), or None
    notes: tuple[str, ...] = ()  # what the check assumed, as llama.cpp does (gating_note)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def bits_per_weight(self) -> float:
        """llama.cpp's BPW: the tensors' bytes × 8 / their elements (llama-model-loader.cpp print_info)."""
        return self.tensor_bytes * 8 / self.elements if self.elements else 0.0


def _describe(tensor: GGUFTensor) -> str:
    return f"{list(tensor.shape)} {tensor.ggml_type}"


def check_listing(
    listing: GGUFListing, spec: ModelSpec | None = None, estimate: str | None = None
) -> GGUFReport:
    """Every tensor of the listing against what the architecture implies (the spec its metadata gives,
    unless one is given): missing, unexpected and wrong-shaped tensors, and the bytes of every component
    at each tensor's ggml type."""
    notes: tuple[str, ...] = ()
    if spec is None:
        spec = spec_from_metadata(listing)
        notes = tuple(note for note in [gating_note(listing)] if note)
    found = {t.name: t for t in listing.tensors}
    split = any(re.fullmatch(r"blk\.[0-9]+\.attn_[kv]_b\.weight", name) for name in found)
    whole = any(re.fullmatch(r"blk\.[0-9]+\.attn_kv_b\.weight", name) for name in found)
    tree = gguf_tree(build_anatomy(spec))
    expected, leaves = expected_tensors(tree, spec, split_kv_b=split)
    # what the file holds of the tree (K3's converter fuses and trims a few tensors; else tree.params)
    held = sum(sum(t.owners.values()) for t in expected.values())
    if split and whole:
        # Some conversions write attn_kv_b beside attn_k_b and attn_v_b (llama.cpp's loader takes it as
        # optional, llama-model.cpp TENSOR_NOT_REQUIRED): the same weights stored twice, both counted in
        # the file size and in the key and value components' bytes.
        both, _ = expected_tensors(tree, spec, split_kv_b=False)
        expected.update((name, t) for name, t in both.items() if name.endswith(".attn_kv_b.weight"))
    mismatches = []
    leaf_bytes = [0] * len(leaves)
    leaf_tensors: list[set[str]] = [set() for _ in leaves]
    for name, want in expected.items():
        tensor = found.get(name)
        if tensor is None:
            mismatches.append(Mismatch(name, "missing", str(list(want.shape)), "absent"))
            continue
        if tensor.shape != want.shape:
            mismatches.append(Mismatch(name, "shape", str(list(want.shape)), _describe(tensor)))
            continue
        for leaf_id, owned in want.owners.items():
            # Owners split a tensor along whole rows (kv_a_mqa: 512 latent rows, 64 rotary), each row
            # the same number of blocks: the share of bytes is exact.
            leaf_bytes[leaf_id] += tensor.nbytes * owned // want.elements
            leaf_tensors[leaf_id].add(name)
    mismatches += [
        Mismatch(t.name, "unexpected", "no such tensor in the architecture", _describe(t))
        for t in listing.tensors
        if t.name not in expected
    ]
    components = _component_bytes(
        tree, leaves, leaf_bytes, leaf_tensors, {t.name: t.ggml_type for t in listing.tensors}
    )
    by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for t in listing.tensors:
        row = by_type[t.ggml_type]
        row[0] += 1
        row[1] += t.elements
        row[2] += t.nbytes
    more = len(listing.files) - 1
    return GGUFReport(
        source=listing.files[0] + (f" (+{more} files)" if more else ""),
        model=spec.name,
        files=listing.files,
        file_bytes=listing.file_bytes,
        tensors=len(listing.tensors),
        tensor_bytes=listing.tensor_bytes,
        elements=listing.elements,
        parameters_expected=held,
        by_type={k: tuple(v) for k, v in sorted(by_type.items(), key=lambda kv: -kv[1][2])},  # type: ignore[misc]
        components=components,
        mismatches=tuple(mismatches),
        kv_b=" + ".join(["attn_k_b + attn_v_b"] * split + ["attn_kv_b"] * (whole or not split)),
        estimate=estimate,
        notes=notes,
    )


def _component_bytes(
    tree: Node,
    leaves: list[Node],
    leaf_bytes: list[int],
    leaf_tensors: list[set[str]],
    types_of: dict[str, str],
) -> tuple[ComponentBytes, ...]:
    """Every node of the tree, in order (a node before its children): its bytes, the sum of its leaves',
    and the GGUF tensors it owns all or part of (a tensor two children share counts once)."""
    from kimicount.component_ids import walk_ids

    ids = {id(leaf): i for i, leaf in enumerate(leaves)}
    component_ids = {id(node): cid for node, cid in walk_ids(tree)}
    rows: list[ComponentBytes] = []

    def visit(node: Node, depth: int) -> tuple[int, set[str]]:
        index = len(rows)
        rows.append(ComponentBytes(node.name, depth, node.params, 0, 0, ()))  # filled in below
        if node.tensors:
            total, names = leaf_bytes[ids[id(node)]], leaf_tensors[ids[id(node)]]
        else:
            total, names = 0, set()
            for child in node.children:
                child_bytes, child_names = visit(child, depth + 1)
                total, names = total + child_bytes, names | child_names
        types = tuple(sorted({types_of[name] for name in names}))
        rows[index] = ComponentBytes(
            node.name, depth, node.params, len(names), total, types, component_ids[id(node)]
        )
        return total, names

    visit(tree, 0)
    return tuple(rows)
