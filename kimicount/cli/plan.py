"""`kimicount plan`: memory per GPU for a deployment, and the speed floor of a decode step."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kimicount.cli.common import (
    COUNTS,
    ConfigOption,
    JsonOption,
    ModelArgument,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    count_or_none,
    load_model,
    print_json,
)
from kimicount.cli.exits import EXIT_CODES
from kimicount.cli.root import app
from kimicount.errors import UsageError
from kimicount.hardware import ACCELERATORS
from kimicount.options import DTYPE_METAVAR, parse_count, parse_dtype

#: The GPU types --gpus names, from the accelerator table.
GPU_TYPES = ", ".join(ACCELERATORS)


@app.command(
    "plan", epilog=EXIT_CODES, short_help="Memory per GPU for a deployment, and what KV cache is left."
)
def plan_command(
    gpus: Annotated[
        str,
        typer.Option(
            "--gpus",
            metavar="NxTYPE",
            help=f"How many GPUs of which type: 8xH200, 8×H200, 16xH100 (types: {GPU_TYPES}), or a count "
            "alone with --gpu-memory.",
            show_default=False,
        ),
    ],
    model: ModelArgument = None,
    config: ConfigOption = None,
    repo: RepoOption = None,
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
            "--tp",
            metavar="N",
            help="Tensor-parallel GPUs per attention group. Default: what --pp and --dp leave.",
            show_default=False,
        ),
    ] = None,
    pp: Annotated[str, typer.Option("--pp", metavar="N", help="Pipeline stages.")] = "1",
    dp: Annotated[
        str,
        typer.Option(
            "--dp",
            metavar="N",
            help="Data-parallel attention groups, as vLLM lays them out: each holds whole attention, dense "
            "MLP, shared expert and head, and keeps its own sequences.",
        ),
    ] = "1",
    ep: Annotated[
        str | None,
        typer.Option(
            "--ep",
            metavar="N",
            help="Expert parallelism: 1 is off; on, engines size it TP × DP, the only other value accepted.",
            show_default=False,
        ),
    ] = None,
    dcp: Annotated[
        str,
        typer.Option(
            "--dcp",
            metavar="N",
            help="Decode-context parallelism: the latent split by token over DCP of the TP ranks.",
        ),
    ] = "1",
    mtp: Annotated[
        bool, typer.Option("--mtp", help="Load the multi-token-prediction layer (speculative decoding).")
    ] = False,
    text_only: Annotated[
        bool,
        typer.Option(
            "--text-only", help="Leave out the vision tower (a text-only server; Kimi-K2-Thinking has none)."
        ),
    ] = False,
    gpu_memory_utilization: Annotated[
        str,
        typer.Option(
            "--gpu-memory-utilization", metavar="FRACTION", help="The share of memory the engine may use."
        ),
    ] = "0.9",
    reserve: Annotated[
        str | None,
        typer.Option(
            "--reserve",
            metavar="SIZE",
            help="What the engine keeps back for activations, CUDA graphs and buffers. Default: an estimate.",
            show_default=False,
        ),
    ] = None,
    max_batched_tokens: Annotated[
        str | None,
        typer.Option(
            "--max-batched-tokens",
            metavar="N",
            help="Tokens per forward pass, for the reserve estimate. Default: vLLM's (8,192 on large GPUs).",
            show_default=False,
        ),
    ] = None,
    max_num_seqs: Annotated[
        str | None,
        typer.Option(
            "--max-num-seqs",
            metavar="N",
            help="Sequences per step, for the reserve estimate. Default: vLLM's (1,024 on large GPUs).",
            show_default=False,
        ),
    ] = None,
    kv_memory: Annotated[
        str | None,
        typer.Option(
            "--kv-memory",
            metavar="SIZE",
            help="The KV pool per GPU an engine printed (e.g. 46.80GiB): skips weights and reserve.",
            show_default=False,
        ),
    ] = None,
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            "--kv-dtype",
            metavar=DTYPE_METAVAR,
            help="KV cache dtype. Default: the model's. fp8 on DeepSeek-V3.2 is FlashMLA's 656-byte record.",
            show_default=False,
        ),
    ] = None,
    kv_layout: Annotated[
        str | None,
        typer.Option(
            "--kv-layout",
            metavar="[latent|flashmla-fp8|naive|flash]",
            help="KV cache layout. Default: the engines' (the latent).",
            show_default=False,
        ),
    ] = None,
    block_size: Annotated[
        str, typer.Option("--block-size", metavar="N", help="KV page size in tokens (FlashMLA's 64).")
    ] = "64",
    max_model_len: Annotated[
        str | None,
        typer.Option(
            "--max-model-len",
            metavar="N",
            help=f"Longest sequence ({COUNTS}). Default: the config's max_position_embeddings.",
            show_default=False,
        ),
    ] = None,
    min_gpus: Annotated[
        bool, typer.Option("--min-gpus", help="Also find the fewest GPUs of this type that hold it.")
    ] = False,
    batch: Annotated[
        str | None,
        typer.Option(
            "--batch",
            metavar="N",
            help="Sequences per replica in a decode step: adds the speed floor (default 1 with --context).",
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
            "--engine",
            metavar="[vllm|sglang|llama.cpp|ik_llama.cpp]",
            help="Whose memory rule sizes the KV pool (default vllm; llama.cpp for a local run).",
            show_default=False,
        ),
    ] = None,
    mem_fraction_static: Annotated[
        str | None,
        typer.Option(
            "--mem-fraction-static",
            metavar="FRACTION",
            help="SGLang's share for weights and KV pool. Default: SGLang's pick for the GPU and layout.",
            show_default=False,
        ),
    ] = None,
    page_size: Annotated[
        str | None,
        typer.Option(
            "--page-size",
            metavar="N",
            help="SGLang's KV page in tokens (default 1; FlashMLA 64, CUTLASS MLA 128).",
            show_default=False,
        ),
    ] = None,
    dp_attention: Annotated[
        bool,
        typer.Option(
            "--enable-dp-attention",
            help="SGLang's DP attention: --tp is all GPUs, attention per --dp rank, each its own pool.",
        ),
    ] = False,
    redundant_experts: Annotated[
        str,
        typer.Option(
            "--num-redundant-experts",
            "--ep-num-redundant-experts",
            metavar="N",
            help="Redundant expert slots for EPLB (vLLM --enable-eplb, SGLang): (E + N) ÷ EP per GPU.",
        ),
    ] = "0",
    max_running_requests: Annotated[
        str | None,
        typer.Option(
            "--max-running-requests",
            metavar="N",
            help="SGLang's cap on running requests. Default: SGLang's, from the pool.",
            show_default=False,
        ),
    ] = None,
    # --- local runs (llama.cpp, ik_llama.cpp): any of --gguf, --quant, --ram, --offload, --n-cpu-moe, -ngl
    # takes the local route (kimicount.local, rendered by kimicount.render_local) ---------------------------
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
    """Memory per GPU for a deployment: weights by component, the reserve, and the KV cache that is left.

    Shards the model as vLLM does (TP, PP, DP attention, EP, DCP), at the checkpoint's stored bytes, and
    says how many tokens of context fit. The reserve is an estimate, labelled so.

    With --gguf, --quant, --ram, --offload, --n-cpu-moe or -ngl: a local llama.cpp or ik_llama.cpp run
    instead (the GGUF on GPUs and in RAM, its KV cache per build, the longest context, the flags).
    """
    local = {
        "--gguf": gguf,
        "--quant": quant,
        "--ram": ram,
        "--offload": offload,
        "--n-cpu-moe": n_cpu_moe,
        "-ngl": ngl,
    }
    local_engine = engine is not None and engine.strip().lower() in ("llama.cpp", "ik_llama.cpp")
    if local_engine or any(value is not None for value in local.values()):
        from kimicount.local.request import run_local_plan

        run_local_plan(
            load_model(model, config, repo, revision, token, timeout, live=not as_json)
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
    from kimicount.hardware import (
        custom_accelerator,
        parse_bandwidth,
        parse_flops,
        parse_gpus,
        with_overrides,
    )
    from kimicount.kvcache import parse_layout
    from kimicount.options import parse_fraction, parse_size
    from kimicount.plan import DeploymentOptions, plan

    count, gpu = parse_gpus(gpus)
    memory = None if gpu_memory is None else parse_size(gpu_memory, "--gpu-memory")
    if gpu is None:
        if memory is None:
            raise UsageError(
                f"--gpus {gpus}: name the GPU type (e.g. {count}xH200) or give --gpu-memory SIZE"
            )
        gpu = custom_accelerator(memory)
    gpu = with_overrides(
        gpu,
        memory_bytes=memory,
        hbm_bandwidth=None if hbm_bandwidth is None else parse_bandwidth(hbm_bandwidth),
        bf16_flops=None if peak_bf16 is None else parse_flops(peak_bf16, "--peak-bf16"),
        fp8_flops=None if peak_fp8 is None else parse_flops(peak_fp8, "--peak-fp8"),
    )
    options = DeploymentOptions(
        tp=count_or_none(tp, "--tp"),
        pp=parse_count(pp, "--pp"),
        dp=parse_count(dp, "--dp"),
        ep=count_or_none(ep, "--ep"),
        dcp=parse_count(dcp, "--dcp"),
        utilization=parse_fraction(gpu_memory_utilization, "--gpu-memory-utilization"),
        reserve=None if reserve is None else parse_size(reserve, "--reserve"),
        max_batched_tokens=count_or_none(max_batched_tokens, "--max-batched-tokens"),
        max_num_seqs=count_or_none(max_num_seqs, "--max-num-seqs"),
        kv_memory=None if kv_memory is None else parse_size(kv_memory, "--kv-memory"),
        kv_dtype=None if kv_dtype is None else parse_dtype(kv_dtype, "--kv-dtype"),
        kv_layout=None if kv_layout is None else parse_layout(kv_layout, "--kv-layout"),
        block_size=parse_count(block_size, "--block-size"),
        max_model_len=count_or_none(max_model_len, "--max-model-len"),
        mtp=mtp,
        vision=not text_only,
        # the engine's own options, as SGLang and vLLM name them
        engine="vllm" if engine is None else engine.strip().lower(),
        mem_fraction_static=None
        if mem_fraction_static is None
        else parse_fraction(mem_fraction_static, "--mem-fraction-static"),
        page_size=count_or_none(page_size, "--page-size"),
        dp_attention=dp_attention,
        redundant_experts=0
        if redundant_experts.strip() == "0"
        else parse_count(redundant_experts, "--num-redundant-experts"),
        max_running_requests=count_or_none(max_running_requests, "--max-running-requests"),
    )
    step = (count_or_none(batch, "--batch"), count_or_none(context, "--context"))
    from kimicount.anatomy import build_anatomy
    from kimicount.storage import require_modelled

    spec = load_model(model, config, repo, revision, token, timeout, live=not as_json)
    anatomy = build_anatomy(spec)
    require_modelled(anatomy.spec)
    report = plan(anatomy, gpu, count, options, min_gpus=min_gpus)
    speed = None
    if step != (None, None):
        from kimicount.speed import step_floor, sweep

        sequences = 1 if step[0] is None else step[0]
        positions = 4096 if step[1] is None else step[1]
        speed = (
            step_floor(report, batch=sequences, context=positions),
            sweep(report, positions, sequences),
            step_floor(report, batch=1, context=positions, prefill=True),
        )
    if as_json:
        from kimicount.reports_plan import plan_json, speed_json

        print_json({**plan_json(report), **({} if speed is None else speed_json(report, *speed))})
        return
    from kimicount.render import make_console, show
    from kimicount.render_plan import render_plan, render_speed

    console = make_console()
    render_plan(console, report)
    if speed is not None:
        show(console)
        render_speed(console, report, *speed)
