"""Known models by name, offline: the bundled configs, where each came from, how names resolve, and
what happens with --revision, an unreachable Hub and an unknown repo.

Expected totals come from outside the code: DESIGN.md (Kimi K2), the GGUF tensor listings of
Kimi-K2-Thinking and DeepSeek-V3.1-Terminus (docs of the shared reference data), published figures
(tests/test_family.py) and a hand count for Moonlight written out below."""

from __future__ import annotations

import json
import socket

import pytest

from kimicount.models import MODELS, known_model

from .fakehub import FakeHub
from .helpers import FIXTURES, KIMI_K2, imported_modules, invoke, run_kimicount

K2_TOTAL, K2_ACTIVATED = 1_026_408_232_448, 32_861_500_928  # DESIGN.md
V3_TOTAL, V3_ACTIVATED = 671_026_419_200, 37_552_297_472  # the V3.1-Terminus GGUF listing; published 37B

# Moonlight-16B-A3B by hand (hidden 2,048, vocab 163,840, 27 layers of which 1 dense, 16 heads of
# 128 + 64 query/key features and 128 value features, no query compression, kv_lora_rank 512,
# 64 routed experts of 1,408 plus 2 shared, router with a correction bias):
_ATTENTION = 2048 * 16 * 192 + 2048 * (512 + 64) + 512 + 512 * 16 * 256 + 16 * 128 * 2048  # 13,763,072
_EXPERT = 3 * 2048 * 1408  # 8,650,752
_MOE = 64 * _EXPERT + 2 * _EXPERT + 64 * 2048 + 64  # 571,080,768
MOONLIGHT_TOTAL = (
    (_ATTENTION + 2 * 2048 + 3 * 2048 * 11264)  # layer 0, dense
    + 26 * (_ATTENTION + 2 * 2048 + _MOE)
    + 2 * 163840 * 2048  # embedding and head
    + 2048  # final norm
)
assert MOONLIGHT_TOTAL == 15_960_110_208


def _offline() -> dict[str, str]:
    """An environment in which the Hub cannot be reached at all."""
    return {"HF_HUB_OFFLINE": "1", "HF_HOME": "/nonexistent/kimicount-test-hf"}


@pytest.mark.parametrize(
    "name, total",
    [
        ("moonshotai/Kimi-K2-Instruct", K2_TOTAL),
        ("MOONSHOTAI/kimi-k2-instruct", K2_TOTAL),  # repo ids in any case
        ("kimi-k2-instruct-0905", K2_TOTAL),
        ("k2-thinking", K2_TOTAL),  # the K2-Thinking GGUF listing: 1,026,408,232,448 elements
        ("kimi-k2.5", K2_TOTAL),
        ("deepseek-v3", V3_TOTAL),
        ("deepseek-ai/DeepSeek-R1", V3_TOTAL),
        ("DeepSeek-V3.1", V3_TOTAL),  # the name without its org
        ("deepseek-v2-lite", 15_706_484_224),  # published 15.7B (tests/test_family.py)
        ("moonlight", MOONLIGHT_TOTAL),
    ],
)
def test_known_models_by_name_need_no_hub(name, total):
    result = invoke("params", name, "--json", env=_offline())
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["total"] == total


def test_the_bundled_config_is_said_in_one_line():
    result = run_kimicount("params", "moonshotai/Kimi-K2-Thinking", "--json", env=_offline())
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["model"] == "moonshotai/Kimi-K2-Thinking"
    assert result.stderr == (
        "kimicount: moonshotai/Kimi-K2-Thinking: the bundled config (derived; `kimicount models` says "
        "where it is from); --revision REV reads the Hub's\n"
    )


def test_a_short_name_asks_for_the_bundled_config_and_is_not_told_so():
    # issue 27: the note came on every run; a short name is no repo id, so no Hub's config was expected
    for args in (("params", "deepseek-v3", "--json"), ("show", "k2-thinking", "router", "--json")):
        result = run_kimicount(*args, env=_offline())
        assert result.returncode == 0 and result.stderr == "", (args, result.stderr)


def test_every_command_that_takes_a_model_takes_a_name():
    for args in (
        ("kv-cache", "deepseek-v3", "--tokens", "1", "--layout", "latent", "--json"),
        ("plan", "deepseek-v3", "--gpus", "8xH200", "--json"),
        ("flops", "deepseek-v3", "--json"),
    ):
        result = invoke(*args, env=_offline())
        assert result.exit_code == 0, (args, result.output)
        assert json.loads(result.stdout)["model"] == "deepseek-ai/DeepSeek-V3", args
    # the latent cache of DeepSeek-V3: (512 + 64) features × 2 bytes × 61 layers = 70,272 B per token
    kv = json.loads(invoke("kv-cache", "v3", "--tokens", "1", "--layout", "latent", "--json").stdout)
    assert kv["layouts"][0]["bytes_per_token"] == (512 + 64) * 2 * 61


