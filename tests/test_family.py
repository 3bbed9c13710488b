"""The rest of the family, each against figures computed by hand in the test (or published)."""

from __future__ import annotations

import pytest

from kimicount.anatomy import build_anatomy
from kimicount.errors import ConfigError
from kimicount.spec import spec_from_path

from .helpers import FIXTURES


def anatomy_of(folder: str):
    return build_anatomy(spec_from_path(FIXTURES / folder))


def test_deepseek_v2_lite_by_hand():
    lite = anatomy_of("deepseek-v2-lite")
    # hidden 2048, 27 layers (layer 0 dense), 16 heads, q_lora_rank null, 64 routed experts of 1408,
    # 2 shared experts, 6 per token, vocab 102400, topk_method greedy (no router bias)
    attention = (
        16 * (128 + 64) * 2048  # q_proj              6,291,456
        + (512 + 64) * 2048  # kv_a_proj_with_mqa      1,179,648
        + 512  # kv_a_layernorm
        + 16 * (128 + 128) * 512  # kv_b_proj          2,097,152
        + 2048 * 16 * 128  # o_proj                    4,194,304
    )
    assert attention == 13_763_072
    expert = 3 * 2048 * 1408  # 8,650,752
    dense_block = 2 * 2048 + attention + 3 * 2048 * 10944
    moe_block = 2 * 2048 + attention + 64 * 2048 + 64 * expert + 3 * 2048 * (2 * 1408)
    assert (dense_block, moe_block) == (81_007_104, 584_847_872)
    embedding = 102400 * 2048
    total = 2 * embedding + dense_block + 26 * moe_block + 2048
    assert total == 15_706_484_224  # published: 15.7B
    activated = total - 26 * (64 - 6) * expert
    assert activated == 2_661_150_208  # DeepSeek's "2.4B" leaves out the 209.7M embedding table

    assert (lite.total, lite.activated) == (total, activated)
    attention_node = lite.model.find(
        "27 transformer blocks", "26 MoE blocks (layers 1–26)", "Latent attention"
    )
    assert [c.name for c in attention_node.children][:2] == ["Key–value compression", "Query heads"]
    assert (
        attention_node.find("Query heads").tensors[0].display_name
        == "model.layers.{1..26}.self_attn.q_proj.weight"
    )
    moe = lite.model.find("27 transformer blocks", "26 MoE blocks (layers 1–26)", "Mixture of experts")
    assert moe.find("Router").params_per_instance == 64 * 2048  # no e_score_correction_bias
    assert moe.find("Shared experts").params_per_instance == 3 * 2048 * 2816
    assert lite.mtp is None


TINY = {
    "model_type": "deepseek_v3",
    "vocab_size": 100,
    "hidden_size": 16,
    "intermediate_size": 40,
    "moe_intermediate_size": 8,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "q_lora_rank": 12,
    "kv_lora_rank": 8,
    "qk_nope_head_dim": 4,
    "qk_rope_head_dim": 2,
    "v_head_dim": 3,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 2,
    "tie_word_embeddings": True,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 64,
}


def test_tiny_config_by_hand(write_config):
    tiny = build_anatomy(spec_from_path(write_config(TINY)))
    # layers 0, 1 and 3 dense (1 and 3 are not multiples of moe_layer_freq 2); layer 2 MoE
    attention = (
        (16 * 12 + 12)  # q_a_proj + q_a_layernorm          204
        + ((8 + 2) * 16 + 8)  # kv_a_proj_with_mqa + norm   168
        + 12 * 2 * (4 + 2)  # q_b_proj                      144
        + 8 * 2 * (4 + 3)  # kv_b_proj                      112
        + 2 * 3 * 16  # o_proj                               96
    )
    assert attention == 724
    dense_block = 2 * 16 + attention + 3 * 16 * 40  # 2,676
    expert = 3 * 16 * 8  # 384
    moe_block = 2 * 16 + attention + (4 * 16 + 4) + 4 * expert + expert  # 2,744
    total = 100 * 16 + 3 * dense_block + moe_block + 16  # tied: no output head
    assert total == 12_388
    assert (tiny.total, tiny.activated) == (total, total - 2 * expert)
    assert [(r.index, r.kind) for r in tiny.layers()] == [
        (0, "dense"),
        (1, "dense"),
        (2, "moe"),
        (3, "dense"),
    ]
    assert "Output head" not in [c.name for c in tiny.model.children]

    # MTP layer 4 is a MoE block (4 >= 1 and 4 % 2 == 0), with its own norms and projection
    unique = 2 * 16 + 16 * 32 + moe_block + 16  # enorm+hnorm, eh_proj, block, shared_head.norm
    assert (tiny.mtp_unique, tiny.mtp.params) == (3_304, unique + 2 * 1_600)
    assert tiny.mtp_activated == unique - 2 * expert


