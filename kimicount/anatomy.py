"""The component tree: every part of the model, its parameters, and the checkpoint tensors it owns.

One tree serves every report. `params` prints it, the per-layer and activated counts are read off it,
and `verify` expands its tensor references into the exact names and shapes the checkpoint must hold.
Each component is built by a small pure function of the spec; its docstring gives the config keys it
reads and its Kimi K2 size (doctests run them against the bundled config as `k2`). These are the
building blocks the families share (kimicount.families: norms, MLA, MoE, embedding and head, Kimi
K2.5's vision tower); each family module assembles them into its layout.

Counts are Python ints throughout. A node's `instances` is the number of copies in the whole model
(the key content up-projection of the MoE blocks: 60; the routed experts: 384 × 60 = 23,040), so
`params = params_per_instance × instances` is always the node's share of the model total.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from kimicount.errors import ConfigError
from kimicount.spec import MAX_SIZE, LayerSizes, ModelSpec, VisionSpec

#: The SwiGLU projections of an MLP as most checkpoints name them (gate, up, down); Kimi Linear's
#: routed experts are w1, w3, w2 (vllm/model_executor/models/kimi_linear.py, load_weights).
MLP_NAMES = ("gate_proj", "up_proj", "down_proj")


class Role(str, Enum):
    """What a tensor is; its storage (dtype, quantization) in a checkpoint follows from this."""

    LINEAR = "linear"  # a Linear weight [out, in]; quantized in FP8/INT4 checkpoints
    ROUTER = "router"  # the MoE gate's Linear weight; kept in the checkpoint dtype
    HEAD = "head"  # the output head's Linear weight; kept in FP8 checkpoints' dtype
    EMBEDDING = "embedding"
    NORM = "norm"  # RMSNorm / LayerNorm weight or bias
    ROUTER_BIAS = "router_bias"  # e_score_correction_bias, stored in F32
    UNQUANTIZED = "unquantized"  # a weight or bias every checkpoint keeps in the model dtype (MTP eh_proj)
    F32 = "f32"  # a parameter its family's checkpoints keep in F32 (KDA's A_log and dt_bias)
    INDEX = "index"  # an integer table the forward pass looks up, not learned (DeepSeek V4's tid2eid, I64)


@dataclass(frozen=True)
class RowPart:
    """The rows of a tensor that one component owns when MLA packs two components into one matrix:
    in every block of `period` rows, `width` rows from `offset` (kv_b_proj: per head of 256 rows, the
    key content is rows 0–127 and the value rows 128–255; kv_a_proj_with_mqa: one block of 576, the
    latent rows 0–511 and the rotary key rows 512–575)."""

    offset: int
    width: int
    period: int

    def owns(self, row: int) -> bool:
        return 0 <= row % self.period - self.offset < self.width

    def describe(self, rows: int) -> str:
        """'rows 512–575', or "features 0–127 of each head's 256"."""
        span = f"{self.offset}–{self.offset + self.width - 1}"
        return f"rows {span}" if self.period == rows else f"features {span} of each head's {self.period}"


@dataclass(frozen=True)
class TensorRef:
    """A checkpoint tensor (or the part of one) that a component owns, in every layer/expert it occurs.

    `pattern` holds `{layer}` and `{expert}` fields that `names()` fills in. When the component owns
    only some rows of the tensor (MLA packs two components into one matrix), `rows` says which.
    """

    pattern: str
    shape: tuple[int, ...]
    role: Role
    layers: tuple[int, ...] = ()
    experts: int = 0
    rows: RowPart | None = None

    @property
    def part(self) -> str:
        """Which part of the tensor this is, in words ('' for the whole tensor)."""
        return self.rows.describe(self.shape[0]) if self.rows else ""

    @property
    def owned_rows(self) -> int:
        return self.shape[0] if self.rows is None else self.rows.width * (self.shape[0] // self.rows.period)

    @property
    def copies(self) -> int:
        """How many tensors the pattern expands to."""
        return max(len(self.layers), 1) * max(self.experts, 1)

    @property
    def elements(self) -> int:
        """Elements of one copy that belong to this reference (the owned rows, or the whole tensor)."""
        return self.owned_rows * math.prod(self.shape[1:])

    def names(self) -> Iterator[str]:
        """Every concrete tensor name, e.g. model.layers.1.mlp.experts.0.up_proj.weight."""
        for _, name in self.layer_names():
            yield name

    def layer_names(self) -> Iterator[tuple[int | None, str]]:
        """(layer index or None, tensor name) for every concrete tensor name."""
        if not self.experts:
            for layer in self.layers or (None,):
                yield layer, self.pattern.format(layer=layer)
            return
        # 69,120 expert names for Kimi K2: fill the layer once, then only the expert index
        for layer in self.layers or (None,):
            head, tail = self.pattern.format(layer=layer, expert="\0").split("\0")
            for expert in range(self.experts):
                yield layer, f"{head}{expert}{tail}"

    @property
    def display_name(self) -> str:
        """The pattern with index sets written as in tensors.json: model.layers.{1..60}.mlp.experts.{0..383}…"""
        return self.pattern.format(layer=index_set(self.layers), expert=index_set(tuple(range(self.experts))))

    @property
    def calculation(self) -> str:
        """Linear weights read `in × out` (the key content up-projection: 512 × 8,192); others by shape."""
        if self.role in (Role.LINEAR, Role.ROUTER, Role.HEAD, Role.UNQUANTIZED) and len(self.shape) == 2:
            return f"{self.shape[1]:,} × {self.owned_rows:,}"
        return " × ".join(f"{d:,}" for d in self.shape)


def index_set(indices: Sequence[int]) -> str:
    """An index set in the checkpoint listing's notation.

    >>> index_set((0,)), index_set(tuple(range(1, 61))), index_set((1, 3, 4, 5))
    ('0', '{1..60}', '{1,3..5}')
    """
    runs = index_runs(indices)
    if len(runs) == 1 and runs[0][0] == runs[0][1]:
        return str(runs[0][0])
    return "{" + ",".join(str(a) if a == b else f"{a}..{b}" for a, b in runs) + "}"


def layer_span(layers: Sequence[int]) -> str:
    """Layers in words: 'layer 0', 'layers 1–60', 'layers 1–3, 5'."""
    runs = index_runs(layers)
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)
    return f"layer {text}" if len(layers) == 1 else f"layers {text}"


def index_runs(indices: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive indices as (first, last) spans: (1, 3, 4, 5) -> [(1, 1), (3, 5)]."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


@dataclass(frozen=True)
class Node:
    """One component: its size per instance, how many instances the model has, and where it lives.

    `calculation` is the per-instance arithmetic with numbers; `formula` the same in config keys.
    Leaves own `tensors`; groups own `children`. Block groups carry the `layers` they stand for and
    their `kind` ("dense" or "moe"), which is how the per-layer report reads the tree.
    """

    name: str
    params_per_instance: int
    instances: int
    activated: int
    calculation: str
    formula: str = ""
    tensors: tuple[TensorRef, ...] = ()
    children: tuple[Node, ...] = ()
    layers: tuple[int, ...] = ()
    kind: str = ""
    #: A stored copy of another module's tensor (the MTP layer's embedding and head).
    copy: bool = False

    @property
    def params(self) -> int:
        return self.params_per_instance * self.instances

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, *path: str) -> Node:
        """The descendant reached by child names, e.g. find('61 transformer blocks', …)."""
        node = self
        for name in path:
            node = next((c for c in node.children if c.name == name), None) or _missing(node, name)
        return node


def _missing(node: Node, name: str) -> Node:
    names = ", ".join(c.name for c in node.children)
    raise KeyError(f"'{node.name}' has no component '{name}' (it has: {names})")


def leaf(
    name: str,
    instances: int,
    tensors: Sequence[TensorRef],
    formula: str,
    *,
    calculation: str | None = None,
    activated: int | None = None,
    copy: bool = False,
) -> Node:
    """A component that owns tensors directly; its size is the sum of what it owns."""
    for tensor in tensors:
        if tensor.copies != instances:
            raise ValueError(
                f"{name}: {tensor.display_name} has {tensor.copies} copies, expected {instances}"
            )
    per_instance = sum(t.elements for t in tensors)
    return Node(
        name=name,
        params_per_instance=per_instance,
        instances=instances,
        activated=per_instance * instances if activated is None else activated,
        calculation=calculation or " + ".join(t.calculation for t in tensors),
        formula=formula,
        tensors=tuple(tensors),
        copy=copy,
    )


def group(
    name: str,
    children: Sequence[Node],
    instances: int = 1,
    *,
    layers: tuple[int, ...] = (),
    kind: str = "",
) -> Node:
    """A component made of others; its calculation is the sum of one instance's parts."""
    total = sum(c.params for c in children)
    per_instance, remainder = divmod(total, instances)
    if remainder:
        raise ValueError(f"{name}: {total} parameters do not split into {instances} equal instances")
    return Node(
        name=name,
        params_per_instance=per_instance,
        instances=instances,
        activated=sum(c.activated for c in children),
        calculation=" + ".join(_share(c, instances) for c in children),
        children=tuple(children),
        layers=layers,
        kind=kind,
    )


