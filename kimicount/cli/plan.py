"""`kimicount plan`: memory per GPU for a deployment, answered first in a few lines, with the detail,
ways out, the largest batch, layouts side by side and the speed floor of a decode step on request.

The deployment comes from plan options, from a serve command pasted after `--` (vllm serve …, python -m
sglang.launch_server …; kimicount.deploy.serve_command reads it), or both, as long as they agree. Every
layout and memory option also answers to the engines' own names (serve_command.PLAN_FLAGS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kimicount.cli.common import (
    COUNTS,
    ConfigOption,
    JsonOption,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    count_or_none,
    ignored,
    load_model,
    print_json,
    warn,
)
from kimicount.cli.common import count as count_option
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app
from kimicount.deploy.hardware import ACCELERATORS
from kimicount.deploy.serve_command import PLAN_FLAGS
from kimicount.errors import UsageError
from kimicount.options import DTYPE_METAVAR, parse_count

#: The GPU types --gpus names, from the accelerator table.
GPU_TYPES = ", ".join(ACCELERATORS)
#: The --engine values that take the local route (kimicount.deploy.local).
LOCAL_ENGINES = ("llama.cpp", "ik_llama.cpp")


def _names(setting: str) -> list[str]:
    """The option names of a setting: kimicount's and the engines' (serve_command.PLAN_FLAGS)."""
    return list(PLAN_FLAGS[setting])


@app.command(
    "plan", epilog=EXIT_CODES, short_help="Memory per GPU for a deployment, and what KV cache is left."
)
def plan_command(
    ctx: typer.Context,
    gpus: Annotated[
        str,
        typer.Option(
            "--gpus",
            metavar="NxTYPE",
            help=f"How many GPUs of which type: 8xH200, 8×H200, 16xH100, 2x8xH800 (2 nodes of 8) (types: "
            f"{GPU_TYPES}), or a count alone with --gpu-memory.",
            show_default=False,
        ),
    ],
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ORG/NAME | -- SERVE COMMAND…]",
            help="A Hub repo id (as --repo), or after -- a serve command: vllm serve MODEL …, python -m "
            "vllm.entrypoints.openai.api_server --model MODEL …, python -m sglang.launch_server --model-path "
            "MODEL …, sglang serve ….",
            show_default=False,
        ),
    ] = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
    model_option: Annotated[
        str | None,
        typer.Option(
            *_names("model"),
            metavar="ORG/NAME|PATH",
            help="The model as vLLM and SGLang name it: a repo id, or a folder holding config.json.",
            show_default=False,
        ),
    ] = None,
    revision: RevisionOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = None,
    gpu_memory: Annotated[
        str | None,
        typer.Option(
            "--gpu-memory",
            metavar="SIZE",
            help="Memory per GPU (e.g. 141GiB), instead of the table's; taken as the total CUDA reports.",
            show_default=False,
        ),
    ] = None,
    hbm_bandwidth: Annotated[
        str | None,
        typer.Option(
            "--hbm-bandwidth",
            metavar="RATE",
            help="HBM bandwidth per GPU (e.g. 4.8TB/s).",
            show_default=False,
        ),
    ] = None,
    peak_bf16: Annotated[
        str | None,
        typer.Option(
            "--peak-bf16",
            metavar="FLOPS",
            help="Dense BF16 peak per GPU (e.g. 989.5TFLOPS).",
            show_default=False,
        ),
    ] = None,
    peak_fp8: Annotated[
        str | None,
        typer.Option(
            "--peak-fp8",
            metavar="FLOPS",
            help="Dense FP8 peak per GPU (e.g. 1979TFLOPS).",
            show_default=False,
        ),
    ] = None,
    tp: Annotated[
        str | None,
        typer.Option(
            *_names("tp"),
            metavar="N",
            help="Tensor-parallel GPUs per attention group. Default: what --pp and --dp leave.",
            show_default=False,
        ),
    ] = None,
    pp: Annotated[
        str | None,
        typer.Option(*_names("pp"), metavar="N", help="Pipeline stages. Default: 1.", show_default=False),
    ] = None,
    dp: Annotated[
        str | None,
        typer.Option(
            *_names("dp"),
            metavar="N",
            help="Data-parallel attention groups, as vLLM lays them out: each holds whole attention, dense "
            "MLP, shared expert and head, and keeps its own sequences. Default: 1.",
            show_default=False,
        ),
    ] = None,
    ep: Annotated[
        str | None,
        typer.Option(
            *_names("ep"),
            metavar="N",
            help="Expert parallelism: 1 is off; on, engines size it TP × DP, the only other value accepted.",
            show_default=False,
        ),
    ] = None,
    enable_expert_parallel: Annotated[
        bool,
        typer.Option(
            *_names("expert_parallel"), help="Expert parallelism over all TP × DP GPUs (vLLM's switch)."
        ),
    ] = False,
    dcp: Annotated[
        str | None,
        typer.Option(
            *_names("dcp"),
            metavar="N",
            help="Decode-context parallelism: the latent split by token over DCP of the TP ranks. Default: 1.",
            show_default=False,
        ),
    ] = None,
    mtp: Annotated[
        bool,
        typer.Option(*_names("mtp"), help="Load the multi-token-prediction layer (speculative decoding)."),
    ] = False,
    text_only: Annotated[
        bool,
        typer.Option(
            *_names("vision"),
            help="Leave out the vision tower (a text-only server; Kimi-K2-Thinking has none).",
        ),
    ] = False,
    gpu_memory_utilization: Annotated[
        str | None,
        typer.Option(
            *_names("utilization"),
            metavar="FRACTION",
            help="The share of memory the engine may use. Default: 0.9.",
            show_default=False,
        ),
    ] = None,
    reserve: Annotated[
        str | None,
        typer.Option(
            *_names("reserve"),
            metavar="SIZE",
            help="What the engine keeps back for activations, CUDA graphs and buffers. Default: an estimate.",
            show_default=False,
        ),
    ] = None,
    max_batched_tokens: Annotated[
        str | None,
        typer.Option(
            *_names("max_batched_tokens"),
            metavar="N",
            help="Tokens per forward pass, for the reserve estimate. Default: vLLM's (8,192 on large GPUs).",
            show_default=False,
        ),
    ] = None,
    max_num_seqs: Annotated[
        str | None,
        typer.Option(
            *_names("max_num_seqs"),
            metavar="N",
            help="Sequences per step, for the reserve estimate. Default: vLLM's (1,024 on large GPUs).",
            show_default=False,
        ),
    ] = None,
    kv_memory: Annotated[
        str | None,
        typer.Option(
            *_names("kv_memory"),
            metavar="SIZE",
            help="The KV pool per GPU an engine printed (e.g. 46.80GiB): skips weights and reserve.",
            show_default=False,
        ),
    ] = None,
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            *_names("kv_dtype"),
            metavar=DTYPE_METAVAR,
            help="KV cache dtype (also the engines' auto, fp8_e4m3, fp8_e5m2). Default: the model's. fp8 on "
            "DeepSeek-V3.2 is FlashMLA's 656-byte record.",
            show_default=False,
        ),
    ] = None,
    kv_layout: Annotated[
        str | None,
        typer.Option(
            *_names("kv_layout"),
            metavar="[latent|flashmla-fp8|naive|flash]",
            help="KV cache layout. Default: the engines' (the latent).",
            show_default=False,
        ),
    ] = None,
    block_size: Annotated[
        str | None,
        typer.Option(
            *_names("block_size"),
            metavar="N",
            help="KV page size in tokens. Default: 64 (FlashMLA's).",
            show_default=False,
        ),
    ] = None,
    max_model_len: Annotated[
        str | None,
        typer.Option(
            *_names("max_model_len"),
            metavar="N",
            help=f"Longest sequence ({COUNTS}). Default: the config's max_position_embeddings.",
            show_default=False,
        ),
    ] = None,
    min_gpus: Annotated[
        bool, typer.Option("--min-gpus", help="Also find the fewest GPUs of this type that hold it.")
    ] = False,
    detail: Annotated[
        bool,
        typer.Option(
            "--detail",
            help="After the answer: the weights per component, one GPU's memory as a bar, the reserve.",
        ),
    ] = False,
    compare_layouts: Annotated[
        str | None,
        typer.Option(
            "--compare",
            metavar="LAYOUTS",
            help="Layouts side by side, e.g. tp8,tp8pp2,dp8ep8,tp8dcp8 (a size after each of tp, pp, dp, ep, "
            "dcp; without tp, what --gpus leaves).",
            show_default=False,
        ),
    ] = None,
    batch: Annotated[
        str | None,
        typer.Option(
            "--batch",
            metavar="N|max",
            help="Sequences per replica in a decode step: adds the speed floor (default 1 with --context); max: "
            "the largest batch whose KV fits.",
            show_default=False,
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            metavar="N",
            help="Positions a decode step attends to, and the prompt of the prefill floor (default 4,096 "
            "with --batch).",
            show_default=False,
        ),
    ] = None,
    # --- the engine and its own options (SGLang's rule, redundant experts) --------------------------
    engine: Annotated[
        str | None,
        typer.Option(
            *_names("engine"),
            metavar="[vllm|sglang|llama.cpp|ik_llama.cpp]",
            help="Whose memory rule sizes the KV pool (default vllm; llama.cpp for a local run).",
            show_default=False,
        ),
    ] = None,
    mem_fraction_static: Annotated[
        str | None,
        typer.Option(
            *_names("mem_fraction_static"),
            metavar="FRACTION",
            help="SGLang's share for weights and KV pool. Default: SGLang's pick for the GPU and layout.",
            show_default=False,
        ),
    ] = None,
    page_size: Annotated[
        str | None,
        typer.Option(
            *_names("page_size"),
            metavar="N",
            help="SGLang's KV page in tokens (default 1; FlashMLA 64, CUTLASS MLA 128).",
            show_default=False,
        ),
    ] = None,
    dp_attention: Annotated[
        bool,
        typer.Option(
            *_names("dp_attention"),
            help="SGLang's DP attention: --tp is all GPUs, attention per --dp rank, each its own pool.",
        ),
    ] = False,
    redundant_experts: Annotated[
        str | None,
        typer.Option(
            *_names("redundant_experts"),
            metavar="N",
            help="Redundant expert slots for EPLB (vLLM --enable-eplb, SGLang): (E + N) ÷ EP per GPU. "
            "Default: 0.",
            show_default=False,
        ),
    ] = None,
    max_running_requests: Annotated[
        str | None,
        typer.Option(
            *_names("max_running_requests"),
            metavar="N",
            help="SGLang's cap on running requests. Default: SGLang's, from the pool.",
            show_default=False,
        ),
    ] = None,
    # --- local runs (llama.cpp, ik_llama.cpp): any of --gguf, --quant, --ram, --offload, --n-cpu-moe, -ngl
    # takes the local route (kimicount.deploy.local, rendered by kimicount.deploy.render_local) ---------------------------
    gguf: Annotated[
        Path | None,
        typer.Option(
            "--gguf",
            metavar="FILE",
            help="Local run: a GGUF file (the first of a split set).",
            show_default=False,
        ),
    ] = None,
    quant: Annotated[
        str | None,
        typer.Option(
            "--quant",
            metavar="TYPE",
            help="Local run: a uniform llama-quantize of the model (Q4_K_M, Q8_0…), estimated.",
            show_default=False,
        ),
    ] = None,
    ram: Annotated[
        str | None,
        typer.Option(
            "--ram", metavar="SIZE", help="Local run: system RAM (e.g. 512GiB).", show_default=False
        ),
    ] = None,
    offload: Annotated[
        str | None,
        typer.Option(
            "--offload",
            metavar="experts",
            help="Local run: keep the routed experts in RAM (-ot exps=CPU).",
            show_default=False,
        ),
    ] = None,
    n_cpu_moe: Annotated[
        str | None,
        typer.Option(
            "--n-cpu-moe",
            metavar="N",
            help="Local run: the routed experts of blocks 0…N−1 in RAM.",
            show_default=False,
        ),
    ] = None,
    ngl: Annotated[
        str | None,
        typer.Option(
            "-ngl",
            "--n-gpu-layers",
            metavar="N",
            help="Local run: layers on the GPUs (default: all).",
            show_default=False,
        ),
    ] = None,
    build: Annotated[
        str | None,
        typer.Option(
            "--build",
            metavar="bNNNN",
            help="Local run: llama.cpp's build (default: the newest).",
            show_default=False,
        ),
    ] = None,
    mla: Annotated[
        str | None,
        typer.Option(
            "--mla", metavar="0-3", help="Local run: ik_llama.cpp's -mla (default 3).", show_default=False
        ),
    ] = None,
    cache_layout: Annotated[
        str | None,
        typer.Option(
            "--cache-layout",
            metavar="[per-head|latent+v|latent]",
            help="Local run: the cache layout, instead of the build's.",
            show_default=False,
        ),
    ] = None,
    cache_type_k: Annotated[
        str, typer.Option("-ctk", "--cache-type-k", metavar="TYPE", help="Local run: K cache type.")
    ] = "f16",
    cache_type_v: Annotated[
        str, typer.Option("-ctv", "--cache-type-v", metavar="TYPE", help="Local run: V cache type.")
    ] = "f16",
    tensor_split: Annotated[
        str | None,
        typer.Option(
            "--tensor-split",
            "-ts",
            metavar="A,B,…",
            help="Local run: GPU shares (default: equal).",
            show_default=False,
        ),
    ] = None,
    ubatch: Annotated[
        str, typer.Option("--ubatch", "-ub", metavar="N", help="Local run: tokens per ubatch.")
    ] = "512",
    no_mmap: Annotated[
        bool, typer.Option("--no-mmap", help="Local run: copy the host tensors into RAM.")
    ] = False,
    ram_bandwidth: Annotated[
        str | None,
        typer.Option(
            "--ram-bandwidth",
            metavar="RATE",
            help="Local run: RAM bandwidth (e.g. 204.8GB/s), for the decode floor.",
            show_default=False,
        ),
    ] = None,
    ram_channels: Annotated[
        str | None,
        typer.Option(
            "--ram-channels",
            metavar="N",
            help="Local run: memory channels (with --ram-speed).",
            show_default=False,
        ),
    ] = None,
    ram_speed: Annotated[
        str | None,
        typer.Option(
            "--ram-speed",
            metavar="MT/s",
            help="Local run: memory speed (with --ram-channels).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Will it fit: the verdict, KV tokens per GPU, the concurrency at max-model-len and what limits it.

    Shards the model as vLLM does (TP, PP, DP attention, EP, DCP), or as SGLang does with --engine sglang,
    at the checkpoint's stored bytes. When it does not fit, each way out is a command that fits. Paste a
    serve command after -- to plan it. The reserve is an estimate, labelled so.

    With --gguf, --quant, --ram, --offload, --n-cpu-moe, -ngl or --engine llama.cpp|ik_llama.cpp: a local
    llama.cpp or ik_llama.cpp run instead (the GGUF on GPUs and in RAM, its KV cache per build, the
    longest context, the flags).
    """
    serve, model = _read_words(words)
    local = {
        "--gguf": gguf,
        "--quant": quant,
        "--ram": ram,
        "--offload": offload,
        "--n-cpu-moe": n_cpu_moe,
        "-ngl": ngl,
    }
    local_engine = engine is not None and engine.strip().lower() in LOCAL_ENGINES
    if local_engine or any(value is not None for value in local.values()):
        if serve is not None:
            raise UsageError(
                f"a serve command after -- ({serve.launcher}) plans a vLLM or SGLang server, not a local "
                "llama.cpp run: name the model as ORG/NAME, --repo or --config"
            )
        from kimicount.deploy.local.request import run_local_plan

        chosen = _the_model(model, repo, model_option, None)
        if chosen is not None and config is None and Path(chosen).exists():  # a local folder
            config, chosen = Path(chosen), None
        run_local_plan(
            load_model(None, config, chosen, revision, token, timeout, live=not as_json)
            if gguf is None
            else None,
            gpus=gpus,
            gpu_memory=gpu_memory,
            hbm_bandwidth=hbm_bandwidth,
            peak_bf16=peak_bf16,
            gguf=gguf,
            quant=quant,
            ram=ram,
            offload=offload,
            n_cpu_moe=n_cpu_moe,
            ngl=ngl,
            engine="llama.cpp" if engine is None else engine,
            build=build,
            mla=mla,
            cache_layout=cache_layout,
            cache_type_k=cache_type_k,
            cache_type_v=cache_type_v,
            tensor_split=tensor_split,
            ubatch=ubatch,
            no_mmap=no_mmap,
            ram_bandwidth=ram_bandwidth,
            ram_channels=ram_channels,
            ram_speed=ram_speed,
            context=context,
            as_json=as_json,
        )
        return
    from kimicount.deploy.hardware import parse_gpu_nodes, typed_gpu
    from kimicount.deploy.plan import ENGINES, DeploymentOptions, plan
    from kimicount.deploy.serve_command import deployment_settings, engine_kv_dtype
    from kimicount.kvcache import parse_layout
    from kimicount.options import parse_fraction, parse_size

    nodes, count, gpu = parse_gpu_nodes(gpus)
    gpu = typed_gpu(
        gpus,
        count,
        gpu,
        gpu_memory=gpu_memory,
        hbm_bandwidth=hbm_bandwidth,
        peak_bf16=peak_bf16,
        peak_fp8=peak_fp8,
    )

    # the plan options typed, by DeploymentOptions field (as typed, for messages)
    typed = _typed_options(ctx)
    given: dict[str, Any] = {}
    for name, text, parse in (
        ("tp", tp, count_option),
        ("pp", pp, count_option),
        ("dp", dp, count_option),
        ("ep", ep, count_option),
        ("dcp", dcp, count_option),
        ("utilization", gpu_memory_utilization, parse_fraction),
        ("reserve", reserve, parse_size),
        ("max_batched_tokens", max_batched_tokens, count_option),
        ("max_num_seqs", max_num_seqs, count_option),
        ("kv_memory", kv_memory, parse_size),
        ("kv_dtype", kv_dtype, engine_kv_dtype),
        ("kv_layout", kv_layout, parse_layout),
        ("block_size", block_size, count_option),
        ("max_model_len", max_model_len, count_option),
        # the engine and its own options (SGLang's rule, redundant experts)
        ("engine", engine, lambda t, o: t.strip().lower()),
        ("mem_fraction_static", mem_fraction_static, parse_fraction),
        ("page_size", page_size, count_option),
        ("redundant_experts", redundant_experts, _redundant),
        ("max_running_requests", max_running_requests, count_option),
    ):
        if text is not None:
            given[name] = parse(text, typed.get(name, PLAN_FLAGS[name][0]))
    if mtp:
        given["mtp"] = True
    if text_only:
        given["vision"] = False
    if dp_attention:
        given["dp_attention"] = True
    if given.get("engine", "vllm") not in ENGINES:  # the local ones took the local route above
        raise UsageError(f"--engine {engine}: expected one of {', '.join(ENGINES + LOCAL_ENGINES)}")

    settings = deployment_settings(serve, given, typed, count, expert_parallel=enable_expert_parallel)
    options = DeploymentOptions(**settings)
    if serve is not None:
        if serve.nodes is not None and nodes == 1 and count % serve.nodes == 0:
            nodes = serve.nodes
        elif serve.nodes is not None and serve.nodes != nodes:
            raise UsageError(
                f"--gpus {gpus} is {nodes} node(s), but the serve command's --nnodes says {serve.nodes}"
            )

    # the model: positional, --repo, --model, --config, or the serve command's
    chosen = _the_model(model, repo, model_option, serve)
    if serve is not None and chosen is None and config is None:
        raise UsageError(
            f"the serve command names no model: {serve.launcher} takes it {_MODEL_FLAG[serve.engine]}"
        )
    if serve is not None and serve.revision is not None:
        if revision is not None and revision != serve.revision:
            raise UsageError(
                f"--revision {revision} and the serve command's --revision {serve.revision} disagree"
            )
        revision = serve.revision
    if chosen is not None and config is None and Path(chosen).exists():  # a local folder, as engines take it
        config, chosen = Path(chosen), None
    model_words = (
        ["--config", str(config)]
        if config is not None
        else ([] if chosen is None else [chosen]) + ([] if revision is None else ["--revision", revision])
    )

    from kimicount.anatomy import build_anatomy
    from kimicount.storage import require_modelled

    if serve is not None:
        _warn_unmodelled(serve)
    spec = load_model(None, config, chosen, revision, token, timeout, live=not as_json)
    anatomy = build_anatomy(spec)
    require_modelled(anatomy.spec)
    gpu_words = [
        w for flag, value in (("--gpu-memory", gpu_memory),) if value is not None for w in (flag, value)
    ]

    if compare_layouts is not None:
        ignored(
            ctx, "with --compare (it compares the layouts' memory)", "batch", "context", "min_gpus", "detail"
        )
        _compare(anatomy, gpu, count, options, compare_layouts, as_json)
        return

    report = plan(anatomy, gpu, count, options, min_gpus=min_gpus)
    from kimicount.deploy.answer import largest_batch, ways_out
    from kimicount.deploy.serve_command import option_words

    def command(found_count: int, found_options: DeploymentOptions) -> str:
        import shlex

        where = (
            gpus
            if found_count == count
            else f"{found_count}x{gpu.name}"
            if gpu.name != "GPU"
            else str(found_count)
        )
        return shlex.join(
            ["kimicount", "plan", *model_words, "--gpus", where, *gpu_words, *option_words(found_options)]
        )

    tries = [(way, command(way.report.count, way.report.options)) for way in ways_out(anatomy, gpu, report)]
    positions = count_or_none(context, "--context")
    best = None
    if batch is not None and batch.strip().lower() == "max":
        positions = 4096 if positions is None else positions
        best = largest_batch(report, positions)
        if best < 1:
            raise UsageError(
                f"--batch max: not one sequence of {positions:,} positions fits the KV cache "
                f"({report.pages_per_gpu:,} pages of {report.block_size} on a GPU)"
            )
        sequences: int | None = best
    else:
        sequences = count_or_none(batch, "--batch")
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
    if as_json:
        from kimicount.deploy.reports import answer_json, plan_json, speed_json

        print_json(
            {
                **plan_json(report),
                **answer_json(report, nodes, [(way.kind, way.why, text, way.report) for way, text in tries]),
                **(
                    {}
                    if best is None
                    else {"batch_max": {"batch": best, "context": positions, "estimate": report.estimate}}
                ),
                **({} if serve is None else {"serve_command": _serve_json(serve)}),
                **({} if speed is None else speed_json(report, *speed)),
            }
        )
        return
    from kimicount.deploy.render_answer import render_answer, render_batch_max
    from kimicount.deploy.render_plan import min_gpus_text, render_plan, render_speed
    from kimicount.render import make_console, say, show

    console = make_console()
    render_answer(console, report, nodes, [(text, way.why) for way, text in tries], detail)
    if detail:
        say(console)
        render_plan(console, report, verdict_line=False)
    elif report.min_gpus_asked:
        say(console, min_gpus_text(report))
    if best is not None:
        say(console)
        render_batch_max(console, report, best, positions)  # type: ignore[arg-type]
    if speed is not None:
        show(console)
        render_speed(console, report, *speed)


