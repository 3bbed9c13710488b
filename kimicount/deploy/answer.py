"""The answer a plan gives first: does it fit, and if not, why and what would.

Reads PlanReports (kimicount.deploy.plan); computes the verdict's kind, what limits the concurrency, the ways
out of a plan that does not fit (each a plan that does, so each can be printed as a command), the
largest decode batch whose KV fits, and layouts side by side. Free of rich, torch and the hub.

Verdicts:
- fits: every GPU holds its weights, the reserve and one sequence of max_model_len;
- longest_request_does_not_fit: the KV pool holds tokens, but fewer than one sequence of max_model_len
  (shorter requests are served; vLLM refuses to start, saying so, until --max-model-len is lowered);
- weights_do_not_fit: the weights and the reserve leave no page of KV cache.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from kimicount.anatomy import Anatomy
from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.options import PLAN_FLAGS
from kimicount.deploy.placement import Parallel, parallel_layout
from kimicount.deploy.plan import (
    DeploymentOptions,
    PlanReport,
    candidate_layouts,
    fewest_gpus,
    plan_memory,
    search_limit,
    sequence_pages,
)
from kimicount.errors import UsageError
from kimicount.spec import ModelSpec


class Verdict(str, Enum):
    fits = "fits"
    longest_request = "longest_request_does_not_fit"
    weights = "weights_do_not_fit"


def verdict_of(report: PlanReport) -> Verdict:
    """Which of the three answers the plan gives."""
    if report.fits:
        return Verdict.fits
    return Verdict.longest_request if report.longest > 0 else Verdict.weights


def max_num_seqs(report: PlanReport) -> int:
    """The most sequences the engine runs at once: vLLM's --max-num-seqs, or its default for the GPU;
    SGLang's max_running_requests per DP rank (given, or its default from the pool)."""
    return report.rules.max_sequences(report)


def sequence_cap(report: PlanReport) -> str:
    """The setting max_num_seqs reads: 'max_num_seqs' (vLLM's) or 'max_running_requests' (SGLang's)."""
    return report.rules.sequence_cap[0]


def limited_by(report: PlanReport) -> str:
    """What bounds the concurrency at max_model_len: 'weights' (no KV page is left), the engine's cap
    on running sequences below what the KV pool holds ('max_num_seqs', or SGLang's
    'max_running_requests'), a hybrid model's 'state_pool' (its per-sequence states run out before its
    latent's pages) or 'kv_pool'."""
    if verdict_of(report) is Verdict.weights:
        return "weights"
    if report.sequences_per_replica > max_num_seqs(report):
        return sequence_cap(report)
    if any(state.limit == "state" for state in report.states):
        return "state_pool"
    return "kv_pool"


def sequence_bytes(report: PlanReport) -> int:
    """What one sequence of max_model_len takes on the fullest GPU, in whole pages (a Packing's; and a
    hybrid model's states, as its engine keeps them). [bytes]"""
    if report.packing is not None:
        return report.packing.request_bytes
    state = report.fullest.state
    kept = 0 if state is None else state.request_state_bytes
    return report.sequence_pages * report.block_size * report.fullest.bytes_per_token + kept


# --- ways out ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WayOut:
    """A plan that fits, found by changing what `kind` says (max_model_len, utilization, fp8_kv, layout,
    whole_nodes), `why` says it in words; `report` is the plan it gives, on `nodes` nodes (None: the
    GPUs as asked)."""

    kind: str
    why: str
    report: PlanReport
    nodes: int | None = None


def try_plan(anatomy: Anatomy, gpu: Accelerator, count: int, options: DeploymentOptions) -> PlanReport | None:
    """The plan these options give on `count` GPUs, or None when a layout cannot run the model."""
    try:
        options.check(anatomy)
        return plan_memory(anatomy, gpu, options.parallel(anatomy.spec, count), options)
    except UsageError:
        return None


def settled(anatomy: Anatomy, gpu: Accelerator, count: int, options: DeploymentOptions) -> PlanReport | None:
    """The plan these options give when it fits; else, when its pool holds some KV, the same with the
    longest --max-model-len that fits; None when neither fits."""
    found = try_plan(anatomy, gpu, count, options)
    if found is None or found.fits:
        return found
    if found.longest > 0:
        shorter = try_plan(anatomy, gpu, count, replace(options, max_model_len=found.longest))
        if shorter is not None and shorter.fits:
            return shorter
    return None


