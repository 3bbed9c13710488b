"""Where each weight lives: the parallel layout, and the bytes of every component on one GPU.

The layout is vLLM's (its deepseek_v2.py, its linear and fused-MoE layers); the rule follows from the
module a tensor belongs to:

| module | rule under tensor parallelism (TP ranks) |
|---|---|
| q_a_proj, kv_a_proj_with_mqa, every norm, the router and its bias, the V3.2 indexer, eh_proj | replicated |
| q_b_proj (q_proj), kv_b_proj | split by heads: each rank its H / TP heads' rows |
| o_proj | split by heads on its input side: each rank its heads' columns |
| KDA: q/k/v_proj, g_proj (and MLA's output gate), g_b_proj, f_b_proj, b_proj, q/k/v_conv1d, dt_bias, A_log | split by heads (ColumnParallelLinear; A_log [1, 1, H, 1] on its third dimension) |
| KDA: f_a_proj, g_a_proj, o_norm; LatentMoE's down/up projections and norm | replicated |
| dense MLP, shared experts | gate/up rows and down columns split along the intermediate dimension |
| routed experts | without EP: every expert split along its intermediate dimension over TP × DP ranks; with EP (size TP × DP): whole experts, ceil(E / EP) on the fullest rank |
| embedding, output head | split by vocabulary, the vocabulary padded to a multiple of 64 first |

DeepSeek V4 (vLLM's models/deepseek_v4.py @ 023da1f, DeepseekV4Attention and DeepseekV4MLP): wq_b is
column-parallel (split by heads); wo_a column-parallel over its o_groups × o_lora_rank rows (each rank
its o_groups ÷ TP groups: split with the heads); wo_b row-parallel; the shared expert's w1, w3 and w2
split along its width; wq_a and wkv (fused_wqa_wkv, disable_tp), the norms, the compressors
(fused_wkv_wgate, disable_tp), the indexer (ReplicatedLinear: "no tensor parallel, just replicated"),
the router, the hash table and the hyper-connections replicated; attn_sink holds the rank's heads
padded to at least 64 (FlashMLA's), F32.

Data-parallel attention (`dp` > 1) gives each DP rank its own copy of everything the TP rule covers,
over its own TP group (TP1: the whole attention, dense MLP, shared expert, embedding and head); only
the routed experts span all TP × DP ranks. Pipeline parallelism gives each stage its layers (vLLM's
partition: the remainder goes to the stages before the last), the embedding to the first and the
final norm and head to the last.

SGLang's data-parallel attention (`sglang_dp`, its --enable-dp-attention) differs: its TP group spans
all TP × DP GPUs and only the attention is per DP rank (attention TP = tp_size ÷ dp_size). The dense
MLP and the shared expert are split over the whole group (DeepseekV2MLP at the full tp_size; the shared
expert is whole on every GPU only when DeepEP runs the MoE, not modelled), the output head too
(ParallelLMHead over the full group unless --enable-dp-lm-head), and the embedding is whole on every
GPU (VocabParallelEmbedding with enable_tp off under DP attention), as its deepseek_v2.py builds them.

Redundant experts (vLLM --enable-eplb --num-redundant-experts R, SGLang --ep-num-redundant-experts R)
give each of the EP ranks (E + R) ÷ EP expert slots, each a whole expert's weights. Both engines take
the slots per rank as that quotient and balance them with DeepSeek's EPLB, whose
rebalance_experts_hierarchical asserts `num_physical_experts % num_gpus == 0` (vLLM's
distributed/eplb/rebalance_algo.py, SGLang's eplb/eplb_algorithms/deepseek.py): a count that does not
divide is refused here too.

vLLM also keeps, beside an FP8 kv_b_proj, BF16 copies of its two halves, W_UK and W_UV, for the
absorbed decode ("we currently do not have quantized bmm's ... we just store fp16/bf16 copies", its MLA
layer's process_weights_after_loading; a quantized kv_b_proj is dequantized there, an unquantized one
is only viewed). They are a component of their own here, split by heads as kv_b_proj is.

A rank's bytes are the storage bytes of its shard, computed by the storage model (`ref_memory`) on the
shard's shape, so FP8 block scales and INT4 group scales are split exactly as the weights are. Shapes
an engine cannot split (heads not divisible by TP, a split that cuts an FP8 block or an INT4 group)
are refused with one line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import lru_cache

from kimicount.anatomy import Anatomy, Node, Role, TensorRef
from kimicount.component_ids import tree_ids
from kimicount.errors import UsageError, require_positive
from kimicount.flow import is_kv_b_proj, vllm_bf16_absorption
from kimicount.kvcache import DTYPE_BYTES, check_tp, default_dtype
from kimicount.spec import Fp4Quantization, ModelSpec
from kimicount.storage import fp4_quantizable, fp8_quantized, packable, ref_memory

#: vLLM and SGLang pad the vocabulary to a multiple of this before splitting it (DEFAULT_VOCAB_PADDING_SIZE).
VOCAB_PADDING = 64


@dataclass(frozen=True)
class Parallel:
    """A parallel layout: `tp` tensor-parallel ranks per attention group, `pp` pipeline stages, `dp`
    data-parallel attention groups, expert parallelism over all TP × DP ranks (`ep`), and `dcp` ranks of
    decode-context parallelism inside each TP group (the latent cache split by token)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False
    dcp: int = 1
    redundant: int = 0  # redundant expert slots, over all EP ranks
    sglang_dp: bool = False  # SGLang's DP attention: dense MLP, shared expert and head over TP × DP

    @property
    def dense_ranks(self) -> int:
        """The ranks the dense MLP, the shared expert and the output head split over: the attention TP
        group, or all TP × DP ranks under SGLang's DP attention."""
        return self.tp * self.dp if self.sglang_dp else self.tp

    @property
    def gpus(self) -> int:
        """tp × pp × dp. [GPUs]"""
        return self.tp * self.pp * self.dp

    @property
    def moe_ranks(self) -> int:
        """The ranks one MoE layer spreads over (within a stage): tp × dp, the EP size when EP is on."""
        return self.tp * self.dp

    @property
    def label(self) -> str:
        """'TP8', 'DP8 + EP8', 'TP4 × PP2', 'TP8 + DCP8'.

        >>> Parallel(tp=8).label, Parallel(dp=8, ep=True).label, Parallel(tp=4, pp=2, dcp=4).label
        ('TP8', 'DP8 + EP8', 'TP4 × PP2 + DCP4')
        """
        if self.sglang_dp:  # as SGLang's flags say it: --tp (all ranks) --dp N --enable-dp-attention
            parts = [f"TP{self.tp * self.dp} + DP{self.dp} attention"]
        else:
            parts = [f"TP{self.tp}"] if self.tp > 1 or self.dp == 1 else []
            if self.dp > 1:
                parts.append(f"DP{self.dp}")
        text = " × ".join(parts + ([f"PP{self.pp}"] if self.pp > 1 else []))
        if self.ep:
            text += f" + EP{self.moe_ranks}"
        if self.dcp > 1:
            text += f" + DCP{self.dcp}"
        return text


