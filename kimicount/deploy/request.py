"""`kimicount plan`'s request: the options as typed, read once into what the planner is asked, and the
answer it gives.

    PlanArgs (text, as the CLI hands it)  ->  read_request  ->  PlanRequest | LocalRequest
    PlanRequest.answer(anatomy)  ->  PlanAnswer (the plan, its ways out, --batch max, the speed floor)
                                 or  CompareAnswer (--compare)
    LocalRequest.answer(spec)    ->  LocalPlan (deploy/local)

Reading checks everything that needs no model, so a bad option costs no more than its message and the
model is loaded (by the CLI: its progress line is the CLI's) only for a request that can be answered.
Warnings said while reading (how vLLM reads 256k, a serve command's flags the plan does not model) go
to the `warn` the caller gives, as they are read: a run that then fails says them before its error.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicount.deploy.engines import DEFAULT_LOCAL, parse_engine, server_engine
from kimicount.deploy.hardware import Accelerator, parse_gpu_nodes, typed_gpu
from kimicount.deploy.local.request import LocalRequest, read_local
from kimicount.deploy.options import PLAN_FLAGS, option_words
from kimicount.deploy.plan import DeploymentOptions, PlanReport, for_model, plan
from kimicount.errors import UsageError
from kimicount.options import parse_count, parse_fraction, parse_ratio, parse_size, vllm_reading
from kimicount.reading import shorten

if TYPE_CHECKING:
    from kimicount.anatomy import Anatomy
    from kimicount.deploy.answer import Compared, WayOut
    from kimicount.deploy.serve_command import ServeCommand
    from kimicount.deploy.speed import Step
    from kimicount.spec import ModelSpec

#: The options that count tokens, whose lower-case suffix vLLM reads as thousands (a warning says so).
TOKEN_OPTIONS = frozenset({"--context", "--max-model-len", "--max-batched-tokens"})
#: The options that take the local route (llama.cpp, ik_llama.cpp).
LOCAL_OPTIONS = ("--gguf", "--quant", "--ram", "--offload", "--n-cpu-moe", "-ngl")


@dataclass(frozen=True)
class PlanArgs:
    """The plan options as typed: text as the CLI hands it (None: not given), by the CLI parameter's
    name; `typed` names each plan option under the name it was typed (`--tensor-parallel-size` for
    tp, by DeploymentOptions field)."""

    gpus: str
    words: list[str] | None = None
    config: Path | None = None
    repo: str | None = None
    model_option: str | None = None
    revision: str | None = None
    gpu_memory: str | None = None
    hbm_bandwidth: str | None = None
    peak_bf16: str | None = None
    peak_fp8: str | None = None
    tp: str | None = None
    pp: str | None = None
    dp: str | None = None
    ep: str | None = None
    enable_expert_parallel: bool = False
    dcp: str | None = None
    mtp: bool = False
    text_only: bool = False
    gpu_memory_utilization: str | None = None
    reserve: str | None = None
    max_batched_tokens: str | None = None
    max_num_seqs: str | None = None
    kv_memory: str | None = None
    kv_dtype: str | None = None
    kv_layout: str | None = None
    block_size: str | None = None
    max_model_len: str | None = None
    min_gpus: bool = False
    detail: bool = False
    compare_layouts: str | None = None
    batch: str | None = None
    context: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    mem_fraction_static: str | None = None
    page_size: str | None = None
    dp_attention: bool = False
    redundant_experts: str | None = None
    max_running_requests: str | None = None
    mamba_ssm_dtype: str | None = None
    mamba_cache_dtype: str | None = None
    mamba_full_memory_ratio: str | None = None
    max_mamba_cache_size: str | None = None
    mamba_strategy: str | None = None
    disable_radix_cache: bool = False
    mamba_cache_mode: str | None = None
    gguf: Path | None = None
    quant: str | None = None
    ram: str | None = None
    offload: str | None = None
    n_cpu_moe: str | None = None
    ngl: str | None = None
    build: str | None = None
    mla: str | None = None
    cache_layout: str | None = None
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    tensor_split: str | None = None
    ubatch: str = "512"
    parallel: str | None = None
    no_mmap: bool = False
    ram_bandwidth: str | None = None
    ram_channels: str | None = None
    ram_speed: str | None = None
    disk_bandwidth: str | None = None
    typed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelChoice:
    """The model a request names: a config (file or folder), or a Hub repo at a revision (None for both:
    the bundled Kimi K2)."""

    config: Path | None
    repo: str | None
    revision: str | None

    def words(self) -> list[str]:
        """How a printed command names it again: --config PATH, or REPO [--revision REV]."""
        if self.config is not None:
            return ["--config", str(self.config)]
        return ([] if self.repo is None else [self.repo]) + (
            [] if self.revision is None else ["--revision", self.revision]
        )


def _the_model(
    model: str | None, repo: str | None, model_option: str | None, serve: ServeCommand | None
) -> str | None:
    """The model named by the positional, --repo, --model or the serve command: once, or the same."""
    named = [m for m in (model, repo, model_option, None if serve is None else serve.model) if m is not None]
    if len(set(named)) > 1:
        raise UsageError(f"name the model once: {' and '.join(shorten(m, 60) for m in sorted(set(named)))}")
    return named[0] if named else None


def _folder_or_repo(chosen: str | None, config: Path | None, revision: str | None) -> ModelChoice:
    """A model named as engines take it: a local folder holding config.json is the config."""
    if chosen is not None and config is None and _exists(chosen):
        return ModelChoice(Path(chosen), None, revision)
    return ModelChoice(config, chosen, revision)


def _exists(name: str) -> bool:
    """Whether `name` is a path that exists; a name no file system takes (too long, a NUL) is none."""
    try:
        return Path(name).exists()
    except (OSError, ValueError):
        return False


def _read_words(words: list[str] | None) -> tuple[ServeCommand | None, str | None]:
    """The positional words: (a serve command pasted after --, or None; a model ORG/NAME, or None)."""
    if not words:
        return None, None
    from kimicount.deploy.serve_command import is_serve_command, parse_serve_command

    if is_serve_command(words):
        return parse_serve_command(words), None
    if len(words) == 1:
        return None, words[0]
    raise UsageError(
        f"expected one model (ORG/NAME), or a serve command after -- (vllm serve …, python -m "
        f"sglang.launch_server …); got: {shorten(' '.join(words[:3]), 80)} …"
    )


def read_request(args: PlanArgs, warn: Callable[[str], None] = lambda _: None) -> PlanRequest | LocalRequest:
    """The request the options make: a local llama.cpp run when any local option (or a local engine)
    is given, a server plan otherwise; everything read and checked that needs no model."""
    serve, model = _read_words(args.words)
    engine, release = (None, None) if args.engine is None else parse_engine(args.engine)
    if args.engine_version is not None:
        if release is not None and release != args.engine_version.strip():
            raise UsageError(
                f"--engine {shorten(args.engine or '', 40)} and --engine-version disagree: give it once"
            )
        release = args.engine_version.strip()
    given_local = [name for name, value in zip(LOCAL_OPTIONS, _local_values(args)) if value is not None]
    if (engine is not None and engine.route == "local") or given_local:
        if serve is not None:
            raise UsageError(
                f"a serve command after -- ({serve.launcher}) plans a vLLM or SGLang server, not a local "
                "llama.cpp run: name the model as ORG/NAME, --repo or --config"
            )
        chosen = _the_model(model, args.repo, args.model_option, None)
        choice = _folder_or_repo(chosen, args.config, args.revision)
        return read_local(args, DEFAULT_LOCAL if engine is None else engine.name, release, choice)
    return _server_request(args, serve, model, None if engine is None else engine.name, release, warn)


def _local_values(args: PlanArgs) -> tuple[object, ...]:
    return (args.gguf, args.quant, args.ram, args.offload, args.n_cpu_moe, args.ngl)


def _count(text: str, option: str, warn: Callable[[str], None]) -> int:
    """A count option; a token count written with a lower-case suffix gets one warning saying how vLLM
    reads it (256k = 256,000, 256K = 262,144), said as it is read."""
    value = parse_count(text, option)
    if option in TOKEN_OPTIONS and (note := vllm_reading(text)):
        warn(note)
    return value


def _redundant(text: str, option: str) -> int:
    """--num-redundant-experts: a count, 0 (the engines' default) allowed."""
    value = parse_count(text, option)
    if value < 0:
        raise UsageError(f"{option} {shorten(text, 40)}: expected 0 or more redundant experts")
    return value


def _server_request(
    args: PlanArgs,
    serve: ServeCommand | None,
    model: str | None,
    engine: str | None,
    release: str | None,
    warn: Callable[[str], None],
) -> PlanRequest:
    from kimicount.deploy.serve_command import deployment_settings, engine_kv_dtype
    from kimicount.kvcache import parse_layout, parse_mamba_dtype

    if args.parallel is not None:
        raise UsageError(
            "--parallel: llama-server's -np, for a llama.cpp or ik_llama.cpp plan (give --engine "
            "llama.cpp, --gguf or --quant); vLLM's sequences are --max-num-seqs, SGLang's "
            "--max-running-requests"
        )

    nodes, count, gpu = parse_gpu_nodes(args.gpus)
    gpu = typed_gpu(
        args.gpus,
        count,
        gpu,
        gpu_memory=args.gpu_memory,
        hbm_bandwidth=args.hbm_bandwidth,
        peak_bf16=args.peak_bf16,
        peak_fp8=args.peak_fp8,
    )
    typed = args.typed

    def counted(text: str, option: str) -> int:
        return _count(text, option, warn)

    given: dict[str, Any] = {}
    for name, text, parse in (
        ("tp", args.tp, counted),
        ("pp", args.pp, counted),
        ("dp", args.dp, counted),
        ("ep", args.ep, counted),
        ("dcp", args.dcp, counted),
        ("utilization", args.gpu_memory_utilization, parse_fraction),
        ("reserve", args.reserve, parse_size),
        ("max_batched_tokens", args.max_batched_tokens, counted),
        ("max_num_seqs", args.max_num_seqs, counted),
        ("kv_memory", args.kv_memory, parse_size),
        ("kv_dtype", args.kv_dtype, engine_kv_dtype),
        ("kv_layout", args.kv_layout, parse_layout),
        ("block_size", args.block_size, counted),
        ("max_model_len", args.max_model_len, counted),
        # the engine and its own options (SGLang's rule, redundant experts)
        ("engine", engine, lambda t, o: t),
        ("release", release, lambda t, o: t),
        ("mem_fraction_static", args.mem_fraction_static, parse_fraction),
        ("page_size", args.page_size, counted),
        ("redundant_experts", args.redundant_experts, _redundant),
        ("max_running_requests", args.max_running_requests, counted),
        # a hybrid model's state (SGLang's mamba pool, vLLM's hybrid manager)
        ("mamba_ssm_dtype", args.mamba_ssm_dtype, parse_mamba_dtype),
        ("mamba_cache_dtype", args.mamba_cache_dtype, parse_mamba_dtype),
        ("mamba_full_memory_ratio", args.mamba_full_memory_ratio, parse_ratio),
        ("max_mamba_cache_size", args.max_mamba_cache_size, counted),
        ("mamba_strategy", args.mamba_strategy, lambda t, o: t.strip()),
        ("mamba_cache_mode", args.mamba_cache_mode, lambda t, o: t.strip()),
    ):
        if text is not None:
            given[name] = parse(text, typed.get(name, PLAN_FLAGS[name][0]))
    if args.mtp:
        given["mtp"] = True
    if args.text_only:
        given["vision"] = False
    if args.dp_attention:
        given["dp_attention"] = True
    if args.disable_radix_cache:
        given["radix_cache"] = False

    settings = deployment_settings(serve, given, typed, count, expert_parallel=args.enable_expert_parallel)
    options = DeploymentOptions(**settings)  # type: ignore[arg-type]  # fields by name, typed as read
    options.rules.release(options.release)  # an engine and a release kimicount knows, before the model
    if serve is not None:
        if serve.nodes is not None and nodes == 1 and count % serve.nodes == 0:
            nodes = serve.nodes
        elif serve.nodes is not None and serve.nodes != nodes:
            raise UsageError(
                f"--gpus {args.gpus} is {nodes} node(s), but the serve command's --nnodes says {serve.nodes}"
            )

    # the model: positional, --repo, --model, --config, or the serve command's
    chosen = _the_model(model, args.repo, args.model_option, serve)
    if serve is not None and chosen is None and args.config is None:
        raise UsageError(
            f"the serve command names no model: {serve.launcher} takes it {server_engine(serve.engine).model_flag}"
        )
    revision = args.revision
    if serve is not None and serve.revision is not None:
        if revision is not None and revision != serve.revision:
            raise UsageError(
                f"--revision {shorten(revision, 60)} and the serve command's --revision "
                f"{shorten(serve.revision, 60)} disagree"
            )
        revision = serve.revision
    if serve is not None:
        _warn_unmodelled(serve, warn)
    batch_max, sequences, positions = _batch(args, warn)
    return PlanRequest(
        model=_folder_or_repo(chosen, args.config, revision),
        gpus=args.gpus,
        nodes=nodes,
        count=count,
        gpu=gpu,
        options=options,
        serve=serve,
        min_gpus=args.min_gpus,
        detail=args.detail,
        compare=args.compare_layouts,
        batch_max=batch_max,
        sequences=sequences,
        positions=positions,
        gpu_words=() if args.gpu_memory is None else ("--gpu-memory", args.gpu_memory),
    )


def _batch(args: PlanArgs, warn: Callable[[str], None]) -> tuple[bool, int | None, int | None]:
    """--batch (N, or max) and --context: (whether max, sequences, positions)."""
    positions = None if args.context is None else _count(args.context, "--context", warn)
    if args.batch is not None and args.batch.strip().lower() == "max":
        return True, None, positions
    sequences = None if args.batch is None else _count(args.batch, "--batch", warn)
    return False, sequences, positions


def _warn_unmodelled(serve: ServeCommand, warn: Callable[[str], None]) -> None:
    """One line: the serve command's flags the plan does not model, those that change memory first;
    and how the engine read a count written with a lower-case suffix."""
    for note in serve.notes:
        warn(note)
    memory = list(serve.memory_unmodelled)
    parts = []
    if memory:
        verb = "changes" if len(memory) == 1 else "change"
        parts.append(f"{', '.join(memory)} {verb} memory in ways the plan does not model")
    if serve.unmodelled:
        verb = "does" if len(serve.unmodelled) == 1 else "do"
        parts.append(f"{', '.join(serve.unmodelled)} {verb} not change memory")
    if parts:
        warn(f"the serve command's {'; '.join(parts)}")


@dataclass(frozen=True)
class PlanRequest:
    """A server plan asked for: the model, the GPUs (`gpus` as typed, in `nodes` nodes), the deployment,
    the serve command it came from, and which views follow the answer (--min-gpus, --detail,
    --compare, --batch/--context)."""

    model: ModelChoice
    gpus: str
    nodes: int
    count: int
    gpu: Accelerator
    options: DeploymentOptions
    serve: ServeCommand | None
    min_gpus: bool = False
    detail: bool = False
    compare: str | None = None
    batch_max: bool = False
    sequences: int | None = None
    positions: int | None = None
    gpu_words: tuple[str, ...] = ()

    def command(self, count: int, options: DeploymentOptions, nodes: int | None = None) -> str:
        """The plan command that gives `options` on `count` GPUs of this type (in `nodes` nodes, when
        given), quoted for the shell."""
        gpu = self.gpu
        if count == self.count:
            where = self.gpus
        elif gpu.name == "GPU":  # described by --gpu-memory: a count alone
            where = str(count)
        elif nodes is not None and nodes > 1:
            where = f"{nodes}x{count // nodes}x{gpu.name}"
        else:
            where = f"{count}x{gpu.name}"
        words = [
            "kimicount",
            "plan",
            *self.model.words(),
            "--gpus",
            where,
            *self.gpu_words,
            *option_words(options),
        ]
        return shlex.join(words)

    def answer(self, anatomy: Anatomy) -> PlanAnswer | CompareAnswer:
        """Plan it on the model; the ways out when it does not fit, each as a command; --batch max; the
        speed floor; or, with --compare, the layouts side by side."""
        from kimicount.storage import require_modelled

        require_modelled(anatomy.spec)
        options = for_model(self.options, anatomy.spec)
        if self.compare is not None:
            from kimicount.deploy.answer import compare

            rows = compare(anatomy, self.gpu, self.count, options, self.compare)
            return CompareAnswer(self, anatomy.spec, tuple(rows))
        from kimicount.deploy.answer import largest_batch, node_size, ways_out

        report = plan(anatomy, self.gpu, self.count, options, min_gpus=self.min_gpus)
        tries = tuple(
            (way, self.command(way.report.count, way.report.options, way.nodes))
            for way in ways_out(anatomy, self.gpu, report, node_size(self.count, self.nodes))
        )
        positions, sequences, best = self.positions, self.sequences, None
        if self.batch_max:
            positions = 4096 if positions is None else positions
            best = largest_batch(report, positions)
            if best < 1:
                raise UsageError(
                    f"--batch max: not one sequence of {positions:,} positions fits the KV cache "
                    f"({report.pages_per_gpu:,} pages of {report.block_size} on a GPU)"
                )
            sequences = best
        speed = None
        if (sequences, positions) != (None, None):
            from kimicount.deploy.speed import step_floor, sweep

            sequences = 1 if sequences is None else sequences
            positions = 4096 if positions is None else positions
            speed = (
                step_floor(report, batch=sequences, context=positions),
                sweep(report, positions, sequences),
                step_floor(report, batch=1, context=positions, prefill=True),
            )
        return PlanAnswer(self, report, tries, best, positions, speed)


@dataclass(frozen=True)
class PlanAnswer:
    """A plan and what follows it: the ways out (each with its command), the largest batch (--batch max,
    at `positions`) and the speed floor (the step asked, the sweep, the prefill)."""

    request: PlanRequest
    report: PlanReport
    tries: tuple[tuple[WayOut, str], ...]
    batch_max: int | None = None
    positions: int | None = None
    speed: tuple[Step, list[Step], Step] | None = None


@dataclass(frozen=True)
class CompareAnswer:
    """--compare: each layout's plan (or why it cannot run)."""

    request: PlanRequest
    spec: ModelSpec
    rows: tuple[Compared, ...]
