"""KV-cache sizes against DESIGN.md's figures and hand computation; page rounding, TP, budgets, sizes."""

from __future__ import annotations

import pytest

from kimicount.errors import UsageError
from kimicount.kvcache import Layout, context_sweep, kv_cache_report, parse_layout
from kimicount.spec import bundled_spec, spec_from_path

from .helpers import FIXTURES

K2 = bundled_spec()
NAIVE, FLASH, LATENT, FLASHMLA_FP8 = Layout.naive, Layout.flash, Layout.latent, Layout.flashmla_fp8


def per_token(report) -> dict[str, int]:
    return {cache.layout.value: cache.bytes_per_token for cache in report.caches}


def test_kimi_k2_bf16_per_token_over_61_layers_matches_design():
    report = kv_cache_report(K2)
    assert (report.dtype, report.layers, report.workload.tokens) == ("bf16", 61, 131_072)
    # DESIGN.md: naive 2,498,560, flash 2,998,272, latent 70,272 B per token
    assert per_token(report) == {"naive": 2_498_560, "flash": 2_998_272, "latent": 70_272}
    assert [c.bytes_per_token_per_layer for c in report.caches] == [
        64 * (128 + 64 + 128) * 2,
        64 * (192 + 192) * 2,
        (512 + 64) * 2,
    ]


def test_totals_scale_with_tokens_and_batch():
    one = kv_cache_report(K2, tokens=1, batch=1)
    assert [c.total_bytes for c in one.caches] == [2_498_560, 2_998_272, 70_272]
    full = kv_cache_report(K2, tokens=131_072, batch=16)
    assert [c.total_bytes for c in full.caches] == [
        2_498_560 * 131_072 * 16,  # 5,239,860,101,120: 4.77 TiB
        2_998_272 * 131_072 * 16,
        70_272 * 131_072 * 16,  # 147,371,065,344: 137 GiB
    ]
    assert isinstance(full.caches[0].total_bytes, int)


def test_fp8_halves_the_bf16_latent_and_flashmla_has_its_own_format():
    fp8 = kv_cache_report(K2, dtype="fp8", layouts=[LATENT, FLASHMLA_FP8])
    assert per_token(fp8) == {"latent": 35_136, "flashmla-fp8": (512 + 4 * 4 + 64 * 2) * 61}
    assert fp8.caches[1].bytes_per_token_per_layer == 656
    fp32 = kv_cache_report(K2, dtype="fp32", layouts=[LATENT])
    assert per_token(fp32) == {"latent": (512 + 64) * 4 * 61}


def test_deepseek_v2_lite_by_hand():
    # 27 layers, 16 heads, kv_lora_rank 512, qk_rope 64, qk_nope 128, v 128, bf16
    lite = kv_cache_report(spec_from_path(FIXTURES / "deepseek-v2-lite"), tokens=4096, batch=2)
    assert lite.layers == 27
    assert per_token(lite) == {
        "naive": 16 * (128 + 64 + 128) * 2 * 27,  # 276,480
        "flash": 16 * (192 + 192) * 2 * 27,  # 331,776
        "latent": (512 + 64) * 2 * 27,  # 31,104
    }
    assert lite.caches[2].total_bytes == 31_104 * 4096 * 2
    assert lite.ratio_to_latent(lite.caches[0]) == pytest.approx(276_480 / 31_104)


def test_dtype_defaults_to_the_config_torch_dtype(write_config, kimi_config):
    spec = spec_from_path(write_config({**kimi_config, "torch_dtype": "float32"}))
    assert kv_cache_report(spec).dtype == "fp32"
    assert kv_cache_report(spec, layouts=[LATENT]).caches[0].bytes_per_token_per_layer == (512 + 64) * 4


def test_block_size_rounds_each_sequence_up_to_whole_pages():
    report = kv_cache_report(K2, tokens=1000, batch=3, block_size=64, layouts=[LATENT])
    workload, latent = report.workload, report.caches[0]
    assert (workload.tokens_per_sequence, workload.allocated_tokens) == (16 * 64, 3 * 1024)
    assert workload.wasted_tokens == 3 * 24
    assert latent.total_bytes == 70_272 * 3 * 1024
    assert latent.wasted_bytes == 70_272 * 72
    exact = kv_cache_report(K2, tokens=4096, block_size=64)
    assert exact.workload.wasted_tokens == 0 and exact.caches[0].wasted_bytes == 0