def parallel_layout(
    spec: ModelSpec,
    gpus: int,
    *,
    tp: int | None = None,
    pp: int = 1,
    dp: int = 1,
    ep: int | None = None,
    dcp: int = 1,
    redundant: int = 0,
    sglang_dp: bool = False,
) -> Parallel:
    """The layout the options describe, checked against the model; TP takes whatever pp and dp leave.

    `ep` is the EP size the user typed: None or 1 is expert parallelism off; on, engines size it as
    TP × DP (vLLM's --enable-expert-parallel, SGLang's --ep-size), so any other value is refused.
    `redundant` expert slots need EP and must divide with the experts over the EP ranks.

    >>> parallel_layout(k2, 8), parallel_layout(k2, 8, dp=8, ep=8).label, parallel_layout(k2, 8, ep=1).ep
    (Parallel(tp=8, pp=1, dp=1, ep=False, dcp=1, redundant=0, sglang_dp=False), 'DP8 + EP8', False)
    """
    for option, value in (("--gpus", gpus), ("--pp", pp), ("--dp", dp), ("--dcp", dcp)):
        require_positive(option, value)
    if ep is not None:
        require_positive("--ep", ep)
    if tp is None:
        if gpus % (pp * dp):
            raise UsageError(f"--gpus {gpus}: does not divide into --pp {pp} × --dp {dp} groups")
        tp = gpus // (pp * dp)
    require_positive("--tp", tp)
    if tp * pp * dp != gpus:
        raise UsageError(f"--tp {tp} × --pp {pp} × --dp {dp} = {tp * pp * dp} GPUs, but --gpus says {gpus}")
    check_tp(spec, tp)
    if pp > spec.num_hidden_layers:
        raise UsageError(f"--pp {pp}: more stages than the {spec.num_hidden_layers} layers of {spec.name}")
    if tp % dcp:
        raise UsageError(f"--dcp {dcp}: must divide --tp {tp} (decode-context parallelism splits a TP group)")
    if ep not in (None, 1, tp * dp):
        raise UsageError(
            f"--ep {ep}: expert parallelism is off (--ep 1) or spans all TP × DP ranks, {tp} × {dp} = "
            f"{tp * dp} here (vLLM --enable-expert-parallel, SGLang --ep-size); use --ep {tp * dp} or --ep 1"
        )
    expert_parallel = ep == tp * dp and tp * dp > 1
    if redundant < 0:
        raise UsageError(f"--num-redundant-experts {redundant}: expected a count of 0 or more")
    if redundant and not expert_parallel:
        raise UsageError(
            f"--num-redundant-experts {redundant}: redundant experts are copies placed by expert-parallel "
            f"load balancing; turn on expert parallelism (--ep {tp * dp})"
        )
    slots = spec.n_routed_experts + redundant
    if redundant and slots % (tp * dp):
        raise UsageError(
            f"--num-redundant-experts {redundant}: {spec.n_routed_experts} experts + {redundant} = {slots:,} "
            f"slots do not divide over EP {tp * dp}; vLLM and SGLang's EPLB need the same number on every GPU"
        )
    return Parallel(
        tp=tp, pp=pp, dp=dp, ep=expert_parallel, dcp=dcp, redundant=redundant, sglang_dp=sglang_dp and dp > 1
    )


