"""What a new user meets: an 80-column terminal shows every number whole, --help reads alike everywhere,
and what users naturally type is accepted. Expected figures are DESIGN.md's or written out by hand."""

from __future__ import annotations

import json
import re
from xml.etree import ElementTree

import pytest
from rich.cells import cell_len

from .checkpoints import kimi_k2_layout, tampered_kimi_k2
from .helpers import FIXTURES, KIMI_K2, imported_modules, invoke, real_kimi_k2_tensors, run_kimicount

# --- every number whole at 80 columns -------------------------------------------------------------

#: Numbers as printed: 1,026,408,232,448, 35.6, 1.0e-06; a cut number ("1,026,…") leaves a piece.
NUMBER = re.compile(r"\d[\d,.]*\d|\d")

#: Each command with a figure it must show whole, from DESIGN.md or by hand.
COMMANDS = {
    "params": (["params"], ["1,026,408,232,448", "32,861,500,928", "1,023,561,914,880"]),
    # DESIGN.md: routed experts 16,911,433,728 per block × 60; key content 4,194,304 × 60
    "params, every component": (["params", "--depth", "all"], ["1,014,686,023,680", "251,658,240"]),
    "params --detail formula": (["params", "--detail", "formula"], ["1,174,405,120"]),
    "params --by layer": (["params", "--by", "layer"], ["17,059,365,248", "500,253,056"]),
    "params --by memory": (
        ["params", "--config", str(FIXTURES / "kimi-k2.5"), "--by", "memory"],
        ["594,205,904,896", "553 GiB"],  # README: K2.5's weights as stored
    ),
    "params of DeepSeek-V3 (MTP)": (
        ["params", "--config", str(FIXTURES / "deepseek-v3")],
        ["671,026,419,200", "11,610,068,224"],  # DESIGN.md: 671B main + MTP apart
    ),
    "kv-cache": (["kv-cache"], ["2,498,560", "327,491,256,320", "70,272"]),  # 2,498,560 × 131,072
    "kv-cache, TP and a budget": (
        ["kv-cache", "--tokens", "131072", "--batch", "16", "--tp", "8", "--budget", "141GiB"],
        ["5,239,860,101,120", "147,371,065,344", "2,154,451", "610 GiB"],  # 2,498,560 × 131,072 × 16
    ),
    "kv-cache of V3.2 in pages": (
        ["kv-cache", "--config", str(FIXTURES / "deepseek-v3.2-exp"), "--tokens", "8100", "--dtype", "fp8"]
        + ["--layout", "latent", "--layout", "flashmla-fp8", "--block-size", "64", "--include-mtp"],
        ["356,786,688", "397,101,568", "66,519,552"],  # 43,896 / 48,856 / 8,184 B × 8,128 tokens
    ),
}


def _numbers(text: str) -> set[str]:
    """The numbers printed, but for the line that names the columns left out (it says 80) and the
    decode timings of measure (two decimals: they change from run to run)."""
    kept = [line for line in text.splitlines() if not line.startswith("Left out at")]
    return {n for n in NUMBER.findall("\n".join(kept)) if not re.fullmatch(r"\d+\.\d\d", n)}


def _check_80_columns(args: list[str], figures: list[str], exit_code: int = 0) -> str:
    narrow = invoke(*args, env={"COLUMNS": "80"})
    wide = invoke(*args, env={"COLUMNS": "240"})
    assert narrow.exit_code == wide.exit_code == exit_code, narrow.output
    out = narrow.stdout
    assert max(cell_len(line) for line in out.splitlines()) <= 80
    assert "…" not in out  # rich's mark of a cut cell
    # every number at 80 columns is one the wide page prints too: none is cut or folded apart
    assert _numbers(out) <= _numbers(wide.stdout)
    for figure in figures:
        assert figure in out
    return out


