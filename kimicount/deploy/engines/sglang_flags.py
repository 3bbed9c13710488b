"""SGLang's serve-command flags, as its ServerArgs.add_cli_args declares them: those the plan reads,
then those it does not model (memory-changing first), with how each one's value reads (engines/flags.py).

SGLang's --kv-cache-dtype choices (python/sglang/srt/server_args.py, ServerArgs.add_cli_args:
`parser.add_argument("--kv-cache-dtype", ..., choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16",
"bfloat16", "fp4_e2m1"])`, the list the 0.5 releases carry; later ones keep it on the dataclass field):
its argparse refuses anything else, plain fp8 included. fp4_e2m1 (an MXFP4 cache, "CUDA 12.8+ and
PyTorch 2.8.0+" in its help) is not modelled and is refused so.
"""

from __future__ import annotations

from kimicount.deploy.engines.flags import SWITCH, VALUE, Flag, flag_table

#: SGLang's flags (python/sglang/srt/server_args.py, ServerArgs.add_cli_args), likewise.
SGLANG_FLAGS = flag_table(
    (("--model-path", "--model"), Flag("model", "text")),
    (("--revision",), Flag("revision", "text")),
    (("--tensor-parallel-size", "--tp-size", "--tp"), Flag("tp", "count")),
    (("--pipeline-parallel-size", "--pp-size", "--pp"), Flag("pp", "count")),
    (("--data-parallel-size", "--dp-size", "--dp"), Flag("dp", "count")),
    (("--expert-parallel-size", "--ep-size"), Flag("ep", "count")),
    (("--enable-dp-attention",), Flag("dp_attention", "switch")),
    (("--context-length",), Flag("max_model_len", "count")),
    (("--mem-fraction-static",), Flag("mem_fraction_static", "fraction")),
    (("--page-size",), Flag("page_size", "count")),
    (("--kv-cache-dtype",), Flag("kv_dtype", "kv_dtype")),
    (("--max-running-requests",), Flag("max_running_requests", "count")),
    (("--dcp-size",), Flag("dcp", "count")),
    # the mamba state pool of a hybrid model (server_args.py: --mamba-full-memory-ratio, --max-mamba-cache-size,
    # --mamba-ssm-dtype, --mamba-radix-cache-strategy, called --mamba-scheduler-strategy before)
    (("--mamba-full-memory-ratio",), Flag("mamba_full_memory_ratio", "ratio")),
    (("--max-mamba-cache-size",), Flag("max_mamba_cache_size", "count")),
    (("--mamba-ssm-dtype",), Flag("mamba_ssm_dtype", "mamba_dtype")),
    (("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy"), Flag("mamba_strategy", "text")),
    (("--disable-radix-cache",), Flag("radix_cache", "off")),
    # SGLang's tokens per forward pass: its reserve rule does not read it (vLLM's --max-num-batched-tokens
    # is another engine's option)
    (("--chunked-prefill-size",), Flag(None, "text", memory=True)),
    (("--ep-num-redundant-experts",), Flag("redundant_experts", "count")),
    (("--speculative-algorithm",), Flag("mtp", "speculative_algorithm")),
    (("--nnodes",), Flag("nodes", "count")),
    (
        (
            "--quantization",
            "--cpu-offload-gb",
            "--max-total-tokens",
            "--cuda-graph-max-bs",
            "--moe-dense-tp-size",
            "--dtype",
            "--hicache-ratio",
            "--hicache-size",
            "--max-prefill-tokens",
            "--load-format",
            "--speculative-num-steps",
            "--speculative-eagle-topk",
            "--speculative-num-draft-tokens",
            "--speculative-draft-model-path",
            "--moe-a2a-backend",
            "--deepep-mode",
            "--torch-compile-max-bs",
        ),
        Flag(None, "text", memory=True),
    ),
    (("--cuda-graph-bs",), Flag(None, "values", memory=True)),
    (
        (
            "--disable-cuda-graph",
            "--enable-dp-lm-head",
            "--enable-hierarchical-cache",
            "--enable-torch-compile",
            "--enable-two-batch-overlap",
            "--enable-eplb",
        ),
        Flag(None, "switch", memory=True),
    ),
    (
        (
            "--host",
            "--port",
            "--tool-call-parser",
            "--reasoning-parser",
            "--chat-template",
            "--api-key",
            "--download-dir",
            "--tokenizer-path",
            "--tokenizer-mode",
            "--random-seed",
            "--dist-init-addr",
            "--node-rank",
            "--log-level",
            "--attention-backend",
            "--served-model-name",
            "--watchdog-timeout",
            "--dist-timeout",
            "--base-gpu-id",
            "--gpu-id-step",
            "--schedule-policy",
            "--stream-interval",
            "--disaggregation-mode",
            "--disaggregation-transfer-backend",
            "--disaggregation-bootstrap-port",
            "--load-balance-method",
            "--ep-dispatch-algorithm",
            "--init-expert-location",
            "--device",
            "--schedule-conservativeness",
            "--grammar-backend",
            "--sampling-backend",
            "--prefill-attention-backend",
            "--decode-attention-backend",
            "--moe-runner-backend",
            "--mm-attention-backend",
            "--context-parallel-size",
        ),
        VALUE,
    ),
    (
        (
            "--trust-remote-code",
            "--enable-metrics",
            "--enable-cache-report",
            "--skip-tokenizer-init",
            "--log-requests",
            "--enable-mixed-chunk",
            "--disable-overlap-schedule",
            "--enable-p2p-check",
            "--disable-custom-all-reduce",
            "--enable-deterministic-inference",
        ),
        SWITCH,
    ),
)

#: SGLang's speculative algorithms that draft with the model's own multi-token-prediction layer: NEXTN
#: (and EAGLE on a model whose draft is its MTP layer).
MTP_ALGORITHMS = frozenset({"NEXTN", "EAGLE", "EAGLE3"})

#: --kv-cache-dtype's choices and the cache dtype each is to the plan (None: the model's; fp4_e2m1 has no
#: cache layout in kimicount).
KV_CACHE_DTYPES: dict[str, str | None] = {
    "auto": None,
    "fp8_e5m2": "fp8",
    "fp8_e4m3": "fp8",
    "bf16": "bf16",
    "bfloat16": "bf16",
}
#: Choices SGLang takes that kimicount does not model.
UNMODELLED_KV_CACHE_DTYPES = frozenset({"fp4_e2m1"})
