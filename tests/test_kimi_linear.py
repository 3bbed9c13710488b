"""The Kimi Linear family (Kimi-Linear-48B-A3B, Kimi K3): trees, storage, cache groups and refusals,
each figure against the real index (fixtures/kimi-linear-48b-a3b), the released K3 checkpoint's facts
(fixtures/kimi-k3/README.md) or a hand computation from the config and the engines' shape rules."""

from __future__ import annotations

import json
import re

import pytest

from kimicount.anatomy import build_anatomy
from kimicount.errors import ConfigError
from kimicount.spec import spec_from_config, spec_from_path
from kimicount.storage import memory_map

from .helpers import FIXTURES, fails_cleanly, invoke

LINEAR = FIXTURES / "kimi-linear-48b-a3b"
K3 = FIXTURES / "kimi-k3"


def index_excerpt() -> tuple[dict, list[str]]:
    """The real index's metadata and the tensor names its two windows show."""
    text = (LINEAR / "index.EXCERPT.txt").read_text()
    metadata = json.loads(re.search(r'"metadata": (\{.*?\})', text, re.DOTALL).group(1))
    names = re.findall(r'^\s+"((?:model|lm_head)[^"]+)": "model-', text, re.MULTILINE)
    return metadata, names


def names_of(anatomy) -> set[str]:
    return {
        name
        for tree in (anatomy.model, anatomy.vision)
        if tree
        for n in tree.walk()
        for r in n.tensors
        for name in r.names()
    }


# --- Kimi Linear ---------------------------------------------------------------------------------


def test_kimi_linear_reproduces_its_index_totals_by_hand():
    """hidden 2,304, 27 layers (KDA but layers 4, 8, ..., 24 and 27, 1-based), 32 KDA heads of 128, MLA
    32 heads (nope 128, rope 64, v 128, latent 512, no query compression), 256 experts of 1,024 (8 per
    token) + 1 shared, layer 0 dense (9,216), vocab 163,840, untied."""
    h, p, d = 2304, 32 * 128, 128
    kda = (
        3 * p * h  # q_proj, k_proj, v_proj (vLLM layers/kda.py: ColumnParallelLinear(hidden, H·d))
        + 3 * p * 4  # q/k/v_conv1d [H·d, 1, short_conv_kernel_size]
        + d * h
        + p * d  # f_a_proj [d, hidden], f_b_proj [H·d, d]
        + 32
        + p  # A_log [1, 1, H, 1], dt_bias [H·d]
        + 32 * h  # b_proj [H, hidden]
        + d * h
        + p * d  # g_a_proj, g_b_proj (the low-rank output gate)
        + d  # o_norm [d]
        + h * p  # o_proj
    )
    mla = 32 * 192 * h + 576 * h + 512 + 32 * 256 * 512 + h * 32 * 128
    moe = 256 * h + 256 + 256 * 3 * h * 1024 + 3 * h * 1024
    total = 2 * 163_840 * h + h + 27 * 2 * h + 20 * kda + 7 * mla + 3 * h * 9216 + 26 * moe
    metadata, _ = index_excerpt()
    assert total == metadata["total_parameters"] == 49_122_681_728
    # BF16 throughout but A_log and dt_bias, F32 (2 more bytes for each of their 20 × 4,128 values)
    assert 2 * total + 2 * 20 * (32 + p) == metadata["total_size"] == 98_245_528_576

    anatomy = build_anatomy(spec_from_path(LINEAR))
    assert anatomy.total == total
    assert anatomy.activated == total - 26 * (256 - 8) * 3 * h * 1024  # 3,484,459,904
    assert memory_map(anatomy.spec, anatomy.model)[id(anatomy.model)].stored == 98_245_528_576
    blocks = anatomy.model.find("27 transformer blocks").children
    assert [(b.name, b.kind, b.instances) for b in blocks] == [
        ("1 dense KDA block (layer 0)", "kda-dense", 1),
        ("19 KDA MoE blocks", "kda-moe", 19),
        ("7 MLA MoE blocks", "mla-moe", 7),
    ]
    assert blocks[2].layers == (3, 7, 11, 15, 19, 23, 26)  # 1-based 4, 8, ..., 24, 27