def test_deepseek_v3_main_model_and_mtp():
    v3 = anatomy_of("deepseek-v3")
    attention = 7168 * 1536 + 1536 + 7168 * 576 + 512 + 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    expert = 3 * 7168 * 2048
    moe_block = 2 * 7168 + attention + 256 * 7168 + 256 + 256 * expert + expert
    dense_block = 2 * 7168 + attention + 3 * 7168 * 18432
    embedding = 129280 * 7168
    total = 2 * embedding + 3 * dense_block + 58 * moe_block + 7168
    assert total == 671_026_419_200  # published: 671B
    assert v3.total == total
    assert v3.activated == total - 58 * 248 * expert == 37_552_297_472  # published: 37B

    unique = moe_block + 2 * 7168 + 7168 * 2 * 7168 + 7168  # block, enorm+hnorm, eh_proj, shared_head.norm
    assert v3.mtp_unique == unique == 11_610_068_224  # published: ~11.5B of MTP's own weights
    assert v3.mtp.params == unique + 2 * embedding  # plus its stored copies of the embedding and head
    assert v3.mtp_activated == unique - 248 * expert
    names = {name for node in v3.mtp.walk() for t in node.tensors for name in t.names()}
    assert {"model.layers.61.eh_proj.weight", "model.layers.61.shared_head.head.weight"} <= names
    assert "model.layers.61.mlp.experts.255.down_proj.weight" in names


def test_deepseek_v32_adds_a_lightning_indexer_to_every_layer():
    v32 = anatomy_of("deepseek-v3.2-exp")
    indexer = 64 * 128 * 1536 + 128 * 7168 + 64 * 7168 + 2 * 128  # wq_b, wk, weights_proj, k_norm w+b
    assert indexer == 13_959_424
    assert v32.total == 671_026_419_200 + 61 * indexer
    assert v32.activated == 37_552_297_472 + 61 * indexer  # the indexer is always active
    layer0 = v32.model.find("61 transformer blocks", "3 dense blocks (layers 0–2)", "Latent attention")
    assert layer0.find("Lightning indexer").params_per_instance == indexer


def test_moe_layer_freq_and_first_k_dense_decide_the_layers(write_config):
    config = dict(
        TINY, num_hidden_layers=6, moe_layer_freq=3, first_k_dense_replace=2, num_nextn_predict_layers=0
    )
    layers = build_anatomy(spec_from_path(write_config(config))).layers()
    assert [r.index for r in layers if r.kind == "moe"] == [3]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_size": 0}, "key 'hidden_size': expected a positive integer, found 0"),
        ({"num_attention_heads": -64}, "key 'num_attention_heads': expected a positive integer, found -64"),
        ({"vocab_size": "163840"}, "key 'vocab_size': expected an integer, found \"163840\""),
        ({"kv_lora_rank": 512.0}, "key 'kv_lora_rank': expected an integer, found 512.0"),
        ({"n_routed_experts": True}, "key 'n_routed_experts': expected an integer, found true"),
        ({"first_k_dense_replace": 62}, "key 'first_k_dense_replace': 62 is beyond num_hidden_layers (61)"),
        ({"num_experts_per_tok": 385}, "key 'num_experts_per_tok': 385 is more than n_routed_experts (384)"),
        (
            {"num_nextn_predict_layers": -1},
            "key 'num_nextn_predict_layers': expected an integer >= 0, found -1",
        ),
        ({"model_type": "llama"}, "unsupported model type 'llama' (supported: kimi_k2, deepseek_v3"),
        (
            {"qk_head_dim": 128},
            "key 'qk_head_dim': 128 is not qk_nope_head_dim + qk_rope_head_dim (128 + 64)",
        ),
        ({"tie_word_embeddings": "no"}, "key 'tie_word_embeddings': expected true or false, found \"no\""),
        ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}}, "weight_block_size"),
    ],
)
def test_bad_config_values_are_named(write_config, kimi_config, change, message):
    path = write_config({**kimi_config, **change})
    with pytest.raises(ConfigError) as error:
        spec_from_path(path)
    assert str(path) in str(error.value)
    assert message in str(error.value)


def test_missing_key_is_named(write_config, kimi_config):
    del kimi_config["kv_lora_rank"]
    with pytest.raises(ConfigError, match=r"key 'kv_lora_rank': missing \(required\)"):
        spec_from_path(write_config(kimi_config))


def test_q_lora_rank_must_be_present_even_if_null(write_config, kimi_config):
    del kimi_config["q_lora_rank"]
    with pytest.raises(ConfigError, match="q_lora_rank"):
        spec_from_path(write_config(kimi_config))
    assert spec_from_path(write_config({**kimi_config, "q_lora_rank": None})).q_lora_rank is None
