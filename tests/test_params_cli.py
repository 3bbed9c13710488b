"""`kimicount params` from the outside: output, JSON contract, model sources, errors, imports."""

from __future__ import annotations

import json
import re

import pytest

from .fakehub import FakeHub
from .helpers import FIXTURES, KIMI_K2, fails_cleanly, imported_modules, invoke, run_kimicount


def test_default_prints_the_kimi_k2_tree_and_totals():
    result = invoke("params", "--depth", "all")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "moonshotai/Kimi-K2-Instruct" in out
    # per instance, instances, total, activated and calculation on one row
    assert re.search(
        r"Key content up-projection\s+4,194,304\s+60\s+251,658,240\s+251,658,240\s+512 × 8,192", out
    )
    assert re.search(r"Routed experts\s+44,040,192\s+384 × 60\s+1,014,686,023,680", out)
    assert re.search(r"Total\s+1,026,408,232,448", out)
    assert re.search(r"Activated\s+32,861,500,928", out)
    assert "├── 61 transformer blocks" in out


def test_depth_folds_the_tree():
    out = invoke("params", "--depth", "2").stdout
    assert "60 MoE blocks (layers 1–60)" in out
    assert "Latent attention" not in out
    assert re.search(r"Total\s+1,026,408,232,448", out)


def test_default_depth_reads_on_one_screen():
    # three levels: the blocks' parts, not the parts of the attention: title, header, 15 rows, a blank
    # line and 3 totals; at 80 columns the totals wrap and a line names the columns left out
    # (the headline figures follow)
    def tree_and_totals(out: str) -> list[str]:
        return out[: out.index("Headline figures")].splitlines()

    out = invoke("params").stdout
    assert "│       └── Mixture of experts" in out and "Latent attention" in out
    assert "Key content up-projection" not in out and "Routed experts" not in out
    assert len(tree_and_totals(out)) == 1 + 1 + 15 + 1 + 3 + 1
    assert len(tree_and_totals(invoke("params", env={"COLUMNS": "80"}).stdout)) <= 27


def test_formulas_show_config_keys():
    out = invoke("params", "--detail", "formula", "--depth", "all").stdout
    assert "kv_lora_rank × num_attention_heads·qk_nope_head_dim" in out


def test_tensors_column_names_the_checkpoint_tensors():
    out = invoke("params", "--detail", "tensors", "--depth", "all").stdout
    assert "model.layers.{1..60}.mlp.experts.{0..383}.gate_proj.weight [2048 × 7168]" in out


def test_by_layer_collapses_identical_layers():
    # DESIGN.md: layer 0 is the dense block (497,500,160); each of the 60 MoE blocks holds 17,059,365,248,
    # of which 500,253,056 run per token: 101,124,096 attention + 2 × 7,168 norms + 2,752,896 router
    # + 8 routed and 1 shared expert of 44,040,192
    assert 101_124_096 + 2 * 7_168 + 2_752_896 + 9 * 44_040_192 == 500_253_056
    out = invoke("params", "--by", "layer").stdout
    rows = re.findall(r"^(\S.*?)\s+([\d,]+)\s+([\d,]+)$", out, re.MULTILINE)
    assert rows == [
        ("0 dense", "497,500,160", "497,500,160"),
        ("1–60 moe (each)", "17,059,365,248", "500,253,056"),
    ]


def test_by_layer_keeps_layers_that_differ_apart(write_config, kimi_config):
    # three dense layers first: one run of them; a layer count the runs must add up to
    path = write_config({**kimi_config, "first_k_dense_replace": 3, "num_hidden_layers": 5})
    out = invoke("params", "--config", str(path), "--by", "layer").stdout
    assert re.findall(r"^(\d\S*(?: \w+)+(?: \(each\))?)\s", out, re.MULTILINE) == [
        "0–2 dense (each)",
        "3–4 moe (each)",
    ]


def test_json_follows_the_contract():
    result = invoke("params", "--json")
    report = json.loads(result.stdout)  # stdout holds the JSON and nothing else
    assert {"model", "total", "activated", "tree", "layers", "mtp"} <= report.keys()
    assert (report["total"], report["activated"], report["mtp"]) == (1_026_408_232_448, 32_861_500_928, None)
    assert len(report["layers"]) == 61
    assert report["layers"][1] == {
        "index": 1,
        "kind": "moe",
        "params": 17_059_365_248,
        "activated": 500_253_056,
    }

    def find(node, name):
        if node["name"] == name:
            return node
        return next((n for c in node["children"] if (n := find(c, name))), None)

    tree = report["tree"]
    assert {
        "name",
        "params_per_instance",
        "instances",
        "params",
        "calculation",
        "tensors",
        "children",
    } <= tree.keys()
    moe = find(tree, "60 MoE blocks (layers 1–60)")
    key = find(moe, "Key content up-projection")
    assert (key["params_per_instance"], key["instances"], key["params"]) == (4_194_304, 60, 251_658_240)
    assert key["calculation"] == "512 × 8,192"
    assert key["tensors"][0]["name"] == "model.layers.{1..60}.self_attn.kv_b_proj.weight"
    assert key["tensors"][0]["part"] == "features 0–127 of each head's 256"


