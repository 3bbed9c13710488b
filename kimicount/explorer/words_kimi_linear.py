"""The explorer's words for the Kimi Linear family (Kimi-Linear-48B-A3B, Kimi K3's language model): each
component, activation and operation in one sentence, its formula, the code that computes it, and what
it reads and writes in each mode.

Class names, attributes, variables and code are those of Moonshot's modeling_kimi_linear.py (the file
the language model's `auto_map` names: KimiLinearForCausalLM, KimiLinearModel, KimiDecoderLayer,
KimiDeltaAttention, KimiMLAAttention, KimiSparseMoeBlock, KimiMoEGate, KimiBlockSparseMLP, KimiMLP,
KimiRMSNorm), as public copies of it keep it (github TOOLS-droid724/Vedika-5.6-PRO @ a11b9e0, K3's
version with LatentMoE and attention residuals; a copy of Kimi-Linear-48B-A3B's, without them, has the
same classes). The recurrence is fla's (fla-org/flash-linear-attention @ bc3b101d: chunk_kda in a
prefill, fused_recurrent_kda in a decode step, fla/ops/kda/naive.py lines 59–63 for the rule itself),
which vLLM runs the same way (vllm/model_executor/layers/kda.py @ 01a7e5d).

Where KDA keeps what a cache would: no entry per position, a state per sequence. A prefill runs the
rule in chunks and writes the recurrent state S and the convolution windows once, at the end of the
sequence; a decode step reads them, advances them by one position and overwrites them in place, at the
same cost whatever the context.
"""

from __future__ import annotations

from kimicount.explorer.words import Tensor, Words

_KDA = "KimiDeltaAttention"
_MLA = "KimiMLAAttention"
_LAYER = "KimiDecoderLayer"
_MOE = "KimiSparseMoeBlock"

#: What KDA's components do in each mode: the state, not a cache.
_STATE_PREFILL = "a chunked pass over the T new positions (64 a chunk); writes S once, at the last"
_STATE_DECODE = "reads S, advances it by the one new position, overwrites it: the same cost at any L"


def values(spec) -> dict[str, str]:
    """The sizes the sentences name (a KimiLinearSpec's)."""
    kda = spec.kda
    latent = spec.routed_expert_hidden_size
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
        "shared_inter": f"{spec.n_shared_experts * spec.moe_intermediate_size:,}",
        "vocab": f"{spec.vocab_size:,}",
        "kda_heads": f"{kda.num_heads:,}",
        "d": f"{kda.head_dim:,}",
        "P": f"{kda.projection:,}",
        "K": f"{kda.conv_kernel:,}",
        "window": f"{kda.conv_kernel - 1:,}",
        "latent": f"{latent or spec.hidden_size:,}",
        "kda_layers": f"{len(spec.kda_layers):,}",
        "mla_layers": f"{len(spec.mla_layers):,}",
        "act": "SiTU" if spec.hidden_act == "situ" else spec.hidden_act.upper(),
        "block": f"{spec.attn_res_block_size or 0:,}",
        "lower": f"{kda.gate_lower_bound:g}" if kda.gate_lower_bound is not None else "",
    }


def _activation(spec) -> str:
    """The MLPs' gated activation, as a formula."""
    if spec.hidden_act == "situ":  # SituAndMul, activation_situ_beta and activation_situ_linear_beta
        return "y = (β tanh(x W_{gate} / β) σ(x W_{gate}) ⊙ β' tanh(x W_{up} / β')) W_{down}"
    return "y = (SiLU(x W_{gate}) ⊙ x W_{up}) W_{down}"


def _decay(spec) -> str:
    """The decay's log per channel, as fla's kernels compute it from A_log and dt_bias."""
    if spec.kda.gate_lower_bound is not None:  # fused_recurrent.py lines 170–176, USE_LOWER_BOUND
        return "log α_t = b σ(e^{A} ⊙ (f_t + Δ))"
    return "log α_t = −e^{A} ⊙ softplus(f_t + Δ)"