def _read_words(words: list[str] | None) -> tuple[Any, str | None]:
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
        f"sglang.launch_server …); got: {' '.join(words[:3])} …"
    )


def _the_model(model: str | None, repo: str | None, model_option: str | None, serve: Any) -> str | None:
    """The model named by the positional, --repo, --model or the serve command: once, or the same."""
    named = [m for m in (model, repo, model_option, None if serve is None else serve.model) if m is not None]
    if len(set(named)) > 1:
        raise UsageError(f"name the model once: {' and '.join(sorted(set(named)))}")
    return named[0] if named else None


def _redundant(text: str, option: str) -> int:
    """--num-redundant-experts: a count, 0 (the engines' default) allowed."""
    value = parse_count(text, option)
    if value < 0:
        raise UsageError(f"{option} {text}: expected 0 or more redundant experts")
    return value


#: Where each engine's serve command names the model.
_MODEL_FLAG = {"vllm": "first (vllm serve MODEL) or from --model", "sglang": "from --model-path"}


def _typed_options(ctx: typer.Context) -> dict[str, str]:
    """The name each plan option was typed under, by setting (`--tensor-parallel-size` for tp): the
    first of its names when typed, since click does not keep which alias was used."""
    typed = {}
    by_param = {
        "tp": "tp",
        "pp": "pp",
        "dp": "dp",
        "ep": "ep",
        "dcp": "dcp",
        "gpu_memory_utilization": "utilization",
        "reserve": "reserve",
        "max_batched_tokens": "max_batched_tokens",
        "max_num_seqs": "max_num_seqs",
        "kv_memory": "kv_memory",
        "kv_dtype": "kv_dtype",
        "kv_layout": "kv_layout",
        "block_size": "block_size",
        "max_model_len": "max_model_len",
        "engine": "engine",
        "mem_fraction_static": "mem_fraction_static",
        "page_size": "page_size",
        "redundant_experts": "redundant_experts",
        "max_running_requests": "max_running_requests",
    }
    for param, setting in by_param.items():
        source = ctx.get_parameter_source(param)
        if source is not None and source.name == "COMMANDLINE":
            typed[setting] = PLAN_FLAGS[setting][0]
    return typed


def _warn_unmodelled(serve: Any) -> None:
    """One stderr line: the serve command's flags the plan does not model, those that change memory
    first; and how vLLM reads a token count written with a lower-case suffix (options.vllm_reading)."""
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


def _serve_json(serve: Any) -> dict[str, Any]:
    return {
        "engine": serve.engine,
        "launcher": serve.launcher,
        "model": serve.model,
        "revision": serve.revision,
        "nodes": serve.nodes,
        "flags": dict(serve.flags),
        "unmodelled": list(serve.unmodelled),
        "memory_unmodelled": list(serve.memory_unmodelled),
    }


def _compare(anatomy: Any, gpu: Any, count: int, options: Any, text: str, as_json: bool) -> None:
    from kimicount.deploy.answer import compare

    rows = compare(anatomy, gpu, count, options, text)
    if as_json:
        from kimicount.deploy.reports import compare_json

        print_json(compare_json(anatomy.spec, gpu, rows))
        return
    from kimicount.deploy.render_answer import render_compare
    from kimicount.render import make_console

    render_compare(make_console(), rows)
