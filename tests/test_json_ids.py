"""Stable component ids (kimicount.component_ids) in the JSON of `plan`, `flops` and `gguf`, where they list
components: the same ids `params --json` gives, so that every command's JSON joins on them, and across
models (issue 27: "60 MoE blocks (layers 1–60)" in Kimi K2 and "58 MoE blocks (layers 3–60)" in DeepSeek-V3
are both `transformer-blocks/moe`)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import FIXTURES, invoke

V3 = str(FIXTURES / "deepseek-v3")
GLM5 = str(FIXTURES / "glm-5")
EXPERTS = "transformer-blocks/moe/mixture-of-experts/routed-experts"


def command_json(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def tree_ids(node: dict) -> list[str]:
    return [node["id"], *(i for child in node["children"] for i in tree_ids(child))]


def params_ids(*model: str) -> set[str]:
    report = command_json("params", *model)
    ids = set(tree_ids(report["tree"]))
    if report.get("mtp"):
        ids |= set(tree_ids(report["mtp"]["tree"]))
    return ids


@pytest.mark.parametrize("model", [(), ("--config", V3)])
def test_plan_weights_name_their_components(model):
    report = command_json("plan", *model, "--gpus", "8xH200")
    rows = {row["name"]: row["component_ids"] for row in report["weights"]}
    # one row per component, the dense and MoE blocks' alike summed: both ids
    assert rows["Routed experts"] == [EXPERTS]
    assert rows["Query heads"] == [
        "transformer-blocks/dense/latent-attention/query-heads",
        "transformer-blocks/moe/latent-attention/query-heads",
    ]
    assert rows["Token embedding"] == ["token-embedding"] and rows["Output head"] == ["output-head"]
    # vLLM's BF16 copies of kv_b_proj: made from the key content and value heads of every block
    assert {i.rsplit("/", 1)[-1] for i in rows["vLLM's BF16 W_UK, W_UV"]} == {
        "key-content-up-projection",
        "value-heads",
    }
    assert {i for ids in rows.values() for i in ids} <= params_ids(*model)


def test_plan_with_mtp_names_the_mtp_module():
    report = command_json("plan", "--config", V3, "--gpus", "16xH200", "--mtp")
    rows = {row["name"]: row["component_ids"] for row in report["weights"]}
    assert rows["Multi-token prediction"] and all(
        i.startswith("multi-token-prediction/") for i in rows["Multi-token prediction"]
    )
    assert set(rows["Multi-token prediction"]) <= params_ids("--config", V3)


@pytest.mark.parametrize("model", [(), ("--config", V3)])
def test_flops_tree_has_the_params_ids(model):
    flops = command_json("flops", *model)
    assert tree_ids(flops["tree"])[0] == "model" and EXPERTS in tree_ids(flops["tree"])
    assert set(tree_ids(flops["tree"])) == set(tree_ids(command_json("params", *model)["tree"]))


@pytest.mark.parametrize(
    ("model", "mtp"), [((), False), (("--config", V3), False), (("--config", GLM5), True)]
)
def test_gguf_components_have_the_params_ids(model, mtp):
    report = command_json("gguf", *model, "--quant", "Q4_K_M")
    ids = [row["id"] for row in report["components"]]
    assert ids[0] == "model" and EXPERTS in ids and len(ids) == len(set(ids))
    # GLM-5's conversion keeps its MTP layer (arch glm-dsa); deepseek2 conversions drop DeepSeek-V3's
    assert any(i.startswith("multi-token-prediction") for i in ids) is mtp
    assert set(ids) <= params_ids(*model)