def test_tp_splits_the_heads_of_naive_and_flash_and_replicates_the_latent():
    report = kv_cache_report(K2, tokens=131_072, batch=16, tp=8)
    naive, flash, latent = report.caches
    assert naive.bytes_per_token_per_gpu == 64 * (128 + 64 + 128) * 2 * 61 // 8 == 312_320
    assert flash.bytes_per_token_per_gpu == 2_998_272 // 8
    assert latent.bytes_per_token_per_gpu == 70_272  # every rank holds the whole latent
    assert naive.bytes_per_gpu == 312_320 * 131_072 * 16
    assert naive.bytes_all_gpus == naive.total_bytes  # split: the ranks hold one copy between them
    assert latent.bytes_all_gpus == 8 * latent.total_bytes  # replicated: eight copies
    assert report.ratio_to_latent_per_gpu(naive) == pytest.approx(312_320 / 70_272)  # 4.4×, not 35.6×


@pytest.mark.parametrize("tp", [3, 5, 128, 48])
def test_tp_must_divide_the_heads(tp):
    with pytest.raises(UsageError, match=rf"--tp {tp}: does not divide the 64 attention heads"):
        kv_cache_report(K2, tp=tp)


def test_flashmla_fp8_and_latent_are_replicated_under_tp():
    report = kv_cache_report(K2, tp=4, layouts=[FLASHMLA_FP8, LATENT, NAIVE])
    assert [c.attention.ranks for c in report.caches] == [1, 1, 4]


def test_include_mtp_adds_deepseek_v3_multi_token_prediction_layer():
    v3 = spec_from_path(FIXTURES / "deepseek-v3")
    without = kv_cache_report(v3, layouts=[LATENT])
    with_mtp = kv_cache_report(v3, layouts=[LATENT], include_mtp=True)
    assert (without.layers, with_mtp.layers, with_mtp.mtp_layers) == (61, 62, 1)
    assert per_token(with_mtp) == {"latent": (512 + 64) * 2 * 62}
    k2 = kv_cache_report(K2, include_mtp=True)  # Kimi K2 has none: nothing changes
    assert (k2.layers, k2.mtp_layers) == (61, 0)


def test_deepseek_v32_caches_the_indexer_keys_in_every_layout():
    v32 = kv_cache_report(spec_from_path(FIXTURES / "deepseek-v3.2-exp"), tokens=1000)
    indexer = 128 + 1 * 4  # index_head_dim fp8 + one F32 scale per 128 values
    assert v32.indexer.bytes_per_token_per_layer == indexer == 132
    assert v32.indexer.bytes_per_token == 132 * 61
    assert v32.indexer_total_bytes == 132 * 61 * 1000
    assert [c.bytes_per_token_per_layer for c in v32.caches] == [
        128 * (128 + 64 + 128) * 2 + 132,
        128 * (192 + 192) * 2 + 132,
        (512 + 64) * 2 + 132,
    ]
    tp = kv_cache_report(spec_from_path(FIXTURES / "deepseek-v3.2-exp"), tp=8, layouts=[NAIVE])
    assert tp.caches[0].bytes_per_token_per_gpu == 128 * 320 * 2 * 61 // 8 + 132 * 61  # indexer replicated
    assert kv_cache_report(K2).indexer is None


def test_each_calculation_evaluates_to_its_bytes():
    # Each formula writes its calculation beside its arithmetic; the two must agree, digit for digit.
    v32 = spec_from_path(FIXTURES / "deepseek-v3.2-exp")
    for spec in (K2, spec_from_path(FIXTURES / "deepseek-v2-lite"), v32):
        for layout in Layout:
            line = kv_cache_report(spec, layouts=[layout], dtype="fp16").caches[0].attention
            assert eval(line.calculation.replace("×", "*")) == line.bytes_per_token_per_layer, (spec, layout)
    indexer = kv_cache_report(v32).indexer
    assert (indexer.calculation, indexer.bytes_per_token_per_layer) == ("128 × 1 + 1 × 4", 132)


