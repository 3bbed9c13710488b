"""The serve command people already have, read as a plan: `vllm serve MODEL --tensor-parallel-size 8 …`,
`python -m vllm.entrypoints.openai.api_server --model …`, `python -m sglang.launch_server --model-path …
--tp 16 …` or `sglang serve …` -> the model, the engine, the DeploymentOptions fields its flags set, and
the flags kimicount does not model. Pure: a list of words in, a ServeCommand out; bad input raises
UsageError in one line.

This module is also the one place where the engines' spellings of a setting live: PLAN_FLAGS gives each
plan option its vLLM and SGLang names (`--tp` is also `--tensor-parallel-size`, `--tp-size` and `-tp`),
and the CLI declares its options from it.

The flags and their aliases are the engines' own:
- vLLM, EngineArgs.add_cli_args in vllm/engine/arg_utils.py: the ParallelConfig group's
  `--tensor-parallel-size`/`-tp`, `--pipeline-parallel-size`/`-pp`, `--data-parallel-size`/`-dp`,
  `--decode-context-parallel-size`/`-dcp`, `--enable-expert-parallel` (a boolean field, so argparse's
  BooleanOptionalAction: `--no-enable-expert-parallel` too); the CacheConfig group's `--block-size`,
  `--gpu-memory-utilization`, `--kv-cache-memory-bytes`, `--kv-cache-dtype`; ModelConfig's `--model`,
  `--max-model-len`, `--revision`, `--quantization`/`-q`; SchedulerConfig's `--max-num-batched-tokens`,
  `--max-num-seqs`; `--speculative-config` (JSON). `vllm serve` takes the model first, as its positional
  `model_tag` (vllm/entrypoints/cli/serve.py). vLLM's FlexibleArgumentParser reads `--flag=value` and
  `--flag_name` as `--flag-name`.
- SGLang, ServerArgs.add_cli_args in python/sglang/srt/server_args.py: `--model-path` (and `--model`),
  `--tensor-parallel-size`/`--tp-size`, `--data-parallel-size`/`--dp-size`,
  `--pipeline-parallel-size`/`--pp-size`, `--expert-parallel-size`/`--ep-size`, `--enable-dp-attention`,
  `--context-length`, `--mem-fraction-static`, `--page-size`, `--kv-cache-dtype`,
  `--max-running-requests`, `--chunked-prefill-size`, `--ep-num-redundant-experts`,
  `--speculative-algorithm`, `--nnodes`. Its parser is plain argparse with allow_abbrev, so the `--tp 16`
  and `--dp 8` of its documentation are unambiguous prefixes of `--tp-size` and `--dp-size`.

Layouts keep each engine's terms, as DeploymentOptions reads them: vLLM's `tp` GPUs per attention
group and `dp` groups (EP over all TP × DP GPUs); SGLang's `--tp-size` counts every GPU of a stage, and
with `--enable-dp-attention` (dp_attention) its attention runs in `--dp-size` groups of tp ÷ dp GPUs.
SGLang's `--dp-size` without DP attention starts that many independent servers: the plan is for one of
them, and says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from pathlib import PurePosixPath

from kimicount.errors import UsageError
from kimicount.options import parse_count, parse_dtype, parse_fraction, vllm_reading
from kimicount.reading import shorten

# --- the plan's options, with the engines' spellings ------------------------------------------------

#: Each plan option (by the DeploymentOptions field, or "model") and every name it answers to: kimicount's
#: first, then vLLM's and SGLang's. The CLI declares its options from this table; nowhere else lists them.
PLAN_FLAGS: dict[str, tuple[str, ...]] = {
    "model": ("--model", "--model-path"),
    "tp": ("--tp", "--tensor-parallel-size", "--tp-size", "-tp"),
    "pp": ("--pp", "--pipeline-parallel-size", "--pp-size", "-pp"),
    "dp": ("--dp", "--data-parallel-size", "--dp-size", "-dp"),
    "ep": ("--ep", "--ep-size", "--expert-parallel-size"),
    "expert_parallel": ("--enable-expert-parallel",),
    "dcp": ("--dcp", "--decode-context-parallel-size", "-dcp"),
    "utilization": ("--gpu-memory-utilization",),
    "kv_memory": ("--kv-memory", "--kv-cache-memory-bytes"),
    "kv_dtype": ("--kv-dtype", "--kv-cache-dtype"),
    "kv_layout": ("--kv-layout",),
    "block_size": ("--block-size",),
    "max_model_len": ("--max-model-len", "--context-length"),
    "max_batched_tokens": ("--max-batched-tokens", "--max-num-batched-tokens"),
    "max_num_seqs": ("--max-num-seqs",),
    "reserve": ("--reserve",),
    "mtp": ("--mtp",),
    "vision": ("--text-only",),  # the flag turns the field off
    # the engine, and SGLang's settings (the plan's SGLang rule reads them; redundant experts are both's)
    "engine": ("--engine",),
    "mem_fraction_static": ("--mem-fraction-static",),
    "page_size": ("--page-size",),
    "dp_attention": ("--enable-dp-attention",),
    "redundant_experts": ("--num-redundant-experts", "--ep-num-redundant-experts"),
    "max_running_requests": ("--max-running-requests",),
}

#: Fields that are switches: their flag takes no value (`vision` is on unless --text-only).
SWITCHES = frozenset({"mtp", "vision", "dp_attention", "expert_parallel"})


def engine_kv_dtype(text: str, option: str) -> str | None:
    """A KV-cache dtype as the engines spell it: 'auto' (None: the model's), vLLM's fp8, fp8_e4m3,
    fp8_e5m2 and fp8_ds_mla (all one byte an element; the layout says which record), or a dtype name.

    >>> engine_kv_dtype("auto", "--kv-cache-dtype"), engine_kv_dtype("fp8_e5m2", "--kv-cache-dtype")
    (None, 'fp8')
    >>> engine_kv_dtype("bfloat16", "--kv-cache-dtype")
    'bf16'
    """
    lowered = text.strip().lower()
    if lowered == "auto":
        return None
    if lowered.startswith("fp8"):
        return "fp8"
    return parse_dtype(text, option)


# --- what a serve command says ----------------------------------------------------------------------


@dataclass(frozen=True)
class ServeCommand:
    """What a serve command says that the plan reads. `settings` are DeploymentOptions fields by name
    (SGLang's among them: mem_fraction_static, page_size, dp_attention, redundant_experts,
    max_running_requests, engine); `flags` the flag each came from, as typed; `unmodelled` the words
    of each flag kimicount does not model, those that change memory first; `notes` how vLLM read a token
    count written with a lower-case suffix (options.vllm_reading: 256k is 256,000, 256K 262,144)."""

    engine: str  # "vllm" | "sglang"
    launcher: str  # how it was started: "vllm serve", "python -m sglang.launch_server", …
    model: str | None
    revision: str | None
    nodes: int | None
    settings: dict[str, object] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)
    unmodelled: tuple[str, ...] = ()
    memory_unmodelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Flag:
    """One flag an engine takes: the setting it gives (None: not modelled) and how its value reads."""

    setting: str | None
    # count | fraction | kv_dtype | switch | off | text | values (nargs="+") | optional (nargs="?") |
    # speculative_config | speculative_algorithm
    kind: str
    memory: bool = False  # not modelled, and changes memory


def _table(*rows: tuple[tuple[str, ...], _Flag]) -> dict[str, _Flag]:
    return {name: flag for names, flag in rows for name in names}


_VALUE, _SWITCH, _VALUES = _Flag(None, "text"), _Flag(None, "switch"), _Flag(None, "values")

#: vLLM's flags (vllm/engine/arg_utils.py, EngineArgs.add_cli_args; the API server's own in
#: vllm/entrypoints/openai/cli_args.py): those the plan reads, then those it does not model.
VLLM_FLAGS = _table(
    (("--model",), _Flag("model", "text")),
    (("--revision",), _Flag("revision", "text")),
    (("--tensor-parallel-size", "-tp"), _Flag("tp", "count")),
    (("--pipeline-parallel-size", "-pp"), _Flag("pp", "count")),
    (("--data-parallel-size", "-dp"), _Flag("dp", "count")),
    (("--enable-expert-parallel",), _Flag("expert_parallel", "switch")),
    (("--no-enable-expert-parallel",), _Flag("expert_parallel", "off")),
    (("--decode-context-parallel-size", "-dcp"), _Flag("dcp", "count")),
    (("--gpu-memory-utilization",), _Flag("utilization", "fraction")),
    (("--kv-cache-memory-bytes",), _Flag("kv_memory", "count")),
    (("--kv-cache-dtype",), _Flag("kv_dtype", "kv_dtype")),
    (("--block-size",), _Flag("block_size", "count")),
    (("--max-model-len",), _Flag("max_model_len", "count")),
    (("--max-num-batched-tokens",), _Flag("max_batched_tokens", "count")),
    (("--max-num-seqs",), _Flag("max_num_seqs", "count")),
    (("--speculative-config",), _Flag("mtp", "speculative_config")),
    (("--num-redundant-experts",), _Flag("redundant_experts", "count")),
    (("--nnodes",), _Flag("nodes", "count")),
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
        _Flag(None, "text", memory=True),
    ),
    (("--cudagraph-capture-sizes", "--cuda-graph-sizes"), _Flag(None, "values", memory=True)),
    (
        ("--enforce-eager", "--enable-eplb", "--enable-lora", "--enable-dbo"),
        _Flag(None, "switch", memory=True),
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
        _VALUE,
    ),
    (("--served-model-name", "--middleware", "--ignore-patterns"), _VALUES),
    (("--hf-token",), _Flag(None, "optional")),  # nargs="?": a token, or the saved one
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
        _SWITCH,
    ),
    (("--language-model-only",), _Flag("vision", "off")),
)

#: SGLang's flags (python/sglang/srt/server_args.py, ServerArgs.add_cli_args), likewise.
SGLANG_FLAGS = _table(
    (("--model-path", "--model"), _Flag("model", "text")),
    (("--revision",), _Flag("revision", "text")),
    (("--tensor-parallel-size", "--tp-size", "--tp"), _Flag("tp", "count")),
    (("--pipeline-parallel-size", "--pp-size", "--pp"), _Flag("pp", "count")),
    (("--data-parallel-size", "--dp-size", "--dp"), _Flag("dp", "count")),
    (("--expert-parallel-size", "--ep-size"), _Flag("ep", "count")),
    (("--enable-dp-attention",), _Flag("dp_attention", "switch")),
    (("--context-length",), _Flag("max_model_len", "count")),
    (("--mem-fraction-static",), _Flag("mem_fraction_static", "fraction")),
    (("--page-size",), _Flag("page_size", "count")),
    (("--kv-cache-dtype",), _Flag("kv_dtype", "kv_dtype")),
    (("--max-running-requests",), _Flag("max_running_requests", "count")),
    # SGLang's tokens per forward pass: its reserve rule does not read it (vLLM's --max-num-batched-tokens
    # is another engine's option)
    (("--chunked-prefill-size",), _Flag(None, "text", memory=True)),
    (("--ep-num-redundant-experts",), _Flag("redundant_experts", "count")),
    (("--speculative-algorithm",), _Flag("mtp", "speculative_algorithm")),
    (("--nnodes",), _Flag("nodes", "count")),
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
        _Flag(None, "text", memory=True),
    ),
    (("--cuda-graph-bs",), _Flag(None, "values", memory=True)),
    (
        (
            "--disable-cuda-graph",
            "--enable-dp-lm-head",
            "--enable-hierarchical-cache",
            "--enable-torch-compile",
            "--enable-two-batch-overlap",
            "--enable-eplb",
        ),
        _Flag(None, "switch", memory=True),
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
        _VALUE,
    ),
    (
        (
            "--trust-remote-code",
            "--enable-metrics",
            "--disable-radix-cache",
            "--enable-cache-report",
            "--skip-tokenizer-init",
            "--log-requests",
            "--enable-mixed-chunk",
            "--disable-overlap-schedule",
            "--enable-p2p-check",
            "--disable-custom-all-reduce",
            "--enable-deterministic-inference",
        ),
        _SWITCH,
    ),
)

#: vLLM's speculative methods that load the model's own multi-token-prediction layer (its
#: SpeculativeConfig: "deepseek_mtp" and the generic "mtp"); SGLang's NEXTN (and EAGLE on a model whose
#: draft is its MTP layer) does the same.
MTP_METHODS = frozenset({"mtp", "deepseek_mtp"})
MTP_ALGORITHMS = frozenset({"NEXTN", "EAGLE", "EAGLE3"})

#: Flags whose values are secrets: named without them.
SECRETS = frozenset({"--api-key", "--hf-token"})

_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")

#: What kimicount accepts as a serve command, for the message that refuses anything else.
LAUNCHERS = (
    "vllm serve MODEL, python -m vllm.entrypoints.openai.api_server --model MODEL, "
    "python -m sglang.launch_server --model-path MODEL or sglang serve --model-path MODEL"
)


def is_serve_command(words: list[str]) -> bool:
    """Whether `words` start like a serve command (after any NAME=value environment words)."""
    rest = list(words)
    while rest and _ENV.fullmatch(rest[0]):
        rest = rest[1:]
    if not rest:
        return False
    first = PurePosixPath(rest[0]).name
    return first in ("vllm", "sglang") or bool(_PYTHON.fullmatch(first))


def _launcher(words: list[str]) -> tuple[str, str, list[str], bool]:
    """(engine, launcher, the words after it, whether the model may come first as a positional)."""
    rest = list(words)
    while rest and _ENV.fullmatch(rest[0]):  # CUDA_VISIBLE_DEVICES=0,1 vllm serve …
        rest = rest[1:]
    if not rest:
        raise UsageError(f"the serve command after --: expected one of {LAUNCHERS}")
    first = PurePosixPath(rest[0]).name
    if first in ("vllm", "sglang") and len(rest) > 1 and rest[1] == "serve":
        return first, f"{first} serve", rest[2:], first == "vllm"
    if _PYTHON.fullmatch(first) and len(rest) > 2 and rest[1] == "-m":
        module = rest[2]
        if module in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
            return "vllm", f"python -m {module}", rest[3:], False
        if module in ("sglang.launch_server", "sglang_router.launch_server"):
            return "sglang", f"python -m {module}", rest[3:], False
    raise UsageError(f"the serve command '{shorten(' '.join(rest[:3]), 60)}': expected one of {LAUNCHERS}")


def _read(flag: _Flag, shown: str, value: str) -> object:
    """A flag's value as the setting takes it; one line naming the flag when it cannot be read."""
    if flag.kind == "count":
        count = parse_count(value, shown)
        if flag.setting == "redundant_experts" and count == 0:  # the engines' default, written out
            return count
        if count < 1:
            raise UsageError(f"{shown} {shorten(value, 40)}: expected a positive whole number")
        return count
    if flag.kind == "fraction":
        return parse_fraction(value, shown)
    if flag.kind == "kv_dtype":
        return engine_kv_dtype(value, shown)
    if flag.kind == "speculative_config":
        try:
            spec = json.loads(value)
        except json.JSONDecodeError:
            raise UsageError(
                f"{shown} '{shorten(value, 60)}': expected JSON such as '{{\"method\": \"mtp\"}}'"
            ) from None
        method = spec.get("method") if isinstance(spec, dict) else None
        return method in MTP_METHODS
    if flag.kind == "speculative_algorithm":
        return value.upper() in MTP_ALGORITHMS
    return value


def parse_serve_command(words: list[str]) -> ServeCommand:
    """Read a serve command's words (as a shell splits them).

    >>> command = parse_serve_command(["vllm", "serve", "moonshotai/Kimi-K2-Thinking", "-tp", "8"])
    >>> command.engine, command.model, command.settings
    ('vllm', 'moonshotai/Kimi-K2-Thinking', {'tp': 8, 'pp': 1, 'dp': 1})
    >>> parse_serve_command(["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp=16",
    ...     "--dp", "8", "--enable-dp-attention"]).settings
    {'tp': 16, 'dp': 8, 'dp_attention': True, 'pp': 1, 'engine': 'sglang'}
    """
    engine, launcher, rest, positional = _launcher(words)
    table = VLLM_FLAGS if engine == "vllm" else SGLANG_FLAGS
    values: dict[str, object] = {}
    flags: dict[str, str] = {}
    unmodelled: list[str] = []
    memory: list[str] = []
    notes: list[str] = []
    model = None
    if positional and rest and not rest[0].startswith("-"):
        model, rest = rest[0], rest[1:]
        flags["model"] = "its first argument"
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if positional and model is None and not word.startswith("-"):  # vllm serve -tp 8 MODEL
            model = word
            flags["model"] = "its argument"
            continue
        if not word.startswith("-") or word == "-":
            raise UsageError(
                f"the serve command's '{shorten(word, 60)}': not the value of a flag kimicount knows "
                f"({launcher} takes the model {'first' if positional else 'from its model flag'})"
            )
        typed, equals, inline = word.partition("=")
        name = typed
        if engine == "vllm" and typed.startswith("--"):  # FlexibleArgumentParser: --max_model_len
            name = "--" + typed[2:].replace("_", "-")
        flag = table.get(name)
        if flag is None:
            # a flag kimicount does not know: fine when its form shows whether it takes a value
            if equals or i >= len(rest) or rest[i].startswith("-"):
                unmodelled.append(typed)  # its name only: a value could be a secret
                continue
            raise UsageError(
                f"the serve command's {typed}: a flag kimicount does not know, so it cannot tell whether "
                f"'{shorten(rest[i], 40)}' is its value; write {typed}={shorten(rest[i], 40)}, or leave it out"
            )
        if flag.kind in ("switch", "off"):
            if equals:
                raise UsageError(
                    f"the serve command's {typed}: a switch, it takes no value ('{shorten(word, 60)}')"
                )
            value: object = flag.kind == "switch"
            shown = typed
        else:
            if equals:
                text = inline
            elif i < len(rest) and not (rest[i].startswith("-") and not re.fullmatch(r"-\d.*", rest[i])):
                text = rest[i]
                i += 1
            elif flag.kind == "optional":  # nargs="?": the flag alone
                unmodelled.append(typed)
                continue
            else:
                raise UsageError(f"the serve command's {typed}: expected a value after it")
            shown = f"{typed} …" if name in SECRETS else f"{typed} {text}" if not equals else word
            if flag.kind == "values":  # nargs="+": more words until the next flag
                while i < len(rest) and not rest[i].startswith("-"):
                    shown += f" {rest[i]}"
                    i += 1
            if flag.setting is None:
                (memory if flag.memory else unmodelled).append(shown)
                continue
            if flag.setting == "max_model_len" and text.strip().lower() in ("-1", "auto"):
                memory.append(
                    f"{shown} (the engine fits it to memory; a try line says the longest that fits)"
                )
                continue
            value = _read(flag, typed, text)
            if engine == "vllm" and flag.setting in ("max_model_len", "max_batched_tokens"):
                note = vllm_reading(text)
                if note is not None:
                    notes.append(f"the serve command's {typed} {note}")
        if flag.setting is None:
            (memory if flag.memory else unmodelled).append(shown)
            continue
        setting = flag.setting
        if flag.kind in ("speculative_config", "speculative_algorithm") and not value:
            memory.append(shown)  # a draft model, n-gram lookup…: not the MTP layer
            continue
        if setting in values and values[setting] != value:
            raise UsageError(f"the serve command gives {flags[setting]} and {shown}: which one?")
        if setting == "model":
            if model is not None and model != value:
                raise UsageError(f"the serve command names two models: {model} and {value}")
            model = str(value)
        values[setting] = value
        flags[setting] = shown
    revision = values.pop("revision", None)
    values.pop("model", None)
    nodes = values.pop("nodes", None)
    settings = _layout(engine, values, flags, memory)
    return ServeCommand(
        engine,
        launcher,
        model,
        None if revision is None else str(revision),
        None if nodes is None else int(nodes),  # type: ignore[call-overload]
        settings,
        flags,
        tuple(unmodelled),
        tuple(memory),
        tuple(notes),
    )


def _layout(
    engine: str, values: dict[str, object], flags: dict[str, str], memory: list[str]
) -> dict[str, object]:
    """The settings in kimicount's layout terms, with the engine's defaults (TP, PP, DP of 1) made
    explicit: a serve command without -tp runs on one GPU per replica."""
    settings = dict(values)
    tp = int(settings.get("tp", 1))  # type: ignore[call-overload]
    dp = int(settings.get("dp", 1))  # type: ignore[call-overload]
    settings.setdefault("tp", 1)
    settings.setdefault("pp", 1)
    settings.setdefault("dp", 1)
    if engine == "vllm":
        if settings.pop("expert_parallel", False):
            settings["ep"] = tp * dp  # vLLM sizes EP as TP × DP
            flags["ep"] = flags["expert_parallel"]
        flags.pop("expert_parallel", None)
        return settings
    settings["engine"] = "sglang"
    if settings.get("dp_attention"):
        if tp % dp:
            raise UsageError(
                f"the serve command's {flags['dp']} with {flags.get('tp', '--tp-size 1')}: DP attention needs "
                "--dp-size to divide --tp-size"
            )
        # tp stays SGLang's --tp-size, all the GPUs of a stage: the plan's SGLang rule splits it by dp
    elif dp > 1:
        memory.append(f"{flags['dp']} without --enable-dp-attention ({dp} independent copies; planned: one)")
        settings["dp"] = 1
    return settings


def deployment_settings(
    serve: ServeCommand | None,
    given: dict[str, object],
    typed: dict[str, str],
    gpus: int,
    *,
    expert_parallel: bool = False,
) -> dict[str, object]:
    """The DeploymentOptions fields of a plan: the serve command's settings (its engine among them) and
    the plan options `given` (by field; `typed` names each as typed), which must agree where both set
    one; vLLM's --enable-expert-parallel made an EP size (TP × DP, TP what --pp and --dp leave of `gpus`).

    >>> deployment_settings(None, {"dp": 8}, {}, 8, expert_parallel=True)
    {'dp': 8, 'ep': 8}
    """
    settings: dict[str, object] = {} if serve is None else {"engine": serve.engine, **serve.settings}
    for name, value in given.items():
        if name in settings and settings[name] != value:
            theirs = (
                serve.flags.get(name, serve.launcher if name == "engine" else name)
                if serve is not None
                else name
            )
            raise UsageError(
                f"{typed.get(name, PLAN_FLAGS[name][0])} and the serve command's {theirs} disagree: give it once"
            )
        settings[name] = value
    if expert_parallel:
        pp, dp = int(settings.get("pp", 1)), int(settings.get("dp", 1))  # type: ignore[call-overload]
        tp = settings.get("tp") or (gpus // (pp * dp) if gpus % (pp * dp) == 0 else 1)
        ep = int(tp) * dp  # type: ignore[call-overload]
        if settings.get("ep") not in (None, ep):
            raise UsageError(
                f"--enable-expert-parallel and --ep {settings['ep']} disagree: EP spans TP × DP = {ep}"
            )
        settings["ep"] = ep
    return settings


# --- a plan as a command ------------------------------------------------------------------------------


def option_words(options: object) -> list[str]:
    """The plan options that give these DeploymentOptions, in PLAN_FLAGS' names: the layout always
    (--tp), everything else where it differs from the default. A field PLAN_FLAGS does not name is an
    error (a new field needs its option).

    >>> from kimicount.deploy.plan import DeploymentOptions
    >>> option_words(DeploymentOptions(tp=8, max_model_len=121_984, kv_dtype="fp8"))
    ['--tp', '8', '--kv-dtype', 'fp8', '--max-model-len', '121984']
    """
    from dataclasses import fields

    default = type(options)()
    words: list[str] = []
    for item in fields(options):  # type: ignore[arg-type]
        value = getattr(options, item.name)
        if value == getattr(default, item.name) and not (item.name == "tp" and value is not None):
            continue
        if item.name not in PLAN_FLAGS:
            raise KeyError(f"DeploymentOptions.{item.name} has no plan option in serve_command.PLAN_FLAGS")
        flag = PLAN_FLAGS[item.name][0]
        if item.name in SWITCHES:
            words.append(flag)  # vision's flag is --text-only: it differs from the default only when off
        elif isinstance(value, Fraction):
            words += [flag, str(float(value))]  # the shortest decimal that reads back as the same float
        elif isinstance(value, Enum):
            words += [flag, str(value.value)]
        else:
            words += [flag, str(value)]
    return words