def test_deepseek_v3_reports_mtp_apart():
    result = invoke("params", "--config", str(FIXTURES / "deepseek-v3" / "config.json"), "--json")
    report = json.loads(result.stdout)
    assert report["total"] == 671_026_419_200
    assert report["mtp"]["unique"] == 11_610_068_224
    assert report["mtp"]["total"] == 11_610_068_224 + 2 * 129280 * 7168
    out = invoke("params", "--config", str(FIXTURES / "deepseek-v3")).stdout
    assert "Multi-token prediction" in out and "Output head copy" in out


def test_config_accepts_a_folder_or_a_file():
    by_folder = json.loads(invoke("params", "--config", str(KIMI_K2), "--json").stdout)
    by_file = json.loads(invoke("params", "--config", str(KIMI_K2 / "config.json"), "--json").stdout)
    assert by_folder["total"] == by_file["total"] == 1_026_408_232_448
    assert by_folder["model"] == "kimi-k2-instruct"


def test_version_and_help():
    assert re.fullmatch(r"kimicount \d+\.\d+\.\d+\n", invoke("--version").stdout)
    assert "params" in invoke("--help").stdout
    assert "--by" in invoke("params", "--help").stdout


def test_python_dash_m_and_no_torch_or_hub_import():
    # -X importtime lists every module imported; params must pay for neither torch nor the Hub client,
    # nor msgspec (25 ms), which only a checkpoint's headers repay.
    result = run_kimicount("params", "--json", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["total"] == 1_026_408_232_448
    imported = imported_modules(result.stderr)
    assert "kimicount.anatomy" in imported  # the check sees our own imports
    assert not {m for m in imported if m.split(".")[0] in ("torch", "huggingface_hub", "msgspec")}
    # A run registers only the command it names: typer would read the other five's signatures too.
    assert "kimicount.cli.params" in imported
    assert not imported & {f"kimicount.cli.{m}" for m in ("flops", "kv_cache", "measure", "plan", "verify")}
    version = run_kimicount("--version", env={"PYTHONPROFILEIMPORTTIME": "1"})
    imported = imported_modules(version.stderr)
    assert "kimicount.cli.root" in imported and "kimicount.cli.params" not in imported


def test_the_root_help_lists_every_command_however_it_is_asked():
    commands = (
        "compare",  # and its alias diff, hidden
        "explore",
        "flops",
        "gguf",
        "kv-cache",
        "measure",
        "models",
        "params",
        "plan",
        "show",
        "verify",
    )
    for args in (["--help"], ["-h", "params"], []):
        result = run_kimicount(*args)
        # no arguments: click prints the help on stderr, as an error
        listed = re.findall(r"^  ([a-z][a-z-]*)  ", result.stdout + result.stderr, re.MULTILINE)
        assert tuple(listed) == commands, (args, result.stdout, result.stderr)


# --- bad input: exit 2, one line naming the file and key, never a traceback --------------------


@pytest.mark.parametrize(
    "content, needles",
    [
        ("{not json", ["not valid JSON", "line 1 column 2"]),
        ("[1, 2]", ["expected a JSON object at the top level, found list"]),
        ('{"model_type": "kimi_k2"}', ["missing required keys: vocab_size, hidden_size, intermediate_size,"]),
        ('{"model_type": "qwen3_moe"}', ["unsupported model type 'qwen3_moe'", "deepseek_v2"]),
        ("", ["not valid JSON"]),
    ],
)
def test_malformed_config_files(write_config, content, needles):
    path = write_config(content)
    fails_cleanly(invoke("params", "--config", str(path)), str(path), *needles)


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("hidden_size", -7168, "key 'hidden_size': expected a positive integer, found -7168"),
        ("num_hidden_layers", 0, "key 'num_hidden_layers': expected a positive integer, found 0"),
        ("moe_intermediate_size", "2048", "key 'moe_intermediate_size': expected an integer, found \"2048\""),
        ("first_k_dense_replace", 100, "key 'first_k_dense_replace': 100 is beyond num_hidden_layers (61)"),
        ("num_experts_per_tok", 400, "key 'num_experts_per_tok': 400 is more than n_routed_experts (384)"),
    ],
)
def test_bad_config_values_exit_2(write_config, kimi_config, key, value, needle):
    path = write_config({**kimi_config, key: value})
    fails_cleanly(invoke("params", "--config", str(path)), str(path), needle)


def test_missing_and_unreadable_config(tmp_path):
    fails_cleanly(invoke("params", "--config", str(tmp_path / "nope.json")), "nope.json: no such file")
    fails_cleanly(invoke("params", "--config", str(tmp_path)), f"{tmp_path}/config.json: no such file")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    fails_cleanly(invoke("params", "--config", str(binary)), "binary.json: not valid JSON (not UTF-8")


def test_conflicting_model_options():
    fails_cleanly(invoke("params", "--config", str(KIMI_K2), "--repo", "a/b"), "--config or --repo")
    fails_cleanly(invoke("params", "--revision", "v1"), "--revision needs --repo")