def components(spec) -> dict[str, Words]:
    """Every component of the family's trees, by its name there."""
    act = _activation(spec)
    words = {
        "Token embedding": Words(
            "look up each token's row of the {vocab} × {hidden} table: the hidden state the blocks refine",
            "h = E[t]",
            "inputs_embeds = self.embed_tokens(input_ids)",
            "KimiLinearModel",
            ("embed_tokens",),
        ),
        "Attention RMSNorm": Words(
            "scale the hidden state to unit root-mean-square, then by a learned weight, before the attention "
            "(KDA or MLA, by the layer)",
            "x = h / √(mean(h^2) + ε) ⊙ g",
            "hidden_states = self.input_layernorm(hidden_states)",
            _LAYER,
            ("input_layernorm",),
        ),
        "MLP RMSNorm": Words(
            "normalise the hidden state after the attention, before the MLP or the experts",
            "x = h / √(mean(h^2) + ε) ⊙ g",
            "hidden_states = self.post_attention_layernorm(hidden_states)",
            _LAYER,
            ("post_attention_layernorm",),
        ),
        "Final RMSNorm": Words(
            "normalise the last block's hidden state before the output head",
            "x = h / √(mean(h^2) + ε) ⊙ g",
            "hidden_states = self.norm(hidden_states)",
            "KimiLinearModel",
            ("norm",),
        ),
        # --- Kimi Delta Attention ----------------------------------------------------------------------
        "Kimi Delta Attention": Words(
            "gated linear attention with the delta rule: each of {kda_heads} heads keeps a {d} × {d} state "
            "S that every position decays channel by channel and corrects toward its value; the layer "
            "keeps S and the convolution windows per sequence, no cache per position",
            "S_t = (I − β_t k_t k_t^T) Diag(α_t) S_{t−1} + β_t k_t v_t^T; o_t = S_t^T q_t",
            "o = self.o_proj(o)",
            _KDA,
            ("q_proj", "k_proj", "v_proj", "q_conv1d", "f_a_proj", "b_proj", "o_norm", "o_proj"),
            _STATE_PREFILL + "; also writes each convolution's last {window} inputs",
            _STATE_DECODE + "; reads and overwrites the convolution windows the same way",
            "One of {kda_layers} such layers; the other {mla_layers} run MLA. S is fp32 in vLLM and SGLang "
            "(kimicount kv-cache --mamba-ssm-dtype).",
        ),
        "Query projection": Words(
            "project the hidden state to {kda_heads} queries of {d}",
            "q = x W_q",
            "q_proj_states = self.q_proj(hidden_states)",
            _KDA,
            ("q_proj",),
        ),
        "Key projection": Words(
            "project the hidden state to {kda_heads} keys of {d}: the direction each position writes "
            "into the state",
            "k = x W_k",
            "k_proj_states = self.k_proj(hidden_states)",
            _KDA,
            ("k_proj",),
        ),
        "Value projection": Words(
            "project the hidden state to {kda_heads} values of {d}: what each position writes into the state",
            "v = x W_v",
            "v_proj_states = self.v_proj(hidden_states)",
            _KDA,
            ("v_proj",),
        ),
        "Short convolutions": Words(
            "a causal depthwise convolution of {K} positions on each of q, k and v, then SiLU: the only "
            "mixing across nearby positions before the recurrence",
            "q_t = SiLU(Σ_{j<K} w_j ⊙ q_{t−j})",
            "q, conv_state_q = self.q_conv1d(x=q_proj_states, …)",
            _KDA,
            ("q_conv1d", "k_conv1d", "v_conv1d"),
            "convolves the T new positions (the window's {window} earlier inputs are zero, or the "
            "cached ones); writes the last {window} inputs of q, k and v as the sequence's windows",
            "reads the {window} cached inputs of q, k and v, convolves them with the new one, and "
            "overwrites the windows with the last {window}",
            "Weights [{P}, 1, {K}] each; their FLOPs count 2 × {K} per channel and position.",
        ),
        "Decay projection": Words(
            "a low-rank projection, through {d}, of the hidden state to one decay logit per channel of "
            "every head",
            "f = (x W_{fa}) W_{fb}",
            "g = self.f_b_proj(self.f_a_proj(hidden_states))",
            _KDA,
            ("f_a_proj", "f_b_proj"),
        ),
        "Decay rates": Words(
            "turn each channel's decay logit into the factor α ∈ (0, 1) that shrinks the state's row "
            "for that key channel, with a learned rate per head (A_log) and bias per channel (dt_bias)",
            _decay(spec),
            "o, recurrent_state = chunk_kda(…, A_log=self.A_log, dt_bias=self.dt_bias, …)",
            _KDA,
            ("A_log", "dt_bias"),
            explanation="Applied inside the kernels (use_gate_in_kernel): "
            + (
                "with gate_lower_bound b = {lower}, the log-decay stays within (b, 0)."
                if spec.kda.gate_lower_bound is not None
                else "−exp(A_log) · softplus(f + dt_bias), fla's own gate."
            )
            + " A_log and dt_bias are F32 in the checkpoint.",
        ),
        "Update strength β": Words(
            "how strongly each head's state is corrected toward the new value: one sigmoid per head "
            "and position",
            "β_t = σ(x_t W_β)",
            "beta = self.b_proj(hidden_states).float()",
            _KDA,
            ("b_proj",),
            explanation="The sigmoid is applied in the kernel (use_beta_sigmoid_in_kernel).",
        ),
        "Output gate": Words(
            "gate each head's output by a sigmoid of the hidden state's projection, before the output "
            "projection (KDA: inside the gated norm; K3's MLA: attn_output · σ(g))",
            "o ← o ⊙ σ(x W_g)",
            "g = self.g_proj(hidden_states)",
            _KDA,
            ("g_proj",) if spec.kda.full_rank_gate else ("g_a_proj", "g_b_proj"),
        ),
        "Output norm": Words(
            "normalise each head's {d}-wide output, scale it, and gate it by σ(g), in one fused step",
            "o_h ← RMSNorm(o_h) ⊙ w ⊙ σ(g_h)",
            "o = self.o_norm(o, g)",
            _KDA,
            ("o_norm",),
        ),
        "Output projection": Words(
            "project the {kda_heads} heads' gated outputs back to the hidden width",
            "u = o W_o",
            "o = self.o_proj(o)",
            _KDA,
            ("o_proj",),
        ),
        # --- MLA (no rotary position; K3's gated output) ----------------------------------------------
        "Latent attention": Words(
            "multi-head latent attention without rotary position (mla_use_nope): each token's keys and "
            "values come from one {kv_rank}-wide latent and one {rope}-wide shared key, which is all the "
            "cache holds",
            "u = MLA(x)",
            "attn_output = self.o_proj(attn_output)",
            _MLA,
            ("kv_a_proj_with_mqa", "kv_b_proj", "o_proj"),
            "makes c_KV and k_R for positions 0 … T − 1, writes them to the cache (latent layout) and "
            "attends causally over them",
            "reads the L cached positions' c_KV and k_R, writes position L's, and attends over all L + 1",
        ),
        "Query compression": Words(
            "compress the hidden state into a {q_rank}-wide query latent, normalised",
            "c^Q = RMSNorm(x W_{DQ})",
            "q_states = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))",
            _MLA,
            ("q_a_proj", "q_a_layernorm"),
        ),
        "Key–value compression": Words(
            "compress the hidden state into the {kv_rank}-wide key–value latent every head's keys and "
            "values are expanded from",
            "c^{KV} = x W_{DKV}",
            "compressed_kv = self.kv_a_proj_with_mqa(hidden_states)",
            _MLA,
            ("kv_a_proj_with_mqa", "kv_a_layernorm"),
            "writes c_KV of positions 0 … T − 1 to the cache (latent layout)",
            "writes c_KV of position L to the cache (latent layout)",
        ),
        "Query heads": Words(
            "map the query to {H} × {qk} features per head: {nope} content and {rope} that meet the "
            "shared key",
            "[q^C; q^R] = c^Q W_{UQ}",
            "q_states = q_states.view(query_shape).transpose(1, 2)",
            _MLA,
            ("q_b_proj",) if spec.q_lora_rank is not None else ("q_proj",),
            "queries of the T new positions; never cached",
            "the query of the new position; never cached",
        ),
        "Key heads": Words(
            "each head's key: {nope} content features from the latent, and the {rope} shared features",
            "k_i = [k_i^C; k^R]",
            "key_states = torch.cat((k_pass, k_rot), dim=-1)",
            _MLA,
            ("kv_b_proj", "kv_a_proj_with_mqa"),
        ),
        "Key content up-projection": Words(
            "map the latent to {H} × {nope} content key features",
            "k^C = ĉ^{KV} W_{UK}",
            "k_pass = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(key_shape).transpose(1, 2)",
            _MLA,
            ("kv_b_proj",),
        ),
        "Shared unrotated key": Words(
            "one {rope}-wide key every head shares, cached as it is: no rotary position (mla_use_nope); "
            "the KDA layers' convolutions and recurrence carry the order",
            "k^R = x W_{KR}",
            "k_pass, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)",
            _MLA,
            ("kv_a_proj_with_mqa",),
            "writes k_R of positions 0 … T − 1 to the cache",
            "writes k_R of position L to the cache",
        ),
        "Value heads": Words(
            "map the latent to {H} × {v} value features",
            "v^C = ĉ^{KV} W_{UV}",
            "k_pass, value_states = torch.split(k_pass, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)",
            _MLA,
            ("kv_b_proj",),
        ),
        "Causal attention": Words(
            "weigh every visible position's values by softmax(q·k) per head, then project the {H} heads' "
            "outputs back to the hidden width",
            "u = concat_i(softmax(q_i k_i^T / √d) v_i) W_O",
            "attn_output = self.o_proj(attn_output)",
            _MLA,
            ("o_proj",),
            "attends causally over positions 0 … T − 1 of the cache just written",
            "attends over the L cached positions and the new one",
        ),
        # --- MLPs, MoE, LatentMoE ---------------------------------------------------------------------
        "Dense MLP": Words(
            "a gated MLP {inter} wide ({act})",
            act,
            "down_proj = self.down_proj(self.act_fn(gate_up))"
            if spec.hidden_act == "situ"
            else "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))",
            "KimiMLP",
            ("gate_proj", "up_proj", "down_proj"),
        ),
        "Mixture of experts": Words(
            "send each token to {k} of {E} routed experts, weighted by the router, plus the shared experts",
            "y = Σ_{i∈TopK} g_i E_i(x) + E_s(x)",
            "y = self.moe_infer(hidden_states, topk_idx, topk_weight)",
            _MOE,
            ("gate", "experts", "shared_experts"),
        ),
        "Latent mixture of experts": Words(
            "LatentMoE: route in the hidden space, project down to a {latent}-wide latent, run {k} of {E} "
            "experts there, normalise their weighted sum, project back up; the shared experts run in the "
            "hidden space",
            "y = RMSNorm(Σ_{i∈TopK} g_i E_i(x W_{down})) W_{up} + E_s(x)",
            "y = self.routed_expert_up_proj(y)",
            _MOE,
            ("routed_expert_down_proj", "routed_expert_norm", "routed_expert_up_proj", "experts"),
        ),
        "Router": Words(
            "score the {E} experts for each token (sigmoid) in the hidden space, add the balancing bias "
            "to choose the top {k}",
            "s = σ(x W_g); TopK(s + b)",
            "topk_idx, topk_weight = self.gate(hidden_states)",
            "KimiMoEGate",
            ("weight", "e_score_correction_bias"),
        ),
        "Latent down-projection": Words(
            "project every token's hidden state down to the {latent}-wide latent the routed experts "
            "work in; every token runs it, before its experts",
            "z = x W_{down}",
            "hidden_states = self.routed_expert_down_proj(hidden_states)",
            _MOE,
            ("routed_expert_down_proj",),
        ),
        "Latent RMSNorm": Words(
            "normalise the experts' weighted sum in the latent, before it goes back up",
            "y_z ← y_z / √(mean(y_z^2) + ε) ⊙ g",
            "y = self.routed_expert_norm(y)",
            _MOE,
            ("routed_expert_norm",),
        ),
        "Routed experts": Words(
            "{E} gated MLPs {moe_inter} wide ({act}), reading and writing the {latent}-wide "
            + ("latent" if spec.routed_expert_hidden_size else "hidden state")
            + "; each token runs the {k} its router chose",
            act.replace("x W", "z W") if spec.routed_expert_hidden_size else act,
            "expert_out = expert(tokens_for_this_expert)",
            "KimiBlockSparseMLP",
            ("w1", "w2", "w3"),
        ),
        "Latent up-projection": Words(
            "project the experts' normalised sum back up to the hidden width",
            "y = y_z W_{up}",
            "y = self.routed_expert_up_proj(y)",
            _MOE,
            ("routed_expert_up_proj",),
        ),
        "Shared expert": Words(
            "one gated MLP {shared_inter} wide that every token runs in the hidden space, beside the "
            "routed experts",
            "E_s(x) = " + act.removeprefix("y = "),
            "y = y + self.shared_experts(identity)",
            _MOE,
            ("shared_experts",),
        ),
        # --- K3's attention residuals -----------------------------------------------------------------
        "Attention residuals": Words(
            "replace the residual sum before the attention and before the MLP by attention over the "
            "earlier blocks' outputs (one every {block} layers) and the current partial sum: RMSNorm-ed "
            "summaries scored by one learned vector, softmax, weighted sum",
            "h = Σ_j softmax_j((RMSNorm(b_j) ⊙ w_n) · w_p) b_j",
            "hidden_states = _apply_attn_res(prefix_sum.view(-1, hidden_size), block_residual, …)",
            _LAYER,
            ("self_attention_res_norm", "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj"),
            "every position mixes its own block summaries; nothing is cached",
            "the new position mixes its own block summaries; nothing is cached",
        ),
        "Output attention residual": Words(
            "the same attention over the block summaries, once more after the last block",
            "h = Σ_j softmax_j((RMSNorm(b_j) ⊙ w_n) · w_p) b_j",
            "hidden_states = self._apply_output_attn_res(hidden_states, block_residual)",
            "KimiLinearModel",
            ("output_attn_res_norm", "output_attn_res_proj"),
        ),
        "Output head": Words(
            "map the final hidden state to one logit per vocabulary entry ({vocab})",
            "logits = x W_{head}",
            "logits = self.lm_head(hidden_states)",
            "KimiLinearForCausalLM",
            ("lm_head",),
        ),
    }
    words["Shared experts"] = words["Shared expert"]
    return words


