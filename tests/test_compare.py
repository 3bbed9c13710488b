"""`kimicount compare` and the stable component ids its JSON is keyed by (issue 27: two `params --json`
did not join, their group names carrying layer counts). Expected figures are DESIGN.md's or written out
by hand here."""

from __future__ import annotations

import json

from kimicount.anatomy import Node
from kimicount.component_ids import node_key, walk_ids

from .helpers import fails_cleanly, invoke


def _json(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _ids(tree: dict) -> dict[str, dict]:
    found = {tree["id"]: tree}
    for child in tree["children"]:
        found.update(_ids(child))
    return found


def test_params_json_of_two_models_joins_on_the_ids():
    k2, v3 = _ids(_json("params", "kimi-k2")["tree"]), _ids(_json("params", "deepseek-v3")["tree"])
    router = "transformer-blocks/moe/mixture-of-experts/router"
    assert router in k2 and router in v3
    # DESIGN.md: Kimi K2's router 2,752,896 per MoE block (384 × 7,168 + 384), × 60 blocks; DeepSeek-V3's
    # 256 × 7,168 + 256 = 1,835,264, × 58 blocks (layers 3–60)
    assert (k2[router]["params_per_instance"], k2[router]["params"]) == (2_752_896, 2_752_896 * 60)
    assert (v3[router]["params_per_instance"], v3[router]["params"]) == (1_835_264, 1_835_264 * 58)
    moe = "transformer-blocks/moe"
    assert (k2[moe]["name"], v3[moe]["name"]) == (
        "60 MoE blocks (layers 1–60)",
        "58 MoE blocks (layers 3–60)",
    )
    assert k2["model"]["params"] == 1_026_408_232_448 and v3["model"]["params"] == 671_026_419_200
    # DeepSeek-V3's MTP module has ids of its own, apart from the main model's
    mtp = _ids(_json("params", "deepseek-v3")["mtp"]["tree"])
    assert "multi-token-prediction/moe/mixture-of-experts/router" in mtp and not set(mtp) & set(v3)


def test_an_id_is_the_kind_of_a_block_group_not_its_counted_name():
    # the families' block groups name attention kind × FFN kind: their kind is their key
    kda = Node("68 KDA MoE blocks (layers 1–68)", 1, 68, 1, "", layers=tuple(range(1, 69)), kind="kda-moe")
    mla = Node("24 MLA MoE blocks (layers 3–26)", 1, 24, 1, "", layers=tuple(range(3, 27)), kind="mla-moe")
    assert (node_key(kda), node_key(mla)) == ("kda-moe", "mla-moe")
    blocks = Node("92 transformer blocks", 1, 1, 1, "", children=(kda, mla))
    root = Node("Kimi-K3", 1, 1, 1, "", children=(blocks,))
    assert [i for _, i in walk_ids(root)] == [
        "model",
        "transformer-blocks",
        "transformer-blocks/kda-moe",
        "transformer-blocks/mla-moe",
    ]


def test_show_json_pages_carry_the_ids():
    page = _json("show", "key heads")
    # one page for the key heads of the dense and of the MoE blocks: both ids
    assert page["component_ids"] == [
        "transformer-blocks/dense/latent-attention/key-heads",
        "transformer-blocks/moe/latent-attention/key-heads",
    ]


def test_compare_kimi_k2_and_deepseek_v3():
    report = _json("compare", "kimi-k2", "deepseek-v3")
    k2, v3 = "moonshotai/Kimi-K2-Instruct", "deepseek-ai/DeepSeek-V3"
    assert report["models"] == [k2, v3]
    rows = report["components"]
    router = rows["transformer-blocks/moe/mixture-of-experts/router"]["models"]
    assert (router[k2]["params"], router[v3]["params"]) == (2_752_896 * 60, 1_835_264 * 58)
    dense = rows["transformer-blocks/dense"]["models"]
    assert (dense[k2]["instances"], dense[v3]["instances"]) == (1, 3)  # layer 0; layers 0–2
    assert rows["model"]["models"][v3]["activated"] == 37_552_297_472  # docs/models.md's table
    # DESIGN.md: the per-head cache 2,498,560 B per token for Kimi K2, 4,997,120 B for DeepSeek-V3 (128
    # heads); the latent (512 + 64) × 2 × 61 = 70,272 B for both, replicated on every GPU
    kv = report["kv_cache"]
    assert (kv["naive"][k2]["bytes_per_token"], kv["naive"][v3]["bytes_per_token"]) == (2_498_560, 4_997_120)
    assert kv["naive"][k2]["bytes_per_token_per_gpu"] == 2_498_560 // 8
    assert (
        kv["latent"][k2]
        == kv["latent"][v3]
        == {
            "dtype": "bf16",
            "bytes_per_token": 70_272,
            "bytes_per_token_per_gpu": 70_272,
        }
    )
    # Kimi K2's routed experts on one GPU of TP8: each expert split to 2,048 / 8 = 256 of its width, FP8,
    # gate and up [256, 7,168] and down [7,168, 256] with one F32 scale per 128 × 128 block (2 × 56 each):
    # 3 × 7,168 × 256 + 3 × 112 × 4 = 5,506,368 B per expert, × 384 experts × 60 blocks
    weights = report["weights_per_gpu"][k2]
    assert weights["layout"] == "TP8" and weights["routed_expert_bytes"] == 5_506_368 * 384 * 60
    # the same placement as plan's: one GPU's weights under TP8
    plan = _json("plan", "kimi-k2", "--gpus", "8xH200")
    assert weights["bytes"] == plan["stages"][0]["weights_bytes"]


def test_a_part_only_one_model_has():
    rows = _json("compare", "kimi-k2", "deepseek-v3.2")["components"]
    indexer = rows["transformer-blocks/moe/latent-attention/lightning-indexer"]["models"]
    assert indexer["moonshotai/Kimi-K2-Instruct"] is None and indexer["deepseek-ai/DeepSeek-V3.2"] is not None
    text = invoke("compare", "kimi-k2", "v3.2", "--depth", "4").stdout
    assert "Lightning indexer" in text and "—: the model has no such part" in " ".join(text.split())


def test_compare_kimi_k2_and_the_hybrid_kimi_k3_and_kimi_linear():
    """A hybrid model in compare (issue 29): its per-token rows are its MLA layers', its KDA layers' state
    a row of its own. By hand from the configs (fixtures/kimi-k3, kimi-linear-48b-a3b):
    K3: 24 MLA layers × (512 + 64) × 2 B = 27,648 B a token; the state per KDA layer (96 heads of
    128 × 128 fp32 + 3 convolution windows of 3 × 96 × 128 bf16) = 6,291,456 + 221,184 = 6,512,640 B,
    × 69 KDA layers = 449,372,160 B; at TP8, 12 heads a GPU: 786,432 + 27,648 = 814,080 B × 69 =
    56,171,520 B. Kimi Linear: 7 MLA layers × 1,152 = 8,064 B a token; 32 heads: 2,097,152 + 73,728 =
    2,170,880 B × 20 KDA layers = 43,417,600 B, 5,427,200 B at TP8 (4 heads)."""
    k2, k3, kl = (
        "moonshotai/Kimi-K2-Instruct",
        "moonshotai/Kimi-K3",
        "moonshotai/Kimi-Linear-48B-A3B-Instruct",
    )
    report = _json("compare", "kimi-k2", "kimi-k3", "kimi-linear")
    assert report["kv_cache"]["latent"][k3]["bytes_per_token"] == 24 * 576 * 2 == 27_648
    assert report["kv_cache"]["latent"][kl]["bytes_per_token"] == 7 * 576 * 2 == 8_064
    assert report["state_per_sequence"][k2] is None
    assert report["state_per_sequence"][k3] == {"bytes": 69 * 6_512_640, "bytes_per_gpu": 69 * 814_080}
    assert 69 * 6_512_640 == 449_372_160 and 69 * (12 * 128 * 128 * 4 + 3 * 3 * 12 * 128 * 2) == 56_171_520
    assert report["state_per_sequence"][kl] == {"bytes": 20 * 2_170_880, "bytes_per_gpu": 20 * 271_360}
    assert (
        32 * 128 * 128 * 4 + 3 * 3 * 32 * 128 * 2 == 2_170_880
        and 4 * 128 * 128 * 4 + 3 * 3 * 4 * 128 * 2 == 271_360
    )
    # the blocks join by their kind: K2's MoE blocks and K3's KDA MoE blocks are different rows
    rows = report["components"]
    assert rows["transformer-blocks/moe"]["models"][k3] is None
    assert any(row["models"][k2] is None and row["models"][k3] is not None for row in rows.values())
    text = invoke("compare", "kimi-k2", "kimi-k3", env={"COLUMNS": "200"}).stdout
    assert "state per sequence" in text and "449,372,160 B" in text and "56,171,520 B" in text


def test_diff_is_compare_and_bad_input_is_one_line():
    assert (
        invoke("diff", "kimi-k2", "v3", "--json").stdout
        == invoke("compare", "kimi-k2", "v3", "--json").stdout
    )
    fails_cleanly(invoke("compare", "kimi-k2"), "compare needs two models or more")
    fails_cleanly(invoke("compare", "kimi-k2", "k2"), "moonshotai/Kimi-K2-Instruct is named twice")
    fails_cleanly(invoke("compare", "kimi-k2", "v3", "--tp", "3"), "--tp 3")
