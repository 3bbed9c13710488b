"""`kimicount plan … -- SERVE COMMAND`: a vLLM or SGLang serve command read as a plan.

Figures from outside the code:
- vLLM's published Kimi-K2-Thinking run on 8 × H200 at TP8 (vllm-project/recipes, moonshotai/Kimi-K2-Think.md,
  startup log): "Available KV cache memory: 46.80 GiB", "GPU KV cache size: 715,072 tokens", "Maximum
  concurrency for 262,144 tokens per request: 2.73x".
- The engines' flag names and aliases: vLLM's EngineArgs.add_cli_args (vllm/engine/arg_utils.py):
  --tensor-parallel-size/-tp, --pipeline-parallel-size/-pp, --data-parallel-size/-dp,
  --decode-context-parallel-size/-dcp, --enable-expert-parallel, --kv-cache-dtype, --kv-cache-memory-bytes,
  --max-num-seqs, --max-num-batched-tokens; `vllm serve` takes the model first. SGLang's
  ServerArgs.add_cli_args (python/sglang/srt/server_args.py): --model-path, --tensor-parallel-size/--tp-size
  (and --tp, an argparse prefix), --data-parallel-size/--dp-size, --expert-parallel-size/--ep-size,
  --enable-dp-attention, --context-length, --mem-fraction-static, --page-size, --max-running-requests.
- K2-Thinking's config: Kimi K2's with its published quantization_config (INT4 groups of 32,
  ../shared/data/configs/kimi-k2-thinking.quantization_config.json) and a 262,144-token context.
"""

from __future__ import annotations

import json
from dataclasses import fields
from fractions import Fraction

import pytest

from kimicount.deploy.plan import DeploymentOptions
from kimicount.deploy.serve_command import PLAN_FLAGS, parse_serve_command
from kimicount.errors import UsageError

from .helpers import KIMI_K2, ROOT, fails_cleanly, invoke

#: K2-Thinking's published quantization_config (moonshotai/Kimi-K2-Thinking; ../shared/data/configs/, whose
#: PROVENANCE.md says where it was read), copied into fixtures/.
QUANTIZATION = ROOT / "fixtures" / "kimi-k2-thinking.quantization_config.json"
K25 = str(ROOT / "fixtures" / "kimi-k2.5")