def test_debug_variable_shows_the_traceback(write_config):
    result = run_kimicount("params", "--config", str(write_config("[]")), env={"KIMICOUNT_DEBUG": "1"})
    assert result.returncode == 2  # the traceback comes first; the exit code is bad input's all the same
    assert "Traceback" in result.stderr and "ConfigError" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("kimicount: error: ")


def test_subprocess_error_is_one_line(write_config):
    result = run_kimicount("params", "--config", str(write_config('{"model_type": 3}')))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "key 'model_type': expected a string, found 3" in result.stderr


# --- --repo through the real huggingface_hub client against a local Hub ------------------------


#: A repo kimicount does not bundle, holding Kimi K2's config: --repo reads it from the Hub (a bundled
#: model's name would read the bundled config; tests/test_models.py covers that).
MIRROR = "mirror/Kimi-K2-Instruct"


@pytest.fixture
def hub(httpserver, tmp_path):
    """A fake Hub serving Kimi K2's config; returns (hub, env for the client)."""
    fake = FakeHub()
    fake.add_repo(MIRROR, {"config.json": (KIMI_K2 / "config.json").read_bytes()})
    fake.add_repo("org/gated", {"config.json": (KIMI_K2 / "config.json").read_bytes()}, token="hf_secret")
    env = fake.client_env(httpserver, tmp_path)
    return fake, env


def test_repo_downloads_only_the_config(hub):
    fake, env = hub
    result = run_kimicount("params", "--repo", MIRROR, "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["model"], report["total"]) == (MIRROR, 1_026_408_232_448)
    assert {path for _, path, _ in fake.requests} == {"/mirror/Kimi-K2-Instruct/resolve/main/config.json"}


def test_repo_named_as_hf_download_names_it(hub):
    # a positional ORG/NAME is --repo: the same request, the same report, for params and kv-cache
    fake, env = hub
    result = run_kimicount("params", MIRROR, "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["total"] == 1_026_408_232_448
    kv = run_kimicount("kv-cache", MIRROR, "--tokens", "1", "--json", env=env)
    assert json.loads(kv.stdout)["layouts"][0]["bytes_per_token"] == 2_498_560
    assert {path for _, path, _ in fake.requests} == {"/mirror/Kimi-K2-Instruct/resolve/main/config.json"}


def test_repo_named_twice_must_agree():
    line = fails_cleanly(invoke("params", "org/one", "--repo", "org/two"))
    assert line == "kimicount: error: name the repo once: org/one or --repo org/two, not both"
    fails_cleanly(invoke("params", "org/one", "--config", str(KIMI_K2)), "--config or --repo")


def test_repo_at_a_commit_and_then_offline_from_the_cache(hub):
    fake, env = hub
    commit = fake.repos[MIRROR].commit
    args = ("params", "--repo", MIRROR, "--revision", commit, "--json")
    assert run_kimicount(*args, env=env).returncode == 0
    fake.requests.clear()
    offline = run_kimicount(*args, env={**env, "HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout)["total"] == 1_026_408_232_448
    assert fake.requests == []


@pytest.mark.parametrize(
    "args, extra_env, needle",
    [
        (["--repo", "nobody/nothing"], {}, "nobody/nothing@main: repo not found"),
        (["--repo", MIRROR, "--revision", "v9"], {}, "revision 'v9' not found"),
        (["--repo", "org/gated"], {}, "org/gated@main: gated repo"),
        (["--repo", "org/gated"], {"HF_TOKEN": "hf_wrong"}, "org/gated@main: gated repo"),
        (["--repo", MIRROR], {"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE"),
        (["--repo", "not a repo id!"], {}, "not a valid repo id"),
    ],
)
def test_repo_failures_exit_2_with_one_line(hub, args, extra_env, needle):
    _, env = hub
    result = run_kimicount("params", *args, env={**env, **extra_env})
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("kimicount: error: ") and result.stderr.count("\n") == 1
    assert needle in result.stderr


def test_gated_repo_with_its_token(hub):
    _, env = hub
    result = run_kimicount("params", "--repo", "org/gated", "--json", env={**env, "HF_TOKEN": "hf_secret"})
    assert result.returncode == 0, result.stderr


def test_network_down_exits_2(tmp_path):
    # Nothing listens on port 9 (discard) here: the connection is refused.
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_ETAG_TIMEOUT": "2"}
    result = run_kimicount("params", "--repo", MIRROR, env=env)
    assert result.returncode == 2, result.stderr
    assert "cannot reach http://127.0.0.1:9" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "args, needle",
    [
        (["params", "--by", "foo"], "Invalid value for '--by'"),
        (["params", "--by", "layers"], "Invalid value for '--by'"),
        (["params", "--no-such-option"], "No such option: --no-such-option"),
        (["nosuch"], "No such command 'nosuch'"),
    ],
)
def test_usage_errors_are_one_line_too(args, needle):
    line = fails_cleanly(invoke(*args), needle)
    assert line.endswith("--help)")