def test_a_name_where_a_config_file_goes():
    result = invoke("params", "--config", "deepseek-v3", "--json", env=_offline())
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["total"] == V3_TOTAL


def test_a_revision_reads_the_hub(httpserver, tmp_path):
    # The fake Hub serves DeepSeek-V3's config under Kimi-K2-Thinking's name: the count says which was read.
    fake = FakeHub()
    fake.add_repo(
        "moonshotai/Kimi-K2-Thinking",
        {"config.json": (FIXTURES / "deepseek-v3" / "config.json").read_bytes()},
    )
    env = {"HF_ENDPOINT": fake.install(httpserver), "HF_HOME": str(tmp_path / "hf")}
    commit = fake.repos["moonshotai/Kimi-K2-Thinking"].commit
    result = run_kimicount("params", "k2-thinking", "--revision", commit, "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["total"] == V3_TOTAL
    assert ("GET", f"/moonshotai/Kimi-K2-Thinking/resolve/{commit}/config.json", None) in fake.requests
    missing = run_kimicount("params", "k2-thinking", "--revision", "v9", env=env)
    assert missing.returncode == 2 and "revision 'v9' not found" in missing.stderr  # no fallback for that


def test_a_revision_with_the_hub_unreachable_falls_back_with_a_warning(tmp_path):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(tmp_path / "hf")}
    result = run_kimicount("params", "deepseek-v3", "--revision", "abc", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["total"] == V3_TOTAL
    assert result.stderr == (
        f"kimicount: warning: deepseek-ai/DeepSeek-V3@abc: cannot reach http://127.0.0.1:{port}: "
        "connection refused; using the bundled config of deepseek-ai/DeepSeek-V3 instead of revision abc\n"
    )


def test_an_unknown_repo_offline_suggests_config():
    result = run_kimicount("params", "someone/Kimi-K2-Pruned", env=_offline())
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "HF_HUB_OFFLINE" in result.stderr
    assert result.stderr.rstrip().endswith("give its config.json with --config PATH")


@pytest.mark.parametrize(
    "args, hint",
    [
        (("verify", "/some/dir"), "give it as --path /some/dir"),
        (("verify", "--repo", "./k2"), "give it as --path ./k2"),
        (("params", "/some/dir"), "give it as --config /some/dir"),
        (("kv-cache", "~/models/k2/config.json"), "give it as --config ~/models/k2/config.json"),
    ],
)
def test_a_folder_where_a_repo_id_goes_suggests_the_option(args, hint):
    result = invoke(*args, env=_offline())
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "not a valid repo id" not in line
    assert line.endswith(f"a folder, not a Hub repo id (ORG/NAME): {hint}"), line


# --- the bundled data: what each config is, as its entry says -----------------------------------------


def test_raw_configs_are_the_real_files():
    # the checkout's fixtures hold the raw files of these two (read from the public inspection reports)
    assert known_model("kimi-k2-instruct").config() == json.loads((KIMI_K2 / "config.json").read_text())
    assert known_model("kimi-k2.5").config() == json.loads(
        (FIXTURES / "kimi-k2.5" / "config.json").read_text()
    )
    # and the 2026 ones, copies of the shared reference data (fixtures/CONFIGS-2026.md)
    glm = ("glm-5", "glm-5-fp8", "glm-5.1", "glm-5.2")
    nvfp4 = ("kimi-k2.6-nvfp4", "kimi-k2.7-code-nvfp4")
    for name in glm + nvfp4:
        assert known_model(name).config() == json.loads((FIXTURES / name / "config.json").read_text()), name
    assert {m.name for m in MODELS if m.kind == "raw"} == {
        "kimi-k2-instruct", "kimi-k2.5", "deepseek-v3.2", *glm, *nvfp4
    }  # fmt: skip


def _changed(a: dict, b: dict) -> set[str]:
    return {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}


def test_derived_configs_differ_from_their_base_only_where_they_say():
    k2, v3 = known_model("kimi-k2").config(), known_model("deepseek-v3").config()
    k2_0905 = known_model("k2-0905").config()
    assert _changed(k2, k2_0905) == {"rope_scaling", "max_position_embeddings"}
    # 0905's 256K: rope_scaling factor 64 over 4,096 original positions
    assert (k2_0905["rope_scaling"]["factor"], k2_0905["max_position_embeddings"]) == (64, 262_144)
    thinking = known_model("k2-thinking").config()
    assert _changed(k2, thinking) == {"quantization_config"}
    assert thinking["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] == 32
    assert known_model("r1").config() == v3
    assert known_model("deepseek-v3.2-exp").config() == known_model("deepseek-v3.2").config()
    for model in MODELS:
        if model.kind == "derived":
            assert "'s" in model.summary and model.base != f"{model.name}.json", model.name


def test_models_lists_every_bundled_model():
    result = invoke("models", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)["models"]}
    assert set(rows) == {
        "kimi-k2-instruct",
        "kimi-k2-instruct-0905",
        "kimi-k2-thinking",
        "kimi-k2.5",
        "kimi-k2.6",
        "kimi-k2.6-nvfp4",
        "kimi-k2.7-code",
        "kimi-k2.7-code-nvfp4",
        "deepseek-v3",
        "deepseek-r1",
        "deepseek-v3.1",
        "deepseek-v3.2",
        "deepseek-v3.2-exp",
        "deepseek-v2-lite",
        "deepseek-v2-lite-chat",
        "kimi-linear-48b-a3b",
        "kimi-k3",
        "glm-5",
        "glm-5-fp8",
        "glm-5.1",
        "glm-5.2",
        "deepseek-v4-flash",
        "deepseek-v4-pro",
        "moonlight-16b-a3b",
    }
    # the real Kimi Linear index's total_parameters (fixtures/kimi-linear-48b-a3b)
    assert rows["kimi-linear-48b-a3b"]["total"] == 49_122_681_728
    assert (rows["kimi-k2-instruct"]["total"], rows["kimi-k2-instruct"]["activated"]) == (
        K2_TOTAL,
        K2_ACTIVATED,
    )
    assert (rows["deepseek-r1"]["total"], rows["deepseek-r1"]["activated"]) == (V3_TOTAL, V3_ACTIVATED)
    assert rows["moonlight-16b-a3b"]["total"] == MOONLIGHT_TOTAL
    # GLM-5's main model: the elements of blk.0–77, token_embd, output_norm and output in the real
    # GLM-5.1 BF16 GGUF listing (fixtures/gguf/glm-5.1.bf16.map); K2.6 and K2.7-Code have K2.5's counts
    for name in ("glm-5", "glm-5-fp8", "glm-5.1"):
        assert rows[name]["total"] == 743_911_218_432, name
    for name in ("kimi-k2.6", "kimi-k2.6-nvfp4", "kimi-k2.7-code", "kimi-k2.7-code-nvfp4"):
        assert (rows[name]["total"], rows[name]["activated"]) == (K2_TOTAL, K2_ACTIVATED), name
    assert rows["kimi-k2.6-nvfp4"]["repo"] == "nvidia/Kimi-K2.6-NVFP4"
    assert (
        rows["deepseek-v3"]["repo"] == "deepseek-ai/DeepSeek-V3" and rows["deepseek-v3"]["revision"] is None
    )
    assert rows["deepseek-v3"]["kind"] == "re-serialized"
    # the DeepSeek V4 cards' "284B" and "1.6T": every tensor of the main model (hand count in
    # tests/test_deepseek_v4.py), the MTP layer apart
    assert (rows["deepseek-v4-flash"]["total"], rows["deepseek-v4-pro"]["model_type"]) == (
        284_334_567_511,
        "deepseek_v4",
    )


def test_names_are_unique():
    # no name answers for two models
    names = [name for model in MODELS for name in set(model.names())]
    assert len(names) == len(set(names))


def test_a_known_name_imports_no_hub_client():
    result = run_kimicount("params", "deepseek-v3", "--json", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    imported = imported_modules(result.stderr)
    assert "kimicount.models" in imported  # the check sees our own imports
    assert not {m for m in imported if m.split(".")[0] in ("torch", "huggingface_hub")}


def test_verify_reads_a_short_name_as_its_repo(httpserver, tmp_path):
    fake = FakeHub()
    env = {"HF_ENDPOINT": fake.install(httpserver), "HF_HOME": str(tmp_path / "hf")}
    result = run_kimicount("verify", "k2-thinking", env=env)
    assert result.returncode == 2
    assert result.stderr.startswith("kimicount: error: moonshotai/Kimi-K2-Thinking@main: ")


def test_k26_and_k27_code_have_k25s_architecture():
    # what the derived INT4 entries stand on: NVIDIA's NVFP4 configs of both, read as kimicount reads
    # every count, are K2.5's but for the quantization
    from dataclasses import replace

    k25 = replace(known_model("kimi-k2.5").spec(), name="", quantization=None)
    for nvfp4, int4 in (("kimi-k2.6-nvfp4", "kimi-k2.6"), ("kimi-k2.7-code-nvfp4", "kimi-k2.7-code")):
        assert replace(known_model(nvfp4).spec(), name="", quantization=None) == k25, nvfp4
        assert known_model(int4).config() == known_model("kimi-k2.5").config()
