"""Every table of every command at 60, 80, 100, 120 and 200 columns (issue 27): no number cut, no row's
label dropped. Each case runs the command twice, once with --json and once as text at that width, and
every figure and label the JSON gives for the table's rows must appear whole in the text (a table too
narrow for its columns stacks its rows or folds its text; it never cuts). Figures are formatted as the
views print them: counts with thousands separators, llama.cpp's MiB with two decimals. The commands
run through the CLI, as a user runs them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich.cells import cell_len

from .checkpoints import kimi_k2_layout, tampered_kimi_k2
from .helpers import KIMI_K2, invoke, real_kimi_k2_tensors

WIDTHS = (60, 80, 100, 120, 200)

#: A number as printed (1,026,408,232,448; 35.6; 8,784.00); a cut one leaves a piece ("1,699,5").
NUMBER = re.compile(r"\d[\d,.]*\d|\d")


def _nodes(node: dict[str, Any], depth: int, deepest: int) -> Iterator[tuple[dict[str, Any], int]]:
    yield node, depth
    if depth < deepest:
        for child in node.get("children", ()):
            yield from _nodes(child, depth + 1, deepest)


def tree(key: str, deepest: int = 3) -> Callable[[dict[str, Any]], list[str]]:
    """Each row of a tree table to `deepest`: its name and its `key` figure."""

    def figures(report: dict[str, Any]) -> list[str]:
        return [s for n, _ in _nodes(report["tree"], 0, deepest) for s in (n["name"], f"{n[key]:,}")]

    return figures


def mib(count: int) -> str:
    """llama.cpp's buffer sizes: bytes / 2^20 with two decimals (written out here, not imported)."""
    return f"{count / 2**20:,.2f} MiB"


def _layers(report: dict[str, Any]) -> list[str]:
    return [f"{layer['params']:,}" for layer in report["layers"]]


def _kv(report: dict[str, Any]) -> list[str]:
    return [s for row in report["layouts"] for s in (row["layout"], f"{row['total_bytes']:,}")]


def _kv_tp(report: dict[str, Any]) -> list[str]:
    return [*_kv(report), *(f"{row['budget_max_tokens']:,}" for row in report["layouts"])]


def _compare(report: dict[str, Any]) -> list[str]:
    rows = report["compare"]
    return [
        s
        for row in rows
        for s in (row["layout"], f"{row['gpus']:,}", f"{row['tokens_per_gpu']:,}", f"{row['tokens_total']:,}")
    ]


def _local(report: dict[str, Any]) -> list[str]:
    return [
        s
        for device in report["devices"]
        for s in (
            device["name"],
            mib(device["weights_bytes"]),
            mib(device["total_bytes"]),
            f"{device['tensors']:,}",
        )
    ]


def _plan(report: dict[str, Any]) -> list[str]:
    stage = report["stages"][0]
    figures = [f"{report['kv_cache']['tokens_per_gpu']:,}", f"{report['usable_bytes']:,} B"]
    return [*figures, f"{stage['weights_bytes']:,} B", *(row["name"] for row in report["weights"])]


def _flops(report: dict[str, Any]) -> list[str]:
    ways = [f"{int(w['decode_flops_per_token_per_layer']):,}" for w in report["attention"]]
    return [*tree("flops_per_token")(report), *ways]


def _stages(report: dict[str, Any]) -> list[str]:
    return [f"{stage['kv_tokens']:,}" for stage in report["stages"]]


def _gguf(report: dict[str, Any]) -> list[str]:
    by_type = report["by_type"]
    return [f"{report['file_bytes']:,}", *(f"{row['tensors']:,}" for row in by_type.values()), *by_type]


def _models(report: dict[str, Any]) -> list[str]:
    return [s for row in report["models"] for s in (row["name"], f"{row['total']:,}")]


def _page(report: dict[str, Any]) -> list[str]:
    parameters = report["parameters"] or {}
    where = [s for row in parameters.get("where", ()) for s in (row["where"], f"{row['params']:,}")]
    kv = [f"{row['bytes_per_token']:,}" for row in report.get("kv_cache") or ()]
    parts = [s for row in report.get("parts") or () for s in (row["name"], f"{row['params']:,}")]
    return [*where, *kv, *parts]


def _measure(report: dict[str, Any]) -> list[str]:
    return [s for row in report["layouts"] for s in (row["layout"], f"{row['predicted_bytes']:,}")]


def _verify(report: dict[str, Any]) -> list[str]:
    return [f"{report['parameters']['expected']:,}", f"{report['parameters']['found']:,}"]


def _compare_models(report: dict[str, Any]) -> list[str]:
    rows = report["components"].values()
    shown = [row for row in rows if row["depth"] <= 3]
    figures = [f"{m['params']:,}" for row in shown for m in row["models"].values() if m is not None]
    kv = [f"{m['bytes_per_token']:,}" for layout in report["kv_cache"].values() for m in layout.values()]
    return [*figures, *kv, *(row["name"] for row in shown)]


