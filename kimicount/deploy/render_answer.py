"""`kimicount plan`'s answer, first: the verdict, the KV tokens per GPU, the concurrency at max-model-len and
what limits it in a few lines; a "try" line per way out when it does not fit; --batch max; --compare.

Reads PlanReports and plan_answer's findings; computes nothing but layout. The component table, the
memory bar and the reserve's formula are render_plan's (under --detail).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from rich.console import Console

from kimicount.deploy.answer import Compared, Verdict, limited_by, max_num_seqs, sequence_bytes, verdict_of
from kimicount.deploy.plan import PlanReport, sequence_pages
from kimicount.deploy.render_command import command_lines, print_command
from kimicount.deploy.render_plan import estimated_from
from kimicount.render import Column, fitted, human_bytes, plural, say, show_fitted

if TYPE_CHECKING:
    from kimicount.deploy.request import PlanAnswer

#: The estimates a pool can rest on, in the answer's words.
ESTIMATES = {
    "reserve": "the reserve",
    "preload": "the memory in use before the weights load",
    "cuda_memory": "the CUDA total",
}


def verdict_text(report: PlanReport) -> str:
    """'fits', 'does not fit 163,840-token requests; up to 121,984 tokens fit' or 'does not fit: …'."""
    kind = verdict_of(report)
    if kind is Verdict.fits:
        text = "fits"
    elif kind is Verdict.longest_request:
        text = f"does not fit {report.max_model_len:,}-token requests; up to {report.longest:,} tokens fit"
    elif report.kv_memory is None and report.fullest.weights > report.usable:
        text = (
            f"does not fit: the weights alone take {human_bytes(report.fullest.weights)} of the "
            f"{human_bytes(report.usable)} a GPU may use"
        )
    else:
        text = "does not fit: the weights and the reserve leave no room for KV cache"
    return text


def where(report: PlanReport, nodes: int) -> str:
    """'8 × H200' or '16 × H800 (2 nodes × 8)'."""
    text = f"{report.count} × {report.gpu.name}"
    return text + (f" ({nodes} nodes × {report.count // nodes})" if nodes > 1 else "")


def tp_spans_nodes(report: PlanReport, nodes: int) -> bool:
    """Whether a TP group is larger than a node: its all-reduces then cross the network."""
    return nodes > 1 and report.parallel.tp > report.count // nodes


def answer_lines(report: PlanReport, nodes: int = 1) -> list[str]:
    """Three to five lines: the verdict; KV tokens per GPU; the concurrency at max_model_len; what limits
    it; where a TP group spans nodes, that; what is estimated."""
    spec, parallel, stage = report.spec, report.parallel, report.fullest
    colour = "green" if report.fits else "red"
    engine = report.rules.sized_by(report.release)
    lines = [
        (
            f"[bold]{spec.name}[/] on {where(report, nodes)}, {parallel.label}{engine}: "
            f"[bold {colour}]{verdict_text(report)}[/]"
        )
    ]
    kv = f"KV cache: {report.tokens_per_gpu:,} tokens per GPU"
    if parallel.dcp > 1:
        kv += f", {report.tokens_per_replica:,} per replica (DCP {parallel.dcp})"
    if parallel.dp > 1:
        kv += f", {report.tokens_total:,} in all (DP {parallel.dp})"
    packing = report.packing
    lines.append(f"{kv}; {stage.bytes_per_token:,} B per token" if packing is None else packing.summary)
    whole = plural(report.sequences_per_replica, "whole sequence")
    everywhere = f", {report.sequences_per_replica * parallel.dp:,} in all" if parallel.dp > 1 else ""
    lines.append(
        f"Concurrency at {report.max_model_len:,} tokens ({human_bytes(sequence_bytes(report))} each): "
        f"{report.max_concurrency:.2f}× ({whole} per replica{everywhere})"
    )
    limit = limited_by(report)
    # the engine's words for what it sizes against and keeps back (SGLang: CUDA's whole total, its share)
    usable, reserve = report.rules.usable_words
    if limit == "weights" and report.kv_memory is None:
        lines.append(
            f"Limited by the weights: {human_bytes(stage.weights)} per GPU + {human_bytes(stage.reserve)} {reserve} "
            f"> {human_bytes(report.usable)} {usable}"
        )
    elif limit == "state_pool":
        state = stage.state
        assert state is not None
        lines.append(
            f"Limited by the state pool: each request keeps {plural(state.slots_per_request, 'state')} "
            f"({human_bytes(state.request_state_bytes)}); the "
            f"states run out before the latent's pages ({human_bytes(stage.pool)} pool per GPU)"
        )
    elif limit in ("max_num_seqs", "max_running_requests"):
        lines.append(
            f"Limited by --{limit.replace('_', '-')} {max_num_seqs(report):,}: the KV pool would hold "
            f"{report.sequences_per_replica:,} such sequences per replica"
        )
    elif report.kv_memory is not None:
        lines.append(f"Limited by the KV pool: {human_bytes(stage.pool)} per GPU (--kv-memory)")
    else:
        lines.append(
            f"Limited by the KV pool: {human_bytes(max(stage.pool, 0))} per GPU = {human_bytes(report.usable)} {usable} "
            f"− {human_bytes(stage.weights)} weights − {human_bytes(stage.reserve)} {reserve}"
        )
    if packing is not None:  # the engine's own words for a family's groups (DeepSeek V4)
        lines += packing.notes
    for group in stage.groups:
        if group.state is not None:
            lines.append(
                f"State: {group.bytes_per_sequence:,} B per sequence ({group.layers} {group.name} layers × "
                f"{group.bytes_per_layer:,} B), whatever its length; the latent {stage.bytes_per_token:,} B per token"
            )
    note = report.rules.model_note(spec)
    if note is not None:
        lines.append(note)
    if tp_spans_nodes(report, nodes):
        lines.append(
            f"TP{parallel.tp} spans {nodes} nodes of {report.count // nodes}: its all-reduces cross the network "
            "between nodes (the memory is as planned; the speed is not modelled)"
        )
    if report.estimate:
        names = " and ".join(ESTIMATES[name] for name in report.estimated_inputs)
        lines.append(f"Estimated: {names}; --kv-memory with the pool the engine logs is exact")
    return lines


#: How a try line's continuation lines are indented.
CONTINUATION = "       "


def try_line(command: str, why: str, width: int) -> list[str]:
    r"""`try: COMMAND  # why` in one line when it fits `width`; otherwise the command broken between its
    options with shell continuations (` \`), so that it still pastes as one command, and the comment last.
    COMMAND is as shlex.join wrote it: its words are read back and quoted again, none split.

    >>> try_line("kimicount plan --gpus 9xH200 --tp 1 --pp 9", "the fewest GPUs", 80)
    ['try: kimicount plan --gpus 9xH200 --tp 1 --pp 9  # the fewest GPUs']
    >>> for line in try_line("kimicount plan --config fixtures/deepseek-v3 --gpus 16xH800 --tp 16", "why", 40):
    ...     print(line)
    try: kimicount plan \
           --config fixtures/deepseek-v3 \
           --gpus 16xH800 --tp 16  # why
    """
    return command_lines(shlex.split(command), width, lead="try: ", indent=CONTINUATION, comment=why)


def render_answer(
    console: Console, report: PlanReport, nodes: int, tries: list[tuple[str, str]], detail: bool
) -> None:
    """The answer's lines, a `try:` line per way out (a command and, after `#`, what it changes), and
    where the detail is."""
    for line in answer_lines(report, nodes):
        say(console, line)
    if not report.fits:
        if tries:
            say(console, "Ways out, each a command that fits:")
            for command, why in tries:
                print_command(console, try_line(command, why, console.width))
        else:
            say(
                console,
                "No way out found: no engine setting (a shorter max-model-len, more of the memory, an fp8 KV "
                "cache), layout or number of whole nodes fits.",
            )
    if not detail:
        say(
            console,
            "--detail adds the weights per component, one GPU's memory as a bar and the reserve's formula.",
        )


def render_batch_max(console: Console, report: PlanReport, batch: int, context: int) -> None:
    """The --batch max sentence: the largest batch, and why one more does not fit."""
    pages = sequence_pages(context, report.block_size, report.parallel.dcp)
    pp = report.parallel.pp
    micro = f" × {pp} micro-batches" if pp > 1 else ""
    estimated = f" (estimated: it rests on {estimated_from(report)})" if report.estimate else ""
    say(
        console,
        f"--batch max: {batch:,} sequences of {context:,} positions per replica fit the KV cache: each takes "
        f"{pages:,} pages of {report.block_size}, and {batch + 1:,}{micro} would take {(batch + 1) * pp * pages:,} "
        f"of the {report.pages_per_gpu:,} pages on a GPU{estimated}.",
    )


def render_compare(console: Console, rows: list[Compared]) -> None:
    """Layouts side by side: GPUs, weights and KV pool per GPU, tokens, concurrency, verdict."""
    first = next((row.report for row in rows if row.report is not None), None)
    if first is not None:
        say(
            console,
            f"[bold]{first.spec.name}[/] ({first.spec.model_type}) on {first.gpu.name}, layouts side by side at "
            f"{first.max_model_len:,} tokens per request:",
        )
    columns = [
        Column("Layout"),
        Column("GPUs", number=True),
        Column("Weights/GPU", number=True),
        Column("KV pool/GPU", number=True),
        Column("Tokens/GPU", number=True),
        Column("Tokens in all", number=True),
        Column("Concurrency", number=True),
        Column("Verdict", wraps=True, min_width=20),
    ]
    table_rows = []
    for row in rows:
        report = row.report
        if report is None:
            table_rows.append([row.typed, f"{row.gpus:,}", "", "", "", "", "", f"cannot run: {row.error}"])
            continue
        stage = report.fullest
        pool = human_bytes(stage.pool) if stage.pool >= 0 else f"−{human_bytes(-stage.pool)}"
        kind = verdict_of(report)
        verdict = {
            Verdict.fits: "fits",
            Verdict.longest_request: "only shorter requests fit",
            Verdict.weights: "the weights do not fit",
        }[kind]
        table_rows.append(
            [
                f"{row.typed} ({report.parallel.label})",
                f"{row.gpus:,}",
                human_bytes(stage.weights),
                pool,
                f"{report.tokens_per_gpu:,}",
                f"{report.tokens_total:,}",
                f"{report.max_concurrency:.2f}×",
                verdict,
            ]
        )
    show_fitted(console, *fitted(console, columns, table_rows))
    estimated = [row.report for row in rows if row.report is not None and row.report.estimate]
    if estimated:
        say(console, f"Estimates: each plan rests on {estimated_from(estimated[0])}.")


def render_plan_answer(console: Console, answer: PlanAnswer) -> None:
    """`kimicount plan`: the answer first, then --detail's plan (or --min-gpus's line), --batch max, and
    the speed floor."""
    from kimicount.deploy.render_plan import min_gpus_text, render_plan, render_speed
    from kimicount.render import show

    report, request = answer.report, answer.request
    render_answer(
        console, report, request.nodes, [(command, way.why) for way, command in answer.tries], request.detail
    )
    if request.detail:
        say(console)
        render_plan(console, report, verdict_line=False)
    elif report.min_gpus_asked:
        say(console, min_gpus_text(report))
    if answer.batch_max is not None and answer.positions is not None:
        say(console)
        render_batch_max(console, report, answer.batch_max, answer.positions)
    if answer.speed is not None:
        show(console)
        render_speed(console, report, *answer.speed)
