"""The speed floor of a deployment: the bytes and FLOPs one decode step needs on each GPU, and so the
least time it can take, and the most tokens per second it can give.

Per GPU of a stage, for a decode step of B sequences per attention replica at context L:

    bytes = the weights on the GPU that every step reads (all but the routed experts, the embedding's
            lookup and the vision tower)
          + its routed experts × the share the step touches: 1 − (1 − k/E)^(B × DP), the expected share of
            E experts that B × DP tokens picking k each reach (E × (1 − (1 − k/E)^B) distinct experts)
          + the KV cache of its B sequences at L positions (÷ DCP)
    FLOPs = B × every replicated matmul + B ÷ TP × every head- or width-split matmul
          + B × DP × the routed experts' FLOPs × the GPU's share of the experts
          + B ÷ TP × the attention over L positions (absorbed for a latent cache, naive otherwise)
    time  ≥ max(bytes ÷ HBM bandwidth, Σ FLOPs ÷ the dense peak of their dtype)

Stages of a pipeline run one after another for a step. These are floors: ideal bandwidth and FLOP/s,
no communication, no kernel launch or scheduling overhead, no activations' traffic.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kimicount.anatomy import Anatomy, Role, TensorRef
from kimicount.errors import UsageError, require_positive
from kimicount.flow import (
    Mla,
    attention_flops,
    compute_dtype,
    expected_experts,
    is_matmul,
    matmul_refs,
    prefill_attention_flops,
    ref_flops,
)
from kimicount.hardware import Accelerator
from kimicount.kvcache import Layout, splits_across_ranks
from kimicount.placement import Parallel, Placement, Rule, tensor_rule
from kimicount.plan import PlanReport

#: Batch sizes the sweep tries (sequences per replica).
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Components a decode step does not read whole.
NOT_READ = ("Token embedding", "Vision tower and projector", "Multi-token prediction")


@dataclass(frozen=True)
class StageStep:
    """One GPU of one stage in one step: what it reads and computes, and the times that bounds."""

    stage: int
    weight_bytes: int  # read whole every step
    expert_bytes: Fraction  # expected
    kv_bytes: Fraction
    flops: dict[str, Fraction]  # by compute dtype
    memory_time: float  # s
    compute_time: float  # s

    @property
    def bytes(self) -> Fraction:
        return self.weight_bytes + self.expert_bytes + self.kv_bytes

    @property
    def total_flops(self) -> Fraction:
        return sum(self.flops.values(), Fraction(0))

    @property
    def time(self) -> float:
        """max(memory time, compute time). [s]"""
        return max(self.memory_time, self.compute_time)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_time > self.memory_time else "memory"


@dataclass(frozen=True)
class Step:
    """A decode step (or a prefill) of the whole deployment, stage by stage."""

    batch: int  # sequences per replica (the prompt's tokens for a prefill)
    context: int
    way: Mla
    parallel: Parallel
    stages: tuple[StageStep, ...]
    fits: bool  # the batch's KV fits the pool

    @property
    def time(self) -> float:
        """The stages one after another. [s]"""
        return sum(stage.time for stage in self.stages)

    @property
    def slowest(self) -> StageStep:
        return max(self.stages, key=lambda s: s.time)

    @property
    def bound(self) -> str:
        return self.slowest.bound

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of the deployment: B × DP per step. [tokens/s]"""
        return self.batch * self.parallel.dp / self.time

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.parallel.gpus

    @property
    def tokens_per_s_per_sequence(self) -> float:
        return 1 / self.time


def decode_way(layout: Layout) -> Mla:
    """How engines run MLA on a cache layout: absorbed over a latent, naive over per-head caches."""
    return Mla.naive if splits_across_ranks(layout) else Mla.absorbed


