"""`show` and `explore` for the Kimi Linear family: a page for every KDA, gated-MLA, LatentMoE and
attention-residual component and for the state and its gates, with the code evidence located by ast in
a modeling_kimi_linear.py.

The modeling file read here, tests/data/modeling_kimi_linear.py.txt, was written for these tests with
the structure of Moonshot's modeling_kimi_linear.py (K3's, as public copies keep it): its classes,
their attributes, the if/elif that picks a layer's attention (`config.is_kda_layer(layer_idx)`, then
`config.is_mla`), and the forward passes' statements. The line numbers asserted are that file's, read
from it. The state's bytes are vLLM's kda_state_shape and kda_state_dtype worked out by hand (as in
tests/test_kimi_linear.py): (4 − 1) × 3 × 12,288 × 2 + 96 × 128 × 128 × 4 = 6,512,640 B per K3 layer.
"""

from __future__ import annotations

import json

import pytest

from kimicount.explorer.build import load_explorer
from kimicount.explorer.evidence import ModelingIndex

from .helpers import FIXTURES, ROOT, invoke

K3 = FIXTURES / "kimi-k3"
LINEAR = FIXTURES / "kimi-linear-48b-a3b"
MODELING = ROOT / "tests" / "data" / "modeling_kimi_linear.py.txt"

#: Every component of the family's trees that the DeepSeek-V3 layout does not have.
NEW_COMPONENTS = (
    "Kimi Delta Attention",
    "Query projection",
    "Key projection",
    "Value projection",
    "Short convolutions",
    "Decay projection",
    "Decay rates",
    "Update strength β",
    "Output gate",
    "Output norm",
    "Output projection",
    "Shared unrotated key",
    "Latent mixture of experts",
    "Latent down-projection",
    "Latent RMSNorm",
    "Latent up-projection",
    "Attention residuals",
    "Output attention residual",
)


@pytest.fixture(scope="module")
def k3():
    return load_explorer(K3, None, None, MODELING, None)


def page(pages, name):
    return next(p for p in pages if p.name == name and p.main)


def lines(found) -> list[tuple[int, int, str]]:
    return [(e.start, e.end, e.role) for e in found]


def test_every_new_component_has_words_shapes_and_evidence(k3):
    for name in NEW_COMPONENTS:
        p = page(k3, name)
        assert p.role and p.formula and p.code, name
        assert p.evidence and all(
            e.file == "modeling_kimi_linear.py.txt" for e in p.evidence if e.role != "config"
        ), name
        if name not in ("Attention residuals", "Output attention residual"):
            assert p.outputs, name
    assert k3.findings == ()  # every tensor sits where its name says, every Linear of its size


def test_the_state_pages_say_what_each_mode_reads_and_writes(k3):
    state = k3["recurrent_state"]
    assert state.role.startswith("each KDA head's 128 × 128 memory")
    prefill, decode = (m.cache for m in state.modes)
    assert "chunked" in prefill and "writes S once" in prefill
    assert "reads S" in decode and "overwrites it" in decode and "same cost at any L" in decode
    # the bindings of recurrent_state in KimiDeltaAttention.forward, and its write into the cache
    assert lines(state.evidence) == [
        (158, 158, "definition"),
        (162, 162, "definition"),
        (172, 184, "definition"),  # chunk_kda: the prefill's
        (186, 198, "definition"),  # fused_recurrent_kda: the decode step's
        (200, 200, "use"),  # cache_params.recurrent_states[self.layer_idx] = recurrent_state
    ]
    windows = k3["conv_state_q"]
    assert [e.start for e in windows.evidence] == [157, 161, 166, 201]
    assert lines(k3["chunk_kda"].evidence) == [(172, 184, "use")]
    assert lines(k3["fused_recurrent_kda"].evidence) == [(186, 198, "use")]
    for activation in ("decay_gate", "beta", "output_gate", "latent", "block_residual"):
        assert k3[activation].evidence, activation


def test_a_layers_attention_is_the_class_its_config_chooses():
    """KimiDecoderLayer sets self_attn in an if/elif: KDA where (i + 1) is in kda_layers (1-based),
    MLA elsewhere. K3's layer 3 (the config's 4) is MLA, layer 92 (93) too; Kimi Linear's 26 (27)."""
    text = MODELING.read_text()
    k3_config = json.loads((K3 / "config.json").read_text())["text_config"]
    linear_config = json.loads((LINEAR / "config.json").read_text())
    index = ModelingIndex.parse(text, file="m.py", config=k3_config)
    classes = [index.module_class(f"model.layers.{i}.self_attn") for i in (0, 2, 3, 4, 92)]
    assert classes == ["KimiDeltaAttention"] * 2 + [
        "KimiMLAAttention",
        "KimiDeltaAttention",
        "KimiMLAAttention",
    ]
    index = ModelingIndex.parse(text, file="m.py", config=linear_config)
    assert [index.module_class(f"model.layers.{i}.self_attn") for i in (25, 26)] == [
        "KimiDeltaAttention",
        "KimiMLAAttention",
    ]
    # K3's full-rank gate and MLA query compression, Kimi Linear's low-rank gate and plain q_proj
    assert index.linear_shape("KimiMLAAttention", "q_proj") == (32 * 192, 2304)
    assert index.check_shape("KimiDeltaAttention", "g_b_proj", (32 * 128, 128)) is True


def test_kv_cache_counts_the_mla_layers_and_the_state_apart(k3):
    attention = page(k3, "Latent attention")
    latent = next(r for r in attention.kv if r.layout == "latent")
    assert (latent.layers, latent.per_token) == (24, 24 * 576 * 2)  # 27,648 B
    assert "6,512,640 B a layer; × 69 = 449,372,160 B per sequence" in k3["model"].kv_note
    kda_blocks = page(k3, "68 KDA MoE blocks")
    assert kda_blocks.kv == () and "× 68 = 442,859,520 B" in kda_blocks.kv_note


def test_show_prints_a_kda_page_and_explore_writes_them_all(tmp_path):
    out = invoke("show", "Short convolutions", "--config", str(K3), env={"COLUMNS": "200"}).stdout
    assert "a causal depthwise convolution of 4 positions on each of q, k and v" in out
    assert "reads the 3 cached inputs of q, k and v" in out
    assert "reads conv windows [B batch, 3 past positions, 36,864 q, k, v channels]" in out
    state = invoke("show", "68 KDA MoE blocks", "--config", str(K3), env={"COLUMNS": "200"}).stdout
    assert "State per sequence" in state
    linear = json.loads(invoke("show", "Output gate", "--config", str(LINEAR), "--json").stdout)
    assert linear["formula"] == "o ← o ⊙ σ(x W_g)"
    result = invoke(
        "explore", "--config", str(K3), "--modeling", str(MODELING), "--output", str(tmp_path / "k3.html")
    )
    assert result.exit_code == 0, result.output
    html = (tmp_path / "k3.html").read_text()
    assert "Recurrent delta rule" in html and "State per sequence" in html
