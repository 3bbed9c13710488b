"""`kimicount plan`: memory per GPU for a deployment, answered first in a few lines, with the detail,
ways out, the largest batch, layouts side by side and the speed floor of a decode step on request.

The deployment comes from plan options, from a serve command pasted after `--` (vllm serve …, python -m
sglang.launch_server …; kimicount.deploy.serve_command reads it), or both, as long as they agree. Every
layout and memory option also answers to the engines' own names (serve_command.PLAN_FLAGS).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kimicount.cli.common import (
    COUNTS,
    ConfigOption,
    JsonOption,
    RepoOption,
    RevisionOption,
    TimeoutOption,
    TokenOption,
    ignored,
    load_model,
    print_json,
    warn,
)
from kimicount.cli.exits import EXIT_CODES, say
from kimicount.cli.root import app
from kimicount.deploy.hardware import ACCELERATORS
from kimicount.deploy.options import PLAN_FLAGS
from kimicount.options import DTYPE_METAVAR

if TYPE_CHECKING:
    from kimicount.deploy.request import ModelChoice
    from kimicount.spec import ModelSpec

#: The GPU types --gpus names, from the accelerator table.
GPU_TYPES = ", ".join(ACCELERATORS)


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
            metavar="[vllm|sglang|llama.cpp|ik_llama.cpp][==RELEASE]",
            help="Whose memory rule sizes the KV pool, at which release (default vllm at the newest release "
            "kimicount knows; llama.cpp for a local run, ==bNNNN a build).",
            show_default=False,
        ),
    ] = None,
    engine_version: Annotated[
        str | None,
        typer.Option(
            *_names("release"),
            metavar="RELEASE",
            help="The engine's release whose rules apply (also --engine sglang==0.5.8). Default: the newest "
            "kimicount knows.",
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
    mamba_ssm_dtype: Annotated[
        str | None,
        typer.Option(
            *_names("mamba_ssm_dtype"),
            metavar="DTYPE",
            help="A hybrid model's recurrent state dtype (SGLang; float32 by default). vLLM keeps KDA's in float32.",
            show_default=False,
        ),
    ] = None,
    mamba_cache_dtype: Annotated[
        str | None,
        typer.Option(
            *_names("mamba_cache_dtype"),
            metavar="DTYPE",
            help="vLLM's state dtype (for KDA, its convolution windows). Default: the model's.",
            show_default=False,
        ),
    ] = None,
    mamba_full_memory_ratio: Annotated[
        str | None,
        typer.Option(
            *_names("mamba_full_memory_ratio"),
            metavar="RATIO",
            help="SGLang's state pool ÷ KV pool: the state gets RATIO ÷ (1 + RATIO) of the pool. Default: 0.9.",
            show_default=False,
        ),
    ] = None,
    max_mamba_cache_size: Annotated[
        str | None,
        typer.Option(
            *_names("max_mamba_cache_size"),
            metavar="N",
            help="SGLang's state slots, given rather than split from the pool.",
            show_default=False,
        ),
    ] = None,
    mamba_strategy: Annotated[
        str | None,
        typer.Option(
            *_names("mamba_strategy"),
            metavar="STRATEGY",
            help="SGLang's state slots per request: no_buffer (3), extra_buffer (5), extra_buffer_lazy (4). "
            "Default: the release's.",
            show_default=False,
        ),
    ] = None,
    disable_radix_cache: Annotated[
        bool,
        typer.Option(
            *_names("radix_cache"), help="SGLang without its radix cache: one state slot a request."
        ),
    ] = False,
    mamba_cache_mode: Annotated[
        str | None,
        typer.Option(
            *_names("mamba_cache_mode"),
            metavar="MODE",
            help="vLLM's state pages per request: none (1, default), align (2, with prefix caching).",
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
            help="Local run: a uniform llama-quantize of the model (Q4_K_M, IQ2_XXS…), estimated; without it "
            "(and --gguf), which quants fit.",
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
    parallel: Annotated[
        str | None,
        typer.Option(
            "--parallel",
            "-np",
            metavar="N",
            help="Local run: llama-server's sequences (slots; default: its auto, 4).",
            show_default=False,
        ),
    ] = None,
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
    disk_bandwidth: Annotated[
        str | None,
        typer.Option(
            "--disk-bandwidth",
            metavar="RATE",
            help="Local run: the disk's read rate, for weights RAM cannot hold (default: a PCIe 4.0 ×4 "
            "NVMe link's 7.88GB/s).",
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
    longest context, the flags); without --gguf or --quant, which quants fit, largest first.
    """
    # the parameters as typer converted them (ctx.params holds click's values: paths as text)
    params = {name: value for name, value in locals().items() if name not in _NOT_ASKED}
    from kimicount.deploy.request import PlanAnswer, PlanArgs, PlanRequest, read_request

    request = read_request(PlanArgs(**params, typed=_typed_options(ctx)), warn)
    if not isinstance(request, PlanRequest):
        from kimicount.deploy.local.request import GGUFMismatch

        spec = _load(request.model, token, timeout, as_json) if request.needs_model else None
        try:
            plan = request.answer(spec)
        except GGUFMismatch as mismatch:  # a failed check, as `kimicount gguf` fails it: exit 1
            say(f"kimicount: error: {mismatch}")
            raise typer.Exit(1) from None
        if as_json:
            from kimicount.deploy.local.reports import local_answer_json

            print_json(local_answer_json(plan))
            return
        from kimicount.deploy.render_local import render_local_answer
        from kimicount.render import make_console

        render_local_answer(make_console(), plan)
        return
    if request.compare is not None:
        ignored(
            ctx, "with --compare (it compares the layouts' memory)", "batch", "context", "min_gpus", "detail"
        )
    from kimicount.anatomy import build_anatomy

    answer = request.answer(build_anatomy(_load(request.model, token, timeout, as_json)))
    if as_json:
        from kimicount.deploy.reports import compare_answer_json, plan_answer_json

        print_json(
            plan_answer_json(answer) if isinstance(answer, PlanAnswer) else compare_answer_json(answer)
        )
        return
    from kimicount.render import make_console

    if isinstance(answer, PlanAnswer):
        from kimicount.deploy.render_answer import render_plan_answer

        render_plan_answer(make_console(), answer)
    else:
        from kimicount.deploy.render_answer import render_compare

        render_compare(make_console(), list(answer.rows))


