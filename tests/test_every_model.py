"""Every command on every bundled model (issue 27): each run ends in exit 0, or in a clear refusal (exit
2, one line on stderr naming what is not possible), never in an internal error (exit 3). The models are
read from kimicount.models' catalogue, so that a model added there is run here too; the model is named
the ways every command takes it: the positional name, and --config NAME."""

from __future__ import annotations

import json

import pytest

from kimicount.families import family_of
from kimicount.models import MODELS

from .helpers import fails_cleanly, invoke

#: Each command, with what it needs besides the model (MODEL stands for where the model goes).
COMMANDS = {
    "params": ["params", "MODEL"],
    "params --by layer": ["params", "MODEL", "--by", "layer"],
    "params --by memory": ["params", "MODEL", "--by", "memory"],
    "params --json": ["params", "MODEL", "--json"],
    "kv-cache": ["kv-cache", "MODEL", "--no-chart", "--tp", "8"],
    "flops": ["flops", "MODEL"],
    "plan": ["plan", "MODEL", "--gpus", "8xH200", "--detail"],
    "plan --compare": ["plan", "MODEL", "--gpus", "8xH200", "--compare", "tp8,dp8ep8,tp8pp2"],
    "plan, local": ["plan", "MODEL", "--gpus", "1xRTX4090", "--quant", "Q4_K_M", "--ram", "512GiB"],
    "gguf --quant": ["gguf", "MODEL", "--quant", "Q4_K_M"],
    "show": ["show", "MODEL", "router"],
    "show the model": ["show", "MODEL", "model", "--json"],
    "explore": ["explore", "MODEL", "-o", "OUT"],
    "compare": ["compare", "kimi-k2", "MODEL"],
    # a checkpoint is read from the Hub: offline, a one-line refusal
    "verify": ["verify", "MODEL"],
}

#: The Hub cannot be reached at all (verify's refusal is then immediate).
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_HOME": "/nonexistent/kimicount-test-hf"}


def _args(command: str, how: str, name: str, out: str) -> list[str]:
    args = [out if a == "OUT" else a for a in COMMANDS[command]]
    where = args.index("MODEL")
    # verify and gguf read a checkpoint by the positional name; --config is for a config file only
    if how == "--config" and args[0] not in ("verify", "gguf", "compare"):
        return [*args[:where], *args[where + 1 :], "--config", name]
    return [*args[:where], name, *args[where + 1 :]]


@pytest.mark.parametrize("how", ["positional", "--config"])
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_command_on_every_bundled_model(model, command, how, tmp_path):
    args = _args(command, how, model.name, str(tmp_path / "explorer.html"))
    result = invoke(*args, env=OFFLINE)
    assert result.exit_code in (0, 2), f"{args}: exit {result.exit_code}: {result.stderr[-400:]}"
    if result.exit_code == 2:
        fails_cleanly(result)
    elif "--json" in args:
        assert json.loads(result.stdout)["model"] == model.repo


def test_the_refusals_say_what_is_not_possible():
    # DeepSeek-V3.2's lightning indexer has no tensor in llama.cpp's deepseek2 layout: once an
    # internal error (ValueError: no GGUF name for …indexer.wq_b.weight), now a refusal that says so
    line = fails_cleanly(invoke("gguf", "deepseek-v3.2", "--quant", "Q4_K_M"))
    assert "self_attn.indexer.wq_b.weight has no tensor in llama.cpp's deepseek2 GGUF layout" in line
    line = fails_cleanly(invoke("verify", "deepseek-v3", env=OFFLINE))
    assert "deepseek-ai/DeepSeek-V3" in line


def test_show_and_explore_take_the_model_as_every_command_does(tmp_path):
    # issue 27: `show router --config deepseek-v3` and `explore --config deepseek-v3` ended in exit 3
    for args in (
        ["show", "deepseek-v3", "router", "--json"],
        ["show", "router", "--config", "deepseek-v3", "--json"],
        ["show", "router", "v3", "--json"],  # the model after the name: a bundled name is recognized
    ):
        result = invoke(*args, env=OFFLINE)
        assert result.exit_code == 0, (args, result.output)
        page = json.loads(result.stdout)
        # DeepSeek-V3's router: 256 experts × 7,168 + 256 correction biases, in 58 MoE blocks
        assert page["parameters"]["per_instance"] == 256 * 7168 + 256
        assert page["parameters"]["instances"] == 58
    out = tmp_path / "v3.html"
    result = invoke("explore", "deepseek-v3", "-o", str(out), env=OFFLINE)
    assert result.exit_code == 0, result.output
    assert "deepseek-ai/DeepSeek-V3" in out.read_text(encoding="utf-8")
    # an unquoted name of several words is one NAME
    result = invoke("show", "key", "content", "up-projection", "--json", env=OFFLINE)
    assert json.loads(result.stdout)["id"] == "key-content-up-projection"


def test_measure_on_every_bundled_config():
    # measure builds one attention layer at the model's true sizes in torch: once per distinct config
    # (DeepSeek-R1's is DeepSeek-V3's, V2-Lite-Chat's V2-Lite's), each with the fewest tokens and steps
    pytest.importorskip("torch")
    seen: list[dict] = []
    for model in MODELS:
        config = model.config()
        if config in seen:
            continue
        seen.append(config)
        args = ["measure", model.name, "--device", "cpu", "--tokens", "4", "--decode-steps", "1", "--json"]
        result = invoke(*args, env=OFFLINE)
        if "measure" not in family_of(model.spec()).commands:  # a family measure does not serve yet
            assert (
                "measure: " in fails_cleanly(result) and "not supported by this command yet" in result.stderr
            )
            continue
        assert result.exit_code == 0, (model.name, result.output)
        report = json.loads(result.stdout)
        assert all(row["ratio"] == 1.0 for row in report["layouts"]), model.name
