"""The headline-figure reconciliation of `kimicount params`, against figures from outside the code: the
issue's independent counts, the real Kimi K2 listing, the K2.5 header count, and hand computation.
Which published figure each convention explains is worked out here by hand, then compared."""

from __future__ import annotations

import json
import math

import pytest

from kimicount.conventions import PUBLISHED, reading

from .checkpoints import deepseek_fp8_listing
from .helpers import FIXTURES, KIMI_K2, invoke, run_kimicount

V3 = FIXTURES / "deepseek-v3"
V2_LITE = FIXTURES / "deepseek-v2-lite"
K25 = FIXTURES / "kimi-k2.5"


def _report(*args: str) -> dict:
    result = invoke("params", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _values(report: dict) -> dict[str, int]:
    return {c["name"]: c["value"] for c in report["conventions"]}


def _explains(report: dict) -> dict[str, set[str]]:
    """convention -> its figures, truncated ones marked with a trailing '↓'."""
    return {
        c["name"]: {e["figure"] + ("↓" if e["reading"] == "truncated" else "") for e in c["explains"]}
        for c in report["conventions"]
    }


def _unexplained(report: dict) -> set[str]:
    return {f["figure"] for f in report["unexplained_figures"]}


def test_deepseek_v3_conventions():
    report = _report("--config", str(V3))
    values = _values(report)
    own, copies = 11_610_068_224, 2 * 129_280 * 7_168  # MTP: its own parameters, its embedding + head
    expert = 3 * 7_168 * 2_048
    # the FP8 scales of the real checkpoint, main and MTP layers, eh_proj having none (by hand, as in
    # test_mtp_storage): 62 attentions, 3 dense MLPs, 59 MoE layers of 257 experts
    scales = 62 * (672 + 2_304 + 280 + 1_024 + 7_168) + 3 * 3 * 8_064 + 59 * 257 * 3 * 896
    assert values == {
        "parameters": 671_026_419_200,
        "parameters_without_embeddings": 671_026_419_200 - 2 * 129_280 * 7_168,  # 669.17B
        "parameters_with_mtp": 671_026_419_200 + own,
        "parameters_with_mtp_copies": 684_489_845_504,
        "stored_elements": 684_489_845_504 + scales,
        "activated": 37_552_297_472,
        "activated_without_embedding": 37_552_297_472 - 926_679_040,  # 36,625,618,432
        "mtp_parameters": own,
        "mtp_activated_with_copies": own - 248 * expert + copies,  # 8 of 256 experts run
    }
    # stored elements are what the real checkpoint's headers hold (its listing, written from the facts)
    listing = deepseek_fp8_listing(json.loads((V3 / "config.json").read_text()))
    assert (
        values["stored_elements"] == sum(math.prod(shape) for shape, _ in listing.values()) == 684_531_386_000
    )
    # By hand: 671.03B rounds to 671B. 684,489,845,504 rounds to 684.5B but to 684B, not 685B; the
    # headers' 684,531,386,000 rounds to both. 37.55B activated rounds to 37.6B: only cut gives 37B;
    # without the embedding 36.63B rounds to 37B and to 36.6B. 682.6B, 11.6B and 2.54B give nothing.
    assert _explains(report) == {
        "parameters": {"671B"},
        "parameters_without_embeddings": set(),
        "parameters_with_mtp": set(),
        "parameters_with_mtp_copies": {"684.5B"},
        "stored_elements": {"685B", "684.5B"},
        "activated": {"37B↓"},
        "activated_without_embedding": {"37B", "36.6B"},
        "mtp_parameters": set(),
        "mtp_activated_with_copies": set(),
    }
    # 36.7B: the activated counts are 37.55B and 36.63B. 11.5B: the MTP's own is 11.61B. 2.4B: with
    # its embedding and head the MTP runs 2.54B per token (0.69B without).
    assert _unexplained(report) == {"36.7B", "11.5B", "2.4B"}


def test_deepseek_v3_mtp_figures_match_its_block_alone():
    """What README says of 11.5B and 2.4B: both are the MTP layer without eh_proj and its three
    norms, its transformer block alone (11,507,286,272) and that block's activated part plus the
    copies (2.44B), a reading no convention here makes."""
    mtp = _report("--config", str(V3), "--depth", "1")["mtp"]["tree"]
    block = next(c for c in mtp["children"] if c["name"].startswith("1 MoE block"))
    assert block["params"] == 11_507_286_272 and reading(block["params"], "11.5B") == "rounded"
    with_copies = block["activated"] + 2 * 129_280 * 7_168
    assert with_copies == 2_438_676_736 and reading(with_copies, "2.4B") == "rounded"


def test_kimi_k2_conventions():
    report = _report()
    listing = json.loads((KIMI_K2 / "tensors.json").read_text())
    rotary = sum(math.prod(t["shape"]) * t["count"] for t in listing["tensors"] if "inv_freq" in t["name"])
    assert listing["totals"]["elements"] == 1_026_470_731_056 and rotary == 61 * 56
    assert _values(report) == {
        "parameters": 1_026_408_232_448,
        "parameters_without_embeddings": 1_026_408_232_448 - 2 * 163_840 * 7_168,  # embedding and head
        # every tensor of the real checkpoint, FP8 scales included, but the rotary buffers, which no
        # config determines
        "stored_elements": 1_026_470_731_056 - rotary,
        "activated": 32_861_500_928,
        "activated_without_embedding": 32_861_500_928 - 163_840 * 7_168,
    }
    # By hand: 1.026T rounds to 1T. 32.86B rounds to 33B: cut, 32B; 31.69B rounds to 32B. The paper's
    # 1.04T is no convention: every tensor of the checkpoint is 1.0265T, and K2 has no MTP layer.
    assert _explains(report) == {
        "parameters": {"1T"},
        "parameters_without_embeddings": {"1T"},
        "stored_elements": {"1T"},
        "activated": {"32B↓"},
        "activated_without_embedding": {"32B"},
    }
    assert _unexplained(report) == {"1.04T"}


def test_kimi_k25_conventions():
    report = _report("--config", str(K25))
    values = _values(report)
    vision = 416_866_032 + 54_277_888
    experts = 60 * 384
    scales = experts * (2 * 2048 * (7168 // 32) + 7168 * (2048 // 32))  # one BF16 per 32 inputs
    shapes = experts * 3 * 2  # a weight_shape [2] per packed Linear
    assert values == {
        "parameters": 1_026_408_232_448,
        "parameters_without_embeddings": 1_026_408_232_448 - 2 * 163_840 * 7_168,
        "parameters_with_vision": 1_026_408_232_448 + vision,
        "stored_elements": 170_738_182_128,  # the header element count of the K2.5 layout (test_k25_int4)
        "weights_and_scales": 1_026_408_232_448 + vision + scales + shapes,
        "activated": 32_861_500_928,
        "activated_without_embedding": 31_687_095_808,
    }
    # By hand: 170.74B rounds to 171B, cut to 170B; weights with their group scales are 1.0586T -> 1.06T.
    explains = _explains(report)
    assert (explains["stored_elements"], explains["weights_and_scales"]) == ({"170B↓"}, {"1T", "1.06T"})
    assert _unexplained(report) == set()


def test_deepseek_v2_lite_conventions():
    """DeepSeek's 2.4B activated against the users' 2.6B: with and without the input embedding, both
    cut, not rounded (2.45B rounds to 2.5B, 2.66B to 2.7B)."""
    report = _report("--config", str(V2_LITE))
    unselected = 26 * (64 - 6) * 3 * 2048 * 1408  # 26 MoE layers, 6 of 64 experts run
    activated = 15_706_484_224 - unselected
    assert _values(report) == {
        "parameters": 15_706_484_224,  # transformers' meta-device count (README)
        "parameters_without_embeddings": 15_706_484_224 - 2 * 102_400 * 2_048,  # 15.29B: neither figure
        "activated": activated,
        "activated_without_embedding": activated - 102_400 * 2_048,
    }
    assert _explains(report) == {
        "parameters": {"15.7B", "16B"},
        "parameters_without_embeddings": set(),
        "activated": {"2.6B↓"},
        "activated_without_embedding": {"2.4B↓"},
    }


def test_a_model_without_published_figures():
    report = _report("--config", str(FIXTURES / "deepseek-v3.2-exp"))
    assert all(c["explains"] == [] for c in report["conventions"]) and report["unexplained_figures"] == []
    out = invoke("params", "--config", str(FIXTURES / "deepseek-v3.2-exp"), "--depth", "0").stdout
    assert "no published figures known" in out


def test_json_entries():
    report = _report("--config", str(V3))
    convention = next(c for c in report["conventions"] if c["name"] == "stored_elements")
    assert set(convention) == {"name", "description", "counts", "value", "explains"}
    assert convention["explains"][0] == {
        "figure": "685B",
        "counts": "total",
        "family": "DeepSeek-V3",
        "source": "DeepSeek-V3 README: 671B main model + 14B MTP",
        "reading": "rounded",
    }
    assert all(isinstance(c["value"], int) for c in report["conventions"])
    assert {"figure", "counts", "family", "source"} == set(report["unexplained_figures"][0])


@pytest.mark.parametrize("config", [None, V3, K25])
def test_section_reads_at_80_columns(config):
    args = ["params", "--depth", "0"] + (["--config", str(config)] if config else [])
    result = run_kimicount(*args, env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    section = result.stdout[result.stdout.index("Headline figures") :].splitlines()
    assert max(len(line) for line in section) <= 80
    report = _report(*args[1:])
    for convention in report["conventions"]:  # one line each, its exact number whole
        (line,) = [line for line in section if line.startswith(convention["name"] + " ")]
        assert f"{convention['value']:,}" in line


@pytest.mark.parametrize(
    "value, figure, expected",
    [
        (684_449_999_999, "684.5B", None),  # rounds to 684.4B, cuts to 684.4B
        (684_450_000_000, "684.5B", "rounded"),  # exactly half: up
        (684_549_999_999, "684.5B", "rounded"),
        (684_550_000_000, "684.5B", "truncated"),  # rounds to 684.6B
        (684_600_000_000, "684.5B", None),
        (499, "1K", None),
        (999, "1K", "rounded"),
        (1_500, "1K", "truncated"),
        (2_000, "1K", None),
    ],
)
def test_reading_at_the_figures_last_digit(value, figure, expected):
    assert reading(value, figure) == expected


def test_every_published_figure_reads():
    for figures in PUBLISHED.values():
        for figure in figures:
            assert reading(0, figure.text) in (None, "rounded", "truncated")
    with pytest.raises(ValueError, match="figure '1,04T'"):
        reading(1, "1,04T")
