"""`kimicount kv-cache` from the outside: tables, notes, chart, SVG, JSON contract, errors, imports."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from xml.etree import ElementTree

import pytest

from .helpers import FIXTURES, fails_cleanly, imported_modules, invoke, run_kimicount
from .test_params_cli import MIRROR, hub  # noqa: F401 (hub: the fake Hub fixture)

V3 = str(FIXTURES / "deepseek-v3")
V32 = str(FIXTURES / "deepseek-v3.2-exp")


def kv_json(*args: str) -> dict:
    result = invoke("kv-cache", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # stdout holds the JSON and nothing else


def test_default_prints_the_three_layouts_of_kimi_k2_side_by_side():
    result = invoke("kv-cache")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert (
        "moonshotai/Kimi-K2-Instruct (kimi_k2): KV cache in bf16, 131,072 tokens × 1 sequence, 61 layers"
        in out
    )
    # per token per layer, per token over 61 layers, total for 131,072 tokens, binary units, × latent
    assert re.search(r"naive\s+40,960 B\s+2,498,560 B\s+327,491,256,320 B\s+305 GiB\s+35\.6×", out)
    assert re.search(r"flash\s+49,152 B\s+2,998,272 B\s+392,989,507,584 B\s+366 GiB\s+42\.7×", out)
    assert re.search(r"latent\s+1,152 B\s+70,272 B\s+9,210,691,584 B\s+8\.58 GiB\s+1\.0×", out)
    assert "flashmla-fp8" not in out


def test_formulas_name_the_config_keys_and_their_values():
    out = invoke("kv-cache", "--no-chart").stdout
    assert "e = 2 bytes per bf16 element), × 61 layers = num_hidden_layers" in out
    assert re.search(
        r"naive\s+num_attention_heads × \(qk_nope_head_dim \+ qk_rope_head_dim \+ v_head_dim\) × e\s+"
        r"= 64 × \(128 \+ 64 \+ 128\) × 2\s+= 40,960 B",
        out,
    )
    assert re.search(
        r"latent\s+\(kv_lora_rank \+ qk_rope_head_dim\) × e\s+= \(512 \+ 64\) × 2\s+= 1,152 B", out
    )


def test_chart_is_on_by_default_and_log_scaled():
    out = invoke("kv-cache", "--tokens", "131072", "--batch", "16").stdout
    assert "Cache size against context length, 16 sequences (log scale: 3 characters = ×2):" in out
    bars = dict(re.findall(r"^\s*(?:131,072)?\s+(naive|flash|latent)\s+(█+)\s+\S+ \S+$", out, re.MULTILINE))
    assert len(bars) == 3  # the last context's rows win: 131,072 tokens
    # log2(2,498,560 / 70,272) = 5.15 doublings at 3 characters each: the latent bar is 15 shorter
    assert len(bars["naive"]) - len(bars["latent"]) == 15
    assert "Cache size" not in invoke("kv-cache", "--no-chart").stdout


def test_one_layout_and_the_flashmla_fp8_format():
    out = invoke("kv-cache", "--layout", "latent", "--layout", "flashmla-fp8", "--no-chart").stdout
    assert re.search(r"flashmla-fp8\s+656 B\s+40,016 B", out)  # 512 + 4 × 4 + 64 × 2 = 656; × 61
    assert "naive" not in out
    assert "512 × 1 + 4 × 4 + 64 × 2" in out


def test_fp8_halves_the_latent():
    report = kv_json("--dtype", "fp8", "--layout", "latent")
    assert (report["dtype"], report["element_bytes"]) == ("fp8", 1)
    assert report["layouts"][0]["bytes_per_token"] == 35_136  # 70,272 / 2


def test_json_follows_the_contract():
    report = kv_json("--tokens", "131072", "--batch", "16")
    assert {"model", "dtype", "tokens", "batch", "layers", "layouts"} <= report.keys()
    assert (report["model"], report["dtype"], report["tokens"], report["batch"], report["layers"]) == (
        "moonshotai/Kimi-K2-Instruct",
        "bf16",
        131_072,
        16,
        61,
    )
    naive, flash, latent = report["layouts"]
    assert {"layout", "bytes_per_token_per_layer", "bytes_per_token", "total_bytes"} <= naive.keys()
    assert [entry["layout"] for entry in report["layouts"]] == ["naive", "flash", "latent"]
    assert (naive["bytes_per_token_per_layer"], naive["bytes_per_token"]) == (40_960, 2_498_560)
    assert naive["total_bytes"] == 2_498_560 * 131_072 * 16
    assert (flash["bytes_per_token"], latent["bytes_per_token"]) == (2_998_272, 70_272)
    assert latent["total_bytes"] == 70_272 * 131_072 * 16
    assert naive["ratio_to_latent"] == pytest.approx(2_498_560 / 70_272)
    assert naive["calculation"] == "64 × (128 + 64 + 128) × 2"
    assert report["indexer"] is None and report["budget_bytes"] is None
    assert "budget_max_tokens" not in naive


def test_tp_says_the_latent_is_replicated_and_shows_per_gpu_bytes():
    out = invoke("kv-cache", "--tokens", "131072", "--batch", "16", "--tp", "8", "--no-chart").stdout
    assert "naive and flash split their 64 heads, 8 per GPU" in out
    assert "The latent belongs to no head: it is replicated, every GPU holds the whole latent cache" in out
    # per GPU, all 8 GPUs, × latent per GPU
    assert re.search(r"naive .*\s610 GiB\s+4\.77 TiB\s+4\.4×$", out, re.MULTILINE)
    assert re.search(r"latent .*\s137 GiB\s+1\.07 TiB\s+1\.0×$", out, re.MULTILINE)
    naive, _, latent = kv_json("--tokens", "131072", "--batch", "16", "--tp", "8")["layouts"]
    assert naive["bytes_per_gpu"] == 2_498_560 * 131_072 * 16 // 8
    assert (naive["split_across_tp"], latent["split_across_tp"]) == (True, False)
    assert latent["bytes_per_gpu"] == latent["total_bytes"] == 70_272 * 131_072 * 16
    assert latent["bytes_all_gpus"] == 8 * 70_272 * 131_072 * 16
    assert naive["ratio_to_latent_per_gpu"] == pytest.approx(2_498_560 / 8 / 70_272)


def test_block_size_shows_the_waste():
    out = invoke("kv-cache", "--tokens", "1000", "--batch", "3", "--block-size", "64", "--no-chart").stdout
    assert (
        "each sequence of 1,000 tokens takes 16 pages (1,024 tokens); 72 tokens allocated but unused" in out
    )
    one_page = invoke("kv-cache", "--tokens", "10", "--block-size", "64", "--no-chart").stdout
    assert "each sequence of 10 tokens takes 1 page (64 tokens); 54 tokens allocated but unused" in one_page
    report = kv_json("--tokens", "1000", "--batch", "3", "--block-size", "64", "--layout", "latent")
    assert (report["allocated_tokens"], report["wasted_tokens"]) == (3 * 1024, 3 * 24)
    assert report["layouts"][0]["total_bytes"] == 70_272 * 3 * 1024
    assert report["layouts"][0]["wasted_bytes"] == 70_272 * 72


def test_budget_round_trips_through_the_cli():
    budget = 141 * 2**30
    args = ("--tp", "8", "--block-size", "64", "--budget", "141GiB")
    report = kv_json("--tokens", "131072", *args)
    assert report["budget_bytes"] == budget
    for entry in report["layouts"]:
        most = entry["budget_max_tokens"]
        fits = kv_json("--tokens", str(most), "--layout", entry["layout"], *args)["layouts"][0]
        over = kv_json("--tokens", str(most + 1), "--layout", entry["layout"], *args)["layouts"][0]
        assert fits["bytes_per_gpu"] <= budget < over["bytes_per_gpu"]
        sequences = entry["budget_max_sequences"]
        batch = kv_json("--tokens", "131072", "--batch", str(sequences), "--layout", entry["layout"], *args)
        more = kv_json(
            "--tokens", "131072", "--batch", str(sequences + 1), "--layout", entry["layout"], *args
        )
        assert batch["layouts"][0]["bytes_per_gpu"] <= budget < more["layouts"][0]["bytes_per_gpu"]
    out = invoke("kv-cache", "--tokens", "131072", *args, "--no-chart").stdout
    assert "What fits in 141 GiB (151,397,597,184 B) per GPU, in whole pages of 64:" in out
    assert re.search(r"latent\s+2,154,432\s+16$", out, re.MULTILINE)


def test_include_mtp():
    k2 = invoke("kv-cache", "--include-mtp", "--no-chart").stdout
    assert (
        "has no multi-token-prediction layer (num_nextn_predict_layers 0): --include-mtp adds nothing." in k2
    )
    v3 = invoke("kv-cache", "--config", V3, "--no-chart").stdout
    assert "Not counted: 1 multi-token-prediction layer (num_nextn_predict_layers)" in v3
    report = kv_json("--config", V3, "--include-mtp", "--layout", "latent")
    assert (report["layers"], report["mtp_layers"]) == (62, 1)
    assert report["layouts"][0]["bytes_per_token"] == (512 + 64) * 2 * 62


def test_deepseek_v32_indexer_keys_have_their_own_line():
    out = invoke("kv-cache", "--config", V32, "--tokens", "1000", "--no-chart").stdout
    assert re.search(r"of which indexer keys\s+132 B\s+8,052 B\s+8,052,000 B", out)
    assert "index_head_dim × 1 + ceil(index_head_dim / 128) × 4" in out
    report = kv_json("--config", V32, "--tokens", "1000")
    assert report["indexer"]["bytes_per_token_per_layer"] == 128 + 4
    assert report["layouts"][2]["bytes_per_token_per_layer"] == (512 + 64) * 2 + 132


def test_plot_writes_an_svg_chart(tmp_path):
    path = tmp_path / "kv.svg"
    report = kv_json("--tokens", "131072", "--plot", str(path))  # --json still prints only JSON
    assert report["tokens"] == 131_072
    svg = ElementTree.parse(path).getroot()
    namespace = "{http://www.w3.org/2000/svg}"
    assert svg.tag == f"{namespace}svg"
    assert len(svg.findall(f"{namespace}polyline")) == 3
    assert len(svg.findall(f"{namespace}circle")) == 3 * 5  # 512, 2,048, 8,192, 32,768, 131,072
    texts = [t.text for t in svg.iter(f"{namespace}text")]
    assert {"naive 305 GiB", "flash 366 GiB", "latent 8.58 GiB", "512", "131,072"} <= set(texts)
    # 35,979,264 B (latent, 512 tokens) to 392,989,507,584 B (flash, 131,072): 2^25.1 to 2^38.5,
    # gridlines at every second power of two from 2^24
    assert [t for t in texts if re.fullmatch(r"\d+ \w?i?B", t)] == [
        "16 MiB",
        "64 MiB",
        "256 MiB",
        "1 GiB",
        "4 GiB",
        "16 GiB",
        "64 GiB",
        "256 GiB",
        "1 TiB",
    ]
    assert "Both axes log scale: naive 35.6×, flash 42.7× the latent at every length" in texts


def test_help_explains_every_option():
    out = " ".join(invoke("kv-cache", "--help", env={"COLUMNS": "200"}).stdout.replace("│", " ").split())
    for option in (
        "--tokens",
        "--batch",
        "--layout",
        "--dtype",
        "--block-size",
        "--tp",
        "--include-mtp",
        "--budget",
        "--chart",
        "--plot",
        "--json",
    ):
        assert option in out
    assert "max_position_embeddings" in out and "replicated on every GPU" in out
    assert "kv-cache" in invoke("--help").stdout


def test_python_dash_m_and_no_torch_or_hub_import():
    result = run_kimicount("kv-cache", "--json", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["layouts"][2]["bytes_per_token"] == 70_272
    imported = imported_modules(result.stderr)
    assert "kimicount.kvcache" in imported  # the check sees our own imports
    assert not {m for m in imported if m.split(".")[0] in ("torch", "huggingface_hub")}


def test_repo_reads_the_config_from_the_hub(hub):  # noqa: F811
    _, env = hub
    result = run_kimicount("kv-cache", "--repo", MIRROR, "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["model"], report["layouts"][0]["bytes_per_token"]) == (
        MIRROR,
        2_498_560,
    )


# --- bad input: exit 2, one line naming the option and what was expected -----------------------


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--tokens", "0"], ["--tokens 0: expected a positive integer"]),
        (["--tokens", "-5"], ["--tokens -5: expected a positive integer"]),
        (["--batch", "0"], ["--batch 0: expected a positive integer"]),
        (["--block-size", "0"], ["--block-size 0: expected a positive integer"]),
        (["--layout", "paged"], ["--layout 'paged': unknown layout", "naive, flash, latent, flashmla-fp8"]),
        (["--dtype", "fp4"], ["--dtype 'fp4': unknown cache dtype", "bf16, fp16, fp32, fp8"]),
        (["--budget", "lots"], ["--budget 'lots': expected a size such as 80GiB"]),
        (["--budget", "80 GiBs"], ["--budget '80 GiBs'", "GiB"]),
        (["--budget", "0GiB"], ["--budget '0GiB': expected at least 1 byte"]),
        (["--tp", "3"], ["--tp 3: does not divide the 64 attention heads", "use 1, 2, 4, 8, 16, 32 or 64"]),
        (["--tp", "0"], ["--tp 0: expected a positive integer"]),
        (["--plot", "/nonexistent-dir/kv.svg"], ["--plot /nonexistent-dir/kv.svg: cannot write"]),
    ],
)
def test_bad_input_exits_2_with_one_line(args, needles):
    fails_cleanly(invoke("kv-cache", *args), *needles)


INT64_MAX = 9_223_372_036_854_775_807  # 2^63 − 1
HUGE = "9" * 400  # a 400-digit number: more than a float holds


@pytest.mark.parametrize("option", ["--tokens", "--batch", "--block-size", "--tp"])
def test_a_count_too_big_for_int64_exits_2_with_one_line(option):
    fails_cleanly(
        invoke("kv-cache", option, HUGE), f"{option} {HUGE}: expected at most 9,223,372,036,854,775,807"
    )
    fails_cleanly(
        invoke("kv-cache", option, str(INT64_MAX + 1)), f"{option} {INT64_MAX + 1}: expected at most"
    )


@pytest.mark.parametrize(
    "budget, needle",
    [
        ("1e30", "--budget 1000000000000000000000000000000: expected at most 9,223,372,036,854,775,807"),
        ("9" * 60 + "GiB", "expected at most"),
        ("9" * 5000, f"--budget '{'9' * 80}… (5,000 characters)': expected a size such as 80GiB"),
    ],
)
def test_a_budget_too_big_exits_2_with_one_line(budget, needle):
    fails_cleanly(invoke("kv-cache", "--budget", budget), needle)


def test_the_largest_counts_still_render_exactly(tmp_path):
    # the largest values the options take: totals of about 2 × 10^44 B, every figure still exact
    most = str(INT64_MAX)
    args = ["--tokens", most, "--batch", most, "--block-size", most, "--tp", "8", "--budget", most]
    svg = tmp_path / "kv.svg"
    report = kv_json(*args, "--plot", str(svg))
    naive, flash, latent = report["layouts"]
    assert naive["total_bytes"] == 2_498_560 * INT64_MAX * INT64_MAX  # one page of 2^63 − 1 tokens each
    assert flash["total_bytes"] == 2_998_272 * INT64_MAX * INT64_MAX
    assert latent["bytes_all_gpus"] == 8 * 70_272 * INT64_MAX * INT64_MAX
    assert naive["budget_max_tokens"] == 0  # not one page fits
    result = invoke("kv-cache", *args)
    assert result.exit_code == 0, result.output
    # in YiB (2^80 B), beyond the largest unit: a whole number of them, rounded half to even
    naive_yib = f"{round(Fraction(2_498_560 * INT64_MAX**2, 2**80))} YiB"
    assert naive_yib == "175820529452544163802 YiB"
    assert re.search(rf"naive\s+40,960 B\s+2,498,560 B\s+212,553,977,\S+ B\s+{naive_yib}", result.stdout)
    assert "What fits in 8 EiB (9,223,372,036,854,775,807 B) per GPU" in result.stdout  # 2^63 B = 8 EiB
    assert f"naive {naive_yib}" in svg.read_text()


def test_tp_refusal_names_the_model_heads():
    fails_cleanly(
        invoke("kv-cache", "--config", str(FIXTURES / "deepseek-v2-lite"), "--tp", "32"),
        "--tp 32: does not divide the 16 attention heads of deepseek-v2-lite (num_attention_heads)",
    )


def test_bad_input_in_a_subprocess_is_one_line():
    result = run_kimicount("kv-cache", "--tokens", "-1")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == "kimicount: error: --tokens -1: expected a positive integer\n"


def test_tp_with_a_single_head_names_the_one_choice(write_config, kimi_config):
    # one head has one divisor: the message says "use 1", not an empty list with a dangling "or" ("use  or 1")
    path = write_config({**kimi_config, "num_attention_heads": 1})
    line = fails_cleanly(invoke("kv-cache", "--config", str(path), "--tp", "2"), "--tp 2")
    assert line.endswith("(num_attention_heads); use 1")
    assert "does not divide the 1 attention head of " in line
