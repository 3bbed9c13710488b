"""The words of the explorer's pages: for each component of the tree (by its name in DESIGN.md), each
activation the forward pass names and each operation, what it is in one sentence, its formula, the
code expression that computes it, and what it does with the KV cache in prefill and decode.

Code expressions and class names are those of modeling_deepseek.py (the file the config's `auto_map`
names); the `attributes` and `variable` fields are how the evidence module finds their lines.
Sizes in the sentences are `{placeholders}` filled from the spec (`values`). Formulas follow the
notation of the DeepSeek-V2 paper (c^KV, W_UK, k^R) in kimicount.explorer.formula's syntax.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimicount.explorer.evidence import ATTENTION_PROJECTIONS
from kimicount.spec import ModelSpec

#: What a component that never touches the cache does in each mode.
_NO_CACHE = (
    "works on the T new positions alone; reads and writes no cache",
    "works on the one new position alone; reads and writes no cache",
)


@dataclass(frozen=True)
class Words:
    """What a page says about one thing. `cls` and `attributes` locate its definition in the modeling
    file (`self.<attribute> = …` in `cls.__init__`); `variable` the assignment that makes an activation."""

    role: str
    formula: str = ""
    code: str = ""
    cls: str = ""
    attributes: tuple[str, ...] = ()
    prefill: str = _NO_CACHE[0]
    decode: str = _NO_CACHE[1]
    explanation: str = ""
    variable: str = ""


def values(spec: ModelSpec) -> dict[str, str]:
    """The sizes the sentences name, formatted as the tables print them."""
    return {
        "H": f"{spec.num_attention_heads:,}",
        "nope": f"{spec.qk_nope_head_dim:,}",
        "rope": f"{spec.qk_rope_head_dim:,}",
        "qk": f"{spec.qk_head_dim:,}",
        "v": f"{spec.v_head_dim:,}",
        "kv_rank": f"{spec.kv_lora_rank:,}",
        "kv_rope": f"{spec.kv_lora_rank + spec.qk_rope_head_dim:,}",
        "q_rank": f"{spec.q_lora_rank or 0:,}",
        "hidden": f"{spec.hidden_size:,}",
        "inter": f"{spec.intermediate_size:,}",
        "moe_inter": f"{spec.moe_intermediate_size:,}",
        "E": f"{spec.n_routed_experts:,}",
        "k": f"{spec.num_experts_per_tok:,}",
        "shared": f"{spec.n_shared_experts:,}",
        "vocab": f"{spec.vocab_size:,}",
        "per_head": f"{spec.qk_nope_head_dim + spec.v_head_dim:,}",
        "v_first": f"{spec.qk_nope_head_dim:,}",
        "v_last": f"{spec.qk_nope_head_dim + spec.v_head_dim - 1:,}",
        "nope_last": f"{spec.qk_nope_head_dim - 1:,}",
        "kv_last": f"{spec.kv_lora_rank - 1:,}",
        "rope_last": f"{spec.kv_lora_rank + spec.qk_rope_head_dim - 1:,}",
    }


_ATTENTION = "DeepseekV3Attention"
_NORM_CODE = "self.weight * hidden_states.to(input_dtype)"

#: The components of the tree, by name.
COMPONENTS: dict[str, Words] = {
    "Token embedding": Words(
        "look up each token's row of the {vocab} × {hidden} table: the hidden state the blocks refine",
        "h = E[t]",
        "inputs_embeds = self.embed_tokens(input_ids)",
        "DeepseekV3Model",
        ("embed_tokens",),
    ),
    "Attention RMSNorm": Words(
        "scale the hidden state to unit root-mean-square, then by a learned weight, before the attention",
        "x = h / √(mean(h^2) + ε) ⊙ g",
        "hidden_states = self.input_layernorm(hidden_states)",
        "DeepseekV3DecoderLayer",
        ("input_layernorm",),
    ),
    "MLP RMSNorm": Words(
        "normalise the hidden state after the attention's residual add, before the MLP or the experts",
        "x = h / √(mean(h^2) + ε) ⊙ g",
        "hidden_states = self.post_attention_layernorm(hidden_states)",
        "DeepseekV3DecoderLayer",
        ("post_attention_layernorm",),
    ),
    "Final RMSNorm": Words(
        "normalise the last block's hidden state before the output head",
        "x = h / √(mean(h^2) + ε) ⊙ g",
        "hidden_states = self.norm(hidden_states)",
        "DeepseekV3Model",
        ("norm",),
    ),
    "Latent attention": Words(
        "multi-head latent attention: each token's keys and values come from one {kv_rank}-wide latent "
        "and one {rope}-wide rotary key, which is all the cache has to hold",
        "u = MLA(x)",
        "hidden_states, self_attn_weights, present_key_value = self.self_attn(hidden_states=hidden_states, …)",
        _ATTENTION,
        ATTENTION_PROJECTIONS,
        "makes c_KV and k_R for positions 0 … T − 1, writes them to the cache (the latent "
        "layout; naive and flash write every head's keys and values) and attends causally over them",
        "reads the L cached positions' c_KV and k_R, writes position L's, and attends over all L + 1",
    ),
    "Query compression": Words(
        "compress the hidden state into a {q_rank}-wide query latent, normalised",
        "c^Q = RMSNorm(x W_{DQ})",
        "self.q_a_layernorm(self.q_a_proj(hidden_states))",
        _ATTENTION,
        ("q_a_proj", "q_a_layernorm"),
        explanation="q_a_proj [{q_rank}, {hidden}] then q_a_layernorm [{q_rank}]; queries are never cached.",
    ),
    "Key–value compression": Words(
        "compress the hidden state into the {kv_rank}-wide key–value latent every head's keys and values "
        "are expanded from",
        "c^{KV} = x W_{DKV}",
        "compressed_kv = self.kv_a_proj_with_mqa(hidden_states)",
        _ATTENTION,
        ("kv_a_proj_with_mqa", "kv_a_layernorm"),
        "writes c_KV of positions 0 … T − 1 to the cache (latent layout)",
        "writes c_KV of position L to the cache (latent layout)",
        "W_DKV is rows 0–{kv_last} of kv_a_proj_with_mqa [{kv_rope}, {hidden}]; kv_a_layernorm [{kv_rank}] "
        "normalises the latent before it is expanded (ĉ^KV).",
    ),
    "Query heads": Words(
        "map the query latent to {H} × {qk} query features: {nope} content and {rope} rotary per head",
        "[q^C; q^R] = c^Q W_{UQ}",
        "q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))",
        _ATTENTION,
        ("q_b_proj",),
        "queries of the T new positions; never cached",
        "the query of the new position; never cached",
    ),
    "Key heads": Words(
        "each head's key: {nope} content features from the latent, and the {rope} rotary features all "
        "heads share",
        "k_i = [k_i^C; k^R]",
        "key_states[:, :, :, : self.qk_nope_head_dim] = k_nope",
        _ATTENTION,
        ("kv_b_proj", "kv_a_proj_with_mqa"),
        "keys of the T new positions, from their latent and rotary key",
        "latent layout: keys of the L cached positions come from the cached c_KV and k_R",
    ),
    "Key content up-projection": Words(
        "map the latent to {H} × {nope} content key features",
        "k^C = ĉ^{KV} W_{UK}",
        "self.kv_b_proj(self.kv_a_layernorm(compressed_kv))",
        _ATTENTION,
        ("kv_b_proj",),
        "expands the latent of the T new positions into content keys; reads no cache",
        "latent re-expanded: reads the L cached c_KV and expands them again; absorbed: W_UK folds into "
        "the query (q^C W_UKᵀ) and nothing is expanded; naive and flash: writes position L's keys",
        "W_UK is output features 0–{nope_last} of each head's {per_head} in kv_b_proj [{H} × {per_head}, "
        "{kv_rank}]; the other {v} are W_UV (Value heads).",
    ),
    "Shared rotary key": Words(
        "one {rope}-wide key, rotated by position, that every head shares",
        "k^R = RoPE(x W_{KR})",
        "compressed_kv, k_pe = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)",
        _ATTENTION,
        ("kv_a_proj_with_mqa",),
        "writes k_R of positions 0 … T − 1 to the cache, after the rotary embedding",
        "writes k_R of position L to the cache",
        "W_KR is rows {kv_rank}–{rope_last} of kv_a_proj_with_mqa [{kv_rope}, {hidden}].",
    ),
    "Value heads": Words(
        "map the latent to {H} × {v} value features",
        "v^C = ĉ^{KV} W_{UV}",
        "self.kv_b_proj(self.kv_a_layernorm(compressed_kv))",
        _ATTENTION,
        ("kv_b_proj",),
        "expands the latent of the T new positions into values; reads no cache",
        "latent re-expanded: reads the L cached c_KV; absorbed: W_UV folds into the output projection; "
        "naive and flash: writes position L's values",
        "W_UV is output features {v_first}–{v_last} of each head's {per_head} in kv_b_proj.",
    ),
    "Causal attention": Words(
        "weigh every visible position's values by softmax(q·k) per head, then project the {H} heads' "
        "outputs back to the hidden width",
        "u = concat_i(softmax(q_i k_i^T / √d) v_i) W_O",
        "attn_output = self.o_proj(attn_output)",
        _ATTENTION,
        ("o_proj",),
        "attends causally over positions 0 … T − 1 of the cache just written",
        "attends over the L cached positions and the new one",
        "Its parameters are o_proj [{hidden}, {H} × {v}]; the scores and the weighted sum have none.",
    ),
    "Lightning indexer": Words(
        "score every cached position cheaply so the attention reads only the best ones (DeepSeek-V3.2)",
        "I_{t,s} = Σ_j w_j ReLU(q_j · k_s)",
        "self.indexer(x, qr, start_pos, freqs_cis, mask)",
        _ATTENTION,
        ("indexer",),
        "writes each position's index key to its own cache",
        "reads the L cached index keys, writes position L's",
    ),
    "Dense MLP": Words(
        "a SwiGLU MLP {inter} wide: the gate's SiLU times the up projection, projected back down",
        "y = (SiLU(x W_{gate}) ⊙ x W_{up}) W_{down}",
        "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))",
        "DeepseekV3MLP",
        ("gate_proj", "up_proj", "down_proj"),
    ),
    "Mixture of experts": Words(
        "send each token to {k} of {E} routed experts, weighted by the router, plus the shared expert",
        "y = Σ_{i∈TopK} g_i E_i(x) + E_s(x)",
        "y = self.moe_infer(hidden_states, topk_idx, topk_weight).view(*orig_shape)",
        "DeepseekV3MoE",
        ("gate", "experts", "shared_experts"),
    ),
    "Router": Words(
        "score the {E} experts for each token (sigmoid), add the balancing bias to choose the top {k}",
        "s = σ(x W_g); TopK(s + b)",
        "topk_idx, topk_weight = self.gate(hidden_states)",
        "MoEGate",
        ("weight", "e_score_correction_bias"),
        explanation="The bias e_score_correction_bias only chooses the experts; the weights g_i are the "
        "sigmoid scores of the chosen ones.",
    ),
    "Routed experts": Words(
        "{E} SwiGLU MLPs {moe_inter} wide; each token runs the {k} its router chose",
        "E_i(x) = (SiLU(x W_{gate,i}) ⊙ x W_{up,i}) W_{down,i}",
        "expert_out = expert(tokens_for_this_expert)",
        "DeepseekV3MoE",
        ("experts",),
    ),
    "Shared expert": Words(
        "one SwiGLU MLP {moe_inter} wide that every token runs, beside the routed experts",
        "E_s(x) = (SiLU(x W_{gate}) ⊙ x W_{up}) W_{down}",
        "y = y + self.shared_experts(identity)",
        "DeepseekV3MoE",
        ("shared_experts",),
    ),
    "Output head": Words(
        "map the final hidden state to one logit per vocabulary entry ({vocab})",
        "logits = x W_{head}",
        "logits = self.lm_head(hidden_states)",
        "DeepseekV3ForCausalLM",
        ("lm_head",),
    ),
}
COMPONENTS["Shared experts"] = COMPONENTS["Shared expert"]

#: The names people use for a component besides the tree's (papers, engines, `show` users): `show`
#: finds the component by them after its own names, and the HTML search box finds them too.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "Causal attention": ("Output projection", "attention output projection", "out_proj", "W_O"),
    "Router": ("MoE gate", "gate", "gating network", "expert router", "routing"),
    "Routed experts": ("experts", "MoE experts"),
    "Shared expert": ("shared experts", "shared_experts"),
    "Shared experts": ("shared expert", "shared_experts"),
    "Dense MLP": ("MLP", "FFN", "feed-forward", "dense FFN"),
    "Mixture of experts": ("MoE", "MoE layer", "sparse MLP"),
    "Token embedding": ("embedding", "embeddings", "embed_tokens", "input embedding"),
    "Output head": ("LM head", "unembedding", "vocabulary projection"),
    "Latent attention": ("MLA", "attention", "self-attention", "self_attn", "multi-head latent attention"),
    "Key–value compression": ("KV compression", "key-value compression", "KV down-projection", "W_DKV"),
    "Query compression": ("query down-projection", "W_DQ"),
    "Query heads": ("query up-projection", "W_UQ"),
    "Key content up-projection": ("key up-projection", "W_UK"),
    "Value heads": ("value up-projection", "W_UV"),
    "Final RMSNorm": ("final norm", "final layernorm"),
}

#: Groups: the model, the blocks, block groups.
MODEL = Words(
    "the whole language model: embed the tokens, refine them through every block, predict the next token",
    "logits = Head(Norm(Blocks(Embed(t))))",
    "outputs = self.model(input_ids=input_ids, …)",
    "DeepseekV3ForCausalLM",
    ("model", "lm_head"),
)
BLOCKS = Words(
    "the transformer blocks in order; each adds its attention's and its MLP's output to the hidden state",
    "h_{l+1} = Block_l(h_l)",
    "for decoder_layer in self.layers:",
    "DeepseekV3Model",
    ("layers",),
)
BLOCK = Words(
    "one transformer block: RMSNorm, latent attention and a residual add, then RMSNorm, {mlp} and a "
    "residual add",
    "h' = h + MLA(RMSNorm(h)); h'' = h' + {mlp_symbol}(RMSNorm(h'))",
    "hidden_states = residual + hidden_states",
    "DeepseekV3DecoderLayer",
    ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm"),
    "the KV cache holds positions 0 … T − 1 and reads them",
    "reads positions 0 … L − 1 from the cache and writes position L",
)


@dataclass(frozen=True)
class Tensor:
    """An activation the forward pass names, or an operation (no parameters) it applies."""

    id: str  # the variable of the modeling file, or a name of kimicount's for an operation
    name: str
    symbol: str
    words: Words
    made_by: str = ""  # the component that makes it
    read_by: tuple[str, ...] = ()
    flow_name: str = ""  # its name in kimicount.flow's shapes
    aliases: tuple[str, ...] = ()


ACTIVATIONS: tuple[Tensor, ...] = (
    Tensor(
        "input_ids",
        "Token ids",
        "t",
        Words(
            "the token ids of the T new positions of each of the B sequences",
            "t",
            "inputs_embeds = self.embed_tokens(input_ids)",
            "DeepseekV3Model",
            ("embed_tokens",),
        ),
        read_by=("Token embedding",),
        flow_name="tokens",
    ),
    Tensor(
        "hidden_states",
        "Hidden state",
        "h",
        Words(
            "the residual stream each block reads and adds to",
            "h",
            "hidden_states = residual + hidden_states",
            "DeepseekV3DecoderLayer",
            variable="hidden_states",
        ),
        made_by="Token embedding",
        read_by=("Attention RMSNorm", "MLP RMSNorm", "Final RMSNorm"),
        flow_name="h",
    ),
    Tensor(
        "c_Q",
        "Query latent",
        "c^Q",
        Words(
            "the {q_rank}-wide compressed query of each position",
            "c^Q = RMSNorm(x W_{DQ})",
            "self.q_a_layernorm(self.q_a_proj(hidden_states))",
            _ATTENTION,
            ("q_a_layernorm",),
        ),
        made_by="Query compression",
        read_by=("Query heads",),
        flow_name="c_Q",
    ),
    Tensor(
        "compressed_kv",
        "Key–value latent",
        "c^{KV}",
        Words(
            "the {kv_rank}-wide latent from which every head's content keys and values are expanded: what "
            "the latent cache stores",
            "c^{KV} = x W_{DKV}",
            "compressed_kv, k_pe = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)",
            _ATTENTION,
            variable="compressed_kv",
            prefill="written to the cache for positions 0 … T − 1 (latent layout)",
            decode="position L's written; positions 0 … L − 1 read from the cache (latent layout)",
        ),
        made_by="Key–value compression",
        read_by=("Key content up-projection", "Value heads"),
        flow_name="c_KV",
        aliases=("c_KV", "c^KV", "kv latent"),
    ),
    Tensor(
        "k_pe",
        "Rotary key",
        "k^R",
        Words(
            "the {rope}-wide key, rotated by position, shared by all {H} heads",
            "k^R = RoPE(x W_{KR})",
            "k_pe = k_pe.view(bsz, q_len, 1, self.qk_rope_head_dim).transpose(1, 2)",
            _ATTENTION,
            variable="k_pe",
            prefill="written to the cache for positions 0 … T − 1 (latent layout)",
            decode="position L's written; positions 0 … L − 1 read from the cache (latent layout)",
        ),
        made_by="Shared rotary key",
        read_by=("Key heads",),
        flow_name="k_R",
        aliases=("k_R", "k^R"),
    ),
    Tensor(
        "q",
        "Queries",
        "q",
        Words(
            "every head's query: {nope} content and {rope} rotary features",
            "[q^C; q^R] = c^Q W_{UQ}",
            "q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))",
            _ATTENTION,
            variable="q",
        ),
        made_by="Query heads",
        read_by=("Causal attention",),
        flow_name="q",
    ),
    Tensor(
        "k_nope",
        "Key content",
        "k^C",
        Words(
            "every head's {nope} content key features, expanded from the latent",
            "k^C = ĉ^{KV} W_{UK}",
            "k_nope, value_states = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)",
            _ATTENTION,
            variable="k_nope",
        ),
        made_by="Key content up-projection",
        read_by=("Key heads",),
        flow_name="k_C",
        aliases=("k_C", "k^C"),
    ),
    Tensor(
        "key_states",
        "Keys",
        "k",
        Words(
            "every head's key: its content features and the shared rotary key",
            "k_i = [k_i^C; k^R]",
            "key_states = k_pe.new_empty(bsz, self.num_heads, q_len, self.q_head_dim)",
            _ATTENTION,
            variable="key_states",
            prefill="naive and flash layouts: written to the cache for positions 0 … T − 1",
            decode="naive and flash layouts: position L's written, 0 … L − 1 read",
        ),
        made_by="Key heads",
        read_by=("Causal attention",),
        flow_name="k",
    ),
    Tensor(
        "value_states",
        "Values",
        "v",
        Words(
            "every head's {v} value features, expanded from the latent",
            "v^C = ĉ^{KV} W_{UV}",
            "k_nope, value_states = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)",
            _ATTENTION,
            variable="value_states",
            prefill="naive and flash layouts: written to the cache for positions 0 … T − 1",
            decode="naive and flash layouts: position L's written, 0 … L − 1 read",
        ),
        made_by="Value heads",
        read_by=("Causal attention",),
        flow_name="v",
    ),
    Tensor(
        "attn_weights",
        "Attention scores",
        "s",
        Words(
            "each head's query against every visible key, scaled by 1/√{qk}",
            "s_i = q_i k_i^T / √d",
            "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.softmax_scale",
            _ATTENTION,
            variable="attn_weights",
            prefill="T × T per head (causal: position t sees 0 … t)",
            decode="1 × (L + 1) per head: the new query against every cached key",
        ),
        made_by="Causal attention",
        read_by=("Causal attention",),
        aliases=("scores", "attention scores"),
    ),
    Tensor(
        "attn_output",
        "Attention output",
        "o",
        Words(
            "each head's weighted sum of values, before the output projection",
            "o_i = softmax(s_i) v_i",
            "attn_output = torch.matmul(attn_weights, value_states)",
            _ATTENTION,
            variable="attn_output",
        ),
        made_by="Causal attention",
        read_by=("Causal attention",),
        flow_name="o",
    ),
    Tensor(
        "router_scores",
        "Router scores",
        "s",
        Words(
            "each expert's sigmoid score for each token",
            "s = σ(x W_g)",
            "scores = logits.sigmoid()",
            "MoEGate",
            variable="scores",
        ),
        made_by="Router",
        read_by=("Mixture of experts",),
        flow_name="scores",
    ),
    Tensor(
        "topk_idx",
        "Chosen experts",
        "TopK",
        Words(
            "the {k} experts each token is sent to, and their weights",
            "TopK(s + b)",
            "topk_idx, topk_weight = self.gate(hidden_states)",
            "DeepseekV3MoE",
            variable="topk_idx",
        ),
        made_by="Router",
        read_by=("Routed experts",),
        aliases=("topk_weight",),
    ),
    Tensor(
        "expert_outputs",
        "Expert outputs",
        "y",
        Words(
            "the chosen experts' outputs, weighted and summed per token",
            "y = Σ_{i∈TopK} g_i E_i(x)",
            "y = self.moe_infer(hidden_states, topk_idx, topk_weight).view(*orig_shape)",
            "DeepseekV3MoE",
            variable="y",
        ),
        made_by="Routed experts",
        read_by=("Mixture of experts",),
        flow_name="y",
        aliases=("y",),
    ),
    Tensor(
        "logits",
        "Logits",
        "logits",
        Words(
            "one score per vocabulary entry for the next token",
            "logits = x W_{head}",
            "logits = self.lm_head(hidden_states)",
            "DeepseekV3ForCausalLM",
            variable="logits",
        ),
        made_by="Output head",
        flow_name="logits",
    ),
)

OPERATIONS: tuple[Tensor, ...] = (
    Tensor(
        "rotary",
        "Rotary embedding",
        "RoPE",
        Words(
            "rotate the {rope} rotary query and key features by an angle proportional to the position",
            "RoPE(x)_{2i,2i+1} = R(p θ_i) x_{2i,2i+1}",
            "q_pe, k_pe = apply_rotary_pos_emb(q_pe, k_pe, cos, sin, position_ids)",
            _ATTENTION,
            ("rotary_emb",),
            explanation="Its inv_freq buffer is no parameter: the checkpoint may store one per layer; "
            "kimicount verify counts them apart.",
        ),
        made_by="Shared rotary key",
        read_by=("Query heads", "Shared rotary key"),
        aliases=("rope", "RoPE"),
    ),
    Tensor(
        "softmax",
        "Softmax",
        "softmax",
        Words(
            "turn each head's scores into weights that sum to 1 over the visible positions",
            "softmax(s)_j = e^{s_j} / Σ_k e^{s_k}",
            "attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)",
            _ATTENTION,
        ),
        made_by="Causal attention",
        read_by=("Causal attention",),
    ),
    Tensor(
        "act_fn",
        "SiLU gate",
        "SiLU",
        Words(
            "the MLPs' activation: x·σ(x) of the gate projection, times the up projection",
            "SiLU(x) = x σ(x)",
            "self.act_fn(self.gate_proj(x)) * self.up_proj(x)",
            "DeepseekV3MLP",
            ("act_fn",),
        ),
        made_by="Dense MLP",
        read_by=("Dense MLP", "Routed experts", "Shared expert"),
        aliases=("silu",),
    ),
)


@dataclass(frozen=True)
class Vocabulary:
    """A model's words: its sizes, components, activations and operations, and the group pages'."""

    sizes: dict[str, str]
    components: dict[str, Words]
    activations: tuple[Tensor, ...]
    operations: tuple[Tensor, ...]
    model: Words
    blocks: Words
    block: Words


def vocabulary(spec) -> Vocabulary:
    """The words of a model's pages: DeepSeek V4's own (kimicount.explorer.words_deepseek_v4), the Kimi
    Linear family's (kimicount.explorer.words_kimi_linear), or the DeepSeek-V3 family's above."""
    family = getattr(spec, "FAMILY", "")
    if family == "deepseek_v4":
        from kimicount.explorer import words_deepseek_v4 as v4

        return Vocabulary(
            v4.values(spec), v4.COMPONENTS, v4.ACTIVATIONS, v4.OPERATIONS, v4.MODEL, v4.BLOCKS, v4.BLOCK
        )
    if family == "kimi_linear":
        from kimicount.explorer import words_kimi_linear as kl

        return Vocabulary(
            kl.values(spec), kl.components(spec), kl.ACTIVATIONS, kl.OPERATIONS, kl.MODEL, kl.BLOCKS, kl.BLOCK
        )
    return Vocabulary(values(spec), COMPONENTS, ACTIVATIONS, OPERATIONS, MODEL, BLOCKS, BLOCK)
