"""The speed floor of a deployment: the bytes and FLOPs one decode step needs on each GPU, and so the
least time it can take, and the most tokens per second it can give.

Per GPU of a stage, for a decode step of B sequences per attention replica at context L:

    bytes = the weights on the GPU that every step reads (all but the routed experts, the embedding's
            lookup, the MTP layer and the vision tower; vLLM's absorbed decode reads its BF16 copies
            of W_UK and W_UV instead of an FP8 kv_b_proj, and prefill reads kv_b_proj)
          + its routed experts × the expected share the step touches: 1 − (1 − k/E)^(B × DP), the
            share of E experts that B × DP tokens picking k each reach (E × (1 − (1 − k/E)^B) distinct
            experts), under uniform routing
          + the KV cache of its B sequences at L positions (÷ DCP, the fullest rank's share)
    FLOPs = B × every replicated matmul + B ÷ TP × every head- or width-split matmul
          + B × DP × the routed experts' FLOPs × the GPU's expected share of the experts
          + B ÷ TP × the attention over L positions (absorbed for a latent cache, naive otherwise)
    time  ≥ max(bytes ÷ HBM bandwidth, Σ FLOPs ÷ the dense peak of their dtype)

Stages of a pipeline run one after another for a token: a token's latency is at least the sum of the
stages' times. vLLM keeps one micro-batch of B sequences per stage in flight, so the pipeline turns
out B × DP tokens every slowest-stage time: throughput ≤ B × DP ÷ the slowest stage, with PP × B
sequences per replica holding KV. These are floors: ideal bandwidth and FLOP/s, no communication, no
kernel launch or scheduling overhead, no activations' traffic. Uniform routing touches the most
experts (1 − (1 − p)^B is concave in an expert's share p, so an even spread maximises the sum); skewed
routing touches fewer, and the deployment's floor is then lower, though a GPU holding hot experts
may be busier than this average.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from fractions import Fraction

from kimicount.anatomy import Anatomy, Role, TensorRef, latent_attention
from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.placement import Kind, Parallel, Placement, Rule, experts_per_gpu, tensor_rule
from kimicount.deploy.plan import PlanReport, sequence_pages
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
from kimicount.kvcache import Layout, splits_across_ranks
from kimicount.spec import ModelSpec

#: Batch sizes the sweep tries (sequences per replica).
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class StageStep:
    """One GPU of one stage in one step: what it reads and computes, and the times that bounds.
    Expert bytes and FLOPs are expected values under uniform routing (Fractions)."""

    stage: int
    weight_bytes: int  # read whole every step
    expert_bytes: Fraction  # expected
    kv_bytes: int
    flops: dict[str, Fraction]  # by compute dtype; expected where the routed experts count
    memory_time: float  # s
    compute_time: float  # s

    @property
    def bytes(self) -> Fraction:
        """weight_bytes + expert_bytes + kv_bytes: expected. [bytes]"""
        return self.weight_bytes + self.expert_bytes + self.kv_bytes

    @property
    def total_flops(self) -> Fraction:
        """Σ FLOPs over the compute dtypes: expected. [FLOPs]"""
        return sum(self.flops.values(), Fraction(0))

    @property
    def time(self) -> float:
        """max(memory time, compute time). [s]"""
        return max(self.memory_time, self.compute_time)

    @property
    def bound(self) -> str:
        """'compute' when the FLOPs take longer than the bytes, else 'memory'."""
        return "compute" if self.compute_time > self.memory_time else "memory"


@dataclass(frozen=True)
class Step:
    """A decode step (or a prefill) of the whole deployment, stage by stage.

    A decode step is one micro-batch of `batch` sequences per replica, PP of them in flight; a
    prefill is one prompt of `context` tokens on one replica, alone in the pipeline."""

    batch: int  # sequences per replica per micro-batch (the prompt's tokens for a prefill)
    context: int
    way: Mla
    parallel: Parallel
    stages: tuple[StageStep, ...]
    fits: bool  # the KV of what is in flight fits the pool
    prefill: bool = False

    @property
    def time(self) -> float:
        """A token's trip through every stage, one after another: Σ stage times. [s]"""
        return sum(stage.time for stage in self.stages)

    @property
    def interval(self) -> float:
        """Between two micro-batches leaving the pipeline: the slowest stage's time, with PP micro-batches
        in flight (a prefill is alone: its whole time). [s]"""
        return self.time if self.prefill else self.slowest.time

    @property
    def slowest(self) -> StageStep:
        """The stage whose GPU takes longest: it sets the pipeline's pace."""
        return max(self.stages, key=lambda s: s.time)

    @property
    def bound(self) -> str:
        """What bounds the slowest stage."""
        return self.slowest.bound

    @property
    def tokens(self) -> int:
        """Tokens one micro-batch carries: B × DP in decode, the prompt in a prefill. [tokens]"""
        return self.batch if self.prefill else self.batch * self.parallel.dp

    @property
    def gpus(self) -> int:
        """The GPUs that work on it: all in decode, one replica's TP × PP in a prefill. [GPUs]"""
        return self.parallel.tp * self.parallel.pp if self.prefill else self.parallel.gpus

    @property
    def tokens_per_s(self) -> float:
        """tokens ÷ interval: output tokens of the deployment in decode, prompt tokens of one replica
        in a prefill. [tokens/s]"""
        return self.tokens / self.interval

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """tokens_per_s ÷ the GPUs that work on it. [tokens/s]"""
        return self.tokens_per_s / self.gpus

    @property
    def tokens_per_s_per_sequence(self) -> float:
        """One sequence's tokens per second: 1 ÷ a token's trip in decode; the prompt's rate in a
        prefill. [tokens/s]"""
        return self.tokens_per_s if self.prefill else 1 / self.time


