"""The explorer's pages (`kimicount show`, `show --json`, `kimicount explore`): the figures DESIGN.md and
issue 23 give for Kimi K2, every way of naming a page, and strings from a config shown as text.
Expected figures are DESIGN.md's, the issue's, or computed by hand in the test."""

from __future__ import annotations

import json
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys

import pytest

from .fakehub import FakeHub
from .helpers import FIXTURES, KIMI_K2, ROOT, fails_cleanly, imported_modules, invoke, run_kimicount

KEY_CONTENT = "Key content up-projection"


def page(*args: str) -> dict:
    result = invoke("show", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_key_content_up_projection_page_has_the_issues_figures():
    p = page(KEY_CONTENT)
    assert p["name"] == KEY_CONTENT and p["kind"] == "learned component"
    assert p["path"] == [
        "61 transformer blocks",
        "60 MoE blocks",
        "Latent attention",
        "Key heads",
        KEY_CONTENT,
    ]
    assert p["code"] == "self.kv_b_proj(self.kv_a_layernorm(compressed_kv))"
    assert p["role"] == "map the latent to 64 × 128 content key features"
    assert p["formula"] == "k^C = ĉ^KV W_UK"
    params = p["parameters"]
    assert params["per_instance"] == 4_194_304 and params["calculation"] == "512 × 8,192"
    where = {w["where"]: (w["instances"], w["params"]) for w in params["where"]}
    # DESIGN.md: × 60 MoE blocks = 251,658,240; the dense block's copy 4,194,304; 61 × 4,194,304 in all
    assert where == {
        "1 dense block (layer 0)": (1, 4_194_304),
        "60 MoE blocks (layers 1–60)": (60, 251_658_240),
    }
    assert params["total"] == 61 * 4_194_304 == 255_852_544
    (tensor,) = params["tensors"]
    assert tensor["name"] == "model.layers.{0..60}.self_attn.kv_b_proj.weight"
    assert tensor["part"] == "features 0–127 of each head's 256"
    assert tensor["shape"] == [64 * 256, 512] and tensor["stored_as"] == "[out, in]"
    assert tensor["bias"] == "no bias" and tensor["dtype"] == "F8_E4M3"
    # one F32 scale per 128 × 128 block: [16,384 / 128, 512 / 128]
    assert "weight_scale_inv [128, 4] F32" in tensor["storage"]
    # FLOPs: 2 × 512 × 8,192 per token per layer, 61 layers
    assert params["flops_per_token"] == 2 * 512 * 8192 * 61
    assert p["shapes"]["in"][0]["text"] == "c_KV [B batch, T positions, 512 key–value latent]"
    assert p["shapes"]["out"][0]["text"] == "k_C [B batch, T positions, 8,192 = 64 heads × 128]"
    assert "W_UK is output features 0–127 of each head's 256 in kv_b_proj" in p["explanation"]
    assert {m["mode"] for m in p["modes"]} == {"prefill", "decode"}
    assert p["links"]["parent"] == {"id": "key-heads", "name": "Key heads"}
    assert p["links"]["reads"] == [{"id": "compressed_kv", "name": "Key–value latent"}]
    assert p["links"]["tensors"] == [{"id": "kv_b_proj", "name": tensor["name"]}]


def test_dense_latent_attention_adds_up_and_holds_the_cache_figures():
    p = page("Latent attention")
    assert p["parameters"]["per_instance"] == 101_124_096
    assert p["parameters"]["calculation"] == (
        "11,011,584 + 3,670,528 + 18,874,368 + 4,653,056 + 4,194,304 + 58,720,256"
    )
    assert 11_011_584 + 3_670_528 + 18_874_368 + 4_653_056 + 4_194_304 + 58_720_256 == 101_124_096
    parts = {x["name"]: x["params"] for x in p["parts"]}
    assert parts == {
        "Query compression": 11_011_584,
        "Key–value compression": 3_670_528,
        "Query heads": 18_874_368,
        "Key heads": 4_653_056,
        "Value heads": 4_194_304,
        "Causal attention": 58_720_256,
    }
    kv = {k["layout"]: k["bytes_per_token"] for k in p["kv_cache"]}
    assert kv == {"naive": 2_498_560, "flash": 2_998_272, "latent": 70_272}  # DESIGN.md, 61 layers
    assert "36× less" in p["kv_note"]  # 2,498,560 / 70,272 = 35.6


def test_block_page_says_the_mode_and_the_cache_state():
    p = page("60 MoE blocks")
    assert p["kind"] == "block group"
    prefill = next(m for m in p["modes"] if m["mode"] == "prefill")
    assert "the KV cache holds positions 0 … T − 1 and reads them" in prefill["cache"]
    assert [x["name"] for x in p["parts"]] == [
        "Attention RMSNorm",
        "Latent attention",
        "MLP RMSNorm",
        "Mixture of experts",
    ]
    assert "naive 2,498,560 B; the latent 70,272 B, 36× less; flash padding 2,998,272 B" in p["kv_note"]
    # this group's share: 60 of the 61 layers, (512 + 64) × 2 B each
    assert {k["layout"]: k["bytes_per_token"] for k in p["kv_cache"]}["latent"] == 60 * 576 * 2


def test_key_value_latent_is_an_activation_page():
    p = page("compressed_kv")
    assert p["name"] == "Key–value latent" and p["kind"] == "activation"
    assert p["variable"] == "compressed_kv"
    (shape,) = p["shapes"]["out"]
    assert [d["size"] for d in shape["dims"]] == ["B", "T", 512]
    assert p["links"]["made_by"] == [{"id": "key-value-compression", "name": "Key–value compression"}]
    assert p["links"]["read_by"] == [
        {"id": "key-content-up-projection", "name": KEY_CONTENT},
        {"id": "value-heads", "name": "Value heads"},
    ]


@pytest.mark.parametrize(
    "name, page_id",
    [
        (KEY_CONTENT, "key-content-up-projection"),
        ("key CONTENT up-projection", "key-content-up-projection"),  # any case
        ("Key content up", "key-content-up-projection"),  # a unique prefix
        ("kv_b_proj", "kv_b_proj"),  # a module attribute: the module's tensor page, both its parts
        ("q_b_proj", "q_b_proj"),
        ("compressed_kv", "compressed_kv"),  # an activation by its variable
        ("c_KV", "compressed_kv"),  # and by its symbol
        ("k_pe", "k_pe"),
        ("Latent attention › Key heads › Key content up-projection", "key-content-up-projection"),  # a path
        ("61 transformer blocks/60 MoE blocks/Latent attention", "latent-attention"),
        ("softmax", "softmax"),  # an operation
        ("model.embed_tokens.weight", "embed_tokens"),  # a tensor without a layer
    ],
)
def test_show_resolves_every_form_of_name(name, page_id):
    assert page(name)["id"] == page_id


def test_a_tensor_name_gives_its_page_at_that_layer():
    p = page("model.layers.5.self_attn.kv_b_proj.weight")
    assert p["id"] == "kv_b_proj" and p["layer"] == 5
    assert p["layer_note"] == "layer 5: one of the 60 MoE blocks (layers 1–60)"
    owners = {t["owner"]: (t["part"], t["elements"]) for t in p["parameters"]["tensors"]}
    assert owners == {
        "key-content-up-projection": ("features 0–127 of each head's 256", 512 * 64 * 128),
        "value-heads": ("features 128–255 of each head's 256", 512 * 64 * 128),
    }
    assert p["parameters"]["per_instance"] == 64 * 256 * 512
    assert p["parameters"]["instances"] == 61
    dense = page("model.layers.0.self_attn.kv_b_proj.weight_scale_inv")  # a scale: its weight's page
    assert dense["layer_note"] == "layer 0: the dense block (layer 0)"
    expert = page("model.layers.7.mlp.experts.300.up_proj.weight")
    assert expert["id"] == "experts.up_proj" and expert["layer"] == 7


@pytest.mark.parametrize(
    "name, needles",
    [
        ("Key", ["names 6 pages", "Key heads", "Key–value latent", "Key content up-projection"]),
        ("Shared", ["Shared rotary key", "Shared expert"]),
    ],
)
def test_an_ambiguous_name_lists_the_candidates_and_exits_2(name, needles):
    result = invoke("show", name)
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    for needle in needles:
        assert needle in result.stderr


@pytest.mark.parametrize(
    "name, needle",
    [
        ("Latent atention", "(closest: Latent attention"),
        ("kvbproj", "(closest: kv_b_proj"),
        ("model.layers.0.mlp.experts.3.up_proj.weight", "has this tensor in layers 1–60, not in layer 0"),
        ("", "NAME is empty"),
        # Kimi K2's 384 routed experts are 0–383 (config.json n_routed_experts 384); 61 layers 0–60
        ("model.layers.5.mlp.experts.384.up_proj.weight", "has experts 0–383 in each MoE layer, not expert 384"),
        ("model.layers.5.mlp.experts." + "1" + "0" * 30 + ".up_proj.weight", "not expert 10000000000000000000… (31 characters)"),
        # 5,000 digits: past Python's 4,300-digit int conversion (exit 3 before)
        ("model.layers." + "7" * 5000 + ".self_attn.kv_b_proj.weight", "in layers 0–60, not in layer 77777777777777777777… (5,000 characters)"),
    ],
)  # fmt: skip
def test_an_unknown_name_is_one_line_and_exit_2(name, needle):
    result = invoke("show", name)
    assert result.exit_code == 2
    assert result.stderr.startswith("kimicount: error: ") and len(result.stderr.splitlines()) == 1
    assert needle in result.stderr


@pytest.mark.parametrize(
    "name, page",
    [
        ("Output projection", "causal-attention"),  # o_proj [7,168, 64 × 128]
        ("output projection", "causal-attention"),
        ("MoE gate", "router"),
        ("gating network", "router"),
        ("FFN", "dense-mlp"),
        ("MLA", "latent-attention"),
        ("W_UK", "key-content-up-projection"),
        ("gate", "gate"),  # the module attribute stays the tensor's: its own names come first
    ],
)
def test_the_names_people_use_find_the_part(name, page):
    # issue 27: `show "Output projection"` and `show "MoE gate"` found nothing
    result = invoke("show", name, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == page


def test_the_hint_ranks_the_closest_names_first():
    # issue 27: the hint for "Output projection" suggested the key content up-projection
    line = fails_cleanly(invoke("show", "output projektion"))
    assert "(closest: Output projection (Causal attention), " in line
    line = fails_cleanly(invoke("show", "MoE gaet"))
    assert "(closest: MoE gate (Router)" in line


def test_json_shape():
    p = page(KEY_CONTENT)
    assert set(p) >= {
        "model",
        "id",
        "name",
        "kind",
        "path",
        "role",
        "formula",
        "code",
        "shapes",
        "modes",
        "parameters",
        "parts",
        "kv_cache",
        "links",
        "evidence",
        "evidence_note",
    }
    assert p["model"] == "moonshotai/Kimi-K2-Instruct"
    # the bundled config has no modeling file beside it: the code's lines from kimicount's index of the
    # pinned revision, each with its link and no excerpt, config.json's lines, and how to get the file
    assert p["evidence"] and {e["role"] for e in p["evidence"]} == {"definition", "use", "config"}
    assert set(p["evidence"][0]) == {"file", "revision", "start", "end", "role", "excerpt", "link"}
    code = [e for e in p["evidence"] if e["file"] == "modeling_deepseek.py"]
    assert [(e["start"], e["end"], e["excerpt"]) for e in code[:2]] == [(676, 681, ""), (781, 785, "")]
    assert code[0]["revision"] == "fd1984e2b7a3350dbf7305fe73a4ede25c14de50"
    assert code[0]["link"] == (
        "https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/fd1984e2b7a3350dbf7305fe73a4ede25c14de50"
        "/modeling_deepseek.py#L676-L681"
    )
    assert p["evidence_note"].endswith(", --modeling DIR/modeling_deepseek.py.")
    assert (
        "hf download moonshotai/Kimi-K2-Instruct modeling_deepseek.py --revision "
        "fd1984e2b7a3350dbf7305fe73a4ede25c14de50" in p["evidence_note"]
    )
    assert set(p["links"]) == {"parent", "children", "reads", "writes", "tensors"}


def test_show_at_80_columns_keeps_every_figure_whole():
    result = invoke("show", KEY_CONTENT, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for figure in ("4,194,304", "251,658,240", "255,852,544", "512 × 8,192"):
        assert figure in result.stdout
    assert "c_KV [B batch, T positions, 512 key–value latent]" in result.stdout
    attention = invoke("show", "Latent attention", env={"COLUMNS": "80"}).stdout
    assert max(len(line) for line in attention.splitlines()) <= 80
    for figure in ("2,498,560 B", "2,998,272 B", "70,272 B", "101,124,096"):
        assert figure in attention


@pytest.mark.parametrize("command", ["show", "explore"])
def test_help_fits_80_columns_and_names_the_exit_codes(command):
    result = invoke(command, "--help", env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "2 bad input" in " ".join(result.stdout.split())


# --- other models --------------------------------------------------------------------------------


def test_deepseek_v3_main_pages_win_over_the_mtp_copies():
    config = str(FIXTURES / "deepseek-v3")
    p = page("Latent attention", "--config", config)
    assert p["path"][0] == "61 transformer blocks"  # not the MTP module's layer 61
    assert p["parameters"]["per_instance"] == 187_107_328  # hand: 7,168·1,536 + 1,536 + 7,168·576 + 512
    #   + 1,536·128·192 + 512·128·256 + 128·128·7,168 = 11,010,048 + 1,536 + 4,128,768 + 512
    #   + 37,748,736 + 16,777,216 + 117,440,512
    assert 7168 * 1536 + 1536 + 7168 * 576 + 512 + 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168 == (
        187_107_328
    )


def test_a_model_without_query_compression_has_no_query_latent():
    config = str(FIXTURES / "deepseek-v2-lite")
    result = invoke("show", "c_Q", "--config", config)
    assert result.exit_code == 2
    p = page("Query heads", "--config", config)
    assert p["parameters"]["tensors"][0]["name"].endswith("self_attn.q_proj.weight")


def test_int4_packing_shown_for_kimi_k25_experts():
    p = page("Routed experts", "--config", str(FIXTURES / "kimi-k2.5"))
    up = next(t for t in p["parameters"]["tensors"] if ".up_proj." in t["name"])
    # up_proj [2,048, 7,168] in 4 bits, groups of 32: 7,168 / 8 = 896 int32s, 7,168 / 32 = 224 scales
    assert "weight_packed [2,048, 896] I32" in up["storage"]
    assert "weight_scale [2,048, 224] BF16" in up["storage"]


# --- explore -------------------------------------------------------------------------------------


def test_explore_writes_one_self_contained_file(tmp_path):
    out = tmp_path / "k2.html"
    result = invoke("explore", "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    html = out.read_text(encoding="utf-8")
    assert report["bytes"] == len(html.encode("utf-8")) < 3 * 2**20  # a few MB at most
    # no network: nothing is loaded from anywhere (the only link is the empty data: icon)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert "@import" not in html and "url(" not in html
    for figure in ("4,194,304", "251,658,240", "101,124,096", "2,498,560 B", "2,998,272 B", "70,272 B"):
        assert figure in html
    assert 'id="kv_b_proj"' in html and 'id="key-content-up-projection"' in html
    assert "<math" in html and "<msub>" in html
    assert "prefers-color-scheme: dark" in html and "@media print" in html
    assert html.count('<section class="page') == report["pages"]


def test_explore_default_file_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("explore")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "kimi-k2-instruct-explorer.html").is_file()
    assert "kimi-k2-instruct-explorer.html" in result.stdout


def test_explore_to_an_unwritable_place_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "no" / "such" / "x.html"
    result = invoke("explore", "-o", str(path))
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr == f"kimicount: error: -o {path}: cannot write: No such file or directory\n"


def _limited_to(size: int):
    """For a subprocess: files it writes stop at `size` bytes (RLIMIT_FSIZE, with SIGXFSZ ignored, a
    write past it fails with EFBIG), as a disk that fills up midway."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


@pytest.mark.parametrize(
    ("args", "name"),
    [(["explore", "-o"], "kimi-k2.html"), (["kv-cache", "--no-chart", "--plot"], "kv.svg")],
)
def test_a_write_that_fails_midway_leaves_the_old_file_whole(tmp_path, args, name):
    # the old file was replaced by a truncated one when the disk filled (issue 26): now the new one is
    # written beside it and renamed, and on failure the temporary is removed
    path = tmp_path / name
    path.write_text("the old file\n")
    result = subprocess.run(
        [sys.executable, "-m", "kimicount", *args, str(path)],
        check=False, capture_output=True, text=True, preexec_fn=_limited_to(1024), timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"kimicount: error: {args[-1]} {path}: cannot write: File too large\n"
    assert path.read_text() == "the old file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary left behind
    # unlimited: written whole, with the mode the old file had
    path.chmod(0o640)
    assert run_kimicount(*args, str(path)).returncode == 0
    assert path.read_bytes().rstrip().endswith(b"</html>" if name.endswith(".html") else b"</svg>")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_explore_to_stdout_with_a_dash(tmp_path, monkeypatch):
    # `-o -` wrote a file named "-"; as Unix tools take it, it is stdout
    monkeypatch.chdir(tmp_path)
    result = invoke("explore", "-o", "-")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("<!doctype html>") and result.stdout.rstrip().endswith("</html>")
    assert list(tmp_path.iterdir()) == []
    refused = invoke("explore", "-o", "-", "--json")
    assert refused.exit_code == 2 and "-o - writes the HTML to stdout, where --json writes its report" in (
        refused.stderr
    )


HOSTILE = "<img src=x onerror=alert(1)>"


def test_a_model_named_like_html_shows_as_text(tmp_path):
    folder = tmp_path / HOSTILE
    folder.mkdir()
    shutil.copy(FIXTURES / "kimi-k2-instruct" / "config.json", folder / "config.json")
    out = tmp_path / "x.html"
    result = invoke("explore", "--config", str(folder), "-o", str(out))
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert "<img" not in html  # neither in the page nor in the search index
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    shown = page("Output head", "--config", str(folder))
    assert shown["model"] == HOSTILE
    terminal = invoke("show", "model", "--config", str(folder))
    assert HOSTILE in terminal.stdout  # rich markup is not read in it


# --- code evidence ---------------------------------------------------------------------------------
# tests/data/modeling_deepseek.py.txt was written for the tests with the structure of Kimi-K2-Instruct's
# modeling_deepseek.py at fd1984e2b7a3 (see tests/test_evidence.py); the issue's reference lines:
# definitions 662–688, the latent 776–789 (compressed_kv made at 777), the prefill attention 799–840,
# the output 848–852, RMSNorm 94–111; config.json's quantization_config 38–46.

MODELING = ROOT / "tests" / "data" / "modeling_deepseek.py.txt"


def checkpoint_folder(tmp_path, modeling_text: str | None = None):
    """A folder as `hf download … config.json modeling_deepseek.py` leaves it."""
    folder = tmp_path / "Kimi-K2-Instruct"
    folder.mkdir(parents=True)
    shutil.copy(KIMI_K2 / "config.json", folder / "config.json")
    text = MODELING.read_text(encoding="utf-8") if modeling_text is None else modeling_text
    (folder / "modeling_deepseek.py").write_text(text, encoding="utf-8")
    return folder


def spans(p: dict, file: str) -> list[tuple[int, int, str]]:
    return [(e["start"], e["end"], e["role"]) for e in p["evidence"] if e["file"] == file]


def test_evidence_beside_the_config(tmp_path):
    folder = checkpoint_folder(tmp_path)
    p = page(KEY_CONTENT, "--config", str(folder))
    code = spans(p, "modeling_deepseek.py")
    definitions = [s for s in code if s[2] == "definition"]
    # the issue's page: defined in the attention's definitions 662–688, used in the latent 776–789 and
    # the prefill attention 799–840
    assert definitions and all(662 <= start <= end <= 688 for start, end, _ in definitions)
    assert (662, 688, "definition") in code
    assert (776, 789, "use") in code and (799, 840, "use") in code
    assert all(662 <= s <= e <= 688 or 776 <= s <= e <= 840 for s, e, _ in code)
    assert any("self.kv_b_proj(self.kv_a_layernorm(compressed_kv))" in e["excerpt"] for e in p["evidence"])
    assert (38, 46, "config") in spans(p, "config.json")  # quantization_config
    assert p["evidence_note"] is None and p["findings"] == []
    latent = page("compressed_kv", "--config", str(folder))
    assert any(e["start"] == 777 for e in latent["evidence"])  # the split that leaves the 512-wide latent
    norm = page("Attention RMSNorm", "--config", str(folder))
    assert (94, 111, "definition") in spans(norm, "modeling_deepseek.py")
    out = page("Causal attention", "--config", str(folder))
    assert (848, 852, "use") in spans(out, "modeling_deepseek.py")  # the output
    softmax = page("softmax", "--config", str(folder))
    assert (834, 836, "use") in spans(softmax, "modeling_deepseek.py")  # nn.functional.softmax(…)


def test_evidence_from_a_modeling_file_given_and_in_the_terminal(tmp_path):
    result = invoke("show", KEY_CONTENT, "--modeling", str(MODELING), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "modeling_deepseek.py.txt lines 676–681 (definition)" in result.stdout
    assert "self.kv_b_proj(self.kv_a_layernorm(compressed_kv))" in result.stdout
    missing = invoke("show", KEY_CONTENT, "--modeling", str(tmp_path / "nothing.py"))
    assert missing.exit_code == 2 and len(missing.stderr.splitlines()) == 1
    assert "nothing.py" in missing.stderr


def test_what_the_file_disagrees_with_is_a_finding(tmp_path):
    text = MODELING.read_text(encoding="utf-8")
    # kv_b_proj's input width written as the query latent's: [64 × 256, 1,536] where the tree has 512
    changed = text.replace(
        "            config.kv_lora_rank,\n            self.num_heads\n",
        "            config.q_lora_rank,\n            self.num_heads\n",
        1,
    )
    assert changed != text
    folder = checkpoint_folder(tmp_path, changed)
    p = page("kv_b_proj", "--config", str(folder))
    assert any("[16,384, 1,536]" in f and "[16,384, 512]" in f for f in p["findings"]), p["findings"]
    renamed = checkpoint_folder(tmp_path / "renamed", text.replace("self.o_proj", "self.out_proj"))
    p = page("Causal attention", "--config", str(renamed))
    assert any("o_proj" in f for f in p["findings"]), p["findings"]


def test_evidence_in_the_html_is_escaped(tmp_path):
    text = MODELING.read_text(encoding="utf-8")
    hostile = text.replace(
        "        self.kv_b_proj = nn.Linear(",
        "        self.kv_b_proj = nn.Linear(  # </pre><script>alert(1)</script>",
        1,
    )
    folder = checkpoint_folder(tmp_path, hostile)
    out = tmp_path / "x.html"
    assert invoke("explore", "--config", str(folder), "-o", str(out)).exit_code == 0
    html = out.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in html and "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_evidence_from_the_hub_at_the_configs_commit(httpserver, tmp_path):
    fake = FakeHub()
    commit = "fd1984e2b7a3" + "0" * 28
    files = {
        "config.json": (KIMI_K2 / "config.json").read_bytes(),
        "modeling_deepseek.py": MODELING.read_bytes(),
    }
    fake.add_repo("moonshotai/Kimi-K2-Instruct", files, commit=commit)
    env = fake.client_env(httpserver, tmp_path)
    # a bundled model's repo id reads the Hub at a revision asked for, as in every command
    args = ("show", KEY_CONTENT, "--repo", "moonshotai/Kimi-K2-Instruct", "--revision", "main", "--json")
    result = run_kimicount(*args, env=env)
    assert result.returncode == 0, result.stderr
    p = json.loads(result.stdout)
    code = [e for e in p["evidence"] if e["file"] == "modeling_deepseek.py"]
    assert code and {e["revision"] for e in code} == {commit}
    assert {e["revision"] for e in p["evidence"] if e["file"] == "config.json"} == {commit}
    assert {path.rsplit("/", 1)[-1] for _, path, _ in fake.requests} == {
        "config.json",
        "modeling_deepseek.py",
    }


def _imported(*args: str) -> set[str]:
    result = run_kimicount(*args, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    return imported_modules(result.stderr)


def test_what_each_command_imports():
    def top(modules: set[str]) -> set[str]:
        return {m.split(".")[0] for m in modules}

    for command in ("show", "explore"):  # help: neither rich nor the anatomy
        imported = _imported(command, "--help")
        assert "kimicount.cli" in imported and "kimicount.anatomy" not in imported
        assert not top(imported) & {"rich", "jinja2", "torch", "huggingface_hub"}
    shown = _imported("show", "kv_b_proj", "--json")
    assert "kimicount.explorer.pages" in shown
    assert not top(shown) & {"jinja2", "torch", "huggingface_hub"}  # jinja2 only for explore
    assert "kimicount.cli.explore" not in shown


@pytest.mark.parametrize(
    "config", [None, "deepseek-v3", "deepseek-v3.2-exp", "kimi-k2.5", "deepseek-v2-lite"]
)
def test_every_page_of_every_model_fits_80_columns(config):
    import io

    from rich.console import Console

    from kimicount.explorer.build import load_explorer
    from kimicount.explorer.page_json import page_json
    from kimicount.explorer.terminal import render_page

    pages = load_explorer(None if config is None else FIXTURES / config, None, None, None, None)
    for p in pages:
        console = Console(file=io.StringIO(), width=80, color_system=None)
        render_page(console, p, pages)
        wide = [line for line in console.file.getvalue().splitlines() if len(line) > 80]
        assert not wide, (p.id, wide[:2])
        json.dumps(page_json(p, pages))  # every value plain data


def test_a_page_shows_the_passages_not_the_whole_class():
    # issue 27: with the modeling file the latent attention's page was 477 lines, DeepseekV3Attention's
    # 230 (628–857) printed whole before its passages; now the class's head, then the passages
    page = json.loads(invoke("show", "latent attention", "--modeling", str(MODELING), "--json").stdout)
    spans = [(e["start"], e["end"]) for e in page["evidence"] if e["file"].startswith("modeling_deepseek")]
    assert (628, 629) in spans and (628, 857) not in spans
    assert {(662, 688), (776, 789), (799, 840), (848, 852)} <= set(spans)  # DESIGN.md's passages
    assert max(end - start + 1 for start, end in spans) <= 60
    lines = invoke("show", "latent attention", "--modeling", str(MODELING)).stdout.count("\n")
    assert lines < 250, lines


# --- issue 27: the smaller points ------------------------------------------------------------------------


def test_deepseek_v3s_tensor_ranges_keep_the_mtp_layer_apart():
    # the router's weight is stored in layers 3–60 (the 58 MoE blocks) and in layer 61, the MTP layer:
    # once named model.layers.{3..61}.mlp.gate.weight against "58 MoE blocks (layers 3–60)"
    page = json.loads(invoke("show", "deepseek-v3", "gate", "--json").stdout)
    assert page["name"] == "model.layers.{3..60}.mlp.gate.weight"
    where = [(x["where"], x["instances"], x["params"]) for x in page["parameters"]["where"]]
    assert where == [
        ("the model (layers 3–60)", 58, 58 * 256 * 7168),
        ("Multi-token prediction (layer 61)", 1, 256 * 7168),
    ]
    names = [t["name"] for t in page["parameters"]["tensors"]]
    assert names == ["model.layers.{3..60}.mlp.gate.weight", "model.layers.61.mlp.gate.weight"]


def test_the_router_page_says_how_it_routes_and_its_weights_alone():
    k2 = json.loads(invoke("show", "router", "--json").stdout)
    assert "No group routing (n_group 1)" in k2["explanation"]
    assert "× 2.827 (routed_scaling_factor)" in k2["explanation"]  # Kimi K2's config.json
    lines = {e["start"]: e["excerpt"] for e in k2["evidence"] if e["file"] == "config.json"}
    assert lines[49].strip() == '"routed_scaling_factor": 2.827,'  # the real config's line 49
    v3 = json.loads(invoke("show", "deepseek-v3", "router", "--json").stdout)
    assert (
        "the experts in 8 groups (n_group), a token's experts chosen from its best 4 groups"
        in v3["explanation"]
    )
    assert "× 2.5 (routed_scaling_factor)" in v3["explanation"]
    # DESIGN.md: the router is gate.weight [384, 7,168] + e_score_correction_bias [384], 2,752,896 per MoE
    # block; the weight alone over the 60 blocks: 384 × 7,168 × 60 = 165,150,720
    text = " ".join(invoke("show", "router").stdout.split())
    assert (
        "By tensor mlp.gate.weight 165,150,720; mlp.gate.e_score_correction_bias 23,040 (× 60 instances)"
        in text
    )


def test_a_tensor_page_names_its_tensor_once():
    lines = invoke("show", "gate").stdout.splitlines()
    assert lines[0] == "model.layers.{1..60}.mlp.gate.weight"
    assert lines[1].startswith("checkpoint tensor")
    # a concrete name shows the pattern it belongs to under it
    lines = invoke("show", "model.layers.5.mlp.gate.weight").stdout.splitlines()
    assert lines[:2] == ["model.layers.5.mlp.gate.weight", "model.layers.{1..60}.mlp.gate.weight"]


def test_params_help_describes_every_detail():
    text = " ".join(invoke("params", "--help").stdout.split())
    assert "shapes (the activations in and out, with named dimensions)" in text
