"""Code evidence: the lines of modeling_deepseek.py and config.json behind each part of the tree.

The modeling file read here, tests/data/modeling_deepseek.py.txt, was written for these tests with the
structure of moonshotai/Kimi-K2-Instruct's modeling_deepseek.py at revision fd1984e2b7a3 (and
DeepSeek-V3's): the same classes, attributes and forward-pass statements on the same lines. The line
numbers asserted are the issue's reference figures (definitions 662–688, the latent 776–789 with
compressed_kv made at 777, the prefill attention 799–840, the output 848–852, RMSNorm 94–111), and, for
the other classes, the real file's lines as read from it (noted where used). config.json is the real
Kimi-K2-Instruct config (quantization_config at lines 38–46).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimicount.anatomy import build_anatomy
from kimicount.errors import ConfigError, KimicountError, SourceError, UsageError
from kimicount.explorer.evidence import Evidence, ModelingError, ModelingIndex, config_evidence
from kimicount.explorer.modeling import (
    MAX_MODELING_BYTES,
    absent_message,
    auto_map_entry,
    find_modeling,
    load_sources,
    read_modeling_file,
)
from kimicount.spec import bundled_spec, spec_from_path

from .fakehub import FakeHub
from .helpers import KIMI_K2, ROOT, fails_cleanly, invoke

MODELING = ROOT / "tests" / "data" / "modeling_deepseek.py.txt"
TEXT = MODELING.read_text(encoding="utf-8")
REVISION = "fd1984e2b7a3"
ATTENTION = "DeepseekV3Attention"
PROJECTIONS = [
    "q_a_proj",
    "q_a_layernorm",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_a_layernorm",
    "kv_b_proj",
    "o_proj",
]


@pytest.fixture
def index() -> ModelingIndex:
    return ModelingIndex.parse(TEXT, file="modeling_deepseek.py", revision=REVISION)


def spans(found: list[Evidence]) -> list[tuple[int, int, str]]:
    return [(e.start, e.end, e.role) for e in found]


def first_and_last_line(evidence: Evidence) -> tuple[str, str]:
    lines = evidence.excerpt.split("\n")
    assert len(lines) == evidence.end - evidence.start + 1
    return lines[0].strip(), lines[-1].strip()


# --- the reference figures -----------------------------------------------------------------


def test_rms_norm_class_is_lines_94_to_111_with_its_registration(index):
    (evidence,) = index.class_("DeepseekV3RMSNorm")
    assert (evidence.start, evidence.end, evidence.role) == (94, 111, "definition")
    assert first_and_last_line(evidence) == (
        "class DeepseekV3RMSNorm(nn.Module):",
        "ALL_LAYERNORM_LAYERS.append(DeepseekV3RMSNorm)",
    )
    assert evidence.file == "modeling_deepseek.py" and evidence.revision == REVISION


def test_attention_definitions_are_lines_662_to_688(index):
    block = index.init_span(ATTENTION, [*PROJECTIONS, "rotary_emb"])
    assert (block.start, block.end) == (662, 688)
    assert first_and_last_line(block) == ("self.q_a_proj = nn.Linear(", "self._init_rope()")
    # each projection's own definition lies in that block, the whole (multi-line) statement
    definitions = {attr: spans(index.attribute(ATTENTION, attr))[0] for attr in PROJECTIONS}
    assert definitions == {
        "q_a_proj": (662, 664, "definition"),
        "q_a_layernorm": (665, 665, "definition"),
        "q_b_proj": (666, 668, "definition"),
        "kv_a_proj_with_mqa": (670, 674, "definition"),
        "kv_a_layernorm": (675, 675, "definition"),
        "kv_b_proj": (676, 681, "definition"),
        "o_proj": (683, 687, "definition"),
    }


def test_key_content_up_projection_is_defined_and_used(index):
    found = index.attribute(ATTENTION, "kv_b_proj")
    assert spans(found) == [(676, 681, "definition"), (781, 785, "use")]
    assert found[0].excerpt.split("\n")[0] == "        self.kv_b_proj = nn.Linear("
    assert "self.kv_b_proj(self.kv_a_layernorm(compressed_kv))" in found[1].excerpt
    assert index.findings() == []


def test_rotary_embedding_is_defined_through_init_rope(index):
    found = spans(index.attribute(ATTENTION, "rotary_emb"))
    # the call in __init__, the four assignments in _init_rope (one per scaling type), the use in forward
    assert found == [
        (688, 688, "definition"),
        (700, 704, "definition"),
        (709, 714, "definition"),
        (716, 721, "definition"),
        (734, 740, "definition"),
        (799, 799, "use"),
    ]


def test_the_latent_is_made_at_777_within_776_to_789(index):
    made = index.activation(ATTENTION, "compressed_kv")
    # first the projection (576 wide), then the split that leaves the 512-wide latent: line 777
    assert spans(made) == [(776, 776, "definition"), (777, 779, "definition")]
    assert made[1].excerpt.split("\n")[0] == "        compressed_kv, k_pe = torch.split("
    (last,) = index.activation(ATTENTION, "value_states")[:1]
    latent = index.span(made[0], last)
    assert (latent.start, latent.end) == (776, 789)
    assert first_and_last_line(latent) == (
        "compressed_kv = self.kv_a_proj_with_mqa(hidden_states)",
        ")",
    )


def test_prefill_attention_is_799_to_840_and_output_848_to_852(index):
    cos = index.activation(ATTENTION, "cos")
    outputs = index.activation(ATTENTION, "attn_output")
    assert [e.start for e in outputs] == [840, 848, 850, 852]
    prefill = index.span(cos[0], outputs[0])
    assert (prefill.start, prefill.end) == (799, 840)
    assert first_and_last_line(prefill) == (
        "cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)",
        "attn_output = torch.matmul(attn_weights, value_states)",
    )
    output = index.span(outputs[1], outputs[-1])
    assert (output.start, output.end) == (848, 852)
    assert output.excerpt.split("\n")[-1].strip() == "attn_output = self.o_proj(attn_output)"
    assert spans(index.attribute(ATTENTION, "o_proj"))[-1] == (852, 852, "use")


def test_the_attention_passages_the_pages_cite(index):
    assert index.attention_class() == ATTENTION
    passages = index.attention_passages()
    assert {name: (e.start, e.end) for name, e in passages.items()} == {
        "projections": (662, 688),
        "query": (768, 774),
        "latent": (776, 789),
        "prefill attention": (799, 840),
        "output": (848, 852),
    }
    assert {e.role for e in passages.values()} == {"definition"}
    assert index.findings() == []


def test_operations_are_the_calls_that_perform_them(index):
    assert spans(index.calls(ATTENTION, "softmax")) == [(834, 836, "use")]
    assert spans(index.calls(ATTENTION, "apply_rotary_pos_emb")) == [(801, 801, "use")]
    assert spans(index.calls(ATTENTION, "rotary_emb")) == [(799, 799, "use")]
    assert index.calls(ATTENTION, "flash_attn_func") == []
    assert index.findings() == ["modeling_deepseek.py: DeepseekV3Attention.forward calls no flash_attn_func"]


def test_router_and_expert_activations(index):
    # lines of the real file: the router's scores at 431, its choice 459–461 and weights 462, 471,
    # 472; an expert's output at 585 in moe_infer, the weighted sum at 602–608
    router = index.module_class("model.layers.1.mlp.gate")
    assert router == "MoEGate"
    assert spans(index.activation(router, "scores")) == [(431, 431, "definition")]
    assert [e.start for e in index.activation(router, "topk_idx")] == [459]
    assert [e.start for e in index.activation(router, "topk_weight")] == [462, 471, 472]
    moe = index.module_class("model.layers.1.mlp")
    assert spans(index.activation(moe, "expert_out", method="moe_infer")) == [(585, 585, "definition")]
    assert spans(index.activation(moe, "final_out", method="moe_infer")) == [(602, 608, "definition")]
    assert spans(index.activation(moe, "y")) == [(530, 530, "definition"), (532, 532, "definition")]
    assert index.findings() == []


def test_line_ends_are_pythons():
    # Windows line ends, and a form feed, which str.splitlines() would count as a line end and
    # Python does not: the lines stay those the parser numbers
    text = TEXT.replace("\n", "\r\n").replace(
        "class DeepseekV3RotaryEmbedding", "\x0cclass DeepseekV3RotaryEmbedding"
    )
    index = ModelingIndex.parse(text, file="modeling_deepseek.py")
    (norm,) = index.class_("DeepseekV3RMSNorm")
    assert (norm.start, norm.end) == (94, 111) and "\r" not in norm.excerpt
    assert spans(index.attribute(ATTENTION, "kv_b_proj"))[0] == (676, 681, "definition")


def test_attention_weights_and_rotary_parts(index):
    assert spans(index.activation(ATTENTION, "attn_weights"))[0] == (816, 818, "definition")
    assert [e.start for e in index.activation(ATTENTION, "q_pe")] == [772, 801]
    assert [e.start for e in index.activation(ATTENTION, "k_pe")] == [777, 780, 801]
    # the flash-attention subclass has its own forward that makes the latent too
    assert index.activation_classes("compressed_kv") == [ATTENTION, "DeepseekV3FlashAttention2"]


# --- module paths, from the file's own structure ---------------------------------------------------


def test_tensor_names_resolve_through_the_files_classes(index):
    steps = index.resolve("model.layers.5.self_attn.kv_b_proj.weight")
    assert [(s.owner, s.attr, s.holds, s.external) for s in steps] == [
        ("DeepseekV3ForCausalLM", "model", ("DeepseekV3Model",), None),
        ("DeepseekV3Model", "layers", ("DeepseekV3DecoderLayer",), None),
        # ATTENTION_CLASSES[...] holds the attention class and its flash subclass: the class is taken
        ("DeepseekV3DecoderLayer", "self_attn", (ATTENTION,), None),
        (ATTENTION, "kv_b_proj", (), "nn.Linear"),
    ]
    # `mlp` is a DeepseekV3MoE or a DeepseekV3MLP: the one with the next attribute
    assert index.resolve("model.layers.0.mlp.gate_proj.weight")[2].holds == ("DeepseekV3MLP",)
    assert index.resolve("model.layers.1.mlp.gate.weight")[2].holds == ("DeepseekV3MoE",)
    assert index.resolve("model.layers.1.mlp")[2].holds == ("DeepseekV3MoE", "DeepseekV3MLP")
    expert = index.resolve("model.layers.1.mlp.experts.7.down_proj.weight")
    assert [(s.owner, s.attr) for s in expert[-2:]] == [
        ("DeepseekV3MoE", "experts"),
        ("DeepseekV3MLP", "down_proj"),
    ]
    assert index.resolve("model.layers.1.mlp.gate.e_score_correction_bias")[-1].external == "nn.Parameter"
    assert index.findings() == []


def test_evidence_of_tensors(index):
    # lines of the real file: the decoder layer's input_layernorm at 1161–1163, used at 1200;
    # lm_head at 1522, used at 1615; the MoE's experts (two branches) at 491–503 and 508–515, used
    # in moe_infer (which forward calls) at 537 and 583
    assert spans(index.path_evidence("model.layers.3.input_layernorm.weight")) == [
        (1161, 1163, "definition"),
        (1200, 1200, "use"),
        (94, 111, "definition"),
    ]
    assert spans(index.path_evidence("lm_head.weight")) == [(1522, 1522, "definition"), (1615, 1615, "use")]
    assert spans(index.path_evidence("model.layers.1.mlp.experts")) == [
        (491, 503, "definition"),
        (508, 515, "definition"),
        (537, 537, "use"),
        (583, 583, "use"),
        (374, 390, "definition"),
    ]


def test_components_of_the_tree():
    index = ModelingIndex.parse(TEXT, file="modeling_deepseek.py", revision=REVISION)
    model = build_anatomy(bundled_spec()).model
    moe = model.find("61 transformer blocks", "60 MoE blocks (layers 1–60)")
    attention = moe.find("Latent attention")
    key_heads = attention.find("Key heads")
    up = key_heads.find("Key content up-projection")
    assert spans(index.component_evidence(up, key_heads)) == [(676, 681, "definition"), (781, 785, "use")]
    # Latent attention is the decoder layer's self_attn (1148–1150, called at 1203–1211) and the class:
    # its head (628 and the docstring at 629), not its 230 lines (issue 27: a page of 477 lines); its
    # forward's passages are cited apart
    assert spans(index.component_evidence(attention, moe)) == [
        (1148, 1150, "definition"),
        (1203, 1211, "use"),
        (628, 629, "definition"),
    ]
    # Key heads sit in self_attn beside other components: the evidence of its two parts
    assert spans(index.component_evidence(key_heads, attention)) == [
        (676, 681, "definition"),
        (781, 785, "use"),
        (670, 674, "definition"),
        (776, 776, "use"),
    ]
    query = attention.find("Query compression")
    assert spans(index.component_evidence(query, attention)) == [
        (662, 664, "definition"),
        (770, 770, "use"),
        (665, 665, "definition"),
        (94, 111, "definition"),
    ]
    dense = model.find("61 transformer blocks", "1 dense block (layer 0)")
    assert spans(index.component_evidence(dense.find("Dense MLP"), dense))[-1] == (374, 390, "definition")
    # the MoE class (476–609) by its head, 476–479 with the docstring, and its short forward, 523–533
    assert spans(index.component_evidence(moe.find("Mixture of experts"), moe))[-2:] == [
        (476, 479, "definition"),
        (523, 533, "use"),
    ]
    assert index.findings() == []


# --- findings ---------------------------------------------------------------------------------------


def test_a_missing_attribute_is_a_finding(index):
    assert index.attribute(ATTENTION, "wkv_b") == []
    assert index.path_evidence("model.layers.61.eh_proj.weight") == []
    assert index.attribute("DeepseekV4Attention", "kv_b_proj") == []
    assert index.findings() == [
        "modeling_deepseek.py: DeepseekV3Attention defines no attribute 'wkv_b'",
        "modeling_deepseek.py: model.layers.61.eh_proj.weight: DeepseekV3DecoderLayer defines no attribute 'eh_proj'",
        "modeling_deepseek.py: no class DeepseekV4Attention (looked for its attribute 'kv_b_proj')",
    ]


def test_linear_shapes_work_out_with_the_config(index):
    config = json.loads((KIMI_K2 / "config.json").read_text())
    # by hand from Kimi K2's config: 64 heads × (128 + 128) = 16,384 rows of kv_lora_rank 512;
    # 64 × (128 + 64) = 12,288 query rows of q_lora_rank 1,536; 512 + 64 = 576; o_proj 7,168 × 64·128
    assert index.linear_shape(ATTENTION, "kv_b_proj", config) == (16_384, 512)
    assert index.linear_shape(ATTENTION, "q_b_proj", config) == (12_288, 1_536)
    assert index.linear_shape(ATTENTION, "kv_a_proj_with_mqa", config) == (576, 7_168)
    assert index.linear_shape(ATTENTION, "o_proj", config) == (7_168, 8_192)
    assert index.check_shape(ATTENTION, "kv_b_proj", (16_384, 512), config) is True
    assert index.linear_shape("DeepseekV3MLP", "gate_proj", config) is None  # sized by its caller
    assert index.findings() == []


def test_the_config_decides_what_the_file_leaves_to_it():
    # Kimi K2: first_k_dense_replace 1, so layer 0's mlp is the dense MLP and layer 1's the MoE;
    # DeepSeek-V3: first_k_dense_replace 3
    for name, dense, moe in (("kimi-k2-instruct", 0, 1), ("deepseek-v3", 2, 3)):
        config = json.loads((ROOT / "fixtures" / name / "config.json").read_text())
        index = ModelingIndex.parse(TEXT, file="modeling_deepseek.py", config=config)
        assert index.module_class(f"model.layers.{dense}.mlp") == "DeepseekV3MLP"
        assert index.module_class(f"model.layers.{moe}.mlp") == "DeepseekV3MoE"
    config = json.loads((KIMI_K2 / "config.json").read_text())
    index = ModelingIndex.parse(TEXT, file="modeling_deepseek.py", config=config)
    # an expert's width is its constructor's argument: moe_intermediate_size 2,048 (hidden 7,168);
    # the shared expert's moe_intermediate_size × n_shared_experts = 2,048 × 1; the dense MLP's 18,432
    widths = {}
    for path in (
        "model.layers.1.mlp.experts.5.up_proj",
        "model.layers.1.mlp.shared_experts.up_proj",
        "model.layers.0.mlp.up_proj",
    ):
        step = index.resolve(path)[-1]
        widths[path.split(".")[4]] = index.linear_shape(step.owner, step.attr, bindings=step.bindings)
    assert widths == {"experts": (2_048, 7_168), "shared_experts": (2_048, 7_168), "up_proj": (18_432, 7_168)}


def test_the_whole_tree_is_checked_against_the_file():
    for name in ("kimi-k2-instruct", "deepseek-v3", "deepseek-v2-lite"):
        spec = spec_from_path(ROOT / "fixtures" / name / "config.json")
        config = json.loads((ROOT / "fixtures" / name / "config.json").read_text())
        index = ModelingIndex.parse(TEXT, file="modeling_deepseek.py", config=config)
        assert index.check_tree(build_anatomy(spec).model, spec.weight_prefix) == [], name
    # DeepSeek-V3.2's lightning indexer is not in a DeepSeek-V3 modeling file: each tensor a finding
    spec = spec_from_path(ROOT / "fixtures" / "deepseek-v3.2-exp" / "config.json")
    index = ModelingIndex.parse(TEXT, file="modeling_deepseek.py", config={})
    findings = index.check_tree(build_anatomy(spec).model, spec.weight_prefix)
    assert findings[0] == (
        "modeling_deepseek.py: model.layers.0.self_attn.indexer.wq_b.weight: "
        "DeepseekV3Attention defines no attribute 'indexer'"
    )
    assert all("defines no attribute 'indexer'" in finding for finding in findings)


def test_experts_of_another_width_are_a_finding():
    # a file that builds its routed experts as wide as the dense MLP: 18,432 where the tree has 2,048
    text = TEXT.replace(
        "                    DeepseekV3MLP(\n                        config, intermediate_size=config.moe_intermediate_size\n"
        "                    )\n                    for i in range(config.n_routed_experts)",
        "                    DeepseekV3MLP(\n                        config, intermediate_size=config.intermediate_size\n"
        "                    )\n                    for i in range(config.n_routed_experts)",
    )
    assert text != TEXT
    config = json.loads((KIMI_K2 / "config.json").read_text())
    index = ModelingIndex.parse(text, file="modeling_deepseek.py", config=config)
    expected = [
        (
            f"modeling_deepseek.py: model.layers.1.mlp.experts.0.{name}.weight: DeepseekV3MLP.{name} "
            f"(line {line}) is a Linear of {found} with this config; the tree expects {tree}"
        )
        for name, line, found, tree in (
            ("gate_proj", 383, "[18,432, 7,168]", "[2,048, 7,168]"),
            ("up_proj", 384, "[18,432, 7,168]", "[2,048, 7,168]"),
            ("down_proj", 385, "[7,168, 18,432]", "[7,168, 2,048]"),
        )
    ]
    assert index.check_tree(build_anatomy(bundled_spec()).model) == expected
    assert index.check_tensor("model.layers.0.mlp.gate_proj.weight", (18_432, 7_168)) is True  # dense: 18,432
    assert index.check_tensor("model.layers.0.input_layernorm.weight", (7_168,)) is None  # not a Linear


def test_another_shape_expression_is_a_finding():
    # a file whose kv_b_proj leaves out the value heads: 64 × 128 rows, where the tree expects 64 × 256
    text = TEXT.replace(
        "* (self.q_head_dim - self.qk_rope_head_dim + self.v_head_dim),",
        "* (self.q_head_dim - self.qk_rope_head_dim),",
    )
    assert text != TEXT
    index = ModelingIndex.parse(text, file="modeling_deepseek.py", revision=None)
    config = json.loads((KIMI_K2 / "config.json").read_text())
    assert index.check_shape(ATTENTION, "kv_b_proj", (16_384, 512), config) is False
    assert index.findings() == [
        (
            "modeling_deepseek.py: DeepseekV3Attention.kv_b_proj (lines 676–681) is a Linear of [8,192, 512] "
            "with this config; the tree expects [16,384, 512]"
        )
    ]


# --- config.json --------------------------------------------------------------------------------------


def test_config_evidence_of_the_real_kimi_k2_config():
    text = (KIMI_K2 / "config.json").read_text()
    found = config_evidence(
        text, ["quantization_config", "kv_lora_rank", "auto_map", "vocab_size"], revision=None
    )
    assert [(e.file, e.start, e.end, e.role) for e in found] == [
        ("config.json", 38, 46, "config"),
        ("config.json", 20, 20, "config"),
        ("config.json", 7, 11, "config"),
        ("config.json", 68, 68, "config"),
    ]
    assert found[0].excerpt.split("\n") == [
        '  "quantization_config": {',
        '    "activation_scheme": "dynamic",',
        '    "fmt": "e4m3",',
        '    "quant_method": "fp8",',
        '    "weight_block_size": [',
        "      128,",
        "      128",
        "    ]",
        "  },",
    ]
    assert found[1].excerpt == '  "kv_lora_rank": 512,'


def test_config_evidence_reads_tokens_not_lines():
    text = '{"a": {"b": "}\\" ,", "c": [1, {"d": 2}]},\n "e":\n  3, "q": "x\\ny",\r\n"a2": null}'
    found = config_evidence(text, ["a", "e", "a2", "missing", "b"], revision="abc")
    assert [(e.start, e.end) for e in found] == [(1, 1), (2, 3), (4, 4)]
    assert found[0].revision == "abc"
    with pytest.raises(ConfigError, match=r"^config.json: not valid JSON \(Expecting"):
        config_evidence('{"a": ', ["a"], revision=None)
    with pytest.raises(ConfigError, match=r"^config.json: expected a JSON object, found a JSON list$"):
        config_evidence("[1]", ["a"], revision=None)


# --- where the modeling file comes from ---------------------------------------------------------------


def kimi_config() -> dict:
    return json.loads((KIMI_K2 / "config.json").read_text())


def test_the_config_names_the_modeling_file():
    assert auto_map_entry(kimi_config()) == ("modeling_deepseek.py", "DeepseekV3ForCausalLM")
    with pytest.raises(ModelingError, match=r"^c.json: no auto_map naming the modeling file"):
        auto_map_entry({"auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}}, "c.json")
    with pytest.raises(
        ModelingError,
        match=r"^config.json: auto_map names '\.\./\.\./etc/passwd\.x', a path outside the repo; expected module",
    ):
        auto_map_entry({"auto_map": {"AutoModel": "../../etc/passwd.x"}})
    with pytest.raises(ModelingError, match=r"^config.json: auto_map names 'modeling-x\.Y', expected module"):
        auto_map_entry({"auto_map": {"AutoModel": "modeling-x.Y"}})


def test_an_auto_map_pointing_outside_the_repo_is_refused_by_show(tmp_path):
    # it was passed over, and the page's hint then read "hf download REPO the modeling file config.json"
    config = kimi_config()
    config["auto_map"] = {"AutoModelForCausalLM": "../../../tmp/evil.Class"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    fails_cleanly(
        invoke("show", "kv_b_proj", "--config", str(tmp_path)),
        f"{tmp_path}/config.json: auto_map names '../../../tmp/evil.Class', a path outside the repo",
    )
    # no auto_map at all: evidence was not asked for; the page says what it needs, in words
    del config["auto_map"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    shown = invoke("show", "kv_b_proj", "--config", str(tmp_path))
    assert shown.exit_code == 0 and "hf download" not in shown.stdout
    assert (
        "Code evidence needs the model's modeling file: config.json has no auto_map naming it; give it "
        "with --modeling FILE." in " ".join(shown.stdout.split())
    )


def test_beside_the_config(tmp_path):
    (tmp_path / "config.json").write_bytes((KIMI_K2 / "config.json").read_bytes())
    (tmp_path / "modeling_deepseek.py").write_text(TEXT)
    found = find_modeling(kimi_config(), config_path=tmp_path / "config.json")
    assert (found.name, found.origin, found.revision, found.model_class) == (
        "modeling_deepseek.py",
        "beside config.json",
        None,
        "DeepseekV3ForCausalLM",
    )
    assert found.index().init_span(ATTENTION, PROJECTIONS).start == 662
    # a folder given as --config works the same; a Hub cache snapshot's folder names the commit
    snapshot = tmp_path / "snapshots" / ("ab" * 20)
    snapshot.mkdir(parents=True)
    (snapshot / "modeling_deepseek.py").write_text(TEXT)
    assert find_modeling(kimi_config(), config_path=snapshot).revision == "ab" * 20


def test_given_explicitly(tmp_path):
    path = tmp_path / "my_model.py"
    path.write_text(TEXT)
    found = find_modeling(kimi_config(), modeling=path, modeling_revision="0123abc", config_path=KIMI_K2)
    assert (found.name, found.origin, found.revision) == ("my_model.py", "--modeling", "0123abc")
    snapshot = tmp_path / "snapshots" / ("cd" * 20)
    snapshot.mkdir(parents=True)
    (snapshot / "modeling_deepseek.py").write_text(TEXT)
    assert find_modeling(kimi_config(), modeling=snapshot / "modeling_deepseek.py").revision == "cd" * 20
    # a config without auto_map is no obstacle when the file is given
    assert find_modeling({}, modeling=path).index().root == "DeepseekV3ForCausalLM"


def test_absent_without_a_source():
    # the bundled config's folder has no modeling file, and no repo is named: no evidence, and why
    assert find_modeling(kimi_config(), config_path=KIMI_K2 / "config.json") is None
    assert find_modeling(kimi_config()) is None
    assert absent_message(kimi_config(), "moonshotai/Kimi-K2-Instruct") == (
        "code evidence needs modeling_deepseek.py: `hf download moonshotai/Kimi-K2-Instruct "
        "modeling_deepseek.py config.json --local-dir DIR` then --config DIR, or --modeling FILE"
    )


def test_sources_for_the_cli_options(tmp_path):
    # the bundled config: config.json evidence, no modeling file, and the message that says why
    bundled = load_sources()
    assert (bundled.index, bundled.modeling, bundled.config_revision) == (None, None, None)
    assert bundled.absent.startswith(
        "code evidence needs modeling_deepseek.py: `hf download moonshotai/Kimi-K2-Instruct "
    )
    assert [(e.start, e.end) for e in bundled.config_lines(["quantization_config"])] == [(38, 46)]
    # a checkpoint folder as `hf download` leaves it: config.json and modeling_deepseek.py side by side
    (tmp_path / "config.json").write_bytes((KIMI_K2 / "config.json").read_bytes())
    (tmp_path / "modeling_deepseek.py").write_text(TEXT)
    folder = load_sources(config=tmp_path)
    assert folder.absent is None and folder.modeling.origin == "beside config.json"
    assert folder.index.module_class("model.layers.0.self_attn") == ATTENTION
    assert spans(folder.index.attribute(ATTENTION, "kv_b_proj"))[0] == (676, 681, "definition")
    # --modeling over the bundled config
    given = load_sources(modeling=MODELING, modeling_revision=REVISION)
    assert (given.modeling.origin, given.index.revision) == ("--modeling", REVISION)
    # a --config without a modeling file beside it: the message names no repo
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_bytes((KIMI_K2 / "config.json").read_bytes())
    assert (
        "`hf download REPO modeling_deepseek.py config.json" in load_sources(config=tmp_path / "bare").absent
    )
    with pytest.raises(UsageError, match=r"^name the model once: --config or --repo, not both$"):
        load_sources(config=tmp_path, repo="moonshotai/Kimi-K2-Instruct")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ConfigError, match=r"list.json: expected a JSON object, found a JSON list$"):
        load_sources(config=tmp_path / "list.json")


HUB_SCRIPT = """
import json, sys
from kimicount.errors import KimicountError
from kimicount.explorer.modeling import load_sources
try:
    found = load_sources(repo=sys.argv[1], revision=sys.argv[2] if len(sys.argv) > 2 else None)
