"""The explorer's words for DeepSeek V4 (kimicount.families.deepseek_v4): each component, activation
and operation in one sentence, its formula and the code that computes it.

Class names, attributes and code are transformers' (src/transformers/models/deepseek_v4/
modeling_deepseek_v4.py, 5.24.0: DeepseekV4Attention, DeepseekV4HyperConnection, the compressors, the
indexer, the routers), the file `--modeling` takes for the evidence; the checkpoint's own names
(wq_a, wkv, hc_attn_fn) are the tensors' on each page.
"""

from __future__ import annotations

from kimicount.explorer.words import Tensor, Words

_ATTENTION = "DeepseekV4Attention"
_LAYER = "DeepseekV4DecoderLayer"


def values(spec) -> dict[str, str]:
    """The sizes the sentences name."""
    return {
        "H": f"{spec.num_attention_heads:,}",
        "d": f"{spec.head_dim:,}",
        "rope": f"{spec.qk_rope_head_dim:,}",
        "nope": f"{spec.head_dim - spec.qk_rope_head_dim:,}",
        "q_rank": f"{spec.q_lora_rank:,}",
        "groups": f"{spec.o_groups:,}",
        "o_rank": f"{spec.o_lora_rank:,}",
        "hidden": f"{spec.hidden_size:,}",
        "m": f"{spec.hc_mult:,}",
        "window": f"{spec.sliding_window:,}",
        "moe_inter": f"{spec.moe_intermediate_size:,}",
        "E": f"{spec.n_routed_experts:,}",
        "k": f"{spec.num_experts_per_tok:,}",
        "vocab": f"{spec.vocab_size:,}",
        "index_heads": f"{spec.index_n_heads:,}",
        "index_dim": f"{spec.index_head_dim:,}",
        "topk": f"{spec.index_topk:,}",
        "hash": f"{spec.num_hash_layers:,}",
    }


def _hc(site: str, attribute: str) -> Words:
    return Words(
        f"mix the {{m}} residual streams into the {site}'s input (pre weights), and its output back into "
        "the streams (post weights, and comb: a doubly stochastic mixing of the streams, by Sinkhorn)",
        "x = Σ_j pre_j H_j; H' = post ⊗ f(x) + combᵀ H",
        f"post, comb, collapsed = self.{attribute}(hidden_states)",
        _LAYER,
        (attribute,),
        explanation="fn [(2 + {m})·{m}, {m} × {hidden}], base and three scales, all F32: the weights are a "
        "one-layer projection of the normalised streams.",
    )


_NORM = "self.weight * hidden_states.to(input_dtype)"

