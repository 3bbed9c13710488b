"""`kimicount gguf`: full-size header-only GGUFs (written by gguf-py's GGUFWriter from the real tensor
listings) checked and sized against llama.cpp's printed figures; mismatches named with exit 1; bad input
one line with exit 2; the Hub route against the fake Hub; --quant sizing from the config."""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

import pytest
from gguf import GGUFValueType
from werkzeug import Response

from .fakehub import FakeHub
from .gguf_files import deepseek2_metadata, read_map, write_gguf
from .helpers import FIXTURES, imported_modules, invoke, run_kimicount
from .test_gguf_reader import as_listed, k2_q6, k2_q6_k  # noqa: F401 - the module-scoped fixture
from .test_terminal import _check_80_columns

#: llama.cpp's log lines for the real files (llama_model_loader::print_info).
K2_Q6_K = "file size   = 784.70 GiB (6.57 BPW)"
R1_Q8_0 = "file size   = 664.29 GiB (8.50 BPW)"


def gguf_json(*args: str, code: int = 0) -> dict:
    result = invoke("gguf", *args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def component(report: dict, name: str, depth: int, under: str = "60 MoE blocks") -> dict:
    """The first node `name` at `depth` after the node whose name starts with `under` (the tree in order)."""
    nodes = report["components"]
    start = next(i for i, c in enumerate(nodes) if c["name"].startswith(under))
    return next(c for c in nodes[start:] if c["name"] == name and c["depth"] == depth)


def test_kimi_k2_q6_k_file(k2_q6):  # noqa: F811
    report = gguf_json(str(k2_q6))
    assert report["ok"] and report["mismatches"] == [] and report["estimate"] is None
    assert report["file_size"]["llama_cpp"] == K2_Q6_K
    assert report["file_size"]["bytes"] == 842_565_869_056
    assert report["parameters"] == {"expected": 1_026_408_232_448, "found": 1_026_408_232_448}
    assert {k: v["tensors"] for k, v in report["by_type"].items()} == {"Q6_K": 670, "F32": 365, "Q8_0": 61}
    assert report["by_type"]["F32"]["bytes"] == 664_721_408
    assert report["kv_b"] == "attn_k_b + attn_v_b"
    # Routed experts of the 60 MoE layers: gate, up and down, each 7,168 × 2,048 × 384 elements, in Q6_K
    # blocks of 256 elements at 210 bytes
    experts = component(report, "Routed experts", 4)
    assert experts["bytes"] == 60 * 3 * (7168 * 2048 * 384 // 256 * 210)
    assert experts["params"] == 60 * 3 * 7168 * 2048 * 384
    assert experts["types"] == ["Q6_K"]
    # attn_k_b fell back to Q8_0: 128 × 512 × 64 elements in blocks of 32 at 34 bytes, 8.5 bits each
    k_b = component(report, "Key content up-projection", 5)
    assert (k_b["bytes"], k_b["bits_per_weight"], k_b["types"]) == (
        60 * 128 * 512 * 64 // 32 * 34,
        8.5,
        ["Q8_0"],
    )
    # attn_kv_a_mqa (7,168 × 576, Q6_K) split by rows: the rotary key owns 64 of the 576 rows
    rotary = component(report, "Shared rotary key", 5)
    assert rotary["bytes"] == 60 * 64 * (7168 // 256 * 210)
    # the router (ffn_gate_inp 7,168 × 384 and exp_probs_b 384) stays F32
    assert component(report, "Router", 4)["bytes"] == 60 * (7168 * 384 + 384) * 4


def test_kimi_k2_text_view(k2_q6):  # noqa: F811
    result = invoke("gguf", str(k2_q6), "--depth", "1")
    assert result.exit_code == 0, result.output
    assert f"As llama.cpp prints it: {K2_Q6_K}" in result.stdout
    assert "OK: every tensor has the name and shape" in result.stdout
    assert "  Token embedding " in result.stdout and "    1 dense block" not in result.stdout


def test_deepseek_r1_q8_0_split_set(tmp_path):
    files = write_gguf(tmp_path / "DeepSeek-R1-Q8_0.gguf", read_map("deepseek-v3.1-terminus"),
                       lambda t: "F32" if t.dtype == "f32" else "Q8_0", deepseek2_metadata("deepseek-v3"),
                       split_max_tensors=400)  # fmt: skip
    report = gguf_json(str(files[0]))
    assert report["ok"] and len(report["files"]) == 3
    assert report["file_size"]["llama_cpp"] == R1_Q8_0
    assert report["parameters"]["expected"] == report["parameters"]["found"] == 671_026_419_200


def test_mismatches_are_named_and_exit_1(tmp_path):
    tensors = read_map("kimi-k2-thinking")
    dropped = "blk.7.attn_q_a_norm.weight"
    kept = [t for t in tensors if t.name != dropped]
    # one tensor of the wrong shape, one the architecture has no place for
    kept = [t if t.name != "blk.3.attn_q_b.weight" else t.__class__(t.name, (1536, 8192), t.dtype, 1536 * 8192, 2 * 1536 * 8192) for t in kept]  # fmt: skip
    kept.append(kept[0].__class__("blk.61.attn_norm.weight", (7168,), "f32", 7168, 4 * 7168))
    (file,) = write_gguf(tmp_path / "bad.gguf", kept, as_listed, deepseek2_metadata("kimi-k2-thinking"))
    report = gguf_json(str(file), code=1)
    assert not report["ok"]
    assert {(m["tensor"], m["kind"], m["expected"], m["found"]) for m in report["mismatches"]} == {
        (dropped, "missing", "[1536]", "absent"),
        ("blk.3.attn_q_b.weight", "shape", "[1536, 12288]", "[1536, 8192] BF16"),
        ("blk.61.attn_norm.weight", "unexpected", "no such tensor in the architecture", "[7168] F32"),
    }
    text = invoke("gguf", str(file))
    assert text.exit_code == 1 and "3 mismatches" in text.stdout


def test_metadata_that_disagrees_with_the_tensors(tmp_path):
    # the metadata says 128 heads, the tensors are Kimi K2's 64: every per-head tensor is named
    metadata = deepseek2_metadata("kimi-k2-thinking")
    metadata["deepseek2.attention.head_count"] = (128, GGUFValueType.UINT32)
    (file,) = write_gguf(tmp_path / "k2.gguf", read_map("kimi-k2-thinking"), as_listed, metadata)
    report = gguf_json(str(file), code=1)
    wrong = {m["tensor"] for m in report["mismatches"] if m["kind"] == "shape"}
    assert len(wrong) == 61 * 4  # attn_q_b, attn_k_b, attn_v_b and attn_output of each layer
    assert "blk.0.attn_k_b.weight" in wrong


def test_a_gguf_converted_before_mla(tmp_path):
    # before llama.cpp PR #12801: one attn_kv_b [kv_lora_rank, H·(qk_nope + v)] per layer, and the head
    # widths in key_length 192 / value_length 128 (no *_mla keys)
    tensors, kv_b = [], read_map("kimi-k2-thinking")[0].__class__
    for t in read_map("kimi-k2-thinking"):
        if ".attn_v_b." in t.name:
            continue
        if ".attn_k_b." in t.name:
            t = kv_b(
                t.name.replace("attn_k_b", "attn_kv_b"), (512, 64 * 256), "bf16", 512 * 16384, 2 * 512 * 16384
            )
        tensors.append(t)
    metadata = deepseek2_metadata("kimi-k2-thinking")
    del metadata["deepseek2.attention.key_length_mla"], metadata["deepseek2.attention.value_length_mla"]
    metadata["deepseek2.attention.key_length"] = (192, GGUFValueType.UINT32)
    metadata["deepseek2.attention.value_length"] = (128, GGUFValueType.UINT32)
    (file,) = write_gguf(tmp_path / "old.gguf", tensors, as_listed, metadata)
    report = gguf_json(str(file))
    assert report["ok"] and report["kv_b"] == "attn_kv_b"
    assert report["file_size"]["bytes"] == 2_053_148_825_600  # the same elements, in BF16
    # attn_kv_b split by rows: half of each head's 256 rows are key content, half value
    assert component(report, "Key content up-projection", 5)["bytes"] == 60 * 2 * 512 * 8192
    assert component(report, "Value heads", 4)["bytes"] == 60 * 2 * 512 * 8192


def test_attn_kv_b_beside_attn_k_b_and_attn_v_b(tmp_path):
    # a conversion that keeps attn_kv_b [512, 64 × 256] as well: not a mismatch, its bytes counted too
    tensors = read_map("kimi-k2-thinking")
    kv_b = tensors[0].__class__
    extra = [
        kv_b(f"blk.{i}.attn_kv_b.weight", (512, 16384), "bf16", 512 * 16384, 2 * 512 * 16384)
        for i in range(61)
    ]
    (file,) = write_gguf(
        tmp_path / "both.gguf", tensors + extra, as_listed, deepseek2_metadata("kimi-k2-thinking")
    )
    report = gguf_json(str(file))
    assert report["ok"] and report["kv_b"] == "attn_k_b + attn_v_b + attn_kv_b"
    assert report["file_size"]["bytes"] == 2_053_148_825_600 + 61 * 2 * 512 * 16384
    # attn_k_b (128 × 512 × 64, BF16) and half of attn_kv_b's rows
    assert component(report, "Key content up-projection", 5)["bytes"] == 60 * (
        2 * 128 * 512 * 64 + 2 * 512 * 8192
    )


# --- --quant: sizing from the config, labelled -----------------------------------------------------------


def test_quant_q6_k_from_the_bundled_config():
    report = gguf_json("--quant", "Q6_K")
    assert report["ok"] and report["mismatches"] == []
    assert report["estimate"].startswith("estimate:")
    assert report["file_size"]["llama_cpp"] == K2_Q6_K  # the real conversion's figure
    assert {k: v["tensors"] for k, v in report["by_type"].items()} == {"Q6_K": 670, "F32": 365, "Q8_0": 61}


def test_quant_q8_0_of_deepseek_v3():
    report = gguf_json("--quant", "q8_0", "--config", str(FIXTURES / "deepseek-v3" / "config.json"))
    assert report["file_size"]["llama_cpp"] == R1_Q8_0  # DeepSeek-R1 has V3's architecture
    assert report["tensors"] == 1_086


def test_quant_bf16_is_the_bf16_listing():
    # the real BF16 conversion of Kimi-K2-Thinking: 2,053,148,825,600 B of tensors, 365 F32
    report = gguf_json("--quant", "BF16")
    assert report["file_size"]["bytes"] == 2_053_148_825_600
    assert report["by_type"]["F32"] == {"tensors": 365, "elements": 664_721_408 // 4, "bytes": 664_721_408}


def test_quant_q4_k_m_mix():
    # Q4_K_M: ffn_down (dense, shared, routed) of the layers use_more_bits picks -> Q6_K; the output head
    # -> Q6_K; attn_k_b (rows of 128) falls back from Q4_K to Q5_0. use_more_bits(i, 61): i < 7, i >= 53,
    # or (i - 7) % 3 == 2: layers 0-6, 9, 12, ..., 51 (15 of them), 53-60: 30 layers, one of them dense.
    report = gguf_json("--quant", "Q4_K_M")
    layers = [i for i in range(61) if i < 7 or i >= 53 or (i - 7) % 3 == 2]
    assert len(layers) == 30
    # 1 dense ffn_down + 29 MoE layers × (ffn_down_exps + ffn_down_shexp) + output
    assert report["by_type"]["Q6_K"]["tensors"] == 1 + 29 * 2 + 1
    assert report["by_type"]["Q5_0"]["tensors"] == 61


def test_quant_from_a_files_metadata(k2_q6):  # noqa: F811
    report = gguf_json(str(k2_q6), "--quant", "Q6_K")
    assert report["file_size"]["llama_cpp"] == K2_Q6_K and report["model"] == "Kimi-K2-Thinking"


# --- bad input: one line, exit 2 ------------------------------------------------------------------------


def fails(*args: str) -> str:
    result = invoke("gguf", *args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_bad_usage():
    assert "name a .gguf FILE" in fails()
    assert "--include needs --repo" in fails("x.gguf", "--include", "*")
    assert "--quant 'Q7'" in fails("--quant", "Q7")
    assert "name one source: x.gguf or --repo/--config" in fails("x.gguf", "--config", "c.json")
    assert "--config needs --quant" in fails("--repo", "a/b", "--config", "c.json")


def test_bad_files(tmp_path):
    assert fails(str(tmp_path / "nope.gguf")) == f"kimicount: error: {tmp_path}/nope.gguf: no such file"
    (tmp_path / "a.gguf").write_bytes(b"not a gguf at all")
    assert "a.gguf: magic: not a GGUF file" in fails(str(tmp_path / "a.gguf"))


def test_not_deepseek2_and_missing_keys(tmp_path):
    tensors = read_map("kimi-k2-thinking")[:5]
    llama = {"general.architecture": ("llama", GGUFValueType.STRING)}
    (file,) = write_gguf(tmp_path / "llama.gguf", tensors, as_listed, llama)
    assert "key 'general.architecture': \"llama\", expected 'deepseek2'" in fails(str(file))
    metadata = deepseek2_metadata("kimi-k2-thinking")
    del metadata["deepseek2.expert_count"]
    (file,) = write_gguf(tmp_path / "k.gguf", tensors, as_listed, metadata)
    assert fails(str(file)) == (
        f"kimicount: error: {file}: key 'deepseek2.expert_count': missing (required to check the tensors)"
    )
    metadata = deepseek2_metadata("kimi-k2-thinking")
    metadata["deepseek2.expert_used_count"] = (500, GGUFValueType.UINT32)
    (file,) = write_gguf(tmp_path / "k.gguf", tensors, as_listed, metadata)
    assert fails(str(file)).startswith(
        f"kimicount: error: {file}: key 'deepseek2.expert_used_count': 500 is more"
    )


def test_a_file_without_expert_gating_func_is_read_as_llama_cpp_reads_it(tmp_path):
    # llama.cpp takes softmax gating for a deepseek2 file without the key and loads exp_probs_b when it
    # is there (src/models/deepseek2.cpp): Kimi K2's 60 MoE layers' exp_probs_b are the router's bias,
    # as in the file with the key, not 60 unexpected tensors
    metadata = deepseek2_metadata("kimi-k2-thinking")
    del metadata["deepseek2.expert_gating_func"]
    tensors = read_map("kimi-k2-thinking")
    (file,) = write_gguf(tmp_path / "k2.gguf", tensors, as_listed, metadata)
    report = gguf_json(str(file))
    assert report["ok"] and report["parameters"]["expected"] == 1_026_408_232_448  # DESIGN.md's total
    assert report["notes"] == [
        (
            "key 'deepseek2.expert_gating_func' is missing: llama.cpp takes softmax gating (DeepSeek-V2's), "
            "and it adds the exp_probs_b tensors to the expert scores"
        )
    ]
    text = invoke("gguf", str(file))
    assert text.exit_code == 0 and "Note: key 'deepseek2.expert_gating_func' is missing" in text.stdout
    # without the key and without exp_probs_b: a router without the bias (384 × 60 = 23,040 fewer)
    plain = [t for t in tensors if ".exp_probs_b." not in t.name]
    (file,) = write_gguf(tmp_path / "plain.gguf", plain, as_listed, metadata)
    report = gguf_json(str(file))
    assert report["ok"] and report["parameters"]["expected"] == 1_026_408_232_448 - 384 * 60
    assert report["notes"][0].endswith("softmax gating (DeepSeek-V2's), and no exp_probs_b")


def test_what_a_header_says_is_quoted_short(tmp_path):
    # a 1,000,000-character architecture: an 80-character excerpt and the length of its JSON (+2 quotes)
    tensors = read_map("kimi-k2-thinking")[:2]
    (file,) = write_gguf(tmp_path / "long.gguf", tensors, as_listed,
                         {"general.architecture": ("x" * 10**6, GGUFValueType.STRING)})  # fmt: skip
    line = fails(str(file))
    assert len(line) < 300 and '"xxxx' in line and "… (1,000,002 characters), expected 'deepseek2'" in line


def test_split_count_past_a_u16_is_one_line(tmp_path):
    # 2^40 parts: a MemoryError (exit 3, 1.9 GB) when a list of every part's name was built
    tensors = read_map("kimi-k2-thinking")[:2]
    metadata = {"split.count": (2**40, GGUFValueType.UINT64), "split.no": (0, GGUFValueType.UINT16)}
    (file,) = write_gguf(tmp_path / "m-00001-of-00002.gguf", tensors, as_listed, metadata)
    assert fails(str(file)) == (
        f"kimicount: error: {file}: key 'split.count': 1099511627776, expected 1 to 65,535 (a u16, as "
        "gguf-split writes it)"
    )


@pytest.mark.parametrize("args", [["gguf", "--help"], ["gguf", "--quant", "Q7"], ["gguf", "-h"]])
def test_help_and_usage_errors_import_neither_rich_gguf_nor_the_anatomy(args):
    result = run_kimicount(*args, env={"PYTHONPROFILEIMPORTTIME": "1"})
    imported = imported_modules(result.stderr)
    assert "kimicount.cli.gguf" in imported  # the check sees our own imports
    heavy = {m for m in imported if m.split(".")[0] in ("rich", "gguf", "numpy", "huggingface_hub")}
    assert not heavy and "kimicount.anatomy" not in imported


def test_params_does_not_import_gguf():
    result = run_kimicount("params", "--json", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    imported = imported_modules(result.stderr)
    assert "kimicount.anatomy" in imported
    assert not {m for m in imported if m.split(".")[0] == "gguf" or m.startswith("kimicount.gguf")}


# --- the Hub: list the repo, ranged reads of each header ------------------------------------------------

REPO = "unsloth/DeepSeek-R1-GGUF"


@pytest.fixture(scope="module")
def r1_split(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("hub-gguf") / "Q8_0"
    folder.mkdir()
    return write_gguf(folder / "DeepSeek-R1-Q8_0.gguf", read_map("deepseek-v3.1-terminus"),
                      lambda t: "F32" if t.dtype == "f32" else "Q8_0", deepseek2_metadata("deepseek-v3"),
                      split_max_tensors=400)  # fmt: skip


@pytest.fixture
def hub(httpserver, tmp_path, r1_split):
    fake = FakeHub()
    files: dict[str, bytes | Path] = {f"Q8_0/{f.name}": f for f in r1_split}
    files["README.md"] = b"# DeepSeek-R1 GGUF\n"
    files["BF16/DeepSeek-R1-BF16-00001-of-00002.gguf"] = r1_split[0]  # another quant beside it
    files["BF16/DeepSeek-R1-BF16-00002-of-00002.gguf"] = r1_split[1]
    fake.add_repo(REPO, files)
    env = fake.client_env(httpserver, tmp_path)
    return fake, env


def test_hub_split_set_by_pattern(hub):
    fake, env = hub
    result = run_kimicount("gguf", "--repo", REPO, "--include", "Q8_0/*", "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["file_size"]["llama_cpp"] == R1_Q8_0
    assert report["files"] == [f"{REPO}@main/Q8_0/DeepSeek-R1-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    # one listing of the tree, then ranged GETs of the three headers (the first MiB of each), no data
    gets = [(method, path, range_) for method, path, range_ in fake.requests if "/resolve/" in path]
    assert sorted(path.rsplit("/", 1)[-1] for _, path, _ in gets) == [
        f"DeepSeek-R1-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    assert all(method == "GET" and range_ == "bytes=0-1048575" for method, _, range_ in gets)
    assert [p for _, p, _ in fake.requests if "/resolve/" not in p] == [f"/api/models/{REPO}/tree/main"]


def test_hub_include_matching_nothing_or_too_much(hub):
    _, env = hub
    result = run_kimicount("gguf", "--repo", REPO, "--include", "Q2_K/*", env=env)
    assert result.returncode == 2 and result.stderr.strip() == (
        f"kimicount: error: {REPO}@main: no .gguf file matches --include Q2_K/*"
    )
    result = run_kimicount("gguf", "--repo", REPO, "--include", "*.gguf", env=env)
    assert (
        result.returncode == 2
        and "--include matches 5 .gguf files that are not one split set" in result.stderr
    )
    result = run_kimicount("gguf", "--repo", REPO, env=env)
    assert result.returncode == 2 and "the repo has 5 .gguf files that are not one split set" in result.stderr


def test_hub_split_set_missing_a_file(hub):
    _, env = hub
    # BF16/ holds two files whose headers say split.count 3
    result = run_kimicount("gguf", "--repo", REPO, "--include", "BF16/*", env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"kimicount: error: {REPO}@main/BF16/DeepSeek-R1-BF16-00001-of-00002.gguf: key 'split.count' is 3, "
        "found 2 files"
    )


def test_hub_quant_reads_the_repos_config(hub):
    fake, env = hub
    fake.repos[REPO].files["config.json"] = (FIXTURES / "deepseek-v3" / "config.json").read_bytes()
    result = run_kimicount("gguf", "--repo", REPO, "--quant", "Q8_0", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["file_size"]["llama_cpp"] == R1_Q8_0


def test_hub_repo_not_found(hub):
    _, env = hub
    result = run_kimicount("gguf", "--repo", "nobody/nothing", "--include", "*", env=env)
    assert result.returncode == 2 and "repo not found" in result.stderr


# --- an 80-column terminal: every number whole -----------------------------------------------------------


@pytest.mark.parametrize("depth", ["3", "all"])
def test_every_number_whole_at_80_columns(depth):
    # the figures: llama.cpp's total for Kimi K2 Q6_K, and the routed experts of the 60 MoE blocks
    figures = ["842,565,869,056", "784.70 GiB", f"{60 * 3 * (7168 * 2048 * 384 // 256 * 210):,}"]
    _check_80_columns(["gguf", "--quant", "Q6_K", "--depth", depth], figures[: 3 if depth == "all" else 2])


def test_mismatches_at_80_columns(tmp_path):
    tensors = [t for t in read_map("kimi-k2-thinking") if t.name != "blk.7.attn_q_a_norm.weight"]
    (file,) = write_gguf(tmp_path / "bad.gguf", tensors, as_listed, deepseek2_metadata("kimi-k2-thinking"))
    out = _check_80_columns(["gguf", str(file)], ["blk.7.attn_q_a_norm.weight", "[1536]"], exit_code=1)
    assert "1 mismatches" in out


def test_hub_header_longer_than_the_first_read(httpserver, tmp_path, k2_q6):  # noqa: F811
    # Kimi K2's header holds 163,840 tokens (about 2.4 MB): the first MiB, then a read twice as long
    fake = FakeHub()
    fake.add_repo("someone/Kimi-K2-GGUF", {"Q6_K/Kimi-K2-Instruct-Q6_K.gguf": k2_q6})
    env = {"HF_ENDPOINT": fake.install(httpserver), "HF_HOME": str(tmp_path / "hf")}
    result = run_kimicount("gguf", "--repo", "someone/Kimi-K2-GGUF", "--include", "Q6_K/*", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["file_size"]["llama_cpp"] == K2_Q6_K
    ranges = [r for _, path, r in fake.requests if "/resolve/" in path]
    assert ranges == ["bytes=0-1048575", "bytes=1048576-3145727"]  # the first MiB, then the next two


# --- issue 26: what a hostile Hub says ---------------------------------------------------------------------


def test_hub_header_claiming_a_huge_array_is_refused_after_the_first_read(httpserver, tmp_path):
    # a 1 TiB file (sparse) whose header says its first value is 2^25 strings, 256 MiB at least: refused
    # from the count, after the first MiB (it downloaded 256 MiB and was still parsing at 60 s)
    path = tmp_path / "huge.gguf"
    path.write_bytes(
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + struct.pack("<Q", 1)
        + b"k"
        + struct.pack("<IIQ", 9, 8, 2**25)
    )
    os.truncate(path, 2**40)
    fake = FakeHub()
    fake.add_repo("someone/huge", {"huge.gguf": path})
    env = {"HF_ENDPOINT": fake.install(httpserver), "HF_HOME": str(tmp_path / "hf")}
    result = run_kimicount("gguf", "--repo", "someone/huge", env=env)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.strip() == (
        "kimicount: error: someone/huge@main/huge.gguf: key 'k': 33,554,432 STRING items of at least "
        "8 bytes cannot fit in the 67,108,815 bytes left of the 67,108,864 a header may take"
    )
    assert [r for _, p, r in fake.requests if "/resolve/" in p] == ["bytes=0-1048575"]


def test_hub_range_answered_4_bytes_at_a_time_is_a_failed_request(hub):
    # a 206 of 4 bytes for 1 MiB asked, far from the end of the file: each try fails, and the third ends
    # it (it was taken as progress: 875 requests in 40 s, until --timeout)
    fake, env = hub
    path = fake.repos[REPO].files["Q8_0/DeepSeek-R1-Q8_0-00001-of-00003.gguf"]
    size = path.stat().st_size

    def four_bytes(request):  # the 4 bytes from where each range starts, truly
        asked = re.fullmatch(r"bytes=([0-9]+)-[0-9]*", request.headers.get("Range", ""))
        if request.path.endswith("-00001-of-00003.gguf") and asked:
            start = int(asked[1])
            with path.open("rb") as handle:
                handle.seek(start)
                body = handle.read(4)
            return Response(body, status=206, headers={"Content-Range": f"bytes {start}-{start + 3}/{size}"})
        return None

    fake.override = four_bytes
    result = run_kimicount("gguf", "--repo", REPO, "--include", "Q8_0/*", "--timeout", "30", env=env)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].endswith(
        f"-00001-of-00003.gguf: HTTP 206 with 4 bytes where 1,048,576 were asked for (from byte 0 of {size:,}); "
        "gave up after 3 tries"
    )
    assert [line.split(";")[-1] for line in lines[:-1]] == [" try 2 of 3", " try 3 of 3"]
    assert sum(1 for _, p, _ in fake.requests if p.endswith("-00001-of-00003.gguf")) == 3


def test_hub_file_list_saying_2_70_bytes_is_refused(hub):
    fake, env = hub
    listing = [{"type": "file", "path": "Q8_0/DeepSeek-R1-Q8_0.gguf", "size": 2**70, "oid": "0" * 40}]

    def tree(request):
        if request.path.startswith("/api/models/"):
            return Response(json.dumps(listing), status=200, content_type="application/json")
        return None

    fake.override = tree
    result = run_kimicount("gguf", "--repo", REPO, env=env)
    assert result.returncode == 2 and result.stderr.strip() == (
        f"kimicount: error: {REPO}@main: the file list says Q8_0/DeepSeek-R1-Q8_0.gguf is "
        "1180591620717411303424 bytes; expected a size of at most 2^64 − 1 (a GGUF's offsets are u64)"
    )
    assert not [p for _, p, _ in fake.requests if "/resolve/" in p]
