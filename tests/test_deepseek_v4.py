"""The DeepSeek V4 family (V4-Flash, V4-Pro): the trees against the real V4-Flash index and shard headers
(fixtures/deepseek-v4), the model cards' and the Hub's totals, each explained by a count written out
here from the config's numbers and the shapes of transformers' modeling_deepseek_v4.py (5.24.0)."""

from __future__ import annotations

import ast
import json
import re

import pytest

from kimicount.anatomy import Role, build_anatomy
from kimicount.conventions import reconcile
from kimicount.models import known_model
from kimicount.spec import spec_from_config
from kimicount.verify import _components, expected_groups

from .helpers import FIXTURES, fails_cleanly, invoke

V4 = FIXTURES / "deepseek-v4"


def flash():
    return known_model("deepseek-v4-flash").spec()


def pro():
    return known_model("deepseek-v4-pro").spec()


def by_hand(h, layers, heads, q, groups, rank, experts, width, vocab, ratios, hash_layers, n=64, d=128, m=4):
    """Every tensor of the main model, from the shapes of transformers' DeepseekV4 modules: head_dim
    512, one KV head, a compressor of coff·512 (CSA coff 2, HCA 1) and the indexer's of coff·128 on
    CSA layers, hyper-connections of (2 + m)·m × m·h, top-k 6, one shared expert."""
    attention = (
        h * q + q + q * heads * 512 + h * 512 + 512 + heads + (groups * rank) * (heads * 512 // groups)
    )
    attention += h * groups * rank
    csa = 2 * h * 1024 + 4 * 1024 + 512  # attn.compressor: wkv, wgate [1024, h], ape [4, 1024], norm
    csa += d * n * q + n * h + 2 * h * 256 + 4 * 256 + d  # indexer: wq_b, weights_proj, its compressor
    hca = 2 * h * 512 + 128 * 512 + 512
    hc = 2 * ((2 + m) * m * m * h + (2 + m) * m + 3)
    moe = experts * h + experts * 3 * h * width + 3 * h * width  # gate, routed, shared
    total = 2 * vocab * h + h + (m * m * h + m + 1)  # embed, head, norm, hc_head
    for layer, ratio in enumerate(ratios[:layers]):
        total += hc + 2 * h + attention + moe + {0: 0, 4: csa, 128: hca}[ratio]
        total += vocab * 6 if layer < hash_layers else experts  # tid2eid [vocab, 6] | the gate's bias
    return total


FLASH_RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]
PRO_RATIOS = [128, 128] + [4, 128] * 29 + [4, 0]


def test_the_trees_count_every_tensor_as_the_shapes_say():
    f = by_hand(4096, 43, 64, 1024, 8, 1024, 256, 2048, 129_280, FLASH_RATIOS, 3)
    p = by_hand(7168, 61, 128, 1536, 16, 1024, 384, 3072, 129_280, PRO_RATIOS, 3)
    assert (f, p) == (284_334_567_511, 1_572_999_528_803)
    assert build_anatomy(flash()).total == f and build_anatomy(pro()).total == p
    # the hash tables: 3 layers × 129,280 tokens × 6 experts, int64
    assert f - 3 * 129_280 * 6 == 284_332_240_471
    # activated: all but the 250 (378) routed experts a token skips in each of 43 (61) layers
    assert build_anatomy(flash()).activated == f - 43 * 250 * 3 * 4096 * 2048 == 13_801_959_511
    assert build_anatomy(pro()).activated == p - 61 * 378 * 3 * 7168 * 3072 == 49_781_408_099


def test_the_layer_kinds_and_block_groups():
    blocks = build_anatomy(flash()).model.find("43 transformer blocks").children
    assert [(b.name, b.kind, b.instances) for b in blocks] == [
        ("2 SWA hash-MoE blocks (layers 0–1)", "swa-hash", 2),
        ("1 CSA hash-MoE block (layer 2)", "csa-hash", 1),
        ("20 HCA MoE blocks", "hca-moe", 20),  # layers 3, 5, ..., 41: in the order of their first layers
        ("20 CSA MoE blocks", "csa-moe", 20),  # 4, 6, ..., 42
    ]
    blocks = build_anatomy(pro()).model.find("61 transformer blocks").children
    assert [(b.name, b.instances) for b in blocks] == [
        ("2 HCA hash-MoE blocks (layers 0–1)", 2),
        ("1 CSA hash-MoE block (layer 2)", 1),
        ("29 HCA MoE blocks", 29),
        ("29 CSA MoE blocks", 29),
    ]