def _share(child: Node, parent_instances: int) -> str:
    """A child's part of one parent instance: '44,040,192' or '384 × 44,040,192'."""
    per_parent = child.instances // parent_instances
    if per_parent == 1:
        return f"{child.params_per_instance:,}"
    return f"{per_parent} × {child.params_per_instance:,}"


# --- components --------------------------------------------------------------------------------
# Each builder takes the spec and the layers it is built for, and returns one node whose instances
# are len(layers). Names follow the design notes.


def layer_tensor(
    spec: LayerSizes, suffix: str, shape: tuple[int, ...], role: Role, layers, **kw
) -> TensorRef:
    """A tensor of the language model's layers: {weight_prefix}model.layers.{layer}.{suffix}."""
    return TensorRef(f"{spec.weight_prefix}model.layers.{{layer}}.{suffix}", shape, role, tuple(layers), **kw)


def rms_norm(spec: LayerSizes, layers: Sequence[int], name: str, suffix: str) -> Node:
    """A per-layer RMSNorm weight [hidden_size]. [params]

    >>> rms_norm(k2, [0], "Attention RMSNorm", "input_layernorm.weight").params_per_instance
    7168
    """
    norm = layer_tensor(spec, suffix, (spec.hidden_size,), Role.NORM, layers)
    return leaf(name, len(layers), [norm], "hidden_size")