def test_the_calculations_of_kimi_k2_in_bf16():
    report = kv_cache_report(K2, layouts=list(Layout))
    assert [c.attention.calculation for c in report.caches] == [
        "64 × (128 + 64 + 128) × 2",
        "64 × (128 + 64 + 192) × 2",
        "(512 + 64) × 2",
        "512 × 1 + 4 × 4 + 64 × 2",
    ]


# --- budgets: the reported maximum fits, one more does not ------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"block_size": 64},
        {"tp": 8},
        {"tp": 8, "block_size": 64, "batch": 16},
        {"dtype": "fp8", "block_size": 16, "layouts": [LATENT, FLASHMLA_FP8]},
    ],
)
@pytest.mark.parametrize("budget", [141 * 2**30, 80 * 10**9, 2**20, 123_456_789])
def test_budget_maximum_fits_and_one_more_does_not(options, budget):
    report = kv_cache_report(K2, tokens=100_000, budget=budget, **options)
    for cache in report.caches:
        most = cache.max_tokens(report.budget)
        assert cache.at(most, batch=1).bytes_per_gpu <= report.budget
        assert cache.at(most + 1, batch=1).bytes_per_gpu > report.budget
        sequences = cache.max_sequences(report.budget)
        assert cache.at(100_000, batch=sequences).bytes_per_gpu <= report.budget
        assert cache.at(100_000, batch=sequences + 1).bytes_per_gpu > report.budget


def test_budget_by_hand_for_one_h200_per_rank():
    budget = 141 * 2**30
    report = kv_cache_report(K2, tokens=131_072, tp=8, block_size=64, budget=budget)
    naive, _, latent = report.caches
    assert report.budget == budget == 151_397_597_184
    naive_per_gpu = 64 * (128 + 64 + 128) * 2 * 61 // 8  # 312,320 B per token per GPU
    assert naive.max_tokens(budget) == budget // (naive_per_gpu * 64) * 64 == 484_736
    assert latent.max_tokens(budget) == budget // (70_272 * 64) * 64 == 2_154_432
    assert latent.max_sequences(budget) == budget // (70_272 * 131_072) == 16
    assert naive.max_sequences(budget) == 3


# --- bad values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        ({"tokens": 0}, "--tokens 0: expected a positive integer"),
        ({"tokens": -5}, "--tokens -5: expected a positive integer"),
        ({"batch": 0}, "--batch 0: expected a positive integer"),
        ({"block_size": -64}, "--block-size -64: expected a positive integer"),
        ({"tp": 0}, "--tp 0: expected a positive integer"),
        ({"budget": 0}, "--budget 0: expected a positive integer"),
        ({"budget": -(2**30)}, "--budget -1073741824: expected a positive integer"),
        # 2^63 − 1 (int64) is the most any count may be
        (
            {"tokens": 2**63},
            "--tokens 9223372036854775808: expected at most 9,223,372,036,854,775,807 (2^63 − 1)",
        ),
        ({"batch": 10**400}, f"--batch {10**400}: expected at most 9,223,372,036,854,775,807"),
        ({"budget": 2**63}, "--budget 9223372036854775808: expected at most 9,223,372,036,854,775,807"),
        ({"dtype": "fp4"}, "--dtype 'fp4': unknown cache dtype (expected one of: bf16, fp16, fp32, fp8)"),
    ],
)
def test_bad_values_name_the_option(options, message):
    with pytest.raises(UsageError) as error:
        kv_cache_report(K2, **options)
    assert message in str(error.value)


def test_parse_layout():
    assert [parse_layout(name) for name in ("naive", "flash", "latent", "flashmla-fp8")] == list(Layout)
    with pytest.raises(UsageError) as error:
        parse_layout("paged")
    assert "--layout 'paged': unknown layout (expected one of: naive, flash, latent, flashmla-fp8)" in str(
        error.value
    )


def test_context_sweep_ends_at_the_tokens_asked_for():
    sweep = context_sweep(kv_cache_report(K2, tokens=131_072, batch=2))
    assert [tokens for tokens, _ in sweep] == [512, 2048, 8192, 32768, 131_072]
    _, caches = sweep[0]
    assert [c.total_bytes for c in caches] == [2_498_560 * 512 * 2, 2_998_272 * 512 * 2, 70_272 * 512 * 2]
    assert context_sweep(kv_cache_report(K2, tokens=100))[0][0] == 100 // 4**3  # 1