except KimicountError as error:
    print(json.dumps({"error": str(error)}))
else:
    lines = found.index.init_span("DeepseekV3Attention", ["q_a_proj", "o_proj"])
    quantization = found.config_lines(["quantization_config"])[0]
    print(json.dumps({"origin": found.modeling.origin, "revision": found.modeling.revision,
                      "config": [found.config_revision, quantization.start, quantization.end],
                      "lines": [lines.start, lines.end]}))
"""


def hub_run(env: dict[str, str], *args: str) -> dict:
    import subprocess

    result = subprocess.run(
        [sys.executable, "-c", HUB_SCRIPT, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_from_the_hub_at_the_configs_commit(httpserver, tmp_path):
    fake = FakeHub()
    commit = "fd1984e2b7a3" + "0" * 28
    files = {"config.json": (KIMI_K2 / "config.json").read_bytes(), "modeling_deepseek.py": TEXT.encode()}
    fake.add_repo("moonshotai/Kimi-K2-Instruct", files, commit=commit)
    env = fake.client_env(httpserver, tmp_path)
    assert hub_run(env, "moonshotai/Kimi-K2-Instruct") == {
        "origin": "the Hub",
        "revision": commit,
        "config": [commit, 38, 46],
        "lines": [662, 687],
    }
    # config.json on main, then the modeling file at the commit main resolved to, one GET each
    gets = [path for method, path, _ in fake.requests if method == "GET"]
    assert gets == [
        "/moonshotai/Kimi-K2-Instruct/resolve/main/config.json",
        f"/moonshotai/Kimi-K2-Instruct/resolve/{commit}/modeling_deepseek.py",
    ]
    # again with the Hub out of reach: both from the cache
    offline = {**env, "HF_ENDPOINT": "http://127.0.0.1:9"}
    assert hub_run(offline, "moonshotai/Kimi-K2-Instruct", commit)["revision"] == commit
    # a repo without the file: one line that names it
    fake.add_repo("org/no-code", files={"config.json": files["config.json"]}, commit="1" * 40)
    # one over 1 MiB: refused as the Hub states its size, before it is downloaded
    oversized = tmp_path / "oversized.py"
    with oversized.open("wb") as handle:
        handle.truncate(MAX_MODELING_BYTES + 1)
    fake.add_repo("org/huge-code", {**files, "modeling_deepseek.py": oversized}, commit="2" * 40)
    assert hub_run(env, "org/huge-code") == {
        "error": f"org/huge-code@{'2' * 12}: modeling_deepseek.py: 1,048,577 bytes, more than any modeling "
        "file (1,048,576 at most)"
    }
    assert hub_run(env, "org/no-code") == {
        "error": f"org/no-code@{'1' * 12}: no file 'modeling_deepseek.py' in the repo"
    }


# --- bad input: one line, a KimicountError (exit 2 in the CLI) ------------------------------------


def test_bad_modeling_files(tmp_path):
    def refused(path: Path) -> str:
        with pytest.raises(ModelingError) as caught:
            read_modeling_file(path).index()
        message = str(caught.value)
        assert "\n" not in message and isinstance(caught.value, KimicountError)
        return message

    assert refused(tmp_path / "absent.py") == f"{tmp_path / 'absent.py'}: no such file"
    assert refused(tmp_path) == f"{tmp_path}: not a regular file"
    big = tmp_path / "big.py"
    with big.open("wb") as handle:
        handle.truncate(MAX_MODELING_BYTES + 1)
    assert refused(big) == f"{big}: 1,048,577 bytes, more than any modeling file (1,048,576 at most)"
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"x = '\xe9'\n")
    assert refused(latin) == f"{latin}: not UTF-8 text (invalid continuation byte at byte 5)"
    broken = tmp_path / "modeling_deepseek.py"
    broken.write_text(TEXT.replace("    def forward(self, x):", "    def forward(self, x)", 1))
    assert refused(broken) == f"{broken}: not valid Python: expected ':' at line 388"
    nulls = tmp_path / "nulls.py"
    nulls.write_bytes(b"x = 1\n\0\n")
    assert refused(nulls).startswith(f"{nulls}: not valid Python: ")
    prose = tmp_path / "notes.py"
    prose.write_text("This is not Python at all.\n")
    assert refused(prose) == f"{prose}: not valid Python: invalid syntax at line 1"


def test_a_model_class_the_file_lacks():
    with pytest.raises(
        ModelingError,
        match=r"^modeling_deepseek.py: no class KimiK3ForCausalLM \(the config's auto_map names it\)$",
    ):
        ModelingIndex.parse(TEXT, file="modeling_deepseek.py", root="KimiK3ForCausalLM")


def test_the_hub_client_is_imported_only_for_a_repo():
    import subprocess

    script = (
        "import sys, json; from pathlib import Path; from kimicount.explorer.modeling import load_sources; "
        "s = load_sources(modeling=Path(sys.argv[1])); "
        "print(json.dumps([s.modeling.origin, 'huggingface_hub' in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(MODELING)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert json.loads(result.stdout) == ["--modeling", False], result.stderr


def test_errors_are_kimicount_errors():
    assert issubclass(ModelingError, KimicountError) and not issubclass(ModelingError, SourceError)


# --- a hostile file ends quickly -------------------------------------------------------------------

HOSTILE = """
A = B
B = A
chain = 1
class Inner:
    def __init__(self, config):
        self.x = self.x * self.x + self.x
        self.a0 = config.hidden_size
{chain}
        self.proj = nn.Linear(self.a60, self.x)
        self.wide = nn.Linear(self.a0 + self.a0, self.a0 * 3)