def _share(spec, parallel: Parallel, ref: TensorRef) -> Fraction:
    """The part of a matmul's FLOPs per token (of the tokens it sees) that one GPU does."""
    rule = tensor_rule(ref)
    if rule is Rule.replicated:
        return Fraction(1)
    if rule is Rule.experts:
        if parallel.ep:
            slots = -(-spec.n_routed_experts // parallel.moe_ranks)
            return Fraction(slots, spec.n_routed_experts)
        return Fraction(1, parallel.moe_ranks)
    return Fraction(1, parallel.tp)


def _stage_refs(anatomy: Anatomy, layers: tuple[int, ...], last: bool):
    """The language model's matmul references a stage runs, restricted to its layers."""
    from dataclasses import replace

    keep = set(layers)
    for node in anatomy.model.walk():
        for ref in node.tensors:
            if not is_matmul(ref):
                continue
            if ref.layers:
                kept = tuple(i for i in ref.layers if i in keep)
                if kept:
                    yield replace(ref, layers=kept)
            elif ref.role is Role.HEAD and last:
                yield ref


def step_floor(
    report: PlanReport, *, batch: int, context: int, prefill: bool = False, gpu: Accelerator | None = None
) -> Step:
    """The floor of one decode step of `batch` sequences per replica at `context` positions, or with
    `prefill` of one prompt of `context` tokens (then `batch` is ignored: the prompt's tokens are the
    batch). See the module docstring for the formulas."""
    gpu = gpu or report.gpu
    if gpu.hbm_bandwidth <= 0 or gpu.bf16_flops <= 0:
        raise UsageError(
            "--batch/--context: the speed floor needs the GPU's --hbm-bandwidth and --peak-bf16 (a GPU given "
            "by --gpu-memory has neither)"
        )
    require_positive("--batch", batch)
    require_positive("--context", context)
    anatomy, parallel, placement = report.anatomy, report.parallel, report.placement
    spec = anatomy.spec
    tokens = context if prefill else batch
    way = Mla.naive if prefill else decode_way(report.layout)
    routed_tokens = tokens if prefill else batch * parallel.dp
    touched = (
        expected_experts(spec.n_routed_experts, spec.num_experts_per_tok, routed_tokens)
        / spec.n_routed_experts
    )
    stages = []
    for index, layers in enumerate(placement.stages):
        last = index == len(placement.stages) - 1
        memory = report.stages[index]
        weights, experts = _stage_weights(placement, index)
        kv = Fraction(memory.bytes_per_token * tokens * (1 if prefill else context), parallel.dcp)
        flops: dict[str, Fraction] = {}
        for ref in _stage_refs(anatomy, layers, last):
            seen = routed_tokens if ref.experts else tokens
            dtype = compute_dtype(spec, ref)
            flops[dtype] = flops.get(dtype, Fraction(0)) + seen * ref_flops(spec, ref) * _share(
                spec, parallel, ref
            )
        per_layer = (
            prefill_attention_flops(spec, way, context)
            if prefill
            else attention_flops(spec, way, context).flops
        )
        flops["bf16"] = flops.get("bf16", Fraction(0)) + Fraction(
            tokens * per_layer * len(layers), parallel.tp
        )
        read = weights + experts * touched + kv
        stages.append(
            StageStep(
                index,
                weights,
                experts * touched,
                kv,
                flops,
                float(read) / gpu.hbm_bandwidth,
                sum(float(f) / gpu.peak_flops(dtype) for dtype, f in flops.items()),
            )
        )
    per_sequence = -(-context // report.block_size) * report.block_size
    fits = prefill or batch * per_sequence <= report.tokens_per_replica
    return Step(batch if not prefill else context, context, way, parallel, tuple(stages), fits)


def _stage_weights(placement: Placement, stage: int) -> tuple[int, int]:
    """(bytes read whole every step, bytes of routed experts) on the fullest GPU of a stage."""
    whole = experts = 0
    for component in placement.components:
        if component.name == "Routed experts":
            experts += component.bytes_per_gpu[stage]
        elif component.name not in NOT_READ:
            whole += component.bytes_per_gpu[stage]
    return whole, experts


def sweep(report: PlanReport, context: int, batch: int | None = None) -> list[Step]:
    """The decode floor at `context` for each batch size of SWEEP (and `batch`)."""
    sizes = sorted(set(SWEEP) | ({batch} if batch else set()))
    return [step_floor(report, batch=b, context=context) for b in sizes]


def compute_bound_from(steps: list[Step]) -> int | None:
    """The smallest batch of a sweep whose step is compute-bound, if any."""
    return next((s.batch for s in steps if s.bound == "compute"), None)


# --- one MLA layer's decode step (what `kimicount measure` times) ----------------------------------------


@dataclass(frozen=True)
class LayerFloor:
    """The floor of one attention layer's decode step for `batch` sequences over `context` positions."""

    way: Mla
    bytes: int
    flops: int
    seconds: float
    bound: str


def mla_decode_floor(
    spec,
    gpu: Accelerator,
    way: Mla,
    *,
    batch: int,
    context: int,
    cache_bytes_per_token: int,
    element_bytes: int = 2,
) -> LayerFloor:
    """One layer's decode step as `kimicount measure` runs it: the attention's matmuls (q_a/q_b or q_proj,
    kv_a_proj, kv_b_proj or its two absorptions, o_proj) in `element_bytes` weights, read once, and the
    cache of `batch` sequences; FLOPs for each sequence's new token (2 × the matmul parameters, plus
    the attention over `context` positions, the new one included), against the BF16 peak.

    bytes = weights + batch × context × cache_bytes_per_token;  FLOPs = batch × (2 × matmul params + attention)

    >>> from kimicount.hardware import ACCELERATORS
    >>> floor = mla_decode_floor(k2, ACCELERATORS["H200"], Mla.absorbed, batch=1, context=2, cache_bytes_per_token=1152)
    >>> floor.bytes == 2 * (7168 * 1536 + 1536 * 12288 + 7168 * 576 + 512 * 16384 + 8192 * 7168) + 2 * 1152
    True
    """
    from kimicount.anatomy import latent_attention

    matmuls = sum(ref.elements * ref.copies for ref in matmul_refs(latent_attention(spec, [0])))
    weights = matmuls * element_bytes
    total_bytes = weights + batch * context * cache_bytes_per_token
    flops = batch * (2 * matmuls + attention_flops(spec, way, context).flops)
    memory, compute = total_bytes / gpu.hbm_bandwidth, flops / gpu.bf16_flops
    return LayerFloor(
        way, total_bytes, flops, max(memory, compute), "compute" if compute > memory else "memory"
    )
