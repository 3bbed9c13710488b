"""The small things a new user tripped over (issue 20), each as the user met it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .checkpoints import write_header_only
from .helpers import ROOT, fails_cleanly, invoke


def test_token_without_repo_suggests_tokens_where_the_command_has_it():
    line = fails_cleanly(invoke("kv-cache", "--token", "128k"))
    assert (
        line == "kimicount: error: --token needs --repo (it is a Hugging Face token); did you mean --tokens?"
    )
    line = fails_cleanly(invoke("flops", "--token", "4096"))
    assert line.endswith("did you mean --tokens?")
    # params has no --tokens: nothing to suggest
    assert fails_cleanly(invoke("params", "--token", "hf_x")) == "kimicount: error: --token needs --repo"


def test_misspelt_tokens_names_it():
    result = invoke("kv-cache", "--tokn", "128k")
    assert result.exit_code == 2 and "--tokens" in result.stderr


def test_make_kimi_k2_headers_help_writes_nothing(tmp_path):
    script = ROOT / "benchmarks" / "make_kimi_k2_headers.py"
    result = subprocess.run(
        [sys.executable, str(script), "--help"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: make_kimi_k2_headers.py [-h] folder")
    assert list(tmp_path.iterdir()) == []  # no folder named --help, no shards
    bare = subprocess.run(
        [sys.executable, str(script)], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert bare.returncode == 2 and "required: folder" in bare.stderr
    assert list(tmp_path.iterdir()) == []


def test_verify_names_every_missing_shard(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    write_header_only(folder / "a.safetensors", {"model.norm.weight": ((7168,), "BF16")})
    weight_map = {
        "model.norm.weight": "a.safetensors",
        "lm_head.weight": "b.safetensors",
        "model.embed_tokens.weight": "c.safetensors",
        "model.layers.0.input_layernorm.weight": "d.safetensors",
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    line = fails_cleanly(invoke("verify", "--path", str(folder)))
    assert line.endswith(
        f"names 3 shards that are not in {folder}: 'b.safetensors', 'c.safetensors', 'd.safetensors'"
    )


# --- issue 27: what kimicount does not cover, and how a run ends --------------------------------------


@pytest.mark.parametrize(
    "args, named",
    [
        (["params", "--lora", "8"], "--lora"),
        (["plan", "--gpus", "8xH200", "--finetune"], "--finetune"),
        (["kv-cache", "--training"], "--training"),
        (["--fine-tune"], "--fine-tune"),
        (["finetune", "kimi-k2"], "finetune"),
    ],
)
def test_an_option_for_training_says_what_kimicount_does_not_do(args, named):
    # issue 27: "How much memory to fine-tune Kimi K2 with LoRA?" got "Possible options: --mla, …"
    line = fails_cleanly(invoke(*args))
    assert line.startswith(f"kimicount: error: {named}: kimicount does not cover training or fine-tuning")
    assert "sizes inference" in line


def test_other_unknown_options_still_get_typers_suggestion():
    line = fails_cleanly(invoke("params", "--tokns", "3"))
    assert "No such option: --tokns" in line


def test_the_root_help_says_what_is_not_covered():
    text = " ".join(invoke("--help").stdout.split())
    assert "Not covered, for now: training and fine-tuning memory" in text


def test_debug_shows_the_traceback_and_keeps_exit_3(monkeypatch):
    # issue 27: KIMICOUNT_DEBUG=1 re-raised the internal error, and Python exited with 1, the code that
    # means a check failed. A command that fails as a bug would, registered for this test only.
    from kimicount.cli.root import app

    def broken() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app, "registered_commands", [*app.registered_commands])
    app.command("broken-for-test", hidden=True)(broken)
    for debug, traced in (("", False), ("1", True)):
        result = invoke("broken-for-test", env={"KIMICOUNT_DEBUG": debug} if debug else None)
        assert result.exit_code == 3, result.output
        assert ("Traceback" in result.stderr) is traced
        assert result.stderr.splitlines()[-1].startswith("kimicount: internal error: RuntimeError: a bug")
