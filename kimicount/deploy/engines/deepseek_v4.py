"""DeepSeek V4 under both serving engines, for `kimicount kv-cache`: vLLM's layout of its groups and
SGLang's pools of them, attached to the model's group report (kimicount.kv_groups), which imports
no engine. The engines' rules are their modules' (vllm_deepseek_v4.py, sglang_deepseek_v4.py);
the plan reads the same rules through each engine's `pack`.
"""

from __future__ import annotations

from dataclasses import replace

from kimicount.deploy.engines.sglang_deepseek_v4 import sglang_pools
from kimicount.deploy.engines.vllm_deepseek_v4 import vllm_layout
from kimicount.families import cache_groups
from kimicount.kv_groups import GroupCacheReport


def engine_pages(report: GroupCacheReport) -> GroupCacheReport:
    """The report with vLLM's layout (block `report.block_size`) and SGLang's pools (pages of as many
    tokens) of its groups, when the cache is fp8, the only one either engine keeps for DeepSeek V4;
    vLLM's of the fp8 indexer keys even under an fp4 indexer cache, which it allocates at fp8's size.

    >>> from kimicount.kv_groups import group_cache_report
    >>> from kimicount.models import known_model
    >>> engine_pages(group_cache_report(known_model("deepseek-v4-flash").spec())).vllm.block_bytes
    1051776
    """
    if report.dtype != "fp8":
        return report
    groups = tuple(line.group for line in report.lines)
    fp8 = groups if report.indexer == "fp8" else cache_groups(report.spec, report.include_mtp, dtype="fp8")
    return replace(
        report, vllm=vllm_layout(fp8, report.block_size), sglang=sglang_pools(groups, report.block_size)
    )