def test_kimi_linear_tree_names_the_index_tensors():
    """Every name in the real index's windows is one the tree expects, and the tree expects the
    20,493 names the index has (18 + 15 per KDA layer, 5 per MLA layer, 773 per MoE layer)."""
    _, names = index_excerpt()
    expected = names_of(build_anatomy(spec_from_path(LINEAR)))
    assert len(names) > 40 and set(names) <= expected
    assert len(expected) == 3 + 27 * 2 + 20 * 15 + 7 * 5 + 3 + 26 * (2 + 256 * 3 + 3) == 20_493
    layer0 = {n for n in names if n.startswith("model.layers.0.")}
    assert layer0 == {n for n in expected if n.startswith("model.layers.0.")}


def test_kimi_linear_kv_cache_by_hand():
    """MLA: 7 layers × (512 + 64) × 2 B per token. KDA, vLLM's kda_state_shape and kda_state_dtype:
    convolution windows (4 − 1) × 3 × 4,096 in bf16, recurrent 32 × 128 × 128 in fp32, per layer."""
    report = json.loads(
        invoke("kv-cache", "kimi-linear", "--tokens", "1000", "--batch", "2", "--json").stdout
    )
    latent = next(entry for entry in report["layouts"] if entry["layout"] == "latent")
    assert (report["layers"], latent["bytes_per_token"]) == (7, 7 * 576 * 2)
    per_layer = 3 * 3 * 4096 * 2 + 32 * 128 * 128 * 4
    state = report["state"]
    assert state["groups"][0]["bytes_per_sequence_per_layer"] == per_layer == 2_170_880
    assert state["bytes_per_sequence"] == 20 * per_layer
    assert state["total_bytes"] == 2 * 20 * per_layer
    with_state = next(e for e in state["layouts"] if e["layout"] == "latent")
    assert with_state["total_bytes_with_state"] == 2 * 1000 * 8_064 + 2 * 20 * per_layer
    assert with_state["break_even_tokens"] == 20 * per_layer / 8_064


# --- Kimi K3 -------------------------------------------------------------------------------------

H, P, L, F = 7168, 96 * 128, 3584, 3072  # hidden, KDA width, LatentMoE latent, expert width


def k3_by_hand() -> dict[str, int]:
    """Kimi K3's parts, from its config and the engines' shapes (SGLang models/kimi_k3.py)."""
    kda = 4 * P * H + H * P + 3 * P * 4 + 128 * H + P * 128 + 128 + P + 96 * H + 128  # q,k,v,g + o; ...
    mla = 1536 * H + 1536 + 96 * 192 * 1536 + 576 * H + 512 + 96 * 256 * 512 + H * P + P * H  # + g_proj
    expert = 3 * L * F
    moe = 896 * H + 896 + L * H + L + H * L + 896 * expert + 3 * H * 2 * F
    per_layer = 2 * H + 4 * H  # two norms; attention residuals: two norms and two [1, hidden]
    total = 2 * 163_840 * H + H + 2 * H + 93 * per_layer + 69 * kda + 24 * mla + 3 * H * 33_792 + 92 * moe
    return {"kda": kda, "mla": mla, "moe": moe, "expert": expert, "total": total}


def test_k3_tree_by_hand():
    anatomy = build_anatomy(spec_from_path(K3))
    hand = k3_by_hand()
    assert anatomy.total == hand["total"] == 2_779_484_478_208  # "2.8T"
    assert anatomy.activated == hand["total"] - 92 * (896 - 16) * hand["expert"]
    blocks = anatomy.model.find("93 transformer blocks").children
    assert [(b.name, b.kind) for b in blocks] == [
        ("1 dense KDA block (layer 0)", "kda-dense"),
        ("68 KDA MoE blocks", "kda-moe"),
        ("24 MLA MoE blocks", "mla-moe"),
    ]
    kda = blocks[1].find("Kimi Delta Attention")
    assert kda.params_per_instance == hand["kda"]
    assert kda.find("Output gate").tensors[0].pattern.endswith("self_attn.g_proj.weight")
    mla = blocks[2].find("Latent attention")
    assert mla.params_per_instance == hand["mla"]
    assert [c.name for c in mla.children][-2:] == ["Output gate", "Causal attention"]
    assert mla.find("Key heads").children[1].name == "Shared unrotated key"  # mla_use_nope
    moe = blocks[2].find("Latent mixture of experts")
    assert [c.name for c in moe.children] == [
        "Router",
        "Latent down-projection",
        "Latent RMSNorm",
        "Routed experts",
        "Latent up-projection",
        "Shared experts",
    ]
    assert moe.params_per_instance == hand["moe"]
    assert blocks[2].layers[:2] == (3, 7) and blocks[2].layers[-2:] == (91, 92)  # 1-based 4, 8, ... 92, 93