MODEL = Words(
    "the whole language model: embed the tokens, refine them through every block (KDA or MLA attention, "
    "then an MLP or the experts), predict the next token",
    "logits = Head(Norm(Blocks(Embed(t))))",
    "outputs = self.model(input_ids=input_ids, …)",
    "KimiLinearForCausalLM",
    ("model", "lm_head"),
)
BLOCKS = Words(
    "the transformer blocks in order, KDA and MLA interleaved; each adds its attention's and its MLP's "
    "output to the hidden state",
    "h_{l+1} = Block_l(h_l)",
    "for decoder_layer in self.layers:",
    "KimiLinearModel",
    ("layers",),
)
BLOCK = Words(
    "one transformer block: RMSNorm, KDA or latent attention and a residual add, then RMSNorm, {mlp} "
    "and a residual add",
    "h' = h + Attn(RMSNorm(h)); h'' = h' + {mlp_symbol}(RMSNorm(h'))",
    "hidden_states = residual + hidden_states",
    _LAYER,
    ("self_attn", "input_layernorm", "post_attention_layernorm"),
    "KDA layers: chunked over the T positions, S written once; MLA layers: the cache holds positions "
    "0 … T − 1",
    "KDA layers: S read and overwritten; MLA layers: positions 0 … L − 1 read, position L written",
)


