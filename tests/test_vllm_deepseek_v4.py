"""vLLM's KV-cache rule for DeepSeek V4 against what vLLM printed.

vLLM issue #44376 (2026-06-03, v0.22): DeepSeek-V4-Flash on 2 × GH200 96 GB, LLM(tensor_parallel_size=2,
enable_expert_parallel=True, max_model_len=30_000, kv_cache_dtype="fp8", block_size=256,
gpu_memory_utilization=0.95) failed with

    ValueError: To serve at least one request with the model's max seq len (30000), (6.66 GiB KV cache
    is needed, which is larger than the available KV cache memory (5.44 GiB). Based on the available
    memory, the estimated maximum model length is 13528. ...

The LLM class on a GPU of at least 70 GiB that is not an A100 defaults max_num_batched_tokens to 16,384
(vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults). The pages and the pool below are written out
by hand from the specs' rules (kimicount/deploy/engines/vllm_deepseek_v4.py says where each is read)."""

from __future__ import annotations

import pytest

from kimicount.deploy.engines.vllm_deepseek_v4 import format_gib, not_enough_memory_line, vllm_layout
from kimicount.families import cache_groups

from .test_deepseek_v4 import flash, pro

PRINTED = (
    "To serve at least one request with the model's max seq len (30000), (6.66 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (5.44 GiB). Based on the available memory, the "
    "estimated maximum model length is 13528."
)
BATCH = 16_384  # max_num_batched_tokens, the LLM class's default on a 96 GB GH200

# Pages, by hand: C4 compressed KV 256 // 4 = 64 records of 584 B = 37,376 → 65 × 576 = 37,440; the
# indexer keys 64 × (128 + 4) = 8,448 → 15 × 576 = 8,640; C128 2 × 584 = 1,168 → 3 × 576 = 1,728.
TUPLE = 37_440 + 8_640 + 1_728
# 21 CSA and 20 HCA layers; 43 windows, 21 + 21 compressor states (C4), 20 (C128): tuples
# [21, 43, 21, 20] chunked by 22 (5 of padding; 21 would pad 21): the 43 windows in 22 + 21.
TUPLES = 22


def pages(length: int) -> int:
    """Block ids one request of `length` takes: the full-MLA group cdiv(length, 256); each sliding group
    cdiv(min(window − 1 + 16,384, length), block) + 1: the two window groups (64-token blocks, window
    128), the C4 states (4-token blocks, window 8), the C128 states (8-token blocks, window 128)."""

    def sliding(window, block):
        return -(-min(window - 1 + BATCH, length) // block) + 1

    return -(-length // 256) + 2 * sliding(128, 64) + sliding(8, 4) + sliding(128, 8)


def test_the_memory_vllm_needs_for_30000_tokens_is_its_6_66_gib():
    layout = vllm_layout(cache_groups(flash()))
    assert (layout.tuple_bytes, layout.layer_tuples) == (TUPLE, TUPLES) == (47_808, 22)
    assert pages(30_000) == 118 + 2 * 259 + 4_099 + 2_065 == 6_800
    needed = TUPLES * TUPLE * pages(30_000)
    assert needed == layout.memory_for(30_000, BATCH) == 7_152_076_800
    assert format_gib(needed) == "6.66"


def test_the_estimated_maximum_length_is_its_13528_to_the_byte():
    """vLLM printed the available memory rounded to 5.44 GiB. 13,528 tokens take 5,554 block ids
    (53 + 2 × 213 + 3,383 + 1,692), 13,529 take 5,556: every pool from 5,554 to 5,555 block ids of
    1,051,776 B gives 13,528, and each of those prints as 5.44 GiB; exactly 5.44 GiB would give 13,524."""
    layout = vllm_layout(cache_groups(flash()))
    low, high = 5_554 * TUPLES * TUPLE, 5_556 * TUPLES * TUPLE
    assert (pages(13_528), pages(13_529)) == (5_554, 5_556)
    for available in (low, high - 1):
        assert format_gib(available) == "5.44"
        assert layout.estimate_max_model_len(available, 30_000, BATCH) == 13_528
        assert not_enough_memory_line(layout, available, 30_000, BATCH) == PRINTED
    assert layout.estimate_max_model_len(low - 1, 30_000, BATCH) < 13_528
    assert layout.estimate_max_model_len(high, 30_000, BATCH) > 13_528
    assert layout.estimate_max_model_len(int(5.44 * 2**30), 30_000, BATCH) == 13_524  # 5,553 ids fit


def test_vllms_gpu_kv_cache_size_is_concurrency_times_max_model_len():
    """Issue #51041: "GPU KV cache size: N tokens" is int(block ids ÷ ids per request × max_model_len):
    the same pool reports other N for another max_model_len, because the windows and states take the
    same pages at any length past the 16,384-token chunk (6,682 of a request's 6,800 ids at 30,000)."""
    layout = vllm_layout(cache_groups(flash()))
    available = 40 * 2**30
    blocks = available // (TUPLES * TUPLE)
    assert pages(30_000) - 118 == pages(100_000) - 391 == 6_682
    assert layout.kv_cache_size_tokens(available, 30_000, BATCH) == int(blocks / pages(30_000) * 30_000)
    assert layout.kv_cache_size_tokens(available, 100_000, BATCH) == int(blocks / pages(100_000) * 100_000)
    assert layout.kv_cache_size_tokens(available, 30_000, BATCH) != layout.kv_cache_size_tokens(
        available, 100_000, BATCH
    )


def test_pro_forms_the_same_five_groups_of_31_tuples():
    layout = vllm_layout(cache_groups(pro()))
    # 30 CSA, 31 HCA: full-MLA 31 tuples; windows 61 → 31 + 30; C4 states 30; C128 states 31
    assert [g.layer_tuples for g in layout.groups] == [31, 31, 30, 30, 31]
    assert layout.block_bytes == 31 * TUPLE


@pytest.mark.parametrize("block", [100, 130])
def test_a_block_size_that_is_no_multiple_of_the_ratios_is_refused(block):
    from kimicount.errors import UsageError

    with pytest.raises(UsageError, match=f"--block-size {block}: vLLM stores"):
        vllm_layout(cache_groups(flash()), block)