def test_k3_matches_the_released_checkpoint():
    """The released shards (fixtures/kimi-k3/README.md): 497,220 tensors, 1,560,860,324,864 B. The
    tree's names, plus a second tensor for each routed expert weight (MXFP4: weight_packed and
    weight_scale), are the index's entries; its tensors at their dtypes (F32 convolutions, A_log,
    dt_bias, o_norm, router bias; BF16 the rest; MXFP4 experts: a U8 per two values and a U8 scale per 32)
    are the total size."""
    anatomy = build_anatomy(spec_from_path(K3))
    names = names_of(anatomy)
    experts = 92 * 896 * 3
    assert len(names) + experts == 497_220
    stored = 0
    for tree in (anatomy.model, anatomy.vision):
        for node in tree.walk():
            for ref in node.tensors:
                n = ref.elements * ref.copies  # a shared tensor's rows are split between two nodes
                if ".experts." in ref.pattern:
                    stored += n // 2 + n // 32
                else:
                    stored += n * (4 if ref.role.value in ("f32", "router_bias") else 2)
    assert stored == 1_560_860_324_864
    assert len(names_of(anatomy) - {n for n in names if n.startswith("language_model.")}) == 168
    assert anatomy.vision.params * 2 == 894_717_952
    a_log = next(r for n in anatomy.model.walk() for r in n.tensors if r.pattern.endswith("A_log"))
    assert a_log.shape == (128,)  # "ships F32[128]"