class Outer(Outer):
    def __init__(self, config):
        self.model = nn.ModuleList([A])
        self.inner = Inner(config)
class HostileForCausalLM(Outer):
    pass
"""


def test_cycles_and_chains_in_a_modeling_file_end():
    chain = "\n".join(
        f"        self.a{i} = self.a{i - 1} * self.a{i - 1} + self.a{i - 1}" for i in range(1, 61)
    )
    text = HOSTILE.format(chain=chain)
    index = ModelingIndex.parse(text, file="h.py", config={"hidden_size": 2})
    # `A = B; B = A` builds no class of the file: the model holds something from elsewhere
    assert [(s.owner, s.attr, s.holds, s.external) for s in index.resolve("model.0.x")] == [
        ("HostileForCausalLM", "model", (), "A")
    ]
    # a class that is its own base, a value that depends on itself: unknown, found at once
    assert index.linear_shape("Inner", "proj") is None
    # a chain of 60 definitions, each used three times: each worked out once (a naive evaluation
    # takes 3^60 steps), and a size past 2^63 − 1 is no size
    assert index.linear_shape("Inner", "wide") == (6, 4)
    outer = text.split("\n").index("class Outer(Outer):") + 1
    assert spans(index.class_("Outer")) == [(outer, outer + 3, "definition")]


# --- the pinned index: lines without the file (issue 27) ------------------------------------------------

INDEX_SCRIPT = ROOT / "benchmarks" / "evidence_index.py"


def _shipped_index() -> dict:
    return json.loads((ROOT / "kimicount" / "data" / "evidence-index.json").read_text(encoding="utf-8"))


def test_the_shipped_index_has_the_reference_lines():
    k2 = _shipped_index()["models"]["moonshotai/Kimi-K2-Instruct"]
    assert k2["revision"] == "fd1984e2b7a3350dbf7305fe73a4ede25c14de50"
    spans = {page: {(s, e) for s, e, _ in lines} for page, lines in k2["pages"].items()}
    # the reference lines: definitions 662–688, latent 776–789, prefill attention 799–840,
    # output 848–852; RMSNorm 94–111; kv_b_proj's definition 676–681
    assert {(662, 688), (776, 789), (799, 840), (848, 852)} <= spans["latent-attention"]
    assert (94, 111) in spans["attention-rmsnorm"]
    assert (676, 681) in spans["key-content-up-projection"]


def test_the_index_made_from_a_file_of_the_same_structure_is_the_shipped_one(tmp_path):
    # the maintenance script, run on the file written with the real one's structure: every page's lines
    # agree with the index made from the real file
    out = tmp_path / "index.json"
    result = subprocess.run(
        [sys.executable, str(INDEX_SCRIPT), str(MODELING), "--output", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    made, shipped = json.loads(out.read_text(encoding="utf-8")), _shipped_index()
    assert made["models"].keys() == shipped["models"].keys()
    for repo, model in made["models"].items():
        assert model["pages"] == shipped["models"][repo]["pages"], repo
        assert model["blob"] != shipped["models"][repo]["blob"]  # another file, the same lines


def test_the_script_refuses_a_file_of_another_layout(tmp_path):
    other = tmp_path / "modeling_deepseek.py"
    other.write_text("\n" + TEXT, encoding="utf-8")  # every line one further down
    result = subprocess.run(
        [sys.executable, str(INDEX_SCRIPT), str(other), "--output", str(tmp_path / "index.json")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode != 0 and "not the pinned layout; reference lines differ" in result.stderr
    assert not (tmp_path / "index.json").exists()


def test_a_modeling_file_is_named_by_its_blob():
    from kimicount.explorer.pinned import git_blob, known_file

    data = MODELING.read_bytes()
    assert known_file(data) is None  # the tests' file is no revision kimicount has indexed
    index = {
        "files": {git_blob(data): {"file": "modeling_deepseek.py", "description": "a file for the tests"}}
    }
    found = known_file(data, index)
    assert found is not None and found.description == "a file for the tests"
    result = invoke("show", "kv_b_proj", "--modeling", str(MODELING), "--json")
    page = json.loads(result.stdout)
    assert [e["link"] for e in page["evidence"]] == [None] * len(page["evidence"])
    text = invoke("show", "kv_b_proj", "--modeling", str(MODELING)).stdout
    assert f"revision unknown: git blob {git_blob(data)[:12]} is no file kimicount has indexed" in text


# --- issue 26: a modeling file's cost bounded ----------------------------------------------------------


def test_a_modeling_file_over_1_mib_is_refused_before_it_is_read(tmp_path):
    # 16 MiB was the cap: a file just under it took 31 s and 2.7 GB to search. The largest modeling
    # files of transformers are about 200 KB, modeling_deepseek.py 76 KB.
    big = tmp_path / "modeling_deepseek.py"
    with big.open("wb") as handle:
        handle.truncate(2 * 2**20)
    with pytest.raises(ModelingError) as refused:
        read_modeling_file(big)
    assert str(refused.value) == f"{big}: 2,097,152 bytes, more than any modeling file (1,048,576 at most)"


def test_an_attribute_read_in_a_thousand_statements_cites_twenty(tmp_path):
    # the attention's forward, after its signature (line 760), reads self.kv_b_proj 1,000 times more
    # than its one use: the page cites the definition and the first 20 of the 1,001, and says so
    marker = '        if "padding_mask" in kwargs:\n'
    assert TEXT.count(marker) == 1
    padded = TEXT.replace(marker, "        x = self.kv_b_proj(x)\n" * 1000 + marker)
    index = ModelingIndex.parse(padded, file="modeling_deepseek.py")
    found = index.attribute(ATTENTION, "kv_b_proj")
    assert [e.role for e in found] == ["definition"] + ["use"] * 20
    assert (found[0].start, found[1].start, found[20].start) == (676, 761, 780)  # 761 + 19
    note = "DeepseekV3Attention's forward pass reads 'kv_b_proj' in 1,001 statements; the first 20 are shown"
    assert index.findings() == [f"modeling_deepseek.py: {note}"]