ACTIVATIONS: tuple[Tensor, ...] = (
    Tensor(
        "input_ids",
        "Token ids",
        "t",
        Words(
            "the token ids of the T new positions of each of the B sequences",
            "t",
            "inputs_embeds = self.embed_tokens(input_ids)",
            "KimiLinearModel",
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
            _LAYER,
            variable="hidden_states",
        ),
        made_by="Token embedding",
        read_by=("Attention RMSNorm", "MLP RMSNorm", "Final RMSNorm"),
        flow_name="h",
    ),
    Tensor(
        "recurrent_state",
        "Recurrent state",
        "S",
        Words(
            "each KDA head's {d} × {d} memory of the sequence so far: keys' directions to values, decayed "
            "channel by channel and corrected toward each new value; it takes the place of a cache",
            "S_t = (I − β_t k_t k_t^T) Diag(α_t) S_{t−1} + β_t k_t v_t^T",
            "o, recurrent_state = chunk_kda(…, initial_state=recurrent_state, output_final_state=True, …)",
            _KDA,
            variable="recurrent_state",
            prefill=_STATE_PREFILL,
            decode=_STATE_DECODE,
            explanation="{kda_heads} × {d} × {d} per sequence and KDA layer, fp32 (vLLM's kda_state_dtype); "
            "cache_params.recurrent_states keeps it between steps.",
        ),
        made_by="Kimi Delta Attention",
        read_by=("Kimi Delta Attention",),
        flow_name="S",
        aliases=("S", "state", "KDA state", "ssm state"),
    ),
    Tensor(
        "conv_state_q",
        "Convolution windows",
        "w",
        Words(
            "the last {window} inputs of q, k and v before the new position: what the short convolutions "
            "need of the past",
            "w = [q_{t−{window}} … q_{t−1}]",
            "q, conv_state_q = self.q_conv1d(x=q_proj_states, cache=conv_state_q, …)",
            _KDA,
            variable="conv_state_q",
            prefill="written once, the T new positions' last {window}",
            decode="read, shifted by the new input, overwritten",
            explanation="3 × {window} × {P} per sequence and KDA layer, in the conv dtype (vLLM's "
            "--mamba-cache-dtype); conv_state_k and conv_state_v alike.",
        ),
        made_by="Short convolutions",
        read_by=("Short convolutions",),
        flow_name="conv windows",
        aliases=("conv_state", "conv windows", "conv_state_k", "conv_state_v"),
    ),
    Tensor(
        "decay_gate",
        "Decay gate",
        "α",
        Words(
            "the factor, per key channel of every head, that each position's state row is multiplied by "
            "before the update: the forgetting",
            "α_t = exp(log α_t)",
            "g = self.f_b_proj(self.f_a_proj(hidden_states))",
            _KDA,
            variable="g",
            explanation="The file binds g twice: the decay logits here, the output gate after the recurrence.",
        ),
        made_by="Decay rates",
        read_by=("Kimi Delta Attention",),
        flow_name="log α",
        aliases=("decay", "alpha", "g", "forget gate"),
    ),
    Tensor(
        "beta",
        "Update strength",
        "β",
        Words(
            "per head and position, how far the state moves toward the new value along the new key",
            "β_t = σ(x_t W_β)",
            "beta = self.b_proj(hidden_states).float()",
            _KDA,
            variable="beta",
        ),
        made_by="Update strength β",
        read_by=("Kimi Delta Attention",),
        flow_name="β",
        aliases=("β", "beta"),
    ),
    Tensor(
        "output_gate",
        "Output gate values",
        "g_o",
        Words(
            "per channel of every head, how much of the recurrence's output passes the gated norm",
            "σ(x W_g)",
            "g = self.g_proj(hidden_states)",
            _KDA,
            variable="g",
            explanation="The file binds g twice: the decay logits first, these after the recurrence.",
        ),
        made_by="Output gate",
        read_by=("Output norm",),
        flow_name="g_o",
        aliases=("g_o",),
    ),
    Tensor(
        "kda_output",
        "Recurrence output",
        "o",
        Words(
            "each KDA head's read of its state with the query, before the gated norm",
            "o_t = S_t^T q_t",
            "o, recurrent_state = chunk_kda(q=q, k=k, v=v, g=g, beta=beta, …)",
            _KDA,
            variable="o",
        ),
        made_by="Kimi Delta Attention",
        read_by=("Output norm", "Output projection"),
        flow_name="o",
        aliases=("o",),
    ),
    Tensor(
        "compressed_kv",
        "Key–value latent",
        "c^{KV}",
        Words(
            "the {kv_rank}-wide latent and the {rope}-wide shared key of each position: what the MLA "
            "layers' cache stores",
            "c^{KV} = x W_{DKV}",
            "compressed_kv = self.kv_a_proj_with_mqa(hidden_states)",
            _MLA,
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
        "latent",
        "Expert latent",
        "z",
        Words(
            "each token's hidden state projected down to the {latent}-wide latent the routed experts read "
            "and write",
            "z = x W_{down}",
            "hidden_states = self.routed_expert_down_proj(hidden_states)",
            _MOE,
            variable="hidden_states",
        ),
        made_by="Latent down-projection",
        read_by=("Routed experts",),
        flow_name="z",
        aliases=("z", "latent"),
    ),
    Tensor(
        "router_scores",
        "Router scores",
        "s",
        Words(
            "each expert's sigmoid score for each token",
            "s = σ(x W_g)",
            "scores = logits.sigmoid()",
            "KimiMoEGate",
            variable="scores",
        ),
        made_by="Router",
        read_by=("Latent mixture of experts", "Mixture of experts"),
        flow_name="scores",
    ),
    Tensor(
        "expert_outputs",
        "Expert outputs",
        "y",
        Words(
            "the chosen experts' outputs, weighted and summed per token (in the latent, with LatentMoE)",
            "y = Σ_{i∈TopK} g_i E_i(·)",
            "y = self.moe_infer(hidden_states, topk_idx, topk_weight)",
            _MOE,
            variable="y",
        ),
        made_by="Routed experts",
        read_by=("Latent mixture of experts", "Mixture of experts"),
        aliases=("y",),
    ),
    Tensor(
        "block_residual",
        "Block summaries",
        "b",
        Words(
            "the hidden state at the start of every {block}-layer block so far, which the attention "
            "residuals weigh",
            "b_j = h_{{block}·j}",
            "hidden_states, block_residual = decoder_layer(hidden_states, …, block_residual=block_residual, …)",
            "KimiLinearModel",
            variable="block_residual",
            prefill="one summary per block and position; nothing is cached",
            decode="the new position's summaries only; nothing is cached",
        ),
        made_by="Attention residuals",
        read_by=("Attention residuals", "Output attention residual"),
        aliases=("block residuals", "attention residuals"),
    ),
    Tensor(
        "logits",
        "Logits",
        "logits",
        Words(
            "one score per vocabulary entry for the next token",
            "logits = x W_{head}",
            "logits = self.lm_head(hidden_states)",
            "KimiLinearForCausalLM",
            variable="logits",
        ),
        made_by="Output head",
        flow_name="logits",
    ),
)

OPERATIONS: tuple[Tensor, ...] = (
    Tensor(
        "chunk_kda",
        "Chunked delta rule",
        "chunk_kda",
        Words(
            "the delta rule over many positions at once: chunks of 64, the positions within a chunk by "
            "matrix products, the state carried from chunk to chunk; the final state returned",
            "S_{n+1} = S_n ⊙ e^{g_C} + (e^{g_C − g} ⊙ K_n)^T (U_n − W_n S_n)",
            "o, recurrent_state = chunk_kda(…)",
            _KDA,
            prefill="runs: writes S (output_final_state) once per sequence",
            decode="not run (a decode step is recurrent)",
            explanation="fla's chunk_kda (fla/ops/kda/chunk_fwd.py, chunk_size 64); vLLM runs it for every "
            "batch with a prefill (layers/kda.py, KimiDeltaAttention._forward).",
        ),
        made_by="Kimi Delta Attention",
        read_by=("Kimi Delta Attention",),
        aliases=("chunk", "chunked", "prefill kernel"),
    ),
    Tensor(
        "fused_recurrent_kda",
        "Recurrent delta rule",
        "recurrent",
        Words(
            "the delta rule for one new position: decay S, correct it along k toward v by β, read it with q",
            "S ← S ⊙ α; S ← S + k ⊗ β(v − k^T S); o = S^T q",
            "o, recurrent_state = fused_recurrent_kda(…)",
            _KDA,
            prefill="not run (a prefill is chunked)",
            decode="runs: reads S and overwrites it in place, 7 × {kda_heads} × {d} × {d} FLOPs a token",
            explanation="fla's fused_recurrent_kda (fla/ops/kda/fused_recurrent.py lines 178–200); the "
            "modeling file takes it for a one-position step with a cache, vLLM for every decode batch.",
        ),
        made_by="Kimi Delta Attention",
        read_by=("Kimi Delta Attention",),
        aliases=("recurrent", "fused recurrent", "decode kernel"),
    ),
)