def test_the_mtp_layer_is_apart_and_shares_the_embedding_and_head():
    anatomy = build_anatomy(flash())
    mtp = anatomy.mtp
    # e_proj + h_proj [4,096, 4,096], enorm + hnorm + norm, hc_head, one SWA block with a learned router
    block = (
        2 * 24 * 4096 * 4
        + 2 * 24
        + 6
        + 2 * 4096
        + 106_956_352
        + 256 * 4096
        + 256
        + 256 * 3 * 4096 * 2048
        + 3 * 4096 * 2048
    )
    assert mtp.params == 2 * 4096 * 4096 + 3 * 4096 + (4 * 4 * 4096 + 4 + 1) + block == 6_610_048_891
    assert "1 SWA MoE block (MTP layer 0)" in [c.name for c in mtp.children]
    assert anatomy.mtp_unique == mtp.params  # no copies of the embedding and head: shared


def patterns(names):
    """The real index's pattern of a name: layer, expert and MTP indices replaced by 0, w1/w2/w3 by w0."""
    return {re.sub(r"\.w[123]\.", ".w0.", re.sub(r"\.\d+\.", ".0.", name)) for name in names}


def tree_names(spec):
    """Every tensor name the trees expect, with the `.scale` of each FP8 or FP4 weight."""
    anatomy = build_anatomy(spec)
    groups = expected_groups(anatomy, _components(anatomy))
    return {name for g in groups for name in (*g.names, *g.scale_names)}


def real_patterns():
    text = (V4 / "index-key-patterns.EXCERPT.txt").read_text()
    return set(re.findall(r'^\s+"([^"]+)",$', text, re.MULTILINE))


def test_the_82_key_patterns_of_the_real_index_are_the_trees_names():
    real = real_patterns()
    assert len(real) == 82
    assert patterns(tree_names(flash())) == real
    assert (
        patterns(tree_names(pro())) == real
    )  # the same names: Pro has no SWA-only layer but 61 more of the same


def header_listing():
    """(name, dtype, shape) of layers 2 and 3 as the real shard headers list them; the experts' weights
    are given for expert `_e`, here 0."""
    text = (V4 / "header-dtypes-shapes.EXCERPT.txt").read_text()
    rows = [
        ast.literal_eval(m)
        for m in re.findall(r'^\s+(\("layers\.[23]\.[^"]+",\s*"\w+",\s*\[[\d, ]+\]\)),', text, re.MULTILINE)
    ]
    experts = re.findall(
        r'\("(layers\.2\.ffn\.experts\.)%d(\.w\d\.weight)" % _e, "(\w+)",\s+(\[[\d, ]+\])\)', text
    )
    rows += [(f"{a}0{b}", dtype, ast.literal_eval(shape)) for a, b, dtype, shape in experts]
    return {name: (dtype, tuple(shape)) for name, dtype, shape in rows}


def test_layers_2_and_3_are_stored_as_the_real_shard_headers_say():
    listing = header_listing()
    assert len(listing) == 43 + 33 + 3  # layer 2 (and its expert 0), layer 3
    anatomy = build_anatomy(flash())
    expected = {}
    for g in expected_groups(anatomy, _components(anatomy)):
        for name in g.names:
            expected[name] = (g.dtypes[0], g.stored_shape)
        for name in g.scale_names:
            expected[name] = (g.scale_dtype, g.fp8_scale)
    for name, (dtype, shape) in listing.items():
        if name.endswith("tid2eid"):  # the excerpt cuts its shape down; the real table is [vocab, top_k]
            assert (expected[name][0], len(expected[name][1])) == (dtype, len(shape)) == ("I64", 2)
            assert expected[name][1] == (129_280, 6)
            continue
        assert expected[name] == (dtype, shape), name
    # layer 3 (HCA, learned routing) is listed whole but its experts: no indexer, a gate bias, no table
    layer3 = {n for n in expected if n.startswith("layers.3.") and ".experts." not in n}
    assert layer3 == {n for n in listing if n.startswith("layers.3.")}