#: The parameters the request does not read: the context, how the model is loaded, the view.
_NOT_ASKED = frozenset({"ctx", "token", "timeout", "as_json"})


def _load(model: ModelChoice, token: str | None, timeout: str | None, as_json: bool) -> ModelSpec:
    """The model's spec, with the progress line while a Hub config is fetched."""
    return load_model(
        None, model.config, model.repo, model.revision, token, timeout, live=not as_json, command="plan"
    )


def _typed_options(ctx: typer.Context) -> dict[str, str]:
    """The name each plan option was typed under, by setting (`--tensor-parallel-size` for tp): the
    first of its names when typed, since click does not keep which alias was used."""
    typed = {}
    for param in ctx.command.params:
        setting = _SETTINGS.get(param.name or "")
        source = ctx.get_parameter_source(param.name or "")
        if setting is not None and source is not None and source.name == "COMMANDLINE":
            typed[setting] = PLAN_FLAGS[setting][0]
    return typed


#: The plan options by CLI parameter that are named otherwise as DeploymentOptions fields.
_SETTINGS = {
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
    "engine_version": "release",
    "mem_fraction_static": "mem_fraction_static",
    "page_size": "page_size",
    "redundant_experts": "redundant_experts",
    "max_running_requests": "max_running_requests",
    "mamba_ssm_dtype": "mamba_ssm_dtype",
    "mamba_cache_dtype": "mamba_cache_dtype",
    "mamba_full_memory_ratio": "mamba_full_memory_ratio",
    "max_mamba_cache_size": "max_mamba_cache_size",
    "mamba_strategy": "mamba_strategy",
    "disable_radix_cache": "radix_cache",
    "mamba_cache_mode": "mamba_cache_mode",
}