CASES: dict[str, tuple[list[str], Callable[[dict[str, Any]], list[str]]]] = {
    "params": (["params"], tree("params")),
    "params --detail calculation": (["params", "--detail", "calculation"], tree("params")),
    "params --detail shapes": (["params", "--detail", "shapes", "--depth", "2"], tree("params", 2)),
    "params --by layer": (["params", "--by", "layer"], _layers),
    "params of DeepSeek-V3": (["params", "deepseek-v3"], tree("params")),
    "kv-cache": (["kv-cache", "--tokens", "128K", "--batch", "16", "--no-chart"], _kv),
    "kv-cache on 8 GPUs": (
        ["kv-cache", "--tokens", "128K", "--tp", "8", "--budget", "141GiB", "--no-chart"],
        _kv_tp,
    ),
    "flops": (["flops"], _flops),
    "plan --detail": (["plan", "--gpus", "16xH200", "--detail"], _plan),
    "plan, two stages": (["plan", "--gpus", "16xH200", "--pp", "2", "--detail"], _stages),
    "plan --compare": (["plan", "--gpus", "8xH200", "--compare", "tp8,dp8ep8,tp8pp2"], _compare),
    "plan, local": (
        ["plan", "--gpus", "1xRTX4090", "--quant", "Q3_K_M", "--ram", "512GiB", "--offload", "experts"],
        _local,
    ),
    "gguf --quant": (["gguf", "--quant", "Q6_K"], _gguf),
    "models": (["models"], _models),
    "show, a component": (["show", "router"], _page),
    "show, a group": (["show", "latent attention"], _page),
    "show, the model": (["show", "model"], _page),
    "compare": (["compare", "kimi-k2", "deepseek-v3"], _compare_models),
}


def _check(args: list[str], figures: Callable[[dict[str, Any]], list[str]]) -> None:
    report = json.loads(_run([*args, "--json"], 200))
    wanted = figures(report)
    assert wanted, args
    whole = _run(args, 1000)
    wide = set(NUMBER.findall(whole))
    for width in WIDTHS:
        text = _run(args, width)
        assert max(cell_len(line) for line in text.splitlines()) <= width, (args, width)
        assert text.count("…") <= whole.count("…"), (args, width)  # rich's mark of a cut cell
        flat = " ".join(text.split())  # a label may fold between its words, never inside one
        missing = [figure for figure in wanted if not _whole(figure, flat)]
        assert not missing, f"{args} at {width} columns: {missing[:6]} not shown whole"
        # the note naming the columns left out says the width: the one number a narrow print adds
        kept = re.sub(
            r"Left\s+out\s+at\s+\d+\s+columns:.*?a\s+wider\s+terminal\s+shows\s+them\.",
            "",
            text,
            flags=re.DOTALL,
        )
        # measure's decode timings (two decimals) change from run to run
        pieces = {n for n in NUMBER.findall(kept) if not re.fullmatch(r"\d+\.\d\d", n)} - wide
        assert not pieces, f"{args} at {width} columns: numbers cut: {sorted(pieces)[:6]}"


def _whole(figure: str, text: str) -> bool:
    """Whether `figure` is in `text` whole: a number as one token, never a piece of a longer one; a
    label of several words, each word whole (a cell folds between words, onto the row's next line), and
    a name each of its dotted parts (a tensor name folds after a dot: model.layers.3. / self_attn.…)."""

    def found(word: str) -> bool:
        return bool(re.search(rf"(?<![\w,.]){re.escape(word)}(?![\w,])", text))

    return all(
        found(word)
        or (re.search(r"[A-Za-z]", word) and all(p in text for p in re.split(r"(?<=[./])", word) if p))
        for word in figure.split()
    )


def _run(args: list[str], width: int) -> str:
    result = invoke(*args, env={"COLUMNS": str(width)})
    assert result.exit_code in (0, 1), (args, result.output)
    return result.stdout


@pytest.mark.parametrize("case", CASES)
def test_every_table_at_every_width(case):
    args, figures = CASES[case]
    _check(args, figures)


def test_measure_at_every_width():
    pytest.importorskip("torch")
    args = ["measure", "--device", "cpu", "--tokens", "64", "--dtype", "fp32", "--decode-steps", "1"]
    _check(args, _measure)


@pytest.fixture(scope="module")
def kimi_k2_checkpoint(tmp_path_factory):
    return kimi_k2_layout(tmp_path_factory.mktemp("kimi-k2"), config=KIMI_K2 / "config.json")


def test_verify_at_every_width(kimi_k2_checkpoint):
    _check(["verify", "--path", str(kimi_k2_checkpoint)], _verify)


def test_verify_mismatches_at_every_width(kimi_k2_checkpoint, tmp_path):
    listing = real_kimi_k2_tensors()
    listing["model.layers.3.self_attn.kv_b_proj.weight"] = ((16384, 511), "F8_E4M3")
    folder = tampered_kimi_k2(kimi_k2_checkpoint, tmp_path / "t", listing)

    def mismatches(report: dict[str, Any]) -> list[str]:
        return [s for m in report["mismatches"] for s in (m["tensor"], m["expected"], m["found"])]

    _check(["verify", "--path", str(folder)], mismatches)


def test_the_issue_figures_at_80_columns():
    # issue 27: plan --compare lost its layout column ("GP…", "22,0…") and the local device table printed
    # "350,647.…" at 80 columns
    compare = _run(["plan", "--gpus", "8xH200", "--compare", "tp8,dp8ep8,tp8pp2"], 80)
    assert "tp8pp2 (TP8 × PP2)" in compare and "1,699,520" in compare
    local = _run(
        ["plan", "--gpus", "1xRTX4090", "--quant", "Q3_K_M", "--ram", "512GiB", "--offload", "experts"], 80
    )
    assert "CUDA0" in local and "RAM" in local and "…" not in local
    # kv-cache wraps its one-line reasons at 80 columns instead of leaving them out
    kv = " ".join(_run(["kv-cache", "--no-chart"], 80).split())
    assert (
        "each head's value padded to the key width" in kv
        and "one latent and one rotary key for all heads" in kv
    )
