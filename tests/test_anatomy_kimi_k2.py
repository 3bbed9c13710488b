"""The Kimi K2 component tree against DESIGN.md's figures and against the real checkpoint listing."""

from __future__ import annotations

import pytest

from kimicount.anatomy import build_anatomy
from kimicount.spec import bundled_spec, spec_from_path

from .helpers import KIMI_K2, elements, real_kimi_k2_tensors

# DESIGN.md, "The component tree": (path below the root, parameters per instance, instances).
DENSE = ("61 transformer blocks", "1 dense block (layer 0)")
MOE = ("61 transformer blocks", "60 MoE blocks (layers 1–60)")
ATTENTION = "Latent attention"
DESIGN_FIGURES = [
    (("Token embedding",), 1_174_405_120, 1),
    (DENSE, 497_500_160, 1),
    (DENSE + ("Attention RMSNorm",), 7_168, 1),
    (DENSE + (ATTENTION,), 101_124_096, 1),
    (DENSE + (ATTENTION, "Query compression"), 11_011_584, 1),
    (DENSE + (ATTENTION, "Key–value compression"), 3_670_528, 1),
    (DENSE + (ATTENTION, "Query heads"), 18_874_368, 1),
    (DENSE + (ATTENTION, "Key heads"), 4_653_056, 1),
    (DENSE + (ATTENTION, "Key heads", "Key content up-projection"), 4_194_304, 1),
    (DENSE + (ATTENTION, "Key heads", "Shared rotary key"), 458_752, 1),
    (DENSE + (ATTENTION, "Value heads"), 4_194_304, 1),
    (DENSE + (ATTENTION, "Causal attention"), 58_720_256, 1),
    (DENSE + ("MLP RMSNorm",), 7_168, 1),
    (DENSE + ("Dense MLP",), 396_361_728, 1),
    (MOE + ("Attention RMSNorm",), 7_168, 60),
    (MOE + (ATTENTION,), 101_124_096, 60),
    (MOE + (ATTENTION, "Key heads", "Key content up-projection"), 4_194_304, 60),
    (MOE + ("MLP RMSNorm",), 7_168, 60),
    (MOE + ("Mixture of experts", "Router"), 2_752_896, 60),
    (MOE + ("Mixture of experts", "Routed experts"), 44_040_192, 384 * 60),
    (MOE + ("Mixture of experts", "Shared expert"), 44_040_192, 60),
    (("Final RMSNorm",), 7_168, 1),
    (("Output head",), 1_174_405_120, 1),
]


@pytest.fixture(scope="module")
def kimi():
    return build_anatomy(bundled_spec())


@pytest.mark.parametrize("path, per_instance, instances", DESIGN_FIGURES, ids=lambda v: str(v))
def test_every_design_figure(kimi, path, per_instance, instances):
    node = kimi.model.find(*path)
    assert (node.params_per_instance, node.instances) == (per_instance, instances)
    assert node.params == per_instance * instances


def test_key_content_up_projection_reads_as_in_the_design(kimi):
    # "Key content up-projection: 4,194,304 per instance, × 60 MoE blocks = 251,658,240", calculation 512 × 8,192
    node = kimi.model.find(*MOE, ATTENTION, "Key heads", "Key content up-projection")
    assert (node.params_per_instance, node.instances, node.params) == (4_194_304, 60, 251_658_240)
    assert node.calculation == "512 × 8,192"


def test_routed_experts_per_block_match_the_design(kimi):
    # "Routed experts 384 × 44,040,192 = 16,911,433,728" in each MoE block
    node = kimi.model.find(*MOE, "Mixture of experts", "Routed experts")
    assert node.params // 60 == 384 * 44_040_192 == 16_911_433_728


def test_totals(kimi):
    assert kimi.total == 1_026_408_232_448
    assert kimi.activated == 32_861_500_928
    assert kimi.mtp is None


def test_layers_add_up_to_the_blocks(kimi):
    layers = kimi.layers()
    assert [row.index for row in layers] == list(range(61))
    assert [row.kind for row in layers] == ["dense"] + ["moe"] * 60
    assert (layers[0].params, layers[0].activated) == (497_500_160, 497_500_160)
    # MoE block: 2 norms + attention + router + 384 experts + shared expert; activated: 8 experts
    assert layers[1].params == 2 * 7_168 + 101_124_096 + 2_752_896 + 384 * 44_040_192 + 44_040_192
    assert layers[1].activated == 2 * 7_168 + 101_124_096 + 2_752_896 + 8 * 44_040_192 + 44_040_192
    embedding_head_norm = 2 * 1_174_405_120 + 7_168
    assert sum(row.params for row in layers) + embedding_head_norm == 1_026_408_232_448
    assert sum(row.activated for row in layers) + embedding_head_norm == 32_861_500_928


def _tree_tensors(anatomy):
    """name -> (shape, elements owned by tree nodes), from the tree's tensor references."""
    owned: dict[str, list] = {}
    for node in anatomy.model.walk():
        for ref in node.tensors:
            for name in ref.names():
                shape, total = owned.get(name, (ref.shape, 0))
                assert shape == ref.shape, name
                owned[name] = (shape, total + ref.elements)
    return owned


def test_tree_and_real_checkpoint_list_the_same_tensors(kimi):
    real = real_kimi_k2_tensors()
    assert len(real) == 139_644  # the listing's own total
    tree = _tree_tensors(kimi)

    # every tensor the tree says exists is in the checkpoint, with the same shape
    for name, (shape, _) in tree.items():
        assert name in real, f"tree tensor {name} not in the checkpoint"
        assert real[name][0] == shape, name

    # every checkpoint tensor that is not an FP8 scale or a rotary buffer belongs to a tree node
    weights = {n: s for n, (s, _) in real.items() if not n.endswith((".weight_scale_inv", ".inv_freq"))}
    assert set(weights) == set(tree)

    # split tensors (kv_a_proj_with_mqa, kv_b_proj) are owned exactly once in total
    for name, (shape, owned) in tree.items():
        assert owned == elements(shape), name

    # and the checkpoint's parameter elements are the total
    assert sum(elements(s) for s in weights.values()) == 1_026_408_232_448 == kimi.total


def test_fp8_scales_and_rotary_buffers_are_what_the_listing_leaves_over():
    # The listing's element total (1,026,470,731,056) = parameters + FP8 block scales + rotary buffers.
    real = real_kimi_k2_tensors()
    scales = sum(elements(s) for n, (s, _) in real.items() if n.endswith(".weight_scale_inv"))
    rotary = sum(elements(s) for n, (s, _) in real.items() if n.endswith(".inv_freq"))
    assert rotary == 61 * 56 == 3_416
    assert 1_026_408_232_448 + scales + rotary == 1_026_470_731_056


def test_copy_of_the_real_config_gives_the_same_tree():
    assert build_anatomy(spec_from_path(KIMI_K2)).total == 1_026_408_232_448


def test_transformers_resaved_config_gives_the_same_counts():
    # Written by transformers 5.24's DeepseekV3Config.save_pretrained: `dtype`, `rope_parameters`,
    # `head_dim` and `qk_head_dim` instead of the Hub original's keys.
    resaved = build_anatomy(spec_from_path(KIMI_K2.parent / "kimi-k2-instruct-resaved"))
    assert (resaved.total, resaved.activated) == (1_026_408_232_448, 32_861_500_928)
    assert resaved.spec.torch_dtype == "bfloat16"