@pytest.fixture
def k2_thinking(tmp_path) -> str:
    """A folder holding K2-Thinking's config.json, as `vllm serve /models/Kimi-K2-Thinking` would read."""
    config = json.loads((KIMI_K2 / "config.json").read_text())
    config["quantization_config"] = json.loads(QUANTIZATION.read_text())
    config["max_position_embeddings"] = 262_144
    folder = tmp_path / "Kimi-K2-Thinking"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def plan_json(*args: str) -> dict:
    result = invoke("plan", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- the published run, from the command alone plus --kv-memory ------------------------------------


def test_the_serve_command_reproduces_vllms_published_kimi_k2_thinking_run(k2_thinking):
    command = [
        "vllm", "serve", k2_thinking, "--tensor-parallel-size", "8", "--max-model-len", "262144",
        "--gpu-memory-utilization", "0.95", "--trust-remote-code",
    ]  # fmt: skip
    report = plan_json("--gpus", "8xH200", "--kv-memory", "46.80GiB", "--", *command)
    # 46.80 GiB = 50,251,117,363 B over 64-token pages of 70,272 B (61 layers × 1,152 B): 11,173 pages
    assert report["parallel"]["label"] == "TP8"
    assert report["kv_cache"]["tokens_per_gpu"] == 11_173 * 64 == 715_072
    assert report["kv_cache"]["max_model_len"] == 262_144
    assert f"{report['kv_cache']['max_concurrency']:.2f}" == "2.73"  # 11,173 ÷ 4,096
    assert report["gpu_memory_utilization"] == 0.95
    assert report["serve_command"]["engine"] == "vllm"
    assert report["serve_command"]["unmodelled"] == ["--trust-remote-code"]
    out = invoke("plan", "--gpus", "8xH200", "--kv-memory", "46.80GiB", "--", *command)
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[:3] == [
        "Kimi-K2-Thinking on 8 × H200, TP8 (vLLM 0.22.0): fits",
        "KV cache: 715,072 tokens per GPU; 70,272 B per token",
        "Concurrency at 262,144 tokens (17.2 GiB each): 2.73× (2 whole sequences per replica)",
    ]
    assert (
        out.stderr == "kimicount: warning: the serve command's --trust-remote-code does not change memory\n"
    )


def test_the_api_server_module_and_flag_value_forms_read_the_same(k2_thinking):
    # vLLM's FlexibleArgumentParser reads --flag=value and --flag_name; the api_server takes --model
    forms = [
        ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", k2_thinking, "-tp", "8"],
        [
            "python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            f"--model={k2_thinking}",
            "--tensor_parallel_size=8",
        ],
        ["CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "vllm", "serve", k2_thinking, "--tensor-parallel-size=8"],
    ]
    for command in forms:
        report = plan_json("--gpus", "8xH200", "--kv-memory", "46.80GiB", "--", *command)
        assert (report["parallel"]["label"], report["kv_cache"]["tokens_per_gpu"]) == ("TP8", 715_072), (
            command
        )


# --- every flag the plan reads, in each of its spellings -------------------------------------------

VLLM = ["vllm", "serve", "m"]
SGLANG = ["python", "-m", "sglang.launch_server", "--model-path", "m"]


@pytest.mark.parametrize(
    "words, expected",
    [
        (VLLM + ["--tensor-parallel-size", "8"], {"tp": 8}),
        (VLLM + ["-tp", "8"], {"tp": 8}),
        (VLLM + ["-tp=8"], {"tp": 8}),
        (VLLM + ["--pipeline-parallel-size", "2", "-tp", "8"], {"pp": 2, "tp": 8}),
        (VLLM + ["-pp", "2"], {"pp": 2, "tp": 1}),  # vLLM's TP defaults to 1
        (VLLM + ["--data-parallel-size", "8", "--enable-expert-parallel"], {"dp": 8, "ep": 8, "tp": 1}),
        (VLLM + ["-dp", "4", "-tp", "2", "--enable-expert-parallel"], {"dp": 4, "tp": 2, "ep": 8}),
        (VLLM + ["-dp", "8", "--enable-expert-parallel", "--no-enable-expert-parallel"], None),  # which one?
        (VLLM + ["-tp", "8", "--decode-context-parallel-size", "8"], {"dcp": 8}),
        (VLLM + ["-tp", "8", "-dcp", "4"], {"dcp": 4}),
        (VLLM + ["--gpu-memory-utilization", "0.95"], {"utilization": Fraction(19, 20)}),
        (VLLM + ["--kv-cache-memory-bytes", "50251117363"], {"kv_memory": 50_251_117_363}),
        (VLLM + ["--kv-cache-dtype", "fp8_e4m3"], {"kv_dtype": "fp8"}),
        (VLLM + ["--kv-cache-dtype", "fp8"], {"kv_dtype": "fp8"}),
        (VLLM + ["--kv-cache-dtype", "auto"], {"kv_dtype": None}),
        (VLLM + ["--block-size", "32"], {"block_size": 32}),
        (VLLM + ["--max-model-len", "131072"], {"max_model_len": 131_072}),
        (VLLM + ["--max-num-batched-tokens", "16384"], {"max_batched_tokens": 16_384}),
        (VLLM + ["--max-num-seqs", "256"], {"max_num_seqs": 256}),
        (
            VLLM + ["--speculative-config", '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'],
            {"mtp": True},
        ),
        (VLLM + ["--language-model-only"], {"vision": False}),
        (SGLANG + ["--tp", "16"], {"tp": 16, "engine": "sglang"}),
        (SGLANG + ["--tp-size", "16"], {"tp": 16}),
        (SGLANG + ["--tensor-parallel-size=16"], {"tp": 16}),
        (SGLANG + ["--pp-size", "2", "--tp", "8"], {"pp": 2, "tp": 8}),
        # DP attention: SGLang's --tp is all 16 GPUs, in 8 attention groups; EP over all 16
        (
            SGLANG + ["--tp", "16", "--dp", "8", "--enable-dp-attention", "--ep-size", "16"],
            {"tp": 16, "dp": 8, "ep": 16, "dp_attention": True},
        ),
        (SGLANG + ["--tp", "16", "--data-parallel-size", "8", "--enable-dp-attention"], {"tp": 16, "dp": 8}),
        (SGLANG + ["--tp", "8", "--expert-parallel-size", "8"], {"ep": 8}),
        (SGLANG + ["--context-length", "131072"], {"max_model_len": 131_072}),
        (SGLANG + ["--mem-fraction-static", "0.93"], {"mem_fraction_static": Fraction(93, 100)}),
        (SGLANG + ["--page-size", "64"], {"page_size": 64}),
        (SGLANG + ["--kv-cache-dtype", "fp8_e4m3"], {"kv_dtype": "fp8"}),
        (SGLANG + ["--max-running-requests", "128"], {"max_running_requests": 128}),
        (SGLANG + ["--ep-num-redundant-experts", "32"], {"redundant_experts": 32}),
        (SGLANG + ["--speculative-algorithm", "NEXTN"], {"mtp": True}),
        (["sglang", "serve", "--model-path", "m", "--tp", "8"], {"tp": 8, "engine": "sglang"}),
        (["python3", "-m", "sglang.launch_server", "--model", "m", "--tp", "8"], {"tp": 8}),
    ],
)
def test_each_flag_and_alias(words, expected):
    if expected is None:
        with pytest.raises(UsageError, match="which one"):
            parse_serve_command(words)
        return
    command = parse_serve_command(words)
    assert command.model == "m"
    for name, value in expected.items():
        assert command.settings[name] == value, name


def test_sglang_chunked_prefill_is_named_not_read_as_vllms_batched_tokens():
    command = parse_serve_command(SGLANG + ["--chunked-prefill-size", "8192"])
    assert "max_batched_tokens" not in command.settings
    assert command.memory_unmodelled == ("--chunked-prefill-size 8192",)


def test_sglang_dp_without_dp_attention_plans_one_copy():
    command = parse_serve_command(SGLANG + ["--tp", "8", "--dp", "2"])
    assert (command.settings["tp"], command.settings["dp"]) == (8, 1)
    assert command.memory_unmodelled == (
        "--dp 2 without --enable-dp-attention (2 independent copies; planned: one)",
    )


def test_nnodes_gives_the_nodes():
    command = parse_serve_command(SGLANG + ["--tp", "16", "--nnodes", "2", "--node-rank", "0"])
    assert command.nodes == 2 and command.unmodelled == ("--node-rank 0",)


# --- the same names as plan options ----------------------------------------------------------------


@pytest.mark.parametrize(
    "args, label",
    [
        (["--gpus", "8xH200", "--tensor-parallel-size", "8"], "TP8"),
        (["--gpus", "8xH200", "--tp-size", "8"], "TP8"),
        (["--gpus", "8xH200", "-tp", "8"], "TP8"),
        (["--gpus", "16xH200", "--pipeline-parallel-size", "2", "--tp", "8"], "TP8 × PP2"),
        (["--gpus", "16xH200", "--pp-size", "2"], "TP8 × PP2"),
        (["--gpus", "8xH200", "--data-parallel-size", "8", "--enable-expert-parallel"], "DP8 + EP8"),
        (["--gpus", "8xH200", "--dp-size", "8", "--ep-size", "8"], "DP8 + EP8"),
        (["--gpus", "8xH200", "-dp", "8", "--expert-parallel-size", "8"], "DP8 + EP8"),
        (["--gpus", "8xH200", "--decode-context-parallel-size", "8"], "TP8 + DCP8"),
        (["--gpus", "8xH200", "-dcp", "8"], "TP8 + DCP8"),
    ],
)
def test_engine_names_work_as_plan_options(args, label):
    assert (
        plan_json("--config", K25, "--text-only", "--kv-memory", "46.80GiB", *args)["parallel"]["label"]
        == label
    )


def test_engine_names_of_memory_options_work_as_plan_options():
    base = ("--config", K25, "--text-only", "--gpus", "8xH200")
    kv = plan_json(*base, "--kv-cache-memory-bytes", "50251117363", "--kv-cache-dtype", "fp8_e4m3")
    # 50,251,117,363 B (46.80 GiB) over pages of 64 × 35,136 B (fp8: 576 B per layer × 61) = 22,346
    assert (kv["kv_cache"]["dtype"], kv["kv_cache"]["tokens_per_gpu"]) == ("fp8", 22_346 * 64)
    assert (
        plan_json(*base, "--context-length", "131072", "--kv-memory", "1GiB")["kv_cache"]["max_model_len"]
        == 131_072
    )
    reserve = plan_json(*base, "--max-num-batched-tokens", "2048", "--max-num-seqs", "256")["reserve"][
        "terms"
    ]
    # the sampler's 256 rows at 38 B per vocabulary entry (engines/reserve.py, the sglang branch's estimate)
    assert {t["name"]: t["bytes"] for t in reserve}["sampler"] == 256 * 163_840 * 38
    assert plan_json("--model", K25, "--gpus", "8xH200", "--text-only")["model"] == "kimi-k2.5"
    assert plan_json("--model-path", K25, "--gpus", "8xH200", "--text-only")["model"] == "kimi-k2.5"


def test_the_alias_table_is_where_the_plan_options_come_from():
    import typer.main

    from kimicount.cli.plan import plan_command  # noqa: F401  (registers the command)
    from kimicount.cli.root import app

    command = typer.main.get_command(app).commands["plan"]  # type: ignore[attr-defined]
    declared = {opt for param in command.params for opt in param.opts}
    # every setting the plan reads answers to every name the table gives it
    settings = {item.name for item in fields(DeploymentOptions)} | {"model", "expert_parallel"}
    for setting, names in PLAN_FLAGS.items():
        if setting in settings:
            assert set(names) <= declared, setting


# --- flags named, flags refused ----------------------------------------------------------------------


def test_flags_it_does_not_model_are_named_in_one_line(k2_thinking):
    result = invoke(
        "plan", "--gpus", "8xH200", "--kv-memory", "46.80GiB", "--",
        "vllm", "serve", k2_thinking, "-tp", "8", "--enforce-eager", "--quantization", "fp8",
        "--port", "8000", "--served-model-name", "kimi", "k2", "--trust-remote-code",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        (
            "kimicount: warning: the serve command's --enforce-eager, --quantization fp8 change memory in ways the "
            "plan does not model; --port 8000, --served-model-name kimi k2, --trust-remote-code do not change memory"
        )
    ]


@pytest.mark.parametrize(
    "words, needles",
    [
        (
            ["vllm", "serve", "m", "--tensor-parallel-size", "eight"],
            ["--tensor-parallel-size 'eight'", "whole number"],
        ),
        (["vllm", "serve", "m", "-tp"], ["-tp: expected a value"]),
        (["vllm", "serve", "m", "--frobnicate", "3"], ["--frobnicate", "does not know", "--frobnicate=3"]),
        (["vllm", "serve", "m", "--tp", "8"], ["--tp", "does not know"]),  # vLLM spells it -tp
        (
            ["vllm", "serve", "m", "--gpu-memory-utilization", "1.5"],
            ["--gpu-memory-utilization 1.5", "(0, 1]"],
        ),
        (["vllm", "serve", "m", "--kv-cache-dtype", "int3"], ["--kv-cache-dtype 'int3'", "cache dtype"]),
        (["vllm", "serve", "m", "--speculative-config", "{mtp"], ["--speculative-config", "JSON"]),
        (
            ["vllm", "serve", "m", "--enable-expert-parallel=yes"],
            ["--enable-expert-parallel", "takes no value"],
        ),
        (["vllm", "serve", "m", "stray"], ["'stray'"]),
        (["vllm", "serve", "m", "--model", "n"], ["two models", "m", "n"]),
        (["docker", "run", "vllm/vllm-openai"], ["names no model", "vllm serve"]),  # the image's launcher
        (["docker", "run", "-p", "8000:8000", "nginx"], ["docker run without an engine's image"]),
        (["python", "-m", "http.server"], ["python -m http.server", "sglang.launch_server"]),
        (SGLANG + ["--tp", "16", "--dp", "3", "--enable-dp-attention"], ["--dp 3", "divide --tp-size"]),
    ],
)
def test_what_it_cannot_read_is_refused_in_one_line(words, needles):
    fails_cleanly(invoke("plan", "--gpus", "8xH200", "--", *words), *needles)


def test_plan_options_and_the_serve_command_must_agree(k2_thinking):
    fails_cleanly(
        invoke("plan", "--gpus", "8xH200", "--tp", "4", "--", "vllm", "serve", k2_thinking, "-tp", "8"),
        "--tp and the serve command's -tp 8 disagree",
    )
    fails_cleanly(
        invoke("plan", "--gpus", "8xH200", "moonshotai/Kimi-K2-Instruct", "vllm", "serve", k2_thinking),
        "expected one model",
    )
    fails_cleanly(
        invoke("plan", "--config", K25, "--gpus", "8xH200", "--", "vllm", "serve", k2_thinking, "-tp", "8"),
        "name the model once",
    )
    # agreeing is fine: the command's layout and the option say the same
    assert plan_json(
        "--gpus", "8xH200", "--tp", "8", "--kv-memory", "1GiB", "--", "vllm", "serve", k2_thinking, "-tp", "8"
    )


def test_a_serve_command_without_tp_runs_on_one_gpu(k2_thinking):
    # vLLM's TP defaults to 1: on 8 GPUs the command says 1
    fails_cleanly(
        invoke("plan", "--gpus", "8xH200", "--", "vllm", "serve", k2_thinking), "--tp 1", "--gpus says 8"
    )


def test_an_sglang_command_plans_its_layout_by_sglangs_rule():
    # --tp 16 --dp 8 --enable-dp-attention: 8 attention groups of 16 ÷ 8 = 2 GPUs; --ep-size 16 over all 16
    report = plan_json(
        "--gpus", "2x8xH200", "--kv-memory", "20GiB", "--",
        "python", "-m", "sglang.launch_server", "--model-path", str(ROOT / "fixtures" / "deepseek-v3"),
        "--tp", "16", "--dp", "8", "--enable-dp-attention", "--ep-size", "16", "--nnodes", "2",
        "--context-length", "65536", "--trust-remote-code",
    )  # fmt: skip
    parallel = report["parallel"]  # 8 attention groups of 2 GPUs
    assert (parallel["tp"] * parallel["dp"], parallel["dp"], parallel["ep"], parallel["gpus"]) == (
        16,
        8,
        16,
        16,
    )
    assert report["kv_cache"]["max_model_len"] == 65_536
    assert report["serve_command"]["engine"] == "sglang"
    assert (report["engine"], report["parallel"]["dp_attention"]) == ("sglang", "sglang")  # SGLang's rule
    assert report["serve_command"]["flags"]["tp"] == "--tp 16"
    assert (report["answer"]["nodes"], report["answer"]["tp_spans_nodes"]) == (2, False)
    # --nnodes must agree with --gpus
    fails_cleanly(
        invoke("plan", "--gpus", "4x4xH200", "--", *SGLANG, "--tp", "16", "--nnodes", "2"),
        "--gpus 4x4xH200 is 4 node(s)",
        "--nnodes says 2",
    )


def test_the_model_may_follow_the_flags_and_must_be_there(k2_thinking):
    # argparse takes vllm serve's positional model anywhere among the flags
    assert parse_serve_command(["vllm", "serve", "-tp", "8", "m"]).model == "m"
    fails_cleanly(
        invoke("plan", "--gpus", "8xH200", "--", "python", "-m", "sglang.launch_server", "--tp", "8"),
        "the serve command names no model",
        "--model-path",
    )


def test_secrets_are_named_without_their_values():
    command = parse_serve_command(
        VLLM + ["--api-key", "sk-secret", "--hf-token", "hf_secret", "--some-new-flag=also-secret"]
    )
    assert command.unmodelled == ("--api-key …", "--hf-token …", "--some-new-flag")


# --- the issue's commands, as typed ---------------------------------------------------------------------


def test_the_issues_command_with_vllms_256k_reproduces_the_published_run(k2_thinking):
    # The issue's command is `plan --gpus 8xH200 --kv-memory 46.80GiB -- vllm serve moonshotai/Kimi-K2-Thinking
    # --tensor-parallel-size 8 --max-model-len 256K --gpu-memory-utilization 0.95`; here the model is
    # K2-Thinking's config folder, as `vllm serve /models/Kimi-K2-Thinking` takes it (the repo id: below). vLLM reads 256K as 256 × 1,024 = 262,144 tokens.
    command = [
        "vllm", "serve", k2_thinking, "--tensor-parallel-size", "8", "--max-model-len", "256K",
        "--gpu-memory-utilization", "0.95",
    ]  # fmt: skip
    result = invoke("plan", "--json", "--gpus", "8xH200", "--kv-memory", "46.80GiB", "--", *command)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # 256K is the binary suffix: nothing to warn about
    report = json.loads(result.stdout)
    # 46.80 GiB = 50,251,117,363 B over 64-token pages of 70,272 B (61 layers × 1,152 B): 11,173 pages
    assert report["kv_cache"]["tokens_per_gpu"] == 11_173 * 64 == 715_072
    assert report["kv_cache"]["max_model_len"] == 256 * 1_024 == 262_144
    assert f"{report['kv_cache']['max_concurrency']:.2f}" == "2.73"  # 11,173 ÷ ceil(262,144 ÷ 64)
    assert report["answer"]["max_concurrency"] == report["kv_cache"]["max_concurrency"]
    out = invoke("plan", "--gpus", "8xH200", "--kv-memory", "46.80GiB", "--", *command).stdout
    assert out.splitlines()[1:3] == [
        "KV cache: 715,072 tokens per GPU; 70,272 B per token",
        "Concurrency at 262,144 tokens (17.2 GiB each): 2.73× (2 whole sequences per replica)",
    ]


def test_the_issues_command_word_for_word_offline():
    # The same run named as the issue types it: moonshotai/Kimi-K2-Thinking is a bundled model, so the
    # command needs no Hub and says in one stderr line which config it used.
    result = invoke(
        "plan", "--json", "--gpus", "8xH200", "--kv-memory", "46.80GiB", "--",
        "vllm", "serve", "moonshotai/Kimi-K2-Thinking", "--tensor-parallel-size", "8",
        "--max-model-len", "256K", "--gpu-memory-utilization", "0.95",
        env={"HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == "moonshotai/Kimi-K2-Thinking"
    assert report["kv_cache"]["tokens_per_gpu"] == 11_173 * 64 == 715_072
    assert f"{report['kv_cache']['max_concurrency']:.2f}" == "2.73"
    assert result.stderr.startswith("kimicount: moonshotai/Kimi-K2-Thinking: the bundled config")
    assert result.stderr.count("\n") == 1


def test_a_lower_case_suffix_in_a_vllm_command_is_read_as_vllm_does_and_said(k2_thinking):
    # vLLM reads 256k as 256,000 (decimal) and 256K as 262,144: the serve command's count says which
    result = invoke(
        "plan", "--json", "--gpus", "8xH200", "--kv-memory", "46.80GiB", "--",
        "vllm", "serve", k2_thinking, "-tp", "8", "--max-model-len", "256k",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_cache"]["max_model_len"] == 256_000
    assert result.stderr == (
        "kimicount: warning: the serve command's --max-model-len 256k = 256,000 tokens, as vLLM reads it; "
        "256K is 262,144\n"
    )


def test_a_pasted_sglang_command_is_planned_by_sglangs_rule_within_one_percent_of_its_log():
    # SGLang's Kubernetes guide: DeepSeek-R1 (DeepSeek-V3's shapes) on 2 nodes × 8 × H20 with
    # `python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 16 --mem-fraction-static 0.93
    # --context-length 163840` logs max_total_num_tokens=712400. The repo id does not resolve offline, so
    # the model path is DeepSeek-V3's config folder (fixtures/deepseek-v3), as SGLang takes a local path.
    args = (
        "--gpus", "2x8xH20", "--",
        "python", "-m", "sglang.launch_server", "--model-path", str(ROOT / "fixtures" / "deepseek-v3"),
        "--tp", "16", "--mem-fraction-static", "0.93", "--context-length", "163840", "--nnodes", "2",
    )  # fmt: skip
    report = plan_json(*args)
    assert report["engine"] == "sglang" and report["serve_command"]["engine"] == "sglang"
    sglang = report["sglang"]  # SGLang's rule, not vLLM's: its fraction, page 1, its printed figures
    assert (sglang["page_size"], sglang["context_len"]) == (1, 163_840)
    assert report["kv_cache"]["bytes_per_token_per_gpu"] == (512 + 64) * 2 * 61 == 70_272
    assert abs(sglang["max_total_num_tokens"] - 712_400) / 712_400 < 0.01
    # the same plan as the plan options give it
    options = plan_json(
        "--config", str(ROOT / "fixtures" / "deepseek-v3"), "--gpus", "2x8xH20", "--engine", "sglang",
        "--tp", "16", "--mem-fraction-static", "0.93", "--max-model-len", "163840",
    )  # fmt: skip
    assert options["sglang"]["max_total_num_tokens"] == sglang["max_total_num_tokens"]
    out = invoke("plan", *args).stdout
    assert out.startswith("deepseek-v3 on 16 × H20 (2 nodes × 8), TP16 (SGLang 0.5.8.post1): fits\n")
    # vLLM's own options refuse the SGLang command's engine, naming both
    fails_cleanly(invoke("plan", "--engine", "vllm", *args), "--engine and the serve command's")


def test_a_serve_command_with_a_local_run_is_refused_in_one_line():
    # a local llama.cpp run (--quant, --gguf, --engine llama.cpp …) plans no server: its model is named
    for local in (["--quant", "Q2_K"], ["--engine", "llama.cpp"]):
        fails_cleanly(
            invoke("plan", "--gpus", "2xRTX3090", *local, "--", "vllm", "serve", K25, "-tp", "2"),
            "a serve command after -- (vllm serve) plans a vLLM or SGLang server, not a local llama.cpp run",
        )


# --- hostile serve commands (issue 26) -----------------------------------------------------------------


def test_a_speculative_config_nested_60000_deep_is_refused_in_one_line():
    # json.loads recursed through it (RecursionError, exit 3); now its depth is counted first
    deep = "[" * 60_000 + "]" * 60_000
    for words in (VLLM + ["--speculative-config", deep], VLLM + [f"--speculative-config={deep}"]):
        line = fails_cleanly(
            invoke("plan", "--gpus", "8xH200", "--", *words),
            "--speculative-config",
            "not nested deeper than 32",
        )
        assert "(120,000 characters)" in line and len(line) < 300


@pytest.mark.parametrize(
    "words, choices",
    [
        # vLLM's CacheDType (vllm/config/cache.py): auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc,
        # fp8_ds_mla
        (VLLM, "auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla"),
        # SGLang's add_cli_args: choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]
        (SGLANG, "auto, fp8_e5m2, fp8_e4m3, bf16, bfloat16"),
    ],
)
def test_a_kv_cache_dtype_outside_the_engines_choices_is_refused(words, choices):
    # it was read as fp8 for starting with "fp8"
    line = fails_cleanly(
        invoke("plan", "--gpus", "8xH200", "--", *words, "--kv-cache-dtype", "fp8xyz"), "'fp8xyz'"
    )
    assert line.endswith(f"(its choices: {choices})")
    # a choice the engine has and kimicount does not model is named as such
    unmodelled = "nvfp4" if words is VLLM else "fp4_e2m1"
    fails_cleanly(
        invoke("plan", "--gpus", "8xH200", "--", *words, "--kv-cache-dtype", unmodelled), "does not model"
    )


def test_the_plans_own_kv_dtype_refuses_what_no_engine_takes():
    fails_cleanly(invoke("plan", "--gpus", "8xH200", "--kv-dtype", "fp8xyz"), "--kv-dtype 'fp8xyz'")


@pytest.mark.parametrize(
    "words",
    [
        VLLM + ["-tp", "9" * 131_072],  # a count
        VLLM + ["--max-model-len", "x" * 131_072],  # a count's value, not a number
        VLLM + ["--gpu-memory-utilization", "0." + "5" * 131_070],  # a fraction
        VLLM + ["--kv-cache-dtype", "f" * 131_072],  # a choice
        VLLM + ["--" + "x" * 131_070, "1"],  # a flag name
        VLLM + ["s" * 131_072],  # a stray word
        ["vllm", "serve", "m" * 131_072, "--model", "n"],  # two models
        ["python", "-m", "sglang." + "x" * 131_065],  # a launcher
    ],
)
def test_128_kib_words_are_quoted_as_a_bounded_excerpt_and_their_length(words):
    # each was echoed whole: 128 KiB on one line of stderr
    line = fails_cleanly(invoke("plan", "--gpus", "8xH200", "--", *words))
    assert len(line) < 600
    assert " characters)" in line


def test_a_128_kib_value_of_a_flag_it_does_not_model_is_warned_of_in_bounded_words(k2_thinking):
    result = invoke(
        "plan",
        "--gpus",
        "8xH200",
        "--",
        "vllm",
        "serve",
        k2_thinking,
        "-tp",
        "8",
        "--served-model-name",
        "y" * 131_072,
    )
    assert result.exit_code == 0, result.output
    assert len(result.stderr) < 400 and "(131,072 characters)" in result.stderr