def query_compression(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """q_a_proj [q_lora_rank, hidden_size] + q_a_layernorm [q_lora_rank]. [params]

    >>> query_compression(k2, [0]).params_per_instance
    11011584
    """
    rank = spec.q_lora_rank
    assert rank is not None  # only built when the config has query compression
    return leaf(
        "Query compression",
        len(layers),
        [
            layer_tensor(spec, "self_attn.q_a_proj.weight", (rank, spec.hidden_size), Role.LINEAR, layers),
            layer_tensor(spec, "self_attn.q_a_layernorm.weight", (rank,), Role.NORM, layers),
        ],
        "hidden_size × q_lora_rank + q_lora_rank",
    )


def query_heads(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """Per-head queries: q_b_proj [H·qk_head_dim, q_lora_rank], or q_proj [H·qk_head_dim, hidden_size]
    when q_lora_rank is null (DeepSeek-V2-Lite). [params]

    >>> query_heads(k2, [0]).params_per_instance  # 1,536 × 64·192
    18874368
    """
    out = spec.num_attention_heads * spec.qk_head_dim
    if spec.q_lora_rank is None:
        q = layer_tensor(spec, "self_attn.q_proj.weight", (out, spec.hidden_size), Role.LINEAR, layers)
        formula = "hidden_size × num_attention_heads·(qk_nope_head_dim + qk_rope_head_dim)"
    else:
        q = layer_tensor(spec, "self_attn.q_b_proj.weight", (out, spec.q_lora_rank), Role.LINEAR, layers)
        formula = "q_lora_rank × num_attention_heads·(qk_nope_head_dim + qk_rope_head_dim)"
    return leaf("Query heads", len(layers), [q], formula)


def _kv_a_proj(spec: LayerSizes, layers: Sequence[int], first: int, rows: int) -> TensorRef:
    """kv_a_proj_with_mqa [kv_lora_rank + qk_rope_head_dim, hidden]: the latent rows, then the rotary key."""
    total = spec.kv_lora_rank + spec.qk_rope_head_dim
    return layer_tensor(
        spec, "self_attn.kv_a_proj_with_mqa.weight", (total, spec.hidden_size), Role.LINEAR, layers,
        rows=RowPart(first, rows, total),
    )  # fmt: skip


def key_value_compression(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """kv_a_proj_with_mqa rows 0…kv_lora_rank-1 + kv_a_layernorm [kv_lora_rank]. [params]

    >>> key_value_compression(k2, [0]).params_per_instance
    3670528
    """
    return leaf(
        "Key–value compression",
        len(layers),
        [
            _kv_a_proj(spec, layers, 0, spec.kv_lora_rank),
            layer_tensor(spec, "self_attn.kv_a_layernorm.weight", (spec.kv_lora_rank,), Role.NORM, layers),
        ],
        "hidden_size × kv_lora_rank + kv_lora_rank",
    )


def _kv_b_proj(spec: LayerSizes, layers: Sequence[int], first: int, width: int) -> TensorRef:
    """kv_b_proj [H·(qk_nope + v), kv_lora_rank]: each head's key-content rows, then its value rows."""
    per_head = spec.qk_nope_head_dim + spec.v_head_dim
    shape = (spec.num_attention_heads * per_head, spec.kv_lora_rank)
    return layer_tensor(
        spec, "self_attn.kv_b_proj.weight", shape, Role.LINEAR, layers, rows=RowPart(first, width, per_head)
    )


def key_content_up_projection(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """kv_b_proj, the first qk_nope_head_dim features of each head. [params]

    >>> node = key_content_up_projection(k2, [0])
    >>> node.params_per_instance, node.calculation
    (4194304, '512 × 8,192')
    """
    return leaf(
        "Key content up-projection",
        len(layers),
        [_kv_b_proj(spec, layers, 0, spec.qk_nope_head_dim)],
        "kv_lora_rank × num_attention_heads·qk_nope_head_dim",
    )


def shared_rotary_key(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """kv_a_proj_with_mqa, the last qk_rope_head_dim rows: one rotary key shared by all heads (without
    rotary position when the config says mla_use_nope: the same rows, cached and used unrotated). [params]

    >>> shared_rotary_key(k2, [0]).params_per_instance
    458752
    """
    return leaf(
        "Shared rotary key" if spec.mla.rotary else "Shared unrotated key",
        len(layers),
        [_kv_a_proj(spec, layers, spec.kv_lora_rank, spec.qk_rope_head_dim)],
        "hidden_size × qk_rope_head_dim",
    )


def value_heads(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """kv_b_proj, the last v_head_dim features of each head. [params]

    >>> value_heads(k2, [0]).params_per_instance
    4194304
    """
    return leaf(
        "Value heads",
        len(layers),
        [_kv_b_proj(spec, layers, spec.qk_nope_head_dim, spec.v_head_dim)],
        "kv_lora_rank × num_attention_heads·v_head_dim",
    )


def attention_output(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """o_proj [hidden_size, H·v_head_dim]. [params]

    >>> attention_output(k2, [0]).params_per_instance
    58720256
    """
    shape = (spec.hidden_size, spec.num_attention_heads * spec.v_head_dim)
    o = layer_tensor(spec, "self_attn.o_proj.weight", shape, Role.LINEAR, layers)
    return leaf("Causal attention", len(layers), [o], "num_attention_heads·v_head_dim × hidden_size")


def output_gate(spec, layers: Sequence[int]) -> Node:
    """Kimi K3's MLA output gate: g_proj [H·v_head_dim, hidden]; the attention output is multiplied by
    sigmoid(g_proj(hidden state)) before o_proj (SGLang python/sglang/srt/models/kimi_k3.py @ 0000e9b,
    KimiK3MLAAttention: ColumnParallelLinear(hidden_size, num_attention_heads * v_head_dim)). [params]
    """
    shape = (spec.num_attention_heads * spec.v_head_dim, spec.hidden_size)
    gate = layer_tensor(spec, "self_attn.g_proj.weight", shape, Role.LINEAR, layers)
    return leaf("Output gate", len(layers), [gate], "hidden_size × num_attention_heads·v_head_dim")


def lightning_indexer(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """DeepSeek-V3.2's indexer: wq_b [n·d, q_lora_rank], wk [d, hidden], weights_proj [n, hidden],
    k_norm weight and bias [d], with n = index_n_heads, d = index_head_dim. Always active. [params]
    """
    indexer = spec.indexer
    assert indexer is not None and spec.q_lora_rank is not None
    n, d, hidden = indexer.n_heads, indexer.head_dim, spec.hidden_size
    prefix = "self_attn.indexer."
    return leaf(
        "Lightning indexer",
        len(layers),
        [
            layer_tensor(spec, prefix + "wq_b.weight", (n * d, spec.q_lora_rank), Role.LINEAR, layers),
            layer_tensor(spec, prefix + "wk.weight", (d, hidden), Role.LINEAR, layers),
            # "weights_proj in the checkpoint is stored in bf16" (DeepSeek-V3.2's inference/model.py)
            layer_tensor(spec, prefix + "weights_proj.weight", (n, hidden), Role.UNQUANTIZED, layers),
            layer_tensor(spec, prefix + "k_norm.weight", (d,), Role.NORM, layers),
            layer_tensor(spec, prefix + "k_norm.bias", (d,), Role.NORM, layers),
        ],
        "q_lora_rank × index_n_heads·index_head_dim + hidden_size × index_head_dim"
        " + hidden_size × index_n_heads + 2·index_head_dim",
    )


def latent_attention(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """Multi-head latent attention, split the way the design notes read it. [params]

    >>> latent_attention(k2, [0]).params_per_instance
    101124096
    """
    n = len(layers)
    parts = []
    if spec.q_lora_rank is not None:
        parts.append(query_compression(spec, layers))
    parts += [
        key_value_compression(spec, layers),
        query_heads(spec, layers),
        group("Key heads", [key_content_up_projection(spec, layers), shared_rotary_key(spec, layers)], n),
        value_heads(spec, layers),
        attention_output(spec, layers),
    ]
    if spec.mla.output_gate:
        parts.insert(-1, output_gate(spec, layers))
    with_indexer = 0 if spec.indexer is None else sum(map(spec.has_indexer, layers))
    if with_indexer not in (0, n):  # block_groups keeps the layers with and without one apart
        raise ValueError(f"layers {list(layers)}: only {with_indexer} of {n} have a lightning indexer")
    if with_indexer:
        parts.append(lightning_indexer(spec, layers))
    return group("Latent attention", parts, n)


def _mlp_tensors(
    spec,
    layers: Sequence[int],
    module: str,
    width: int,
    experts: int = 0,
    names: tuple[str, str, str] = MLP_NAMES,
    hidden: int | None = None,
):
    """A SwiGLU MLP's three weights: gate and up [width, hidden], down [hidden, width]; `hidden` is the
    width it reads and writes (the model's hidden_size, or LatentMoE's latent)."""
    hidden = spec.hidden_size if hidden is None else hidden
    gate, up, down = names
    return [
        layer_tensor(spec, f"{module}.{gate}.weight", (width, hidden), Role.LINEAR, layers, experts=experts),
        layer_tensor(spec, f"{module}.{up}.weight", (width, hidden), Role.LINEAR, layers, experts=experts),
        layer_tensor(spec, f"{module}.{down}.weight", (hidden, width), Role.LINEAR, layers, experts=experts),
    ]


def dense_mlp(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """SwiGLU MLP: gate_proj and up_proj [intermediate_size, hidden], down_proj [hidden, intermediate_size].

    >>> dense_mlp(k2, [0]).params_per_instance  # 3 × 7,168 × 18,432
    396361728
    """
    width = spec.intermediate_size
    return leaf(
        "Dense MLP",
        len(layers),
        _mlp_tensors(spec, layers, "mlp", width),
        "3 × hidden_size × intermediate_size",
        calculation=f"3 × {spec.hidden_size:,} × {width:,}",
    )


def router(
    spec: LayerSizes, layers: Sequence[int], module: str = "mlp", bias_role: Role = Role.ROUTER_BIAS
) -> Node:
    """gate.weight [n_routed_experts, hidden] + gate.e_score_correction_bias [n_routed_experts]
    (the bias only with topk_method noaux_tc; `bias_role` says how the family stores it). [params]

    >>> router(k2, [1]).params_per_instance
    2752896
    """
    n = spec.n_routed_experts
    tensors = [layer_tensor(spec, f"{module}.gate.weight", (n, spec.hidden_size), Role.ROUTER, layers)]
    formula = "hidden_size × n_routed_experts"
    if spec.router_bias:
        tensors.append(layer_tensor(spec, f"{module}.gate.e_score_correction_bias", (n,), bias_role, layers))
        formula += " + n_routed_experts"
    return leaf("Router", len(layers), tensors, formula)


def routed_experts(
    spec: LayerSizes,
    layers: Sequence[int],
    module: str = "mlp",
    names: tuple[str, str, str] = MLP_NAMES,
    hidden: int | None = None,
) -> Node:
    """n_routed_experts SwiGLU experts of width moe_intermediate_size per MoE layer, reading and writing
    `hidden` (hidden_size; LatentMoE's latent); per token only num_experts_per_tok of them run.
    [params per expert]

    >>> node = routed_experts(k2, range(1, 61))
    >>> node.params_per_instance, node.instances, node.activated  # 8 of 384 experts active
    (44040192, 23040, 21139292160)
    """
    width = spec.moe_intermediate_size
    hidden = spec.hidden_size if hidden is None else hidden
    per_expert = 3 * hidden * width
    latent = hidden != spec.hidden_size
    return leaf(
        "Routed experts",
        len(layers) * spec.n_routed_experts,
        _mlp_tensors(
            spec, layers, f"{module}.experts.{{expert}}", width, spec.n_routed_experts, names, hidden
        ),
        f"3 × {'routed_expert_hidden_size' if latent else 'hidden_size'} × moe_intermediate_size",
        calculation=f"3 × {hidden:,} × {width:,}",
        activated=len(layers) * spec.num_experts_per_tok * per_expert,
    )


def shared_experts(spec: LayerSizes, layers: Sequence[int], module: str = "mlp") -> Node:
    """The always-active shared experts, stored as one SwiGLU MLP n_shared_experts × moe_intermediate_size
    wide (DeepSeek-V2 has 2; Kimi K2 and DeepSeek-V3 have 1). [params]

    >>> shared_experts(k2, [1]).params_per_instance
    44040192
    """
    width = spec.n_shared_experts * spec.moe_intermediate_size
    return leaf(
        "Shared expert" if spec.n_shared_experts == 1 else "Shared experts",
        len(layers),
        _mlp_tensors(spec, layers, f"{module}.shared_experts", width),
        "3 × hidden_size × n_shared_experts·moe_intermediate_size",
        calculation=f"3 × {spec.hidden_size:,} × {width:,}",
    )


def mixture_of_experts(spec: LayerSizes, layers: Sequence[int]) -> Node:
    """Router, routed experts and shared experts of one MoE layer. [params]

    >>> mixture_of_experts(k2, [1]).params_per_instance
    16958226816
    """
    parts = [router(spec, layers), routed_experts(spec, layers)]
    if spec.n_shared_experts:
        parts.append(shared_experts(spec, layers))
    return group("Mixture of experts", parts, len(layers))


def embedding(spec: LayerSizes, name: str, pattern: str, layers: tuple[int, ...] = (), copy=False) -> Node:
    """The token embedding [vocab_size, hidden_size] (`copy`: a stored copy, the MTP layer's). [params]"""
    shape = (spec.vocab_size, spec.hidden_size)
    tensor = TensorRef(spec.weight_prefix + pattern, shape, Role.EMBEDDING, layers)
    return leaf(name, max(len(layers), 1), [tensor], "vocab_size × hidden_size", copy=copy)


def output_head(spec: LayerSizes, name: str, pattern: str, layers: tuple[int, ...] = (), copy=False) -> Node:
    """The output head [vocab_size, hidden_size] (`copy`: a stored copy, the MTP layer's). [params]"""
    shape = (spec.vocab_size, spec.hidden_size)
    tensor = TensorRef(spec.weight_prefix + pattern, shape, Role.HEAD, layers)
    return leaf(name, max(len(layers), 1), [tensor], "hidden_size × vocab_size", copy=copy)


def final_norm(spec: LayerSizes, name: str, pattern: str, layers: tuple[int, ...] = ()) -> Node:
    """An RMSNorm weight [hidden_size] outside the blocks (the final norm, the MTP output norm). [params]"""
    norm = TensorRef(spec.weight_prefix + pattern, (spec.hidden_size,), Role.NORM, layers)
    return leaf(name, max(len(layers), 1), [norm], "hidden_size")


# --- the vision side (Kimi K2.5) -------------------------------------------------------------------
# MoonViT and the patch-merger projector; every tensor kept in the model dtype, outside the language
# model's quantization. Linear weights are [out, in] with biases; LayerNorms have a weight and a bias.


def _vision_linear(pattern: str, out_features: int, in_features: int, layers: tuple[int, ...] = ()):
    return [
        TensorRef(f"{pattern}.weight", (out_features, in_features), Role.UNQUANTIZED, layers),
        TensorRef(f"{pattern}.bias", (out_features,), Role.UNQUANTIZED, layers),
    ]


def _layer_norm(pattern: str, width: int, layers: tuple[int, ...] = ()) -> list[TensorRef]:
    return [TensorRef(f"{pattern}.{p}", (width,), Role.NORM, layers) for p in ("weight", "bias")]


def vision_blocks(vision: VisionSpec) -> Node:
    """vt_num_hidden_layers MoonViT blocks: LayerNorm, fused QKV [3·vt_hidden, vt_hidden] and output
    [vt_hidden, vt_hidden] projections, LayerNorm, MLP fc0 [vt_intermediate, vt_hidden] and fc1
    [vt_hidden, vt_intermediate]; every Linear with a bias. [params]"""
    n, hidden, inner = vision.num_layers, vision.hidden_size, vision.intermediate_size
    layers = tuple(range(n))
    block = "vision_tower.encoder.blocks.{layer}"
    parts = [
        leaf("Attention LayerNorm", n, _layer_norm(f"{block}.norm0", hidden, layers), "2 × vt_hidden_size"),
        leaf(
            "Fused QKV",
            n,
            _vision_linear(f"{block}.wqkv", 3 * hidden, hidden, layers),
            "vt_hidden_size × 3·vt_hidden_size + 3·vt_hidden_size",
        ),
        leaf(
            "Attention output",
            n,
            _vision_linear(f"{block}.wo", hidden, hidden, layers),
            "vt_hidden_size × vt_hidden_size + vt_hidden_size",
        ),
        leaf("MLP LayerNorm", n, _layer_norm(f"{block}.norm1", hidden, layers), "2 × vt_hidden_size"),
        leaf(
            "MLP",
            n,
            _vision_linear(f"{block}.mlp.fc0", inner, hidden, layers)
            + _vision_linear(f"{block}.mlp.fc1", hidden, inner, layers),
            "2 × vt_hidden_size × vt_intermediate_size + vt_intermediate_size + vt_hidden_size",
        ),
    ]
    return group(f"{n} vision blocks", parts, n)


def vision_tower(vision: VisionSpec) -> Node:
    """MoonViT: a patch embedding (a conv [vt_hidden, 3, patch, patch] with bias), a learned position
    embedding [init_pos_emb_height, init_pos_emb_width, vt_hidden], the blocks, a final LayerNorm."""
    hidden, patch = vision.hidden_size, vision.patch_size
    conv = [
        TensorRef("vision_tower.patch_embed.proj.weight", (hidden, 3, patch, patch), Role.UNQUANTIZED),
        TensorRef("vision_tower.patch_embed.proj.bias", (hidden,), Role.UNQUANTIZED),
    ]
    position = TensorRef(
        "vision_tower.patch_embed.pos_emb.weight",
        (vision.pos_emb_height, vision.pos_emb_width, hidden),
        Role.UNQUANTIZED,
    )
    return group(
        "Vision tower",
        [
            leaf("Patch embedding", 1, conv, "vt_hidden_size × 3 × patch_size² + vt_hidden_size"),
            leaf(
                "Position embedding",
                1,
                [position],
                "init_pos_emb_height × init_pos_emb_width × vt_hidden_size",
            ),
            vision_blocks(vision),
            leaf(
                "Final LayerNorm",
                1,
                _layer_norm("vision_tower.encoder.final_layernorm", hidden),
                "2 × vt_hidden_size",
            ),
        ],
    )


def projector(vision: VisionSpec) -> Node:
    """The patch merger: a LayerNorm over mm_hidden_size, then proj.0 [m, m] and proj.2 [text_hidden, m]
    with biases, m = mm_hidden_size × merge_kernel_size[0] × merge_kernel_size[1]. [params]"""
    m = vision.merged_size
    return group(
        "Projector",
        [
            leaf(
                "Pre-norm",
                1,
                _layer_norm("mm_projector.pre_norm", vision.mm_hidden_size),
                "2 × mm_hidden_size",
            ),
            leaf("Merged patch projection", 1, _vision_linear("mm_projector.proj.0", m, m), "m × m + m"),
            leaf(
                "Projection to the language model",
                1,
                _vision_linear("mm_projector.proj.2", vision.text_hidden_size, m),
                "m × text_hidden_size + text_hidden_size",
            ),
        ],
    )


@dataclass(frozen=True)
class LayerCount:
    index: int
    kind: str
    params: int
    activated: int


@dataclass(frozen=True)
class Anatomy:
    """The component trees of one model: the language model, the MTP module when there is one, and the
    vision side of a multimodal model. Only the language model counts in `total` and `activated`."""

    spec: ModelSpec
    model: Node
    mtp: Node | None = None
    vision: Node | None = None
    #: What a reader of the tree must be told about it, in a sentence each (its family's).
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return self.model.params

    @property
    def activated(self) -> int:
        return self.model.activated

    def layers(self) -> list[LayerCount]:
        """One row per main transformer layer, read off the block groups of the tree."""
        rows = []
        for node in self.model.walk():
            for index in node.layers:
                rows.append(
                    LayerCount(index, node.kind, node.params_per_instance, node.activated // node.instances)
                )
        return sorted(rows, key=lambda row: row.index)

    @property
    def mtp_unique(self) -> int:
        """MTP parameters that are its own (without the stored embedding and head copies)."""
        return sum(c.params for c in self.mtp.children if not c.copy) if self.mtp else 0

    @property
    def mtp_activated(self) -> int:
        """MTP parameters used per token, not counting the copies (they duplicate the main model's)."""
        return sum(c.activated for c in self.mtp.children if not c.copy) if self.mtp else 0


def check_tensor_sizes(anatomy: Anatomy) -> None:
    """Every tensor of the trees within what a tensor can hold: each dimension and the element count at
    most 2^63 − 1 (MAX_SIZE: torch and engines count in int64, safetensors in u64). The spec bounds
    each config size alone; a tensor's dims are products of them (heads × head width), known here."""
    for tree in (anatomy.model, anatomy.mtp, anatomy.vision):
        for node in tree.walk() if tree is not None else ():
            for ref in node.tensors:
                over = "a dimension" if max(ref.shape) > MAX_SIZE else "the element count"
                if over == "a dimension" or math.prod(ref.shape) > MAX_SIZE:
                    shape = ", ".join(f"{d:,}" for d in ref.shape)
                    raise ConfigError(
                        f"{anatomy.spec.name}: the config's sizes make {ref.display_name} [{shape}], "
                        f"{over} over {MAX_SIZE:,} (2^63 − 1), more than a tensor holds"
                    )


def build_anatomy(spec) -> Anatomy:
    """The component trees of the model the spec describes, built by its family (kimicount.families)."""
    from kimicount.families import build_anatomy as family_anatomy

    return family_anatomy(spec)
