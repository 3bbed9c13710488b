"""vLLM's serve-command flags, as its own argument parser declares them: those the plan reads, then
those it does not model (memory-changing first), with how each one's value reads (engines/flags.py).

vLLM's --kv-cache-dtype choices are its CacheConfig's CacheDType (vllm/config/cache.py, `CacheDType =
Literal[...]`, the field `cache_dtype: CacheDType = "auto"`): auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2,
fp8_inc, fp8_ds_mla, and float16 in releases that list it; a value outside them is refused as vLLM's
parser refuses it (plain `fp8xyz` is no fp8). Releases after those kimicount knows add choices with no
cache layout here (the Literal read at commit 002f10e0: nvfp4, nvfp4_ds_mla, nvfp4_4over6, the
turboquant_* and *_per_token_head records): refused as not modelled.
"""

from __future__ import annotations

from kimicount.deploy.engines.flags import SWITCH, VALUE, VALUES, Flag, flag_table

#: vLLM's flags (vllm/engine/arg_utils.py, EngineArgs.add_cli_args; the API server's own in
#: vllm/entrypoints/openai/cli_args.py): those the plan reads, then those it does not model.
VLLM_FLAGS = flag_table(
    (("--model",), Flag("model", "text")),
    (("--revision",), Flag("revision", "text")),
    (("--tensor-parallel-size", "-tp"), Flag("tp", "count")),
    (("--pipeline-parallel-size", "-pp"), Flag("pp", "count")),
    (("--data-parallel-size", "-dp"), Flag("dp", "count")),
    (("--enable-expert-parallel",), Flag("expert_parallel", "switch")),
    (("--no-enable-expert-parallel",), Flag("expert_parallel", "off")),
    (("--decode-context-parallel-size", "-dcp"), Flag("dcp", "count")),
    (("--gpu-memory-utilization",), Flag("utilization", "fraction")),
    (("--kv-cache-memory-bytes",), Flag("kv_memory", "count")),
    (("--kv-cache-dtype",), Flag("kv_dtype", "kv_dtype")),
    (("--block-size",), Flag("block_size", "count")),
    (("--max-model-len",), Flag("max_model_len", "count")),
    (("--max-num-batched-tokens",), Flag("max_batched_tokens", "count")),
    (("--max-num-seqs",), Flag("max_num_seqs", "count")),
    (("--speculative-config",), Flag("mtp", "speculative_config")),
    (("--num-redundant-experts",), Flag("redundant_experts", "count")),
    (("--nnodes",), Flag("nodes", "count")),
    # a hybrid model's state (vllm/config/cache.py CacheConfig.mamba_cache_dtype, mamba_ssm_cache_dtype,
    # mamba_cache_mode)
    (("--mamba-cache-dtype",), Flag("mamba_cache_dtype", "mamba_dtype")),
    (("--mamba-ssm-cache-dtype",), Flag("mamba_ssm_dtype", "mamba_dtype")),
    (("--mamba-cache-mode",), Flag("mamba_cache_mode", "text")),
    # change memory, not modelled
    (
        (
            "--quantization",
            "-q",
            "--cpu-offload-gb",
            "--swap-space",
            "--num-gpu-blocks-override",
            "--max-cudagraph-capture-size",
            "--compilation-config",
            "-O",
            "--eplb-config",
            "--dtype",
            "--hf-overrides",
            "--limit-mm-per-prompt",
            "--max-loras",
            "--max-lora-rank",
            "--kv-transfer-config",
            "--mm-encoder-tp-mode",
            "--load-format",
        ),
        Flag(None, "text", memory=True),
    ),
    (("--cudagraph-capture-sizes", "--cuda-graph-sizes"), Flag(None, "values", memory=True)),
    (
        ("--enforce-eager", "--enable-eplb", "--enable-lora", "--enable-dbo"),
        Flag(None, "switch", memory=True),
    ),
    # no effect on memory
    (
        (
            "--host",
            "--port",
            "--tool-call-parser",
            "--reasoning-parser",
            "--chat-template",
            "--api-key",
            "--download-dir",
            "--tokenizer",
            "--tokenizer-mode",
            "--seed",
            "--distributed-executor-backend",
            "--data-parallel-size-local",
            "-dpl",
            "--data-parallel-address",
            "-dpa",
            "--data-parallel-rpc-port",
            "-dpp",
            "--data-parallel-start-rank",
            "-dpr",
            "--data-parallel-rank",
            "-dpn",
            "--data-parallel-backend",
            "-dpb",
            "--api-server-count",
            "--attention-backend",
            "--all2all-backend",
            "--uvicorn-log-level",
            "--max-logprobs",
            "--generation-config",
            "--node-rank",
            "--master-addr",
            "--master-port",
            "--expert-placement-strategy",
            "--tokenizer-revision",
            "--code-revision",
            "--ssl-keyfile",
            "--ssl-certfile",
            "--root-path",
            "--response-role",
            "--chat-template-content-format",
            "--override-generation-config",
            "--max-num-partial-prefills",
            "--scheduling-policy",
            "--runner",
            "--task",
            "--config-format",
            "--hf-config-path",
            "--logprobs-mode",
            "--structured-outputs-config",
            "--kv-events-config",
            "--additional-config",
            "--default-chat-template-kwargs",
            "--tool-parser-plugin",
            "--log-config-file",
            "--allowed-origins",
            "--lora-modules",
            "--prefix-caching-hash-algo",
        ),
        VALUE,
    ),
    (("--served-model-name", "--middleware", "--ignore-patterns"), VALUES),
    (("--hf-token",), Flag(None, "optional")),  # nargs="?": a token, or the saved one
    (
        (
            "--trust-remote-code",
            "--enable-auto-tool-choice",
            "--disable-log-requests",
            "--enable-log-requests",
            "--disable-log-stats",
            "--enable-prefix-caching",
            "--no-enable-prefix-caching",
            "--enable-chunked-prefill",
            "--no-enable-chunked-prefill",
            "--async-scheduling",
            "--disable-custom-all-reduce",
            "--headless",
            "--data-parallel-hybrid-lb",
            "--disable-fastapi-docs",
            "--enable-prompt-tokens-details",
            "--enable-force-include-usage",
            "--disable-uvicorn-access-log",
            "--skip-tokenizer-init",
            "--enable-server-load-tracking",
            "--disable-frontend-multiprocessing",
            "--enable-request-id-headers",
            "--disable-cascade-attn",
            "--enable-return-routed-experts",
        ),
        SWITCH,
    ),
    (("--language-model-only",), Flag("vision", "off")),
)

#: vLLM's speculative methods that load the model's own multi-token-prediction layer (its
#: SpeculativeConfig: "deepseek_mtp" and the generic "mtp").
MTP_METHODS = frozenset({"mtp", "deepseek_mtp"})

#: --kv-cache-dtype's choices (vllm/config/cache.py CacheDType) and the cache dtype each is to the plan:
#: auto the model's (None), fp8 variants one byte an element (the layout says which record).
KV_CACHE_DTYPES: dict[str, str | None] = {
    "auto": None,
    "float16": "fp16",
    "bfloat16": "bf16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_inc": "fp8",
    "fp8_ds_mla": "fp8",
}
#: Choices of later releases' CacheDType (vllm/config/cache.py at commit 002f10e0) kimicount does not model.
UNMODELLED_KV_CACHE_DTYPES = frozenset(
    {
        "nvfp4",
        "nvfp4_ds_mla",
        "nvfp4_4over6",
        "turboquant_k8v4",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_3bit_nc",
        "int4_per_token_head",
        "int8_per_token_head",
        "fp8_per_token_head",
    }
)