def layout_options(options: DeploymentOptions, parallel: Parallel) -> DeploymentOptions:
    """The options with this layout in place of theirs."""
    return replace(
        options,
        tp=parallel.tp,
        pp=parallel.pp,
        dp=parallel.dp,
        ep=parallel.moe_ranks if parallel.ep else None,
        dcp=parallel.dcp,
    )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _layout_families(report: PlanReport) -> list[tuple[str, list[dict[str, int]]]]:
    """Other layouts of the same GPUs, by family, simplest first within each."""
    count, now = report.count, report.parallel
    families: list[tuple[str, list[dict[str, int]]]] = []
    if report.options.kv_memory is None:  # a printed pool is that layout's: other layouts need their own
        tp_pp = [{"tp": count // pp, "pp": pp} for pp in _divisors(count)]
        tp_pp += [
            {"tp": count // pp, "pp": pp, "ep": count // pp} for pp in _divisors(count) if count // pp > 1
        ]
        dp_ep = [{"tp": count // dp, "dp": dp, "ep": count} for dp in reversed(_divisors(count)) if dp > 1]
        families += [("TP × PP", tp_pp), ("DP + EP", dp_ep)]
    if now.tp > 1:
        ep = now.moe_ranks if now.ep else None
        dcp = [
            {"tp": now.tp, "pp": now.pp, "dp": now.dp, "dcp": d} | ({} if ep is None else {"ep": ep})
            for d in _divisors(now.tp)
            if d > now.dcp
        ]
        families.append(("DCP", dcp))
    return families


def _shortened(found: PlanReport, asked: PlanReport) -> str:
    """', requests of up to 46,976' when the way also shortens the longest request (--max-model-len)."""
    return (
        "" if found.max_model_len == asked.max_model_len else f", requests of up to {found.max_model_len:,}"
    )


def engine_settings(anatomy: Anatomy, gpu: Accelerator, report: PlanReport) -> list[WayOut]:
    """The ways out on the same GPUs and layout, before any hardware: the longest --max-model-len that
    fits (when some KV fits); the engine's higher memory share (vLLM's --gpu-memory-utilization 0.95, its
    published Kimi-K2-Thinking run's), with the longest context that then fits; an fp8 KV cache, with
    that share when it alone leaves no KV."""
    options, count = report.options, report.count
    ways: list[WayOut] = []
    if report.longest > 0:
        longest = report.longest
        found = try_plan(anatomy, gpu, count, replace(options, max_model_len=longest))
        if found is not None and found.fits:
            ways.append(
                WayOut("max_model_len", f"the longest --max-model-len that fits: {longest:,} tokens", found)
            )
    shared, share_words = None, ""  # the options at the engine's higher memory share, and its flag
    share = report.rules.memory_share
    if share is not None and options.kv_memory is None:
        field, value, where = share
        if getattr(options, field) < value:
            raise_to: dict[str, Any] = {field: value}
            shared, share_words = replace(options, **raise_to), f"{PLAN_FLAGS[field][0]} {float(value):g}"
            found = settled(anatomy, gpu, count, shared)
            if found is not None:
                ways.append(
                    WayOut(
                        "utilization",
                        f"{share_words} ({where}): {found.tokens_per_gpu:,} tokens per GPU"
                        + _shortened(found, report),
                        found,
                    )
                )
    if report.dtype != "fp8":
        found = settled(anatomy, gpu, count, replace(options, kv_dtype="fp8"))
        with_share = ""
        if found is None and shared is not None:
            found = settled(anatomy, gpu, count, replace(shared, kv_dtype="fp8"))
            with_share = f" at {share_words}"
        if found is not None:
            ways.append(
                WayOut(
                    "fp8_kv",
                    f"an fp8 KV cache{with_share}: {found.tokens_per_gpu:,} tokens per GPU{_shortened(found, report)}",
                    found,
                )
            )
    return ways


def node_layouts(
    spec: ModelSpec, count: int, per_node: int, redundant: int = 0, dense_over_dp: bool = False
) -> list[Parallel]:
    """The layouts of `count` GPUs in nodes of `per_node`, in the order the whole-node way tries them:
    vLLM's common practice first, "the tensor parallel size … the number of GPUs in each node, and the
    pipeline parallel size … the number of nodes" (docs.vllm.ai, Distributed Inference and Serving), then
    the others whose TP group stays inside a node (candidate_layouts' order), then those whose TP group
    crosses nodes."""
    nodes = count // per_node

    def rank(parallel: Parallel) -> int:
        if parallel.tp == per_node and parallel.pp == nodes and parallel.dp == 1:
            return 0 if not parallel.ep else 1
        return 2 if parallel.tp <= per_node else 3

    layouts = list(candidate_layouts(spec, count, redundant, dense_over_dp))
    return sorted(layouts, key=rank)  # stable: candidate_layouts' order within a rank


def whole_nodes(anatomy: Anatomy, gpu: Accelerator, report: PlanReport, per_node: int) -> WayOut | None:
    """The fewest whole nodes of `per_node` GPUs (more than the GPUs asked) on which a layout fits, from
    the fewest GPUs that hold it (the --min-gpus search) up; None when no count of GPUs does."""
    options, spec = report.options, anatomy.spec
    searched = report.min_gpus_search  # --min-gpus searched already: the same options, the same answer
    fewest = fewest_gpus(anatomy, gpu, options) if searched is None else searched.found
    if fewest is None:
        return None
    first = max(report.count // per_node + 1, -(-fewest[0] // per_node))
    for nodes in range(first, search_limit(spec) // per_node + 1):
        count = nodes * per_node
        for parallel in node_layouts(
            spec, count, per_node, options.redundant_experts, options.rules.dense_over_dp
        ):
            found = try_plan(anatomy, gpu, count, layout_options(options, parallel))
            if found is not None and found.fits:
                spans = " (its TP group crosses nodes)" if parallel.tp > per_node else ""
                why = f"whole nodes: {nodes} × {per_node} × {gpu.name}, {parallel.label}{spans}, {found.tokens_per_gpu:,} tokens per GPU"
                return WayOut("whole_nodes", why, found, nodes)
    return None


#: GPUs in a node when --gpus names no nodes (at most the GPUs asked): the 8 of an HGX or DGX board
#: (H100, H200, B200) and of AMD's MI300X platform.
NODE_GPUS = 8


def node_size(count: int, nodes: int) -> int:
    """The GPUs of a node: as --gpus NODESxN names them, else NODE_GPUS, at most `count`.

    >>> node_size(16, 2), node_size(16, 1), node_size(9, 1), node_size(4, 1)
    (8, 8, 8, 4)
    """
    return count // nodes if nodes > 1 else min(count, NODE_GPUS)


def ways_out(
    anatomy: Anatomy, gpu: Accelerator, report: PlanReport, per_node: int | None = None
) -> list[WayOut]:
    """For a plan that does not fit, one plan that does per way out, engine settings first: the longest
    max_model_len that fits, the engine's higher memory share, an fp8 KV cache (engine_settings); then the
    first layout of each family (TP × PP, DP + EP, DCP) on these GPUs that fits; then the fewest whole
    nodes of `per_node` GPUs (node_size of the GPUs asked by default; not under --kv-memory, which is one
    layout's pool). Each is checked: only plans that fit are returned."""
    if report.fits:
        return []
    options, count, spec = report.options, report.count, anatomy.spec
    ways = engine_settings(anatomy, gpu, report)
    # layouts are written back as kimicount's options (tp per attention group): only for an engine whose
    # terms they are (SGLang's --tp is every GPU of a stage)
    as_options = report.rules.layouts_as_options
    for family, layouts in _layout_families(report) if as_options else ():
        for layout in layouts:
            try:
                parallel = parallel_layout(
                    spec,
                    count,
                    tp=layout.get("tp"),
                    pp=layout.get("pp", 1),
                    dp=layout.get("dp", 1),
                    ep=layout.get("ep"),
                    dcp=layout.get("dcp", 1),
                )
            except UsageError:
                continue
            if parallel == report.parallel:
                continue
            found = try_plan(anatomy, gpu, count, layout_options(options, parallel))
            if found is not None and found.fits:
                ways.append(
                    WayOut(
                        "layout",
                        f"another layout ({family}): {parallel.label}, "
                        + (
                            f"{found.tokens_per_replica:,} tokens per replica"
                            if parallel.dcp > 1
                            else f"{found.tokens_per_gpu:,} tokens per GPU"
                        ),
                        found,
                    )
                )
                break
    if options.kv_memory is None and as_options:
        nodes = whole_nodes(anatomy, gpu, report, per_node or node_size(count, 1))
        if nodes is not None:
            ways.append(nodes)
    return ways


# --- the largest batch ------------------------------------------------------------------------------


def largest_batch(report: PlanReport, context: int) -> int:
    """The most sequences per replica whose KV at `context` positions fits the pool in a decode step:
    each takes sequence_pages(context) pages on every GPU, and under PP each stage holds PP micro-batches
    at once, so floor(pages_per_gpu ÷ (pages × PP)), as speed.step_floor's `fits` counts them. [sequences]"""
    if report.packing is not None:
        raise UsageError(
            f"--batch max: {report.spec.name}'s decode steps (compressed attention) are not modelled yet"
        )
    pages = sequence_pages(context, report.block_size, report.parallel.dcp)
    return report.pages_per_gpu // (pages * report.parallel.pp)


# --- layouts side by side ----------------------------------------------------------------------------

_PART = re.compile(r"(dcp|tp|pp|dp|ep)(\d+)")
_SEPARATORS = re.compile(r"[\s+×*_-]+")


def parse_layout(text: str, count: int) -> tuple[int, dict[str, int]]:
    """One --compare layout: `tp8`, `tp8pp2`, `dp8ep8`, `tp8dcp8` (sizes after their names, in any
    order, `+`, `-` or `×` between them allowed) -> (its GPUs, the parallel_layout keywords). Without a
    TP size it takes what --gpus leaves after PP and DP.

    >>> parse_layout("tp8pp2", 8), parse_layout("dp8ep8", 8), parse_layout("pp2", 16)
    ((16, {'tp': 8, 'pp': 2}), (8, {'dp': 8, 'ep': 8}), (16, {'pp': 2}))
    """
    lowered = text.strip().lower()
    parts = _PART.findall(lowered)
    if not parts or _SEPARATORS.sub("", _PART.sub("", lowered)):
        raise UsageError(
            f"--compare '{text}': expected layouts such as tp8, tp8pp2, dp8ep8 or tp8dcp8 (a size after each "
            "of tp, pp, dp, ep, dcp), separated by commas"
        )
    sizes: dict[str, int] = {}
    for name, digits in parts:
        if name in sizes:
            raise UsageError(f"--compare '{text}': {name} given twice")
        sizes[name] = int(digits)
        if sizes[name] < 1:
            raise UsageError(f"--compare '{text}': {name}{digits}: expected a positive size")
    pp, dp = sizes.get("pp", 1), sizes.get("dp", 1)
    gpus = sizes["tp"] * pp * dp if "tp" in sizes else count
    return gpus, sizes


@dataclass(frozen=True)
class Compared:
    """One layout of --compare: as typed, its GPUs, and its plan (or why it cannot run)."""

    typed: str
    gpus: int
    report: PlanReport | None
    error: str | None


def compare(
    anatomy: Anatomy, gpu: Accelerator, count: int, options: DeploymentOptions, text: str
) -> list[Compared]:
    """Each layout of `text` (comma-separated) planned with the other options as given."""
    rows = []
    for typed in (part.strip() for part in text.split(",")):
        if not typed:
            continue
        gpus, sizes = parse_layout(typed, count)
        layout = replace(
            options,
            tp=sizes.get("tp"),
            pp=sizes.get("pp", 1),
            dp=sizes.get("dp", 1),
            ep=sizes.get("ep"),
            dcp=sizes.get("dcp", 1),
        )
        try:
            layout.check(anatomy)
            report = plan_memory(anatomy, gpu, layout.parallel(anatomy.spec, gpus), layout)
        except UsageError as error:
            rows.append(Compared(typed, gpus, None, str(error)))
            continue
        rows.append(Compared(typed, gpus, report, None))
    if not rows:
        raise UsageError(f"--compare '{text}': expected layouts such as tp8,tp8pp2,dp8ep8")
    return rows