@pytest.mark.parametrize("case", COMMANDS)
def test_every_number_whole_at_80_columns(case):
    args, figures = COMMANDS[case]
    _check_80_columns(args, figures)


def test_columns_left_out_are_named():
    out = invoke("params", env={"COLUMNS": "80"}).stdout
    assert "Left out at 80 columns: Per instance, Instances, Calculation (--detail calculation)" in " ".join(
        out.split()
    )
    # an explicit --detail keeps its column, folded; the others make room
    detail = invoke("params", "--detail", "calculation", env={"COLUMNS": "80"}).stdout
    assert "Calculation" in detail and "163,840 × 7,168" in detail


@pytest.fixture(scope="module")
def kimi_k2_checkpoint(tmp_path_factory):
    return kimi_k2_layout(tmp_path_factory.mktemp("kimi-k2"), config=KIMI_K2 / "config.json")


def test_verify_at_80_columns(kimi_k2_checkpoint):
    # the listing's own totals (fixtures/kimi-k2-instruct/tensors.json)
    figures = ["1,026,408,232,448", "1,029,173,256,720", "139,644", "17,059,365,248"]
    _check_80_columns(["verify", "--path", str(kimi_k2_checkpoint)], figures)


def test_verify_mismatches_at_80_columns(kimi_k2_checkpoint, tmp_path):
    listing = real_kimi_k2_tensors()
    listing["model.layers.3.self_attn.kv_b_proj.weight"] = ((16384, 511), "F8_E4M3")
    folder = tampered_kimi_k2(kimi_k2_checkpoint, tmp_path / "t", listing)
    out = _check_80_columns(["verify", "--path", str(folder)], ["[16384, 512]", "[16384, 511]"], exit_code=1)
    assert "1 mismatches" in out


def test_measure_at_80_columns():
    pytest.importorskip("torch")
    # 64 tokens of Kimi K2's naive cache, fp32: 64 × (192 + 128) × 64 heads × 4 bytes
    args = ["measure", "--device", "cpu", "--tokens", "64", "--dtype", "fp32", "--decode-steps", "1"]
    out = _check_80_columns(args, [f"{64 * 320 * 64 * 4:,}"])
    # Ratio (1.0000) would fold the "Decode ms/step" header onto a second line: the layout of fewest
    # lines leaves it out, and says so (a wider terminal never prints more lines than this one)
    assert "Left out at 80 columns: Ratio, Cache tensors per layer (--json lists them)" in " ".join(
        out.split()
    )


# --- help: one style everywhere -------------------------------------------------------------------

HELP = [[], ["params"], ["verify"], ["kv-cache"], ["measure"], ["flops"], ["plan"]]


@pytest.mark.parametrize("command", HELP, ids=lambda c: " ".join(c) or "kimicount")
def test_help_reads_alike_in_every_command(command):
    long = invoke(*command, "--help", env={"COLUMNS": "80"})
    short = invoke(*command, "-h", env={"COLUMNS": "80"})
    assert long.exit_code == short.exit_code == 0
    assert long.stdout == short.stdout
    out = long.stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    assert not re.search(r"<(bool|str|int|path|float)", out)  # values are NAMED, choices [a|b]
    assert "╭" not in out  # plain help, no boxes
    text = " ".join(out.split())
    for code in (
        "0 ok",
        "1 a check failed",
        "2 bad input, an unreachable source or unwritable output",
        "3 an internal error",
        "130 interrupted",
        "141 the reader closed the pipe",
    ):
        assert code in text