def test_the_hub_counts_are_the_headers_elements_term_by_term():
    """The Hub's listing gives 158B (V4-Flash) and 862B (V4-Pro): what tools that count the headers'
    elements count. From the parameters (MTP and hash tables included), the FP4 experts count half
    (two E2M1 values to an I8), plus one E8M0 scale per 32 expert values and one per 128 × 128 block of
    every FP8 weight."""
    flash_params = 284_334_567_511 + 6_610_048_891  # + the MTP layer
    experts = 44 * 256 * 3 * 4096 * 2048  # 43 layers and the MTP one
    # per layer, the blocks of wq_a [8, 32], wq_b [256, 8], wkv [4, 32], wo_a [64, 32], wo_b [32, 64] and
    # the shared expert's three [16, 32]; the indexer's wq_b [64, 8] in 21 CSA layers; e_proj and h_proj [32, 32]
    blocks = 44 * (256 + 2048 + 128 + 2048 + 2048 + 3 * 512) + 21 * 512 + 2 * 1024
    flash_stored = flash_params - experts // 2 + experts // 32 + blocks
    assert flash_stored == 158_069_433_298
    pro_params = 1_572_999_528_803 + 25_840_145_979
    experts = 62 * 384 * 3 * 7168 * 3072
    blocks = 62 * (672 + 6144 + 224 + 4096 + 7168 + 3 * 1344) + 30 * 768 + 2 * 3136
    pro_stored = pro_params - experts // 2 + experts // 32 + blocks
    assert pro_stored == 861_608_274_846

    for spec, stored, figures in (
        (flash(), flash_stored, {"284B", "13B", "158B"}),
        (pro(), pro_stored, {"1.6T", "49B", "862B"}),
    ):
        r = reconcile(build_anatomy(spec))
        values = {c.name: c.value for c, _ in r.conventions}
        assert values["stored_elements"] == stored
        explained = {e.figure.text: (c.name, e.reading) for c, found in r.conventions for e in found}
        assert set(explained) == figures and not r.unexplained
    flash_r = {
        c.name: [(e.figure.text, e.reading) for e in found]
        for c, found in reconcile(build_anatomy(flash())).conventions
    }
    # the card's 284B: the main model, with or without the hash tables, without the MTP layer (291B)
    assert flash_r["parameters"] == flash_r["parameters_without_hash_tables"] == [("284B", "rounded")]
    assert flash_r["parameters_with_mtp"] == []
    # 13B activated: DeepSeek's count without the input embedding (13.27B); with it 13.80B only truncates
    assert flash_r["activated_without_embedding"] == [("13B", "rounded")]
    assert flash_r["activated"] == [("13B", "truncated")]
    pro_r = {
        c.name: [(e.figure.text, e.reading) for e in found]
        for c, found in reconcile(build_anatomy(pro())).conventions
    }
    assert pro_r["activated_without_embedding"] == [("49B", "rounded")]  # 48.85B; 49.78B with the embedding
    assert pro_r["parameters_with_mtp"] == [("1.6T", "rounded")]  # 1.599T: the card's 1.6T holds either way


def test_the_config_as_transformers_reserializes_it_gives_the_same_spec():
    raw = known_model("deepseek-v4-flash").config()
    resaved = {
        k: v
        for k, v in raw.items()
        if k not in ("compress_ratios", "num_hash_layers", "qk_rope_head_dim", "expert_dtype")
    }
    names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
    resaved["layer_types"] = [names[r] for r in raw["compress_ratios"][:43]]
    resaved["compress_rates"] = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    resaved["mlp_layer_types"] = ["hash_moe"] * 3 + ["moe"] * 40
    resaved["partial_rotary_factor"] = 0.125
    resaved["quantization_config"] = {**raw["quantization_config"], "expert_dtype": "fp4"}
    assert spec_from_config(resaved, name="deepseek-ai/DeepSeek-V4-Flash", where="config.json") == flash()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"compress_ratios": [0, 4, 128]},
            "key 'compress_ratios': 3 entries: expected num_hidden_layers (43)",
        ),
        ({"compress_ratios": [0, 8] * 22}, "key 'compress_ratios': expected a list of 0, 4 or 128"),
        ({"o_groups": 7}, "key 'o_groups': 7 does not divide num_attention_heads (64)"),
        ({"num_key_value_heads": 2}, "key 'num_key_value_heads': 2: DeepSeek V4 has one shared KV head"),
        ({"num_hash_layers": 50}, "key 'num_hash_layers': 50 is beyond num_hidden_layers (43)"),
        ({"expert_dtype": "int4"}, "key 'expert_dtype': expected fp4 or fp8"),
        ({"moe_intermediate_size": 2047}, "key 'moe_intermediate_size': 2047 is not a multiple of 32"),
    ],
)
def test_bad_configs_are_refused_in_one_line(write_config, change, message):
    path = write_config({**known_model("deepseek-v4-flash").config(), **change})
    fails_cleanly(invoke("params", "--config", str(path)), message)


