"""The plan's options: every name each answers to (kimicount's, then vLLM's and SGLang's), and a plan
written back as the options that give it (each way out is printed as a command).

The CLI declares its plan options from PLAN_FLAGS; nowhere else lists them.
"""

from __future__ import annotations

from enum import Enum
from fractions import Fraction

#: Each plan option (by the DeploymentOptions field, or "model") and every name it answers to: kimicount's
#: first, then vLLM's and SGLang's. The CLI declares its options from this table; nowhere else lists them.
PLAN_FLAGS: dict[str, tuple[str, ...]] = {
    "model": ("--model", "--model-path"),
    "tp": ("--tp", "--tensor-parallel-size", "--tp-size", "-tp"),
    "pp": ("--pp", "--pipeline-parallel-size", "--pp-size", "-pp"),
    "dp": ("--dp", "--data-parallel-size", "--dp-size", "-dp"),
    "ep": ("--ep", "--ep-size", "--expert-parallel-size"),
    "expert_parallel": ("--enable-expert-parallel",),
    "dcp": ("--dcp", "--decode-context-parallel-size", "-dcp", "--dcp-size"),
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
    "release": ("--engine-version",),
    "mem_fraction_static": ("--mem-fraction-static",),
    "page_size": ("--page-size",),
    "dp_attention": ("--enable-dp-attention",),
    "redundant_experts": ("--num-redundant-experts", "--ep-num-redundant-experts"),
    "max_running_requests": ("--max-running-requests",),
    # a hybrid model's state (Kimi Linear, Kimi K3): SGLang's and vLLM's own flags
    "mamba_ssm_dtype": ("--mamba-ssm-dtype", "--mamba-ssm-cache-dtype"),
    "mamba_cache_dtype": ("--mamba-cache-dtype",),
    "mamba_full_memory_ratio": ("--mamba-full-memory-ratio",),
    "max_mamba_cache_size": ("--max-mamba-cache-size",),
    "mamba_strategy": ("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy"),
    "radix_cache": ("--disable-radix-cache",),  # the flag turns the field off
    "mamba_cache_mode": ("--mamba-cache-mode",),
}

#: Fields that are switches: their flag takes no value (`vision` is on unless --text-only).
SWITCHES = frozenset({"mtp", "vision", "dp_attention", "expert_parallel", "radix_cache"})


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