COMPONENTS: dict[str, Words] = {
    "Token embedding": Words(
        "look up each token's row of the {vocab} × {hidden} table, copied into the {m} residual streams",
        "H_j = E[t]",
        "inputs_embeds = self.embed_tokens(input_ids)",
        "DeepseekV4Model",
        ("embed_tokens",),
    ),
    "Attention hyper-connection": _hc("attention", "attn_hc"),
    "MLP hyper-connection": _hc("mixture of experts", "ffn_hc"),
    "Attention RMSNorm": Words(
        "normalise the collapsed streams before the attention",
        "x = h / √(mean(h^2) + ε) ⊙ g",
        "self.self_attn(self.input_layernorm(collapsed), **kwargs)",
        _LAYER,
        ("input_layernorm",),
    ),
    "MLP RMSNorm": Words(
        "normalise the collapsed streams before the experts",
        "x = h / √(mean(h^2) + ε) ⊙ g",
        "self.mlp(self.post_attention_layernorm(collapsed), input_ids=input_ids)",
        _LAYER,
        ("post_attention_layernorm",),
    ),
    "Query compression": Words(
        "compress the hidden state into a {q_rank}-wide query latent, normalised",
        "c^Q = RMSNorm(x W_{QA})",
        "q_residual = self.q_a_norm(self.q_a_proj(hidden_states))",
        _ATTENTION,
        ("q_a_proj", "q_a_norm"),
    ),
    "Query heads": Words(
        "map the query latent to {H} heads of {d}: {nope} content and {rope} rotary features each",
        "q = RMSNorm_h(c^Q W_{QB})",
        "q = self.q_b_proj(q_residual).view(*hidden_shape).transpose(1, 2)",
        _ATTENTION,
        ("q_b_proj",),
    ),
    "Shared key–value head": Words(
        "one {d}-wide head that every query head reads as its key and as its value: the only per-position "
        "vector the sliding window holds",
        "kv = RoPE(RMSNorm(x W_{KV}))",
        "kv = self.kv_norm(self.kv_proj(hidden_states)).view(*hidden_shape).transpose(1, 2)",
        _ATTENTION,
        ("kv_proj", "kv_norm"),
        "writes the kv of positions 0 … T − 1 to the window, which keeps the last sliding_window",
        "writes position L's kv to the window, which keeps the last sliding_window",
        "head_dim {d} is this one head's width, not a per-head width of {H} keys.",
    ),
    "Attention sinks": Words(
        "one learned logit per head that the softmax adds as a position no value comes from",
        "p = softmax([q·k_1, …, q·k_n, s_h])_{1…n}",
        "sinks = module.sinks.reshape(1, -1, 1, 1).expand(query.shape[0], -1, query.shape[-2], -1)",
        _ATTENTION,
        ("sinks",),
    ),
    "Grouped output projection": Words(
        "project the heads' outputs in {groups} groups, each to {o_rank} features",
        "z_g = o_g W_{OA,g}",
        "grouped = self.o_a_proj(grouped).flatten(2)",
        _ATTENTION,
        ("o_a_proj",),
    ),
    "Output projection": Words(
        "mix the {groups} × {o_rank} group outputs back to the hidden width",
        "u = z W_{OB}",
        "output = self.o_b_proj(grouped)",
        _ATTENTION,
        ("o_b_proj",),
    ),
    "KV compressor": Words(
        "pool every ratio positions (4: CSA, its windows overlapping; 128: HCA) into one {d}-wide entry, "
        "weighted by a softmax of the gate plus a learned position bias",
        "C_i = Σ_{j∈window_i} softmax(Z_j + B)_j ⊙ C_j",
        "compressed = self.kv_norm((chunk_kv * chunk_gate.softmax(dim=2, dtype=torch.float32)…).sum(dim=2))",
        "DeepseekV4HCACompressor",
        ("kv_proj", "gate_proj", "position_bias", "kv_norm"),
        "writes one entry per closed window of positions 0 … T − 1; keeps the open window in its state",
        "adds position L to its state; when that closes a window, writes one compressed entry",
    ),
    "Lightning indexer": Words(
        "score every compressed entry for each query, cheaply, so the attention reads only the top {topk}",
        "I_{t,s} = Σ_h w_{t,h} ReLU(q_{t,h} · K_s)",
        "top_k_indices = self.indexer(hidden_states, q_residual, position_ids, past_key_values, layer_idx)",
        "DeepseekV4Indexer",
        ("q_b_proj", "kv_proj", "gate_proj", "position_bias", "kv_norm", "scorer"),
        "writes one {index_dim}-wide key per 4 positions to its own cache",
        "reads every cached index key, writes one when a window closes",
    ),
    "Indexer query heads": Words(
        "map the query latent to {index_heads} index heads of {index_dim}",
        "q^I = c^Q W_{IQ}",
        "q = self.q_b_proj(q_residual).view(batch, seq_len, -1, self.head_dim).transpose(1, 2)",
        "DeepseekV4Indexer",
        ("q_b_proj",),
    ),
    "Indexer head weights": Words(
        "one weight per index head from the hidden state",
        "w = x W_w",
        "weights = self.weights_proj(hidden_states).float() * self.weights_scaling",
        "DeepseekV4IndexerScorer",
        ("weights_proj",),
    ),
    "Key compressor": Words(
        "the indexer's own compressor: every 4 positions pooled into one {index_dim}-wide index key",
        "K_s = Σ softmax(Z + B) ⊙ C",
        "compressed = self.kv_norm((new_kv * new_gate.softmax(dim=2, dtype=torch.float32)…).sum(dim=2))",
        "DeepseekV4Indexer",
        ("kv_proj", "gate_proj", "position_bias", "kv_norm"),
    ),
    "Mixture of experts": Words(
        "send each token to {k} of {E} routed experts chosen by the learned gate, plus the shared expert",
        "y = Σ_{i∈TopK} g_i E_i(x) + E_s(x)",
        "return routed + self.shared_experts(residual)",
        "DeepseekV4SparseMoeBlock",
        ("gate", "experts", "shared_experts"),
    ),
    "Hash-routed mixture of experts": Words(
        "the first {hash} layers' experts: each token's {k} experts looked up by its id, weighted by the gate",
        "y = Σ_{i∈tid2eid[t]} g_i E_i(x) + E_s(x)",
        "_, weights, indices = self.gate(hidden_states, input_ids)",
        "DeepseekV4SparseMoeBlock",
        ("gate", "experts", "shared_experts"),
    ),
    "Router": Words(
        "score the {E} experts (sqrt-softplus); add the balancing bias to pick the top {k} (learned layers)",
        "s = f(x W_g); TopK(s + b)",
        "indices = torch.topk(scores + self.e_score_correction_bias, self.top_k, dim=-1, sorted=False).indices",
        "DeepseekV4TopKRouter",
        ("weight", "e_score_correction_bias"),
    ),
    "Hash routing table": Words(
        "each token id's {k} experts, fixed: a {vocab} × {k} int64 table looked up, not learned",
        "TopK(t) = tid2eid[t]",
        "indices = self.tid2eid[input_ids.reshape(-1)].long()",
        "DeepseekV4HashRouter",
        ("tid2eid",),
    ),
    "Routed experts": Words(
        "{E} SwiGLU MLPs {moe_inter} wide (FP4 in the released checkpoints); each token runs its {k}",
        "E_i(x) = (SiLU(x W_{1,i}) ⊙ x W_{3,i}) W_{2,i}",
        "current = self._apply_gate(F.linear(hidden_states[token_idx], self.gate_up_proj[expert_idx]))",
        "DeepseekV4Experts",
        ("gate_up_proj", "down_proj"),
    ),
    "Shared expert": Words(
        "one SwiGLU MLP {moe_inter} wide that every token runs",
        "E_s(x) = (SiLU(x W_1) ⊙ x W_3) W_2",
        "return self.down_proj(self.act_fn(gate) * up)",
        "DeepseekV4MLP",
        ("gate_proj", "up_proj", "down_proj"),
    ),
    "Output hyper-connection": Words(
        "collapse the {m} residual streams into one, before the final norm",
        "h = Σ_j pre_j H_j",
        "hidden_states = self.norm(self.hc_head(hidden_states))",
        "DeepseekV4HyperHead",
        ("hc_fn", "hc_base", "hc_scale"),
    ),
    "Final RMSNorm": Words(
        "normalise the collapsed hidden state before the head",
        "x = h / √(mean(h^2) + ε) ⊙ g",
        _NORM,
        "DeepseekV4Model",
        ("norm",),
    ),
    "Output head": Words(
        "map the final hidden state to one logit per vocabulary entry ({vocab})",
        "logits = x W_{head}",
        "logits = self.lm_head(hidden_states[:, slice_indices, :])",
        "DeepseekV4ForCausalLM",
        ("lm_head",),
    ),
}
COMPONENTS["Shared experts"] = COMPONENTS["Shared expert"]
for _name, _kind in (
    ("Sliding-window attention", "its window alone"),
    ("Compressed sparse attention", "its window and the indexer's top {topk} of one entry per 4 positions"),
    ("Heavily compressed attention", "its window and every entry of one per 128 positions"),
):
    COMPONENTS[_name] = Words(
        f"{{H}} query heads against the one shared key–value head: {_kind}",
        "u = W_O softmax([q·K], sinks) K",
        "attn_output, attn_weights = attention_interface(self, q, kv, kv, attention_mask, …)",
        _ATTENTION,
        ("q_a_proj", "q_b_proj", "kv_proj", "o_a_proj", "o_b_proj", "sinks", "compressor"),
        "writes the window (and the compressed entries) of positions 0 … T − 1",
        "reads the window's last sliding_window positions and the compressed entries, writes position L's",
    )