def experts_per_gpu(spec: ModelSpec, parallel: Parallel) -> int:
    """Whole routed-expert slots on the fullest GPU under expert parallelism: ceil((E + R) / EP), R the
    redundant slots (which then divide evenly). [experts]

    >>> experts_per_gpu(k2, Parallel(dp=8, ep=True)), experts_per_gpu(k2, Parallel(dp=10, ep=True))
    (48, 39)
    >>> experts_per_gpu(k2, Parallel(dp=8, ep=True, redundant=8))  # (384 + 8) ÷ 8
    49
    """
    return -(-(spec.n_routed_experts + parallel.redundant) // parallel.moe_ranks)


def expert_width_per_gpu(spec: ModelSpec, parallel: Parallel) -> int:
    """An expert's intermediate width on one GPU: whole under EP, else split over the TP × DP ranks.
    [columns]

    >>> expert_width_per_gpu(k2, Parallel(tp=8)), expert_width_per_gpu(k2, Parallel(dp=8, ep=True))
    (256, 2048)
    """
    return spec.moe_intermediate_size // (1 if parallel.ep else parallel.moe_ranks)


def pipeline_stages(num_layers: int, pp: int) -> list[tuple[int, ...]]:
    """The main layers of each stage, as vLLM partitions them: num_layers // pp each, the remainder
    one more each to the stages before the last, counting back from it.

    >>> [len(s) for s in pipeline_stages(61, 2)], [len(s) for s in pipeline_stages(61, 4)]
    ([31, 30], [15, 15, 16, 15])
    """
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    starts = [sum(sizes[:i]) for i in range(pp)]
    return [tuple(range(start, start + size)) for start, size in zip(starts, sizes)]


# --- the rule of each tensor ----------------------------------------------------------------------


class Rule(str, Enum):
    """How a tensor is divided among ranks."""

    replicated = "replicated"
    heads = "split by heads"  # output rows
    heads_input = "split by heads, input side"  # o_proj's columns
    intermediate = "split along the intermediate dimension"
    experts = "routed experts"  # split or whole, depending on EP
    vocabulary = "split by vocabulary"


_HEAD_SPLIT = (".q_b_proj.", ".q_proj.", ".kv_b_proj.", ".attn.wq_b.", ".attn.wo_a.", ".o_a_proj.")
_HEAD_INPUT = (".o_proj.", ".attn.wo_b.", ".o_b_proj.")
#: Kimi Delta Attention's per-head tensors (vLLM layers/kda.py @ 01a7e5d, KimiDeltaAttention.__init__:
#: q/k/v_proj, f_b_proj, g_b_proj, b_proj and the q/k/v_conv1d containers are ColumnParallelLinear; dt_bias
#: is loaded with sharded_weight_loader(0) and A_log [1, 1, H, 1] sharded on its heads; f_a_proj and
#: g_a_proj are ReplicatedLinear; SGLang's kimi_k3.py makes the full-rank g_proj ColumnParallelLinear,
#: and the MLA layers' output gate g_proj [H·v_head_dim, hidden] goes with their heads too). Kimi K3's
#: 1-D A_log [head_dim] (zero-padded rates) is kept whole here: 512 B a layer.
_KDA_HEAD_SPLIT = (
    ".k_proj.",
    ".v_proj.",
    ".g_proj.",
    ".g_b_proj.",
    ".f_b_proj.",
    ".b_proj.",
    "_conv1d.",
)
_KDA_HEAD_VECTORS = (".dt_bias", ".A_log")
_INTERMEDIATE_ROWS = (
    ".mlp.gate_proj.",
    ".mlp.up_proj.",
    ".shared_experts.gate_proj.",
    ".shared_experts.up_proj.",
    ".shared_experts.w1.",
    ".shared_experts.w3.",
)
_INTERMEDIATE_COLUMNS = (".mlp.down_proj.", ".shared_experts.down_proj.", ".shared_experts.w2.")
#: DeepSeek V4's attention sinks, one F32 per head: vLLM keeps the rank's heads, at least 64.
_SINKS = (".attn.attn_sink", ".self_attn.sinks")
SINK_HEADS = 64


def tensor_rule(ref: TensorRef) -> Rule:
    """The rule for a tensor, from the module it belongs to (as engines decide it).

    >>> from kimicount.anatomy import attention_output, query_heads, router
    >>> tensor_rule(query_heads(k2, [0]).tensors[0]), tensor_rule(attention_output(k2, [0]).tensors[0])
    (<Rule.heads: 'split by heads'>, <Rule.heads_input: 'split by heads, input side'>)
    >>> tensor_rule(router(k2, [1]).tensors[0])
    <Rule.replicated: 'replicated'>
    """
    pattern = ref.pattern
    if ref.role in (Role.EMBEDDING, Role.HEAD):
        return Rule.vocabulary
    if ref.experts:
        return Rule.experts
    if ".indexer." in pattern:  # vLLM: "no tensor parallel, just replicated"
        return Rule.replicated
    if any(module in pattern for module in _HEAD_SPLIT + _KDA_HEAD_SPLIT) or pattern.endswith(_SINKS):
        return Rule.heads
    if pattern.endswith(_KDA_HEAD_VECTORS) and (len(ref.shape) == 4 or pattern.endswith(".dt_bias")):
        return Rule.heads
    if any(module in pattern for module in _HEAD_INPUT):
        return Rule.heads_input
    if any(module in pattern for module in _INTERMEDIATE_ROWS + _INTERMEDIATE_COLUMNS):
        return Rule.intermediate
    return Rule.replicated


def padded_vocabulary(spec: ModelSpec) -> int:
    """vocab_size rounded up to a multiple of 64, as engines allocate it. [rows]

    >>> padded_vocabulary(k2)
    163840
    """
    return -(-spec.vocab_size // VOCAB_PADDING) * VOCAB_PADDING


@dataclass(frozen=True)
class Shard:
    """What one rank holds of a tensor reference: the shard (a TensorRef the storage model sizes), how
    many equal parts the split dimension was cut into, and which dimension (0 rows, 1 columns, None
    whole). `parts` for whole experts is the EP size."""

    ref: TensorRef
    rule: Rule
    parts: int = 1
    axis: int | None = None


def shard(
    spec: ModelSpec, ref: TensorRef, parallel: Parallel, layers: Sequence[int] | None = None
) -> Shard | None:
    """The part of `ref` on the fullest rank of a stage holding `layers` (None: every layer); None
    when the stage holds none of it. Refuses splits engines refuse."""
    if ref.layers and layers is not None:
        held = set(layers)
        kept = tuple(i for i in ref.layers if i in held)
        if not kept:
            return None
        ref = replace(ref, layers=kept)
    rule = tensor_rule(ref)
    if rule is Rule.replicated:
        return Shard(ref, rule)
    if rule is Rule.vocabulary:
        padded = padded_vocabulary(spec)
        parts = vocabulary_ranks(parallel, ref)
        if padded % parts:
            raise UsageError(
                f"--tp {parts}: {spec.name}'s vocabulary padded to a multiple of {VOCAB_PADDING} "
                f"({padded:,} rows) does not split evenly over {parts} GPUs, which vLLM and SGLang require"
            )
        return Shard(replace(ref, shape=(padded // parts, *ref.shape[1:])), rule, parts, 0)
    if rule is Rule.experts:
        if parallel.ep:
            return Shard(replace(ref, experts=experts_per_gpu(spec, parallel)), rule, parallel.moe_ranks)
        parts = parallel.moe_ranks
        option = f"--tp {parallel.tp} × --dp {parallel.dp}" if parallel.dp > 1 else f"--tp {parallel.tp}"
    elif rule is Rule.intermediate:
        parts, option = parallel.dense_ranks, f"--tp {parallel.dense_ranks}"
    else:
        parts, option = parallel.tp, f"--tp {parallel.tp}"
    if ref.pattern.endswith(_SINKS):  # the rank's heads, padded to FlashMLA's 64 with -inf
        heads = max(ref.shape[0] // parts, SINK_HEADS)
        return Shard(replace(_split(spec, ref, 0, parts, option), shape=(heads,)), rule, parts, 0)
    # down_proj and DeepSeek V4's w2 (routed and shared experts) are row-parallel: split by input
    axis = 1 if rule is Rule.heads_input or ".down_proj." in ref.pattern or ".w2." in ref.pattern else 0
    if ref.pattern.endswith(".A_log"):  # [1, 1, H, 1]: the heads are its third dimension
        axis = 2
    return Shard(_split(spec, ref, axis, parts, option), rule, parts, axis)


def vocabulary_ranks(parallel: Parallel, ref: TensorRef) -> int:
    """The ranks the embedding or the head splits over: the attention TP group; under SGLang's DP
    attention the embedding is whole on every GPU and the head split over all TP × DP ranks."""
    if not parallel.sglang_dp:
        return parallel.tp
    return 1 if ref.role is Role.EMBEDDING else parallel.dense_ranks


def _split(spec: ModelSpec, ref: TensorRef, axis: int, parts: int, option: str) -> TensorRef:
    """`ref` with dimension `axis` cut into `parts`, checked as vLLM's linear layers check it."""
    size = ref.shape[axis]
    what = f"{option}: {ref.display_name}"
    if size % parts:
        raise UsageError(f"{what}: its {size:,} {_dimension(axis)} do not split evenly over {parts} GPUs")
    local = size // parts
    if parts > 1 and fp8_quantized(spec, ref.role):
        rows, columns = spec.quantization.block  # type: ignore[union-attr]  # FP8, checked just above
        if local % (rows, columns)[axis]:
            raise UsageError(
                f"{what}: {local:,} {_dimension(axis)} per GPU ({size:,} over {parts}) would cut its "
                f"{rows} × {columns} FP8 blocks; vLLM and SGLang need whole blocks on each GPU"
            )
    if parts > 1 and axis == 1 and packable(spec, ref.role):
        group = spec.quantization.group_size  # type: ignore[union-attr]
        if group and local % group:
            raise UsageError(
                f"{what}: {local:,} inputs per GPU ({size:,} over {parts}) would cut its INT4 groups of {group}"
            )
    if parts > 1 and axis == 1 and fp4_quantizable(spec, ref.role):
        # an FP4 Linear's scales are one per group of inputs (NVFP4 16, MXFP4 32): the engines' FP4 MoE
        # and linear methods take whole groups on each rank (vLLM's ModelOptNvFp4 / Mxfp4 create_weights
        # allocate weight_scale [out, in_per_rank // group_size])
        quantization = spec.quantization
        assert isinstance(quantization, Fp4Quantization)
        group = quantization.group_size
        if local % group:
            raise UsageError(
                f"{what}: {local:,} inputs per GPU ({size:,} over {parts}) would cut its "
                f"{quantization.scheme.upper()} groups of {group}"
            )
    shape = list(ref.shape)
    shape[axis] = local
    return replace(ref, shape=tuple(shape))


def _dimension(axis: int) -> str:
    return ("rows", "columns", "heads")[axis] if axis < 3 else "elements"


@lru_cache(maxsize=4096)
def shard_bytes(spec: ModelSpec, ref: TensorRef) -> int:
    """Storage bytes of a shard (its FP8 or INT4 scales included), from the storage model. [bytes]"""
    return ref_memory(spec, ref).stored


# --- one GPU's weights, per component ---------------------------------------------------------------


class Kind(str, Enum):
    """What a component is to a forward pass (the speed floor reads it): which bytes a step reads."""

    weights = "weights"  # read whole by every step
    kv_b_proj = "kv_b_proj"  # read by prefill; by the absorbed decode too unless vLLM's copies stand in
    absorption = "absorption copies"  # vLLM's BF16 W_UK, W_UV: read by the absorbed decode
    routed_experts = "routed experts"  # read in the share the step's tokens touch
    embedding = "embedding"  # a lookup: a step reads its tokens' rows only
    mtp = "multi-token prediction"  # runs only when speculative decoding drafts
    vision = "vision"  # runs on images only


@dataclass(frozen=True)
class PlacedComponent:
    """A component (all its layers) under a layout: its rule in words, its bytes in the whole model's
    checkpoint (0 for what an engine makes at load time: `in_checkpoint` False), and its bytes on the
    fullest GPU of each pipeline stage."""

    name: str
    rule: str
    model_bytes: int
    bytes_per_gpu: tuple[int, ...]  # one per stage
    kind: Kind = Kind.weights
    in_checkpoint: bool = True
    component_ids: tuple[str, ...] = ()  # the tree nodes it sums (kimicount.component_ids), in order


@dataclass(frozen=True)
class Placement:
    """Every component's bytes per GPU under one layout, stage by stage."""

    parallel: Parallel
    stages: tuple[tuple[int, ...], ...]  # the main layers of each stage
    components: tuple[PlacedComponent, ...]
    mtp_layers: int = 0  # MTP layers loaded (on the last stage)

    def weight_bytes(self, stage: int) -> int:
        """Σ bytes on the fullest GPU of `stage`. [bytes]"""
        return sum(c.bytes_per_gpu[stage] for c in self.components)

    def kind_bytes(self, stage: int, *kinds: Kind) -> int:
        """Σ bytes of the components of these kinds on the fullest GPU of `stage`. [bytes]"""
        return sum(c.bytes_per_gpu[stage] for c in self.components if c.kind in kinds)

    def has(self, kind: Kind) -> bool:
        """Whether any component is of this kind."""
        return any(c.kind is kind for c in self.components)

    def kv_layers(self, stage: int) -> int:
        """Layers whose KV cache the stage holds: its main layers, and the MTP layers on the last."""
        return len(self.stages[stage]) + (self.mtp_layers if stage == len(self.stages) - 1 else 0)


@dataclass
class _Row:
    """A component row being summed over its tensors."""

    kind: Kind
    model_bytes: int = 0
    per_stage: list[int] = field(default_factory=list)
    shards: list[Shard] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # the component ids of the nodes it sums

    def owns(self, component_id: str) -> None:
        if component_id not in self.ids:
            self.ids.append(component_id)


def _kind(node: Node) -> Kind:
    """A language-model leaf's kind, from its tensors."""
    refs = node.tensors
    if all(ref.experts for ref in refs):
        return Kind.routed_experts
    if any(ref.role is Role.EMBEDDING for ref in refs):
        return Kind.embedding
    if all(is_kv_b_proj(ref) for ref in refs):
        return Kind.kv_b_proj
    return Kind.weights


def _leaves(node: Node) -> Iterator[Node]:
    for n in node.walk():
        if n.tensors and not n.copy:  # the MTP layer's embedding and head copies: engines use the main ones
            yield n


def place(
    anatomy: Anatomy,
    parallel: Parallel,
    *,
    mtp: bool = False,
    vision: bool = True,
    copies_name: str = "",
) -> Placement:
    """Each component's bytes on the fullest GPU of every stage.

        The language model's leaves are one row each (the same component of the dense and MoE blocks
        summed). With `mtp` (speculative decoding) the MTP module's own layer is one row, on the last stage;
        its embedding and head are the main model's, which engines share with it. With `vision` the vision
        tower and projector are one row on the first stage (the image encoder runs before layer 0),
        replicated. When kv_b_proj is quantized, vLLM's BF16 copies of W_UK and W_UV are one row more
        (ABSORPTION_COPIES): each GPU's kv_b_proj shard again, at 2 bytes an element, not in the checkpoint.
        SGLang keeps the same, its w_kc and w_vc (deepseek_v2.py's post_load_weights dequantizes a 128 × 128
        block-FP8 kv_b_proj to BF16 and splits it, unless SGL_USE_DEEPGEMM_BMM): `copies_name` names the row as
    the engine calls them (vLLM's by default).

        >>> from kimicount.anatomy import build_anatomy
        >>> placement = place(build_anatomy(k2), Parallel(tp=8))
        >>> [(c.name, c.bytes_per_gpu) for c in placement.components][:2]
        [('Token embedding', (293601280,)), ('Attention RMSNorm', (874496,))]
        >>> placement.components[-1].name, placement.components[-1].bytes_per_gpu  # 61 × 8 heads × 256 × 512 × 2
        ("vLLM's BF16 W_UK, W_UV", (127926272,))
    """
    spec = anatomy.spec
    stages = pipeline_stages(spec.num_hidden_layers, parallel.pp)
    count = len(stages)
    rows: dict[str, _Row] = {}
    copies = _Row(Kind.absorption, per_stage=[0] * count)  # vLLM's dequantized kv_b_proj, per stage
    copy_bytes = DTYPE_BYTES[default_dtype(spec)] if vllm_bf16_absorption(spec) else 0

    ids = tree_ids(anatomy.model, anatomy.mtp, anatomy.vision)

    def add(
        node: Node, name: str, kind: Kind, ref: TensorRef, stage_layers: dict[int, Sequence[int] | None]
    ) -> None:
        row = rows.setdefault(name, _Row(kind, per_stage=[0] * count))
        row.owns(ids[id(node)])
        row.model_bytes += shard_bytes(spec, ref)
        for stage, kept in stage_layers.items():
            placed = shard(spec, ref, parallel, kept)
            if placed is not None:
                row.per_stage[stage] += shard_bytes(spec, placed.ref)
                row.shards.append(placed)
                if copy_bytes and is_kv_b_proj(ref):
                    copies.per_stage[stage] += placed.ref.elements * placed.ref.copies * copy_bytes
                    copies.shards.append(placed)
                    copies.owns(ids[id(node)])

    for node in _leaves(anatomy.model):
        for ref in node.tensors:
            if ref.layers:
                add(node, node.name, _kind(node), ref, dict(enumerate(stages)))
            else:  # the embedding goes to the first stage; the final norm and the head to the last
                add(node, node.name, _kind(node), ref, {0 if ref.role is Role.EMBEDDING else count - 1: None})
    if mtp and anatomy.mtp is not None:
        for node in _leaves(anatomy.mtp):
            for ref in node.tensors:
                add(node, "Multi-token prediction", Kind.mtp, ref, {count - 1: spec.mtp_layers})
    if vision and anatomy.vision is not None:
        for node in _leaves(anatomy.vision):
            for ref in node.tensors:
                row = rows.setdefault("Vision tower and projector", _Row(Kind.vision, per_stage=[0] * count))
                row.owns(ids[id(node)])
                row.model_bytes += shard_bytes(spec, ref)
                row.per_stage[0] += shard_bytes(spec, ref)
                row.shards.append(Shard(ref, Rule.replicated))
    components = [
        PlacedComponent(
            name,
            rules_text(spec, parallel, row.shards),
            row.model_bytes,
            tuple(row.per_stage),
            row.kind,
            component_ids=tuple(row.ids),
        )
        for name, row in rows.items()
    ]
    if copies.shards:
        rule = f"{ABSORPTION_RULE}, {rule_text(spec, parallel, Rule.heads, copies.shards)}"
        name = copies_name or ABSORPTION_COPIES
        components.append(
            PlacedComponent(
                name,
                rule,
                0,
                tuple(copies.per_stage),
                Kind.absorption,
                False,
                component_ids=tuple(copies.ids),
            )
        )
    mtp_layers = len(spec.mtp_layers) if mtp and anatomy.mtp is not None else 0
    return Placement(parallel, tuple(stages), tuple(components), mtp_layers)


#: The row of vLLM's BF16 copies of kv_b_proj, and its rule.
ABSORPTION_COPIES = "vLLM's BF16 W_UK, W_UV"
ABSORPTION_RULE = "kv_b_proj in BF16"


def rules_text(spec: ModelSpec, parallel: Parallel, shards: Sequence[Shard]) -> str:
    """The rule of a component with this layout's numbers ('by heads: 8 of 64'); a
    component whose tensors follow different rules names each (the shared rotary key is replicated,
    the MTP layer mixes them all)."""
    by_rule: dict[Rule, list[Shard]] = {}
    for s in shards:
        by_rule.setdefault(s.rule, []).append(s)
    if len(by_rule) > 2:
        return "as the main layers' components"
    return "; ".join(rule_text(spec, parallel, rule, group) for rule, group in by_rule.items())


def rule_text(spec: ModelSpec, parallel: Parallel, rule: Rule, shards: Sequence[Shard]) -> str:
    """One rule with this layout's numbers: 'by heads: 8 of 64', 'whole experts: 48 of 384'."""
    if rule is Rule.replicated:
        return "replicated"
    first = shards[0]
    if rule is not Rule.experts and first.parts == 1:
        return "whole on every GPU" if parallel.dp > 1 else "whole"
    if rule in (Rule.heads, Rule.heads_input):
        side = ", input side" if rule is Rule.heads_input else ""
        return f"by heads{side}: {spec.num_attention_heads // parallel.tp} of {spec.num_attention_heads}"
    if rule is Rule.vocabulary:
        padded = padded_vocabulary(spec)
        pad = f", padded from {spec.vocab_size:,}" if padded != spec.vocab_size else ""
        return f"by vocabulary: {padded // first.parts:,} of {padded:,} rows{pad}"
    if rule is Rule.intermediate:
        local = first.ref.shape[first.axis or 0]
        return f"by width: {local:,} of {local * first.parts:,}"
    experts = spec.n_routed_experts
    if parallel.ep:
        slots = experts + parallel.redundant
        fullest = "" if slots % parallel.moe_ranks == 0 else " (the fullest GPU)"
        extra = f" + {parallel.redundant} redundant" if parallel.redundant else ""
        return f"whole experts: {experts_per_gpu(spec, parallel)} of {experts}{extra}{fullest}"
    if parallel.moe_ranks == 1:
        return "whole"
    width = spec.moe_intermediate_size
    return f"each expert by width: {width // parallel.moe_ranks:,} of {width:,}"