@pytest.mark.parametrize("command", ["gguf", "measure"])  # plan serves V4: tests/test_plan_deepseek_v4.py
def test_commands_that_do_not_serve_v4_yet_refuse_in_one_line(command, write_config):
    path = write_config(known_model("deepseek-v4-flash").config())
    extra = {"gguf": ["--quant", "Q4_K_M"]}.get(command, [])
    result = invoke(command, "--config", str(path), *extra)
    fails_cleanly(result, f"{command}: ", "(deepseek_v4, the DeepSeek V4 layout", "not supported")


def test_storage_roles_match_the_released_checkpoint():
    anatomy = build_anatomy(flash())
    roles = {r.pattern: r.role for n in anatomy.model.walk() for r in n.tensors}
    assert roles["layers.{layer}.ffn.gate.tid2eid"] is Role.INDEX
    assert roles["layers.{layer}.attn.compressor.wkv.weight"] is Role.UNQUANTIZED  # BF16, no scale
    params = json.loads(invoke("params", "deepseek-v4-flash", "--json").stdout)
    assert params["total"] == 284_334_567_511 and params["mtp"]["total"] == 6_610_048_891


def test_flops_per_layer_kind_by_hand():
    """Decode at L = 1,048,576: 64 heads × 512 against the one KV head, 2 × 64 × 512 FLOPs a position
    for the scores and as many for the sum, over the window's 128 positions; CSA also over the
    indexer's top 512 of the 262,144 compressed entries, plus the indexer's scores over all of them
    (2 × 64 × 128 each); HCA over all 8,192 of its entries."""
    out = json.loads(
        invoke("flops", "deepseek-v4-flash", "--context", "1M", "--tokens", "4", "--json").stdout
    )
    kinds = {a["kind"]: a for a in out["attention"]}
    per = 4 * 64 * 512
    assert kinds["SWA"]["decode_flops_per_token_per_layer"] == per * 128
    assert kinds["CSA"]["decode_flops_per_token_per_layer"] == per * (128 + 512) + 2 * 64 * 128 * 262_144
    assert kinds["HCA"]["decode_flops_per_token_per_layer"] == per * (128 + 8192)
    # a prefill of 4 tokens: positions 1..4 see 1..4 window entries; CSA's one entry at position 4
    assert kinds["SWA"]["prefill_flops_per_token_per_layer"] == per * (1 + 2 + 3 + 4) / 4
    assert kinds["CSA"]["prefill_flops_per_token_per_layer"] == (per * (10 + 1) + 2 * 64 * 128 * 1) / 4
    assert (kinds["SWA"]["layers"], kinds["CSA"]["layers"], kinds["HCA"]["layers"]) == (2, 21, 20)
    # the matmuls: twice the activated parameters that multiply (not the embedding, norms, sinks, ape,
    # hyper-connections, the gates' bias or the hash tables)
    matmul = 2 * (13_801_959_511 - 529_530_880)
    matmul -= 2 * (
        2 * 43 * 4096 + 43 * (1024 + 512 + 64) + 43 * 2 * (24 * 16384 + 24 + 3) + 4 * 16384 + 5 + 4096
    )
    matmul -= 2 * (
        21 * (4 * 1024 + 512 + 4 * 256 + 128) + 20 * (128 * 512 + 512) + 40 * 256 + 3 * 129_280 * 6
    )
    assert out["matmul_flops_per_token"] == matmul


def test_show_and_explore_read_the_v4_tree(tmp_path, write_config):
    path = write_config(known_model("deepseek-v4-flash").config())
    page = invoke("show", "Hash routing table", "--config", str(path), "--json")
    assert page.exit_code == 0, page.output
    data = json.loads(page.stdout)
    assert "layers.{0..2}.ffn.gate.tid2eid" in json.dumps(data)
    result = invoke("explore", "--config", str(path), "--output", str(tmp_path / "v4.html"))
    assert result.exit_code == 0, result.output
    assert "Shared key–value head" in (tmp_path / "v4.html").read_text()