MODEL = Words(
    "the whole language model: embed into {m} streams, refine through every block, collapse, predict",
    "logits = Head(Norm(HCHead(Blocks(Embed(t)))))",
    "outputs = self.model(input_ids=input_ids, …)",
    "DeepseekV4ForCausalLM",
    ("model", "lm_head"),
)
BLOCKS = Words(
    "the blocks in order, each between two hyper-connections on the {m} residual streams",
    "H_{l+1} = Block_l(H_l)",
    "for layer in self.layers:",
    "DeepseekV4Model",
    ("layers",),
)
BLOCK = Words(
    "one block: a hyper-connection, RMSNorm and the attention; a hyper-connection, RMSNorm and the experts",
    "H' = HC(H, Attn(RMSNorm(Σ pre H))); H'' = HC(H', MoE(RMSNorm(Σ pre H')))",
    "post, comb, collapsed = self.attn_hc(hidden_states)",
    _LAYER,
    ("self_attn", "mlp", "attn_hc", "ffn_hc"),
    "keeps the window and the compressed entries of positions 0 … T − 1",
    "reads the window and the compressed entries, writes position L's",
)

ACTIVATIONS: tuple[Tensor, ...] = (
    Tensor(
        "input_ids",
        "Token ids",
        "t",
        Words(
            "the token ids of the T new positions of each of the B sequences",
            "t",
            "input_ids",
            "DeepseekV4Model",
        ),
        read_by=("Token embedding", "Hash routing table"),
        flow_name="tokens",
    ),
    Tensor(
        "hidden_states",
        "Residual streams",
        "H",
        Words(
            "the {m} parallel residual streams of {hidden} each that the hyper-connections mix",
            "H ∈ ℝ^{m × hidden}",
            "hidden_states = inputs_embeds.unsqueeze(2).expand(-1, -1, self.config.hc_mult, -1)",
            "DeepseekV4Model",
            variable="hidden_states",
        ),
        made_by="Token embedding",
        read_by=("Attention hyper-connection", "MLP hyper-connection", "Output hyper-connection"),
        flow_name="H",
    ),
    Tensor(
        "q_residual",
        "Query latent",
        "c^Q",
        Words(
            "the {q_rank}-wide compressed query of each position; the indexer's queries come from it too",
            "c^Q = RMSNorm(x W_{QA})",
            "q_residual = self.q_a_norm(self.q_a_proj(hidden_states))",
            _ATTENTION,
            variable="q_residual",
        ),
        made_by="Query compression",
        read_by=("Query heads", "Indexer query heads"),
        flow_name="c_Q",
    ),
    Tensor(
        "kv",
        "Key–value",
        "kv",
        Words(
            "the one {d}-wide vector of each position, read as key and as value by all {H} heads",
            "kv = RoPE(RMSNorm(x W_{KV}))",
            "kv = self.kv_norm(self.kv_proj(hidden_states)).view(*hidden_shape).transpose(1, 2)",
            _ATTENTION,
            variable="kv",
            prefill="the last sliding_window of positions 0 … T − 1 go to the window",
            decode="position L's goes to the window",
        ),
        made_by="Shared key–value head",
        read_by=("Grouped output projection",),
        flow_name="kv",
    ),
)
OPERATIONS: tuple[Tensor, ...] = (
    Tensor(
        "sinkhorn",
        "Sinkhorn normalisation",
        "Sinkhorn",
        Words(
            "make the streams' mixing matrix doubly stochastic: rows and columns normalised in turn",
            "comb ← comb / Σ_rows; comb ← comb / Σ_cols (t_max times)",
            "comb = comb / (comb.sum(dim=-1, keepdim=True) + self.hc_eps)",
            "DeepseekV4HyperConnection",
        ),
        made_by="Attention hyper-connection",
        read_by=("Attention hyper-connection", "MLP hyper-connection"),
        aliases=("hc_sinkhorn_iters",),
    ),
)
