"""kv-cache for DeepSeek V4, group by group: each figure written out by hand from the byte rules of the
engines' code (FlashMLA tests/quant.py @ 9241ae3: 448 fp8 NoPE + 64 bf16 RoPE + 7 E8M0 scales + 1 pad
= 584 B; the indexer keys 128 fp8 + one F32 scale = 132 B, 64 + 4 E8M0 = 68 B in fp4; the compressor
states 2 × coff × width F32 per position of their window)."""

from __future__ import annotations

import json

import pytest

from kimicount.deploy.engines.deepseek_v4 import engine_pages
from kimicount.kv_groups import group_cache_report

from .helpers import ROOT, fails_cleanly, invoke
from .test_deepseek_v4 import flash, pro

T = 1_048_576  # "1M" as kimicount and vLLM read it
RECORD, INDEX, INDEX_FP4 = 448 + 64 * 2 + 7 + 1, 128 + 4, 64 + 4
PRO_WINDOWS = 61 * 128 * RECORD + 30 * 8 * (2 * 2 * 512 * 4 + 2 * 2 * 128 * 4) + 31 * 128 * (2 * 512 * 4)


def test_v4_pro_at_1m_tokens_by_hand():
    assert (RECORD, INDEX, INDEX_FP4) == (584, 132, 68)
    report = group_cache_report(pro(), tokens=T)
    # 30 CSA layers: a record and an index key per 4 tokens; 31 HCA layers: a record per 128
    assert report.bytes_per_token == 30 * (RECORD + INDEX) / 4 + 31 * RECORD / 128 == 5_511.4375
    assert report.bytes_per_sequence == PRO_WINDOWS == 23_270_400
    assert report.total_bytes == 30 * (T // 4) * (RECORD + INDEX) + 31 * (T // 128) * RECORD + PRO_WINDOWS
    assert report.total_bytes == 5_802_431_488


def test_the_card_s_10_percent_of_v3_2_at_1m():
    """DeepSeek-V3.2 caches per token and layer its 576-value latent (1,152 B in bf16; FlashMLA's 656-B
    fp8 record) and its indexer key (132 B), 61 layers; V4-Pro its records (above). The card's "10 %" lies
    between the two pairings: fp8 against fp8 11.5 %, V4's fp8 against V3.2's bf16 latent 7.1 %."""
    v4 = group_cache_report(pro(), tokens=T).total_bytes
    v32_fp8, v32_bf16 = 61 * (656 + 132) * T, 61 * (1152 + 132) * T
    assert (v32_fp8, v32_bf16) == (50_402_951_168, 82_128_666_624)
    assert round(100 * v4 / v32_fp8, 1) == 11.5 and round(100 * v4 / v32_bf16, 1) == 7.1
    out = json.loads(
        invoke("kv-cache", "deepseek-v3.2", "--tokens", "1M", "--layout", "flashmla-fp8", "--json").stdout
    )
    assert out["layouts"][0]["total_bytes"] == v32_fp8
    out = json.loads(invoke("kv-cache", "deepseek-v4-pro", "--tokens", "1M", "--json").stdout)
    assert out["total_bytes"] == v4 and out["layouts"][0]["total_bytes"] == v4
    # with FP4 indexer keys (68 B) and against V3.2's bf16 latent, as docs/kv-cache.md tabulates
    v4_fp4 = group_cache_report(pro(), tokens=T, indexer="fp4").total_bytes
    v4_bf16 = group_cache_report(pro(), tokens=T, dtype="bf16").total_bytes
    assert (v4_fp4, v4_bf16) == (5_299_115_008, 9_377_906_688)
    assert round(100 * v4_fp4 / v32_fp8, 1) == 10.5 and round(100 * v4_bf16 / v32_bf16, 1) == 11.4
    # README says these figures in prose (a console block of both would not fit its 350 lines)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"gives {v4:,} B, 11.5 % of DeepSeek-V3.2's {v32_fp8:,} B in fp8" in readme


def test_v4_flash_groups_and_the_fp4_indexer():
    report = engine_pages(group_cache_report(flash(), tokens=T, indexer="fp4"))
    lines = {line.group.name: line for line in report.lines}
    assert lines["CSA indexer keys"].bytes_per_sequence == 21 * (T // 4) * INDEX_FP4
    assert lines["SWA window"].bytes_per_sequence == 43 * 128 * RECORD
    # SGLang allocates the fp4 keys; vLLM the fp8 ones whatever the indexer's cache (its pages unchanged)
    assert [p.page_bytes for p in report.sglang if p.name == "c4 indexer keys"] == [64 * INDEX_FP4]
    assert report.vllm.page_sizes == (37_440, 8_640, 1_728)


def test_bf16_entries_and_the_mtp_layer():
    report = engine_pages(group_cache_report(flash(), tokens=1000, dtype="bf16", include_mtp=True))
    lines = {line.group.name: line for line in report.lines}
    assert lines["SWA window"].bytes_per_sequence == 44 * 128 * 512 * 2  # 43 layers + the MTP one
    assert lines["HCA compressed KV"].bytes_per_sequence == 20 * (1000 // 128) * 1024
    assert report.vllm is None and report.sglang is None  # neither engine caches V4 in bf16


def test_the_vllm_figures_of_issue_44376_from_the_command():
    out = invoke(
        "kv-cache", "deepseek-v4-flash", "--tokens", "30000", "--max-num-batched-tokens", "16384",
        "--budget", str(5_554 * 1_051_776), "--json",
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    vllm = json.loads(out.stdout)["vllm"]
    assert vllm["memory_bytes"] == 7_152_076_800  # "6.66 GiB KV cache is needed"
    assert vllm["budget"]["estimated_max_model_len"] == 13_528
    text = invoke(
        "kv-cache", "deepseek-v4-flash", "--tokens", "30000", "--max-num-batched-tokens", "16384"
    ).stdout
    assert '"6.66 GiB KV cache is needed"' in " ".join(text.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--indexer-cache", "fp5"], "--indexer-cache fp5: expected one of: fp8, fp4"),
        (["--layout", "latent"], "caches no MLA latent"),
        (["--dtype", "fp32"], ("--dtype fp32: ", "cache is fp8")),
        (["--block-size", "100"], "--block-size 100: vLLM stores block_size // 128"),
        (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens 0: expected a positive integer"),
    ],
)
def test_bad_options_are_refused_in_one_line(args, message, write_config):
    from kimicount.models import known_model

    path = write_config(known_model("deepseek-v4-flash").config())
    fails_cleanly(
        invoke("kv-cache", "--config", str(path), *args),
        *([message] if isinstance(message, str) else message),
    )


def test_v4_options_are_said_to_do_nothing_for_mla_models():
    result = invoke("kv-cache", "kimi-k2", "--indexer-cache", "fp4", "--tokens", "1k")
    assert result.exit_code == 0
    assert "--indexer-cache has no effect" in result.stderr