def test_choices_and_values_have_one_style():
    kv = " ".join(invoke("kv-cache", "--help").stdout.split())
    measure = " ".join(invoke("measure", "--help").stdout.split())
    params = " ".join(invoke("params", "--help").stdout.split())
    for text in (kv, measure):
        assert "--dtype [bf16|fp16|fp32|fp8]" in text and "--tokens N" in text
    assert "--layout [naive|flash|latent|flashmla-fp8]" in kv and "--budget SIZE" in kv
    assert "--device [auto|cuda|cpu]" in measure
    assert (
        "--by [component|layer|memory]" in params
        and "--detail [calculation|formula|tensors|shapes]" in params
    )
    assert "Usage: kimicount params [OPTIONS] [MODEL]" in params.replace("python -m kimicount", "kimicount")


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["params", "-h"],
        ["kv-cache", "--help"],
        ["params", "--by", "nothing"],
        ["params", "--depth", "x"],
    ]
    + [["kv-cache", "--tokens", "lots"], ["kv-cache", "--dtype", "fp4"], ["nosuch"], ["--version"]],
)
def test_help_and_errors_import_neither_rich_nor_the_anatomy(args):
    result = run_kimicount(*args, env={"PYTHONPROFILEIMPORTTIME": "1"})
    imported = imported_modules(result.stderr)
    assert "kimicount.cli" in imported  # the check sees our own imports
    heavy = {m for m in imported if m.split(".")[0] in ("rich", "pydantic", "torch", "huggingface_hub")}
    assert not heavy and "kimicount.anatomy" not in imported


# --- what users type -------------------------------------------------------------------------------


def kv_json(*args: str) -> dict:
    result = invoke("kv-cache", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    "tokens, count",
    [
        ("128k", 128_000),
        ("128K", 131_072),  # upper case is binary, as vLLM reads it (vllm/engine/arg_utils.py)
        ("128Ki", 131_072),
        ("1M", 1_048_576),
        ("1m", 1_000_000),
        ("1e6", 1_000_000),
        ("131,072", 131_072),
    ],
)
def test_token_counts_as_people_write_them(tokens, count):
    report = kv_json("--tokens", tokens, "--layout", "latent")
    assert report["tokens"] == count
    assert report["layouts"][0]["total_bytes"] == 70_272 * count  # DESIGN.md: 70,272 B per token


def test_every_count_option_takes_the_same_forms():
    report = kv_json("--tokens", "4Ki", "--batch", "1k", "--block-size", "64", "--tp", "8")
    assert (report["tokens"], report["batch"], report["block_size"], report["tp"]) == (4096, 1000, 64, 8)


@pytest.mark.parametrize("dtype", ["bfloat16", "BF16", "bf16"])
def test_dtype_as_config_json_and_safetensors_spell_it(dtype):
    report = kv_json("--dtype", dtype, "--layout", "latent", "--tokens", "1")
    assert (report["dtype"], report["layouts"][0]["bytes_per_token"]) == ("bf16", 70_272)


def test_tokens_past_the_models_context_warn():
    result = invoke("kv-cache", "--tokens", "200k", "--layout", "naive", "--json")
    assert result.exit_code == 0
    assert result.stderr == (
        "kimicount: warning: 200k = 200,000 tokens, as vLLM reads it; 200K is 204,800\n"
        "kimicount: warning: --tokens 200,000 is past the model's context, 131,072 tokens "
        "(max_position_embeddings); the sizes are exact all the same\n"
    )
    assert json.loads(result.stdout)["layouts"][0]["total_bytes"] == 2_498_560 * 200_000
    assert invoke("kv-cache", "--tokens", "128Ki", "--json").stderr == ""  # exactly the context: no warning


@pytest.mark.parametrize(
    "args, warning",
    [
        (
            ["params", "--by", "layer", "--depth", "2"],
            "--depth has no effect with --by layer (one row per layer)",
        ),
        (
            ["params", "--by", "layer", "--depth", "2", "--detail", "formula"],
            "--depth and --detail have no effect with --by layer (one row per layer)",
        ),
        (["params", "--by", "memory", "--detail", "tensors"], "--detail has no effect with --by memory"),
        (["params", "--json", "--depth", "1"], "--depth has no effect with --json"),
        (["kv-cache", "--json", "--no-chart"], "--chart/--no-chart has no effect with --json"),
    ],
)
def test_options_a_view_ignores_say_so(args, warning):
    result = invoke(*args)
    assert result.exit_code == 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kimicount: warning: {warning}")


