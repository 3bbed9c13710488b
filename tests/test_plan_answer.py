"""`kimicount plan` answers first: the verdict, KV tokens per GPU, the concurrency at max-model-len and what
limits it; a runnable `try:` line per way out; `--batch max`; `--compare`; `--gpus NODESxNxTYPE`.

Figures from outside the code:
- vLLM's published Kimi-K2-Thinking run on 8 × H200, TP8 (vllm-project/recipes): a 46.80 GiB pool,
  715,072 tokens, "Maximum concurrency for 262,144 tokens per request: 2.73x".
- The issue's DeepSeek-V3 on 16 × H800 with DP16 + EP16: 121,984 tokens per GPU (1,906 pages), short of one
  163,840-token request, under the reserve estimate of the time (the sampler's 16 B per vocabulary entry,
  2 GiB outside torch). The sglang branch's estimate (38 B per entry at the sampler's sort, 1.5 GiB) moved
  it: V3_POOL below. The largest decode batch at 4,096 positions was found by trial: 22 no, 21 yes.
- Hand arithmetic written out below: the latent is (512 + 64) × 2 = 1,152 B per token per layer in bf16,
  576 B in fp8; 64-token pages.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import fields

import pytest

from kimicount.deploy.plan import DeploymentOptions
from kimicount.deploy.serve_command import PLAN_FLAGS

from .helpers import FIXTURES, ROOT, fails_cleanly, heavy_imports, invoke

K25 = str(FIXTURES / "kimi-k2.5")  # K2-Thinking's language model and quantization (+ a vision tower)
V3 = str(FIXTURES / "deepseek-v3")
GIB = 2**30
POOL = 50_251_117_363  # 46.80 GiB, as vLLM printed it, in bytes: round(46.80 × 2^30)
V3_DP16 = ("--config", V3, "--gpus", "16xH800", "--dp", "16", "--ep", "16")
# The pool was 1,906 pages of 64 × 70,272 B (bf16 latent, 61 layers): 1,906.5 pages, 8,574,504,608 B.
# The reserve estimate is now larger by the sampler's 1,024 rows × 129,280 entries × (38 − 16) B less the
# 0.5 GiB taken off the allowance outside torch: 2,912,419,840 − 536,870,912 = 2,375,548,928 B. So the pool
# is 8,574,504,608 − 2,375,548,928 = 6,198,955,680 B, floor(6,198,955,680 ÷ 4,497,408) = 1,378 pages,
# 1,378 × 64 = 88,192 tokens per GPU.
V3_PAGES = 1_378


def plan_json(*args: str) -> dict:
    result = invoke("plan", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def plan_text(*args: str) -> str:
    result = invoke("plan", *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def try_lines(out: str) -> list[str]:
    """The commands of the `try:` lines: continuation lines (a line ending in ` \\`) joined, the
    `  # why` comment dropped."""
    commands, current = [], None
    for line in out.splitlines():
        if line.startswith("try: "):
            current = line.removeprefix("try: ")
        elif current is not None and line.startswith("       "):
            current += " " + line.strip()
        else:
            current = None
            continue
        if not current.endswith(" \\"):
            commands.append(current.split("  # ")[0].split(" # ")[0].strip())
            current = None
        else:
            current = current.removesuffix(" \\")
    return commands


def test_try_lines_wrap_as_shell_continuations_on_a_narrow_terminal():
    wide = try_lines(plan_text(*V3_DP16))
    narrow = invoke("plan", *V3_DP16, env={"COLUMNS": "80"}).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert try_lines(narrow) == wide and len(wide) == 6


def test_try_lines_paste_into_a_shell_as_the_commands_they_say(tmp_path):
    # issue 26: a --config path holding $(…) and spaces must run nothing when a try line is pasted and
    # stay one word, even where the line breaks (the words were split at spaces, quotes and all)
    folder = tmp_path / "my $(touch pwned) v3"
    shutil.copytree(V3, folder)
    args = ("--config", str(folder), *V3_DP16[2:])
    commands = plan_json(*args)["try"]
    narrow = invoke("plan", *args, env={"COLUMNS": "60"}).stdout
    lines = narrow.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("try: "))
    block = lines[
        first : first + next(i for i, line in enumerate(lines[first:]) if not line.endswith("\\")) + 1
    ]
    assert len(block) > 1  # broken at 60 columns
    pasted = "\n".join(block).removeprefix("try: ").replace("kimicount", "printf '%s\\n'", 1)
    shell = subprocess.run(["bash", "-c", pasted], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert shell.stdout.splitlines() == shlex.split(commands[0]["command"])[1:]
    assert str(folder) in shell.stdout.splitlines() and not (tmp_path / "pwned").exists()


def test_names_from_input_are_shown_escaped_and_still_paste(tmp_path):
    # issue 27: the try lines went to the terminal through console.print, past kimicount.render.show's
    # escaping: an ESC in a config folder's name reached the terminal raw. Now it shows as \x1b, in the
    # answer's lines and, in bash's $'…' quoting, in the commands, which still paste as the same path
    folder = tmp_path / "v3\x1b[31mred $(touch pwned)"
    shutil.copytree(V3, folder)
    args = ("--config", str(folder), *V3_DP16[2:])
    out = invoke("plan", *args, env={"COLUMNS": "80"}).stdout
    assert "\x1b" not in out and "\\x1b[31mred" in out.splitlines()[0]
    commands = plan_json(*args)["try"]
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("try: "))
    block = lines[
        first : first + next(i for i, line in enumerate(lines[first:]) if not line.endswith("\\")) + 1
    ]
    assert any("$'" in line and "\\x1b[31mred" in line for line in block)
    pasted = "\n".join(block).removeprefix("try: ").replace("kimicount", "printf '%s\\n'", 1)
    shell = subprocess.run(["bash", "-c", pasted], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert shell.stdout.splitlines() == shlex.split(commands[0]["command"])[1:]
    assert str(folder) in shell.stdout.splitlines() and not (tmp_path / "pwned").exists()


# --- the short answer --------------------------------------------------------------------------------


def test_the_answer_comes_first_in_a_few_lines():
    out = plan_text("--config", K25, "--text-only", "--gpus", "8xH200", "--kv-memory", "46.80GiB")
    # 46.80 GiB ÷ (64 × 70,272 B) = 11,173 pages = 715,072 tokens; 11,173 ÷ 4,096 pages a sequence = 2.73
    # 4,096 pages × 64 × 70,272 B = 17.2 GiB a sequence
    assert out.splitlines() == [
        "kimi-k2.5 on 8 × H200, TP8 (vLLM 0.22.0): fits",
        "KV cache: 715,072 tokens per GPU; 70,272 B per token",
        "Concurrency at 262,144 tokens (17.2 GiB each): 2.73× (2 whole sequences per replica)",
        "Limited by the KV pool: 46.8 GiB per GPU (--kv-memory)",
        "--detail adds the weights per component, one GPU's memory as a bar and the reserve's formula.",
    ]
    assert 4_096 * 64 * 70_272 / GIB == pytest.approx(17.16, abs=0.005)
    detailed = plan_text(
        "--detail", "--config", K25, "--text-only", "--gpus", "8xH200", "--kv-memory", "46.80GiB"
    )
    assert detailed.startswith("\n".join(out.splitlines()[:4]) + "\n\n")  # the same answer, then the detail
    assert "Tokens: 11,173 × 64 = 715,072 per GPU" in detailed and "--detail adds" not in detailed


def test_only_the_longest_request_not_fitting_is_not_the_weights_not_fitting():
    report = plan_json(*V3_DP16)
    answer = report["answer"]
    assert (answer["verdict"], answer["tokens_per_gpu"], answer["max_model_len"]) == (
        "longest_request_does_not_fit",
        88_192,
        163_840,
    )
    assert answer["limited_by"] == "kv_pool"
    out = plan_text(*V3_DP16)
    first = " ".join(out.split("\nKV cache:")[0].split())
    assert first == (
        "deepseek-v3 on 16 × H800, DP16 + EP16 (vLLM 0.22.0): does not fit 163,840-token requests; up to 88,192 tokens fit"
    )
    # Kimi-K2-Instruct on 8 × H200: 121 GiB of weights fit the 126 GiB vLLM may use, the reserve does not
    assert plan_json("--gpus", "8xH200")["answer"]["verdict"] == "weights_do_not_fit"
    # on 8 × H100 the weights alone exceed the memory: 121 GiB against ceil(81,090 MiB × 0.9) = 71.3 GiB
    h100 = plan_text("--gpus", "8xH100")
    assert "does not fit: the weights alone take 121 GiB of the 71.3 GiB a GPU may use" in " ".join(
        h100.split()
    )
    assert plan_json("--gpus", "8xH100")["answer"]["limited_by"] == "weights"


def test_the_engines_cap_on_sequences_is_named_when_it_limits():
    # 1,000-token requests take 16 pages: 11,173 ÷ 16 = 698 sequences, above --max-num-seqs 256
    args = (
        "--config",
        K25,
        "--text-only",
        "--gpus",
        "8xH200",
        "--kv-memory",
        "46.80GiB",
        "--max-model-len",
        "1000",
    )
    out = plan_text(*args, "--max-num-seqs", "256")
    assert "Limited by --max-num-seqs 256: the KV pool would hold 698 such sequences per replica" in out
    assert plan_json(*args, "--max-num-seqs", "256")["answer"]["limited_by"] == "max_num_seqs"
    assert plan_json(*args)["answer"]["limited_by"] == "kv_pool"  # vLLM's default on an H200: 1,024 > 698


def test_estimates_are_said_in_the_answer():
    out = plan_text("--config", K25, "--text-only", "--gpus", "8xH200")
    assert "Estimated: the reserve; --kv-memory with the pool the engine logs is exact" in out
    assert len(out.splitlines()) <= 6  # five lines of answer and where the detail is


# --- ways out: each a command that fits -------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kinds",
    [
        (V3_DP16, {"max_model_len", "utilization", "fp8_kv", "layout", "whole_nodes"}),
        # no other layout of 8 H200 holds it: engine settings, then whole nodes
        (("--gpus", "8xH200"), {"utilization", "fp8_kv", "whole_nodes"}),
        (("--gpus", "8xH100"), {"whole_nodes"}),
        (
            (
                "--config",
                K25,
                "--text-only",
                "--gpus",
                "8xH200",
                "--kv-memory",
                "46.80GiB",
                "--max-model-len",
                "1000000",
            ),
            {"max_model_len", "layout", "fp8_kv"},
        ),
    ],
)
def test_every_try_line_is_a_command_that_fits(args, kinds):
    report = plan_json(*args)
    assert report["fits"] is False
    assert {way["kind"] for way in report["try"]} == kinds
    commands = try_lines(plan_text(*args))
    assert commands == [way["command"] for way in report["try"]]
    for command in commands:
        words = shlex.split(command)
        assert words[:2] == ["kimicount", "plan"]
        found = plan_json(*words[2:])
        assert found["fits"] is True, command


def test_engine_settings_first_then_whole_nodes():
    # issue 27: Kimi-K2-Instruct on 8 × H200 offered 9 × H200 (TP1 × PP9) alone; nobody buys nine GPUs.
    # At --gpu-memory-utilization 0.95 (vLLM's Kimi-K2 recipe): usable = ceil(150,109,945,856 × 0.95) =
    # 142,604,448,564 B; − 129,873,676,000 B of weights − 9,428,795,392 B of reserve = 3,301,977,172 B;
    # floor(÷ (64 × 70,272)) = 734 pages = 46,976 tokens; in fp8, floor(÷ (64 × 35,136)) = 1,468 pages = 93,952
    assert -(-150_109_945_856 * 95 // 100) - 129_873_676_000 - 9_428_795_392 == 3_301_977_172
    assert 3_301_977_172 // (64 * 70_272) == 734 and 3_301_977_172 // (64 * 35_136) == 1_468
    report = plan_json("--gpus", "8xH200")
    assert [way["kind"] for way in report["try"]] == ["utilization", "fp8_kv", "whole_nodes"]
    utilization, fp8, nodes = report["try"]
    assert (
        utilization["command"]
        == "kimicount plan --gpus 8xH200 --gpu-memory-utilization 0.95 --max-model-len 46976"
    )
    assert (utilization["tokens_per_gpu"], utilization["max_model_len"]) == (46_976, 46_976)
    assert fp8["command"].endswith("--gpu-memory-utilization 0.95 --kv-dtype fp8 --max-model-len 93952")
    assert fp8["tokens_per_gpu"] == 93_952
    # whole nodes of 8: 2 × 8 × H200, TP8 within each node × PP2 across them (vLLM's common practice)
    assert nodes["command"] == "kimicount plan --gpus 2x8xH200 --tp 8 --pp 2"
    assert (nodes["gpus"], nodes["parallel"]["label"]) == (16, "TP8 × PP2")
    assert all("9xH200" not in way["command"] for way in report["try"])
    # the fewest GPUs of H100 are 18 (--min-gpus): 3 whole nodes of 8
    assert (
        plan_json("--gpus", "8xH100")["try"][-1]["command"] == "kimicount plan --gpus 3x8xH100 --tp 8 --pp 3"
    )
    # nodes named: more of them, as named
    named = plan_json("--gpus", "1x8xH100")["try"][-1]
    assert (
        named["command"] == "kimicount plan --gpus 3x8xH100 --tp 8 --pp 3" and named["kind"] == "whole_nodes"
    )
    # the text says them in that order, each a command
    out = plan_text("--gpus", "8xH200")
    assert [line.split("  # ")[0] for line in out.splitlines() if line.startswith("try: ")] == [
        "try: " + way["command"] for way in report["try"]
    ]


def test_docs_plan_md_says_what_its_example_prints():
    # issue 27: docs/plan.md said Kimi-K2-Instruct's weights on 8 × H200 leave "1,001 MiB less than nothing"
    # (the reserve estimate before it grew) under an example that prints a pool of −3.91 GiB
    from kimicount.render import human_bytes

    text = " ".join((ROOT / "docs" / "plan.md").read_text().split())
    report = plan_json("--gpus", "8xH200")
    (stage,) = report["stages"]
    # usable − weights − reserve, each as the --detail example prints it
    assert stage["kv_pool_bytes"] == 135_098_951_271 - 129_873_676_000 - 9_428_795_392 == -4_203_520_121
    assert f"leave {human_bytes(-stage['kv_pool_bytes'])} less than nothing of the" in text  # 3.91 GiB
    sequence = report["answer"]["sequence_bytes"]
    assert f"a 128K-token sequence needs {human_bytes(sequence)} more: a GPU is short by " in text
    assert f"short by {human_bytes(report['short_by_bytes'])}." in text  # 12.5 GiB
    assert "1,001 MiB" not in text


def test_the_try_lines_figures():
    report = plan_json(*V3_DP16)
    ways = {way["kind"]: way for way in report["try"]}
    # the longest that fits is every page of the pool: 1,378 pages × 64 = 88,192 tokens
    assert ways["max_model_len"]["max_model_len"] == V3_PAGES * 64 == 88_192
    assert ways["max_model_len"]["command"].endswith("--max-model-len 88192")
    # an fp8 latent is 576 B per layer, half of bf16's: the pool's pages of 64 × 35,136 B hold about twice
    assert ways["fp8_kv"]["tokens_per_gpu"] >= 2 * 88_192
    # under --kv-memory the pool is fixed: DCP 2 splits each sequence's tokens over 2 GPUs, so a
    # 1,000,000-token sequence takes ceil(1,000,000 ÷ 128) = 7,813 of the 11,173 pages
    fixed = plan_json(
        "--config",
        K25,
        "--text-only",
        "--gpus",
        "8xH200",
        "--kv-memory",
        "46.80GiB",
        "--max-model-len",
        "1000000",
    )
    dcp = next(way for way in fixed["try"] if way["kind"] == "layout")
    assert dcp["parallel"]["label"] == "TP8 + DCP2"
    assert next(w for w in fixed["try"] if w["kind"] == "max_model_len")["max_model_len"] == 11_173 * 64


def test_a_plan_that_fits_has_no_try_lines():
    assert plan_json("--config", K25, "--text-only", "--gpus", "8xH200")["try"] == []


# --- --batch max ------------------------------------------------------------------------------------


def test_batch_max_is_the_largest_batch_whose_kv_fits():
    # 88,192 tokens = 1,378 pages per GPU (V3_PAGES); a sequence of 4,096 positions takes 64 pages:
    # 21 × 64 = 1,344 ≤ 1,378 < 1,408 = 22 × 64
    report = plan_json(*V3_DP16, "--batch", "max")
    assert report["batch_max"] == {"batch": 21, "context": 4_096, "estimate": True}
    assert report["decode"]["batch"] == 21
    assert plan_json(*V3_DP16, "--batch", "21")["decode"]["kv_fits"] is True
    assert plan_json(*V3_DP16, "--batch", "22")["decode"]["kv_fits"] is False
    out = plan_text(*V3_DP16, "--batch", "max")
    assert (
        "--batch max: 21 sequences of 4,096 positions per replica fit the KV cache: each takes 64 pages of 64, "
        "and 22 would take 1,408 of the 1,378 pages on a GPU" in " ".join(out.split())
    )
    # at 8,192 positions a sequence takes 128 pages: 1,378 // 128 = 10
    assert plan_json(*V3_DP16, "--batch", "max", "--context", "8192")["batch_max"]["batch"] == 10


def test_batch_max_counts_the_micro_batches_of_a_pipeline():
    # TP8 × PP2 at a 46.80 GiB pool: stage 0 holds 31 layers, 31 × 1,152 = 35,712 B per token, so
    # floor(50,251,117,363 ÷ (64 × 35,712)) = 21,986 pages; each stage holds 2 micro-batches of B
    # sequences of 64 pages: B = 21,986 // 128 = 171
    args = ("--config", K25, "--text-only", "--gpus", "16xH200", "--pp", "2", "--kv-memory", "46.80GiB")
    assert POOL // (64 * 31 * 1_152) == 21_986
    assert plan_json(*args, "--batch", "max")["batch_max"]["batch"] == 21_986 // 128 == 171


def test_batch_max_when_not_one_sequence_fits():
    fails_cleanly(
        invoke("plan", "--gpus", "8xH200", "--batch", "max"), "--batch max", "not one sequence of 4,096"
    )


# --- --compare --------------------------------------------------------------------------------------


def test_compare_puts_layouts_side_by_side():
    args = ("--config", K25, "--text-only", "--gpus", "8xH200", "--kv-memory", "46.80GiB")
    rows = {row["layout"]: row for row in plan_json(*args, "--compare", "tp8,dp8ep8,tp8pp2,tp3")["compare"]}
    # the same pool on every GPU: 715,072 tokens per GPU at TP8 and DP8 + EP8 (8 replicas: × 8 in all)
    assert (rows["tp8"]["tokens_per_gpu"], rows["tp8"]["tokens_total"]) == (715_072, 715_072)
    assert (rows["dp8ep8"]["tokens_per_gpu"], rows["dp8ep8"]["tokens_total"]) == (715_072, 8 * 715_072)
    assert rows["dp8ep8"]["parallel"]["label"] == "DP8 + EP8"
    # TP8 × PP2 is 16 GPUs; stage 0's 31 layers: 21,986 pages of 64 (above)
    assert (rows["tp8pp2"]["gpus"], rows["tp8pp2"]["tokens_per_gpu"]) == (16, 21_986 * 64)
    assert "does not divide the 64 attention heads" in rows["tp3"]["error"]
    out = plan_text(*args, "--compare", "tp8,dp8ep8,tp8pp2")
    lines = out.splitlines()
    assert lines[1].split() == [
        "Layout", "GPUs", "Weights/GPU", "KV", "pool/GPU", "Tokens/GPU", "Tokens", "in", "all", "Concurrency", "Verdict",
    ]  # fmt: skip
    assert lines[2].split()[:2] == ["tp8", "(TP8)"] and "715,072" in lines[2] and lines[2].endswith("fits")
    assert "5,720,576" in lines[3] and "1,407,104" in lines[4]


@pytest.mark.parametrize("text", ["tp8,xyz", "tp8tp4", "tp0", ","])
def test_compare_refuses_what_it_cannot_read(text):
    fails_cleanly(invoke("plan", "--gpus", "8xH200", "--compare", text), "--compare")


# --- nodes ------------------------------------------------------------------------------------------


def test_gpus_in_nodes():
    args = ("--config", V3, "--gpus", "2x8xH800", "--kv-memory", "20GiB")
    report = plan_json(*args)
    assert report["gpus"]["count"] == 16 and report["parallel"]["label"] == "TP16"
    answer = report["answer"]
    assert (answer["nodes"], answer["gpus_per_node"], answer["tp_spans_nodes"]) == (2, 8, True)
    out = plan_text(*args)
    assert out.startswith("deepseek-v3 on 16 × H800 (2 nodes × 8), TP16 (vLLM 0.22.0): fits\n")
    assert "TP16 spans 2 nodes of 8: its all-reduces cross the network between nodes" in " ".join(out.split())
    # TP8 × DP2 keeps each TP group inside a node
    assert plan_json(*args, "--tp", "8", "--dp", "2", "--ep", "16")["answer"]["tp_spans_nodes"] is False
    fails_cleanly(invoke("plan", "--gpus", "2x8xH900"), "unknown accelerator 'H900'")


# --- the alias table covers every option --------------------------------------------------------------


def test_every_deployment_option_has_a_plan_option():
    # a try line writes each setting back as an option: a field without one could not be written
    assert {item.name for item in fields(DeploymentOptions)} <= set(PLAN_FLAGS)


def test_the_new_modules_import_neither_rich_nor_torch_nor_the_hub():
    assert heavy_imports("kimicount.deploy.serve_command", "kimicount.deploy.answer") == []


def test_the_json_keeps_its_keys_and_adds_the_answers():
    report = plan_json("--config", V3, "--gpus", "16xH800", "--dp", "16", "--ep", "16")
    kept = {
        "model", "model_type", "gpus", "parallel", "gpu_memory_utilization", "usable_bytes", "estimated_inputs",
        "weights", "stages", "reserve", "kv_memory_bytes", "kv_cache", "fits", "short_by_bytes", "estimate",
        "min_gpus",
    }  # fmt: skip
    assert kept | {"answer", "try"} <= set(report)


def test_compare_says_what_it_leaves_out():
    result = invoke(
        "plan", "--config", K25, "--text-only", "--gpus", "8xH200", "--compare", "tp8", "--batch", "4"
    )
    assert result.exit_code == 0, result.output
    assert (
        result.stderr
        == "kimicount: warning: --batch has no effect with --compare (it compares the layouts' memory)\n"
    )


# --- the answer under SGLang's rule ------------------------------------------------------------------


def test_the_answer_under_sglang_names_its_rule_and_its_cap_on_running_requests():
    # DeepSeek-V3 on 16 × H20 at TP16, mem_fraction_static 0.93: 713,012 tokens per GPU (tests/test_sglang.py,
    # 0.086 % from the 712,400 SGLang's Kubernetes guide logs), pages of 1, so ⌊713,012 ÷ 163,840⌋ = 4
    # whole sequences; --max-running-requests 2 caps them below that
    args = ("--config", V3, "--gpus", "16xH20", "--engine", "sglang", "--mem-fraction-static", "0.93")
    out = plan_text(*args, "--max-running-requests", "2").splitlines()
    assert out[0] == "deepseek-v3 on 16 × H20, TP16 (SGLang 0.5.8.post1): fits"
    assert out[1] == "KV cache: 713,012 tokens per GPU; 70,272 B per token"
    assert (
        out[3] == "Limited by --max-running-requests 2: the KV pool would hold 4 such sequences per replica"
    )
    answer = plan_json(*args, "--max-running-requests", "2")["answer"]
    assert (answer["limited_by"], answer["max_num_seqs"]) == ("max_running_requests", 2)
    # without the cap, SGLang's default of int(713,012 ÷ 163,840 × 512) = 2,228 leaves the pool the limit,
    # which SGLang sizes against CUDA's whole total and keeps back its rule's share
    plain = plan_text(*args).splitlines()
    assert plain[3].startswith(
        "Limited by the KV pool: 46.7 GiB per GPU = 95 GiB CUDA total − 40.3 GiB weights"
    )
    assert plain[3].endswith("kept back")
    assert plan_json(*args)["answer"]["max_num_seqs"] == 2_228