def decode_way(layout: Layout) -> Mla:
    """How engines run MLA on a cache layout: absorbed over a latent, naive over per-head caches."""
    return Mla.naive if splits_across_ranks(layout) else Mla.absorbed


def _share(spec: ModelSpec, parallel: Parallel, ref: TensorRef) -> Fraction:
    """The part of a matmul's FLOPs per token (of the tokens it sees) that one GPU does: for routed
    experts under EP, the fullest GPU's expected share, ceil(E / EP) of E."""
    rule = tensor_rule(ref)
    if rule is Rule.replicated:
        return Fraction(1)
    if rule is Rule.experts:
        if parallel.ep:
            return Fraction(experts_per_gpu(spec, parallel), spec.n_routed_experts)
        return Fraction(1, parallel.moe_ranks)
    return Fraction(1, parallel.tp)


def _stage_refs(anatomy: Anatomy, layers: tuple[int, ...], last: bool) -> Iterator[TensorRef]:
    """The language model's matmul references a stage runs, restricted to its layers."""
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
    if report.packing is not None:  # DeepSeek V4: windows, compressed entries and sparse reads
        raise UsageError(
            f"--batch/--context: {report.spec.name}'s speed floor (compressed attention) is not modelled yet"
        )
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
    positions = -(-context // parallel.dcp)  # the fullest DCP rank's share of each sequence
    stages = []
    for index, layers in enumerate(placement.stages):
        last = index == len(placement.stages) - 1
        memory = report.stages[index]
        weights, experts = stage_weights(placement, index, way)
        kv = memory.bytes_per_token * (positions if prefill else tokens * positions)
        flops: dict[str, Fraction] = {}
        for ref in _stage_refs(anatomy, layers, last):
            seen = routed_tokens if ref.experts else tokens
            dtype = compute_dtype(spec, ref, way)
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
    pages = sequence_pages(context, report.block_size, parallel.dcp)
    in_flight = 1 if prefill else batch * parallel.pp  # sequences whose KV each GPU holds at once
    fits = in_flight * pages <= report.pages_per_gpu
    return Step(tokens if prefill else batch, context, way, parallel, tuple(stages), fits, prefill)


def stage_weights(placement: Placement, stage: int, way: Mla) -> tuple[int, int]:
    """(bytes read whole every step, bytes of routed experts) on the fullest GPU of a stage. The
    absorbed decode reads vLLM's BF16 copies of W_UK and W_UV where it keeps them, kv_b_proj otherwise.
    [bytes]"""
    absorbed = way is Mla.absorbed and placement.has(Kind.absorption)
    whole = placement.kind_bytes(stage, Kind.weights, Kind.absorption if absorbed else Kind.kv_b_proj)
    return whole, placement.kind_bytes(stage, Kind.routed_experts)


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
    spec: ModelSpec,
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

    >>> from kimicount.deploy.hardware import ACCELERATORS
    >>> floor = mla_decode_floor(k2, ACCELERATORS["H200"], Mla.absorbed, batch=1, context=2, cache_bytes_per_token=1152)
    >>> floor.bytes == 2 * (7168 * 1536 + 1536 * 12288 + 7168 * 576 + 512 * 16384 + 8192 * 7168) + 2 * 1152
    True
    """
    matmuls = sum(ref.elements * ref.copies for ref in matmul_refs(latent_attention(spec, [0])))
    weights = matmuls * element_bytes
    total_bytes = weights + batch * context * cache_bytes_per_token
    flops = batch * (2 * matmuls + attention_flops(spec, way, context).flops)
    memory, compute = total_bytes / gpu.hbm_bandwidth, flops / gpu.bf16_flops
    return LayerFloor(
        way, total_bytes, flops, max(memory, compute), "compute" if compute > memory else "memory"
    )