def test_options_a_view_uses_say_nothing():
    for args in (["params", "--depth", "2"], ["params", "--by", "layer"], ["kv-cache", "--no-chart"]):
        assert invoke(*args).stderr == ""


# --- the --plot file ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["chart.png", "chart.PNG", "chart"])
def test_plot_writes_svg_or_refuses(tmp_path, name):
    result = invoke("kv-cache", "--plot", str(tmp_path / name))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"kimicount: error: --plot {tmp_path / name}: the chart is written as SVG only; "
        "name a .svg file (any browser opens it)\n"
    )
    assert not (tmp_path / name).exists()
    assert invoke("kv-cache", "--plot", str(tmp_path / "chart.SVG"), "--json").exit_code == 0


def test_plot_shows_per_gpu_lines_and_the_budget(tmp_path):
    path = tmp_path / "kv.svg"
    kv_json("--tokens", "131072", "--batch", "16", "--tp", "8", "--budget", "141GiB", "--plot", str(path))
    svg = ElementTree.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    dashed = [p for p in svg.iter(f"{ns}polyline") if p.get("stroke-dasharray")]
    assert len(svg.findall(f"{ns}polyline")) == 3 + 2 and len(dashed) == 2  # naive and flash split
    texts = {t.text for t in svg.iter(f"{ns}text")}
    # 16 × 131,072 tokens: naive 2,498,560 B per token in all, 1/8 of it per GPU = 610 GiB; the latent,
    # 70,272 B per token, replicated: 137 GiB on each GPU
    assert {"naive per GPU 610 GiB", "flash per GPU 732 GiB", "latent 137 GiB on every GPU"} <= texts
    assert "budget 141 GiB per GPU" in texts
    budget_line = [line for line in svg.iter(f"{ns}line") if line.get("stroke-dasharray") == "2 3"]
    assert len(budget_line) == 1


# --- nothing from input acts on the terminal (issue 26) ----------------------------------------------------

#: An OSC that sets the window title, BEL, an SGR colour, backspace, the C1 CSI (U+009B) and a
#: right-to-left override: what a folder's name may hold.
HOSTILE = "evil\x1b]0;pwned\x07\x1b[31mRED\x08\u009b2J\u202e"
SHOWN = "evil\\x1b]0;pwned\\x07\\x1b[31mRED\\x08\\x9b2J\\u202e"


def _unprintable(text: str) -> list[str]:
    return sorted({c for c in text if not c.isprintable() and c != "\n"})


def test_a_config_folders_name_reaches_stdout_escaped(tmp_path):
    folder = tmp_path / HOSTILE
    folder.mkdir()
    (folder / "config.json").write_bytes((KIMI_K2 / "config.json").read_bytes())
    result = run_kimicount("params", "--config", str(folder))
    assert result.returncode == 0, result.stderr
    assert _unprintable(result.stdout) == []
    # the title names the model by its folder; rich itself drops BEL and backspace from what it prints
    shown = SHOWN.replace("\\x07", "").replace("\\x08", "")
    assert result.stdout.splitlines()[0].startswith(shown + " (kimi_k2): parameters per component")
    as_json = run_kimicount("params", "--config", str(folder), "--json")
    assert _unprintable(as_json.stdout) == [] and "\\u009b" in as_json.stdout
    assert json.loads(as_json.stdout)["model"] == HOSTILE


def test_an_error_naming_such_a_path_reaches_stderr_escaped(tmp_path):
    result = run_kimicount("params", "--config", str(tmp_path / HOSTILE / "config.json"))
    assert result.returncode == 2 and result.stdout == ""
    assert _unprintable(result.stderr) == []
    assert result.stderr == f"kimicount: error: {tmp_path}/{SHOWN}/config.json: no such file\n"