def test_k3_weights_as_stored_are_the_released_checkpoints_bytes():
    """kimicount's own storage model (MXFP4 experts, F32 where K3 keeps it) gives the released shards'
    1,560,860,324,864 B: 1,559,965,606,912 in the language model + 894,717,952 in the vision side
    (BF16, 447,358,976 parameters × 2)."""
    result = invoke("params", "kimi-k3", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["memory"]["stored_bytes"] + 447_358_976 * 2 == 1_560_860_324_864


def test_k3_headline_figures():
    report = json.loads(invoke("params", "kimi-k3", "--json").stdout)
    explains = {c["name"]: {e["figure"] for e in c["explains"]} for c in report["conventions"]}
    # by hand: 2,779.48B rounds to 2.8T; activated 105.36B does not give 104B, without the embedding
    # (105.36B − 1.17B = 104.19B) it does
    assert explains["parameters"] == {"2.8T"} and explains["activated"] == set()
    assert explains["activated_without_embedding"] == {"104B"}
    assert report["unexplained_figures"] == []


def test_kimi_linear_headline_figures():
    """48B: 49.12B less the embedding and head (2 × 377.5M) is 48.37B. 3B: 3.48B activated."""
    report = json.loads(invoke("params", "kimi-linear", "--json").stdout)
    explains = {c["name"]: {e["figure"] for e in c["explains"]} for c in report["conventions"]}
    assert explains["parameters"] == set()
    assert explains["parameters_without_embeddings"] == {"48B"}
    assert explains["activated"] == {"3B"}


def test_k3_kv_cache_per_token_and_per_sequence():
    """24 MLA layers × 576 × 2 = 27,648 B per token; 69 KDA layers × (3 × 3 × 12,288 × 2 +
    96 × 128 × 128 × 4) per sequence; with --tp 8 each GPU holds an eighth of the state."""
    report = json.loads(invoke("kv-cache", "kimi-k3", "--tokens", "1M", "--json").stdout)
    latent = next(entry for entry in report["layouts"] if entry["layout"] == "latent")
    assert latent["bytes_per_token"] == 24 * 576 * 2 == 27_648
    per_layer = 3 * 3 * P * 2 + 96 * 128 * 128 * 4
    state = report["state"]
    assert state["bytes_per_sequence"] == 69 * per_layer == 449_372_160
    even = next(e for e in state["layouts"] if e["layout"] == "latent")["break_even_tokens"]
    assert even == pytest.approx(449_372_160 / 27_648)  # 16,253.3 tokens
    tp8 = json.loads(invoke("kv-cache", "kimi-k3", "--tp", "8", "--json").stdout)["state"]
    assert tp8["bytes_per_sequence_per_gpu"] == 69 * (3 * 3 * P // 8 * 2 + 12 * 128 * 128 * 4)
    shapes = [t["shape_per_gpu"] for t in tp8["groups"][0]["tensors"]]
    assert shapes == [[3, 3 * P // 8], [12, 128, 128]]


def test_state_dtypes_as_the_engines_name_them():
    """--mamba-cache-dtype float32 doubles the windows; --mamba-ssm-dtype bfloat16 halves the state."""
    args = ("kv-cache", "--config", str(K3), "--json")
    both = json.loads(invoke(*args, "--mamba-cache-dtype", "float32", "--mamba-ssm-dtype", "bfloat16").stdout)
    assert both["state"]["bytes_per_sequence"] == 69 * (3 * 3 * P * 4 + 96 * 128 * 128 * 2)
    fails_cleanly(invoke(*args, "--mamba-ssm-dtype", "int8"), "--mamba-ssm-dtype 'int8'", "bfloat16")
    warned = invoke("kv-cache", "--mamba-cache-dtype", "float32", "--json")  # Kimi K2: no state
    assert warned.exit_code == 0 and "no effect" in warned.stderr


def test_human_readable_kv_cache_shows_both_parts():
    out = invoke("kv-cache", "kimi-k3", "--tokens", "1M", "--no-chart", env={"COLUMNS": "200"}).stdout
    assert "24 MLA layers (the other 69 keep a state per sequence, below)" in out
    assert "= 96 × 128 × 128 × 4" in out and "= 6,512,640 × 69" in out
    assert "28,991,029,248 B (latent) + 449,372,160 B = 29,440,401,408 B" in out
    assert "16,253.3 tokens" in out


# --- families, refusals, bad configs -------------------------------------------------------------


@pytest.mark.parametrize("command", ["measure"])  # gguf serves the family: tests/test_llama_kimi_*.py
def test_commands_that_cannot_serve_the_family_refuse_in_one_line(command, tmp_path):
    extra = {"explore": ["--output", str(tmp_path / "k3.html")]}.get(command, [])
    result = invoke(command, *(["kv_b_proj"] if command == "show" else []), "--config", str(K3), *extra)
    fails_cleanly(result, f"{command}: kimi-k3 (kimi_k3, the Kimi Linear layout", "not supported")


def test_unknown_model_type_names_the_known_ones():
    with pytest.raises(ConfigError, match="unsupported model type 'qwen3_next' .*kimi_linear, .*kimi_k3"):
        spec_from_config({"model_type": "qwen3_next"}, name="x", where="config.json")


def _k3_text(**changes):
    config = json.loads((K3 / "config.json").read_text())
    config["text_config"]["linear_attn_config"].update(changes)
    return config


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"kda_layers": [0, 1, 2]},
            "expected a list of layer numbers from 1 to 93 (1-based), found [0, 1, 2]",
        ),
        ({"kda_layers": [1, 2, 4]}, "both list layer 4"),
        ({"full_attn_layers": [4]}, "together they miss layer 8"),
    ],
)
def test_layer_lists_are_checked_one_based(changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        spec_from_config(_k3_text(**changes), name="k3", where="config.json")


def test_a_bad_k3_config_is_one_line_at_the_cli(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_k3_text(kda_layers=[0])))
    fails_cleanly(invoke("params", "--config", str(path)), "linear_attn_config: key 'kda_layers'")
