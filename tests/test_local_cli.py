"""`kimicount plan` on a local box (the route --gguf, --quant, --ram, --offload, --n-cpu-moe, -ngl take):
from the outside, with a header-only GGUF of the real UD-IQ3_XXS types and the figures its published
run printed."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from gguf import GGUFValueType

from tests.gguf_files import deepseek2_metadata, read_map, write_gguf
from tests.helpers import FIXTURES, heavy_imports, imported_modules, invoke

MIB = 2**20


def ud_types() -> dict[str, str]:
    types = {}
    for line in (FIXTURES / "local" / "kimi-k2-instruct-ud-iq3_xxs.tensors").read_text().splitlines():
        if not line.startswith("#"):
            name, _, ggml_type = line.split()
            types[name] = ggml_type
    return types


@pytest.fixture(scope="module")
def ud_file(tmp_path_factory):
    types = ud_types()
    path = tmp_path_factory.mktemp("ud") / "Kimi-K2-Instruct-UD-IQ3_XXS.gguf"
    write_gguf(
        path, read_map("kimi-k2-thinking"), lambda t: types[t.name], deepseek2_metadata("kimi-k2-thinking")
    )
    return path


def plan_json(*args: str) -> dict:
    result = invoke("plan", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_published_two_3090_run_from_its_header(ud_file):
    # ik_llama.cpp #616: -mla 3 -fa -ctk q8_0 -ngl 99 -ot exps=CPU, n_ctx 2048 on 2 × RTX 3090:
    # "CUDA0 buffer size = 2998.56 MiB", "CUDA1 buffer size = 3632.72 MiB",
    # "CUDA0 KV buffer size = 37.07 MiB", "CUDA1 KV buffer size = 35.87 MiB"
    report = plan_json(
        "--gpus", "2xRTX3090", "--gguf", str(ud_file), "--engine", "ik_llama.cpp", "-ctk", "q8_0",
        "--offload", "experts", "--context", "2048",
    )  # fmt: skip
    cuda0, cuda1, ram = report["devices"]
    assert [f"{d['weights_bytes'] / MIB:.2f}" for d in (cuda0, cuda1)] == ["2998.56", "3632.72"]
    assert [f"{d['kv_cache_bytes'] / MIB:.2f}" for d in (cuda0, cuda1)] == ["37.07", "35.87"]
    assert (cuda0["layers"], cuda1["layers"]) == (list(range(31)), list(range(31, 61)))
    assert report["kv_cache"] == {
        "layout": "latent",
        "reason": "-mla 3",
        "type_k": "q8_0",
        "type_v": None,
        "bytes_per_token": 61 * 612,
        "context": 2048,
        "cells": 2048,
        "layers": list(range(61)),  # every layer of a deepseek2 model has KV cells
        "total_bytes": 61 * 612 * 2048,  # "KV self size = 72.91 MiB"
    }
    assert ram["name"] == "RAM" and ram["tensors"] == 181
    assert report["command"] == [
        "llama-server", "-m", str(ud_file), "-mla", "3", "-ngl", "99", "-ot", "exps=CPU", "-c", "2048",
        "-fa", "-ctk", "q8_0",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "build, layout, per_token",
    [
        ("b5136", "per-head", 61 * 64 * 320 * 2),
        ("b5331", "latent+v", 61 * 1088 * 2),
        ("b7832", "latent", 61 * 1152),
    ],
)
def test_the_build_sets_the_cache(ud_file, build, layout, per_token):
    report = plan_json("--gpus", "1xRTX4090", "--gguf", str(ud_file), "--build", build, "--offload", "experts",
                       "--context", "4096")  # fmt: skip
    assert (report["kv_cache"]["layout"], report["kv_cache"]["bytes_per_token"]) == (layout, per_token)


def test_quant_route_and_flags():
    report = plan_json(
        "--gpus", "2xRTX3090", "--quant", "Q2_K", "--ram", "384GiB", "--offload", "experts", "-ctk", "q8_0",
        "--context", "65536", "--build", "b5331",
    )  # fmt: skip
    assert report["estimate"] and report["route"] == "local"
    # b5331: latent (q8_0: 612 B) + V (f16: 1,024 B) per layer; 65,536 cells
    assert report["kv_cache"]["total_bytes"] == 61 * (612 + 1024) * 65_536
    # the cache follows the blocks: 31 layers on CUDA0; b5331 is before #13194 (b5429): 1-D tensors, which
    # CUDA does not pad
    assert report["devices"][0]["kv_cache_bytes"] == 31 * (612 + 1024) * 65_536
    # from b5429 the K rows of 576 q8_0 are padded by CUDA to 1,024 elements (+ 476 B), then to 128 B
    later = plan_json("--gpus", "2xRTX3090", "--quant", "Q2_K", "--offload", "experts", "-ctk", "q8_0",
                      "--context", "65536", "--build", "b5500")  # fmt: skip
    assert later["devices"][0]["kv_cache_bytes"] == 31 * (
        -(-(612 * 65_536 + 476) // 128) * 128 + 1024 * 65_536
    )
    # b5331 is before #15434 (b6325): flash attention is the bare -fa
    assert report["command"][3:] == ["-ngl", "99", "-ot", "exps=CPU", "-c", "65536", "-fa", "-ctk", "q8_0"]


def test_n_cpu_moe_and_ngl():
    report = plan_json("--gpus", "1xRTX5090", "--quant", "Q2_K", "--n-cpu-moe", "58", "--context", "8192")
    gpu, ram = report["devices"]
    assert gpu["routed_expert_bytes"] > 0 and "--n-cpu-moe" in report["command"]
    report = plan_json("--gpus", "1xRTX5090", "--quant", "Q2_K", "-ngl", "0", "--context", "8192")
    gpu, ram = report["devices"]
    # -ngl 0: nothing offloaded; every block's cache in RAM
    assert gpu["weights_bytes"] == 0 and gpu["layers"] == [] and len(ram["layers"]) == 61


def test_decode_floor_by_hand():
    report = plan_json(
        "--gpus", "1xRTX3090", "--quant", "Q8_0", "--offload", "experts", "--context", "1024",
        "--ram-channels", "8", "--ram-speed", "3200",
    )  # fmt: skip
    floor = report["floor"]
    _, ram = report["devices"]
    # 8 channels × 3,200 MT/s × 8 B = 204.8 GB/s; the 3090's 936 GB/s
    assert [r["bandwidth_bytes_per_s"] for r in floor["reads"]] == [936 * 10**9, 204_800_000_000]
    # RAM reads 8 of 384 experts of each layer, and one row of token_embd (Q8_0: 7,168 ÷ 32 × 34 B)
    assert floor["reads"][1]["bytes"] == pytest.approx(ram["routed_expert_bytes"] * 8 / 384 + 7168 // 32 * 34)
    expected = floor["reads"][0]["bytes"] / 936e9 + floor["reads"][1]["bytes"] / 204.8e9
    assert floor["decode_seconds_per_token"] == pytest.approx(expected)


def test_text_view(ud_file):
    result = invoke("plan", "--gpus", "2xRTX3090", "--gguf", str(ud_file), "--engine", "ik_llama.cpp", "-ctk",
                    "q8_0", "--offload", "experts", "--context", "2048")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "2,998.56 MiB" in result.stdout and "3,632.72 MiB" in result.stdout
    assert "37.07 MiB" in result.stdout and "35.87 MiB" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--quant", "Q4_K_M", "--gguf", "x.gguf"], "give --gguf FILE or --quant TYPE (one of them)"),
        (["--ram", "512GiB", "--quant", "IQ5_K"], "--quant 'IQ5_K': expected one of"),
        (["--quant", "Q4_K_M", "--offload", "attention"], "--offload 'attention': expected experts"),
        (["--quant", "Q4_K_M", "--engine", "vllm"], "--engine 'vllm': expected llama.cpp or ik_llama.cpp"),
        (["--quant", "Q4_K_M", "--build", "latest"], "--build 'latest': expected a llama.cpp release tag"),
        (["--quant", "Q4_K_M", "--cache-layout", "flash"], "--cache-layout 'flash': expected per-head"),
        (["--quant", "Q4_K_M", "-ctk", "q3_k"], "-ctk 'q3_k': unknown cache type"),
        (["--quant", "Q4_K_M", "--ram-channels", "8"], "--ram-channels and --ram-speed: give both"),
        (
            ["--quant", "Q4_K_M", "--n-cpu-moe", "3", "--offload", "experts"],
            "--n-cpu-moe and --offload experts",
        ),
        (["--quant", "Q4_K_M", "-ngl", "-1"], "-ngl -1: expected 0 or more layers"),
        (["--quant", "Q4_K_M", "-ngl", "99", "-ts", "1,1,1"], "--tensor-split: 3 shares for 2 GPUs"),
        (["--quant", "Q4_K_M", "-ngl", "99", "--mla", "2"], "--mla: an ik_llama.cpp option"),
        (["--gguf", "no/such.gguf"], "no/such.gguf: no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = invoke("plan", "--gpus", "2xRTX3090", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_a_gguf_written_without_mla(tmp_path):
    # convert_hf_to_gguf.py before #12801: key_length 192, value_length 128, head_count_kv 64, no *_mla keys
    metadata = deepseek2_metadata("kimi-k2-thinking")
    for key in ("deepseek2.attention.key_length_mla", "deepseek2.attention.value_length_mla"):
        del metadata[key]
    u32 = metadata["deepseek2.block_count"][1]
    metadata["deepseek2.attention.key_length"] = (192, u32)
    metadata["deepseek2.attention.value_length"] = (128, u32)
    metadata["deepseek2.attention.head_count_kv"] = (64, u32)
    path = tmp_path / "old.gguf"
    write_gguf(path, read_map("kimi-k2-thinking"), lambda t: "Q8_0" if t.dtype == "bf16" else "F32", metadata)
    report = plan_json("--gpus", "1xRTX4090", "--gguf", str(path), "--offload", "experts", "--context", "512")
    # llama.cpp, any build: 61 × 64 × (192 + 128) × 2 B per token; 1,220.00 MiB at 512 tokens
    assert report["kv_cache"]["layout"] == "per-head" and report["kv_cache"]["bytes_per_token"] == 2_498_560
    assert f"{report['kv_cache']['total_bytes'] / MIB:.2f}" == "1220.00"
    # ik_llama.cpp makes the MLA tensors at load: -mla 3 caches the latent alone
    report = plan_json(
        "--gpus", "1xRTX4090", "--gguf", str(path), "--offload", "experts", "--engine", "ik_llama.cpp"
    )
    assert report["kv_cache"]["layout"] == "latent"


def test_no_mmap_needs_the_host_copy_to_fit():
    # Q2_K's routed experts alone are over 300 GiB: with --no-mmap they must fit in --ram
    report = plan_json("--gpus", "1xRTX4090", "--quant", "Q2_K", "--offload", "experts", "--ram", "256GiB",
                       "--no-mmap")  # fmt: skip
    assert report["longest_context"] is None and report["longest_context_limit"] == "RAM"
    assert report["devices"][1]["fits"] is False and report["command"][-1] == "--no-mmap"
    # with mmap the page cache holds what it can: RAM limits nothing
    report = plan_json("--gpus", "1xRTX4090", "--quant", "Q2_K", "--offload", "experts", "--ram", "256GiB")
    assert report["longest_context"] == 131_072


def test_the_local_modules_import_neither_rich_nor_torch_nor_the_hub():
    assert (
        heavy_imports(
            "kimicount.deploy.local.plan", "kimicount.deploy.local.reports", "kimicount.deploy.local.request"
        )
        == []
    )


def test_a_bad_local_option_imports_no_rich():
    from tests.helpers import run_kimicount

    result = run_kimicount("plan", "--gpus", "2xRTX3090", "--quant", "Q2_K", "--engine", "vllm",
                           env={"PYTHONPROFILEIMPORTTIME": "1"})  # fmt: skip
    assert result.returncode == 2
    imported = imported_modules(result.stderr)
    assert "kimicount.deploy.local.request" in imported and not {
        m for m in imported if m.split(".")[0] == "rich"
    }


def test_the_run_line_is_quoted_for_the_shell_and_pastes_as_one_command(tmp_path):
    # issue 26: the Run line joined the words with spaces, so a model path holding $(…) ran it when pasted,
    # and one with spaces split; issue 27: at 80 columns the table layout wrapped it, -fa apart from on
    types = ud_types()
    folder = tmp_path / "my models"
    folder.mkdir()
    path = folder / "$(touch pwned) K2.gguf"
    write_gguf(
        path, read_map("kimi-k2-thinking"), lambda t: types[t.name], deepseek2_metadata("kimi-k2-thinking")
    )
    args = (
        "--gpus",
        "2xRTX3090",
        "--gguf",
        str(path),
        "-ctk",
        "q8_0",
        "--offload",
        "experts",
        "--context",
        "2048",
    )
    report = plan_json(*args)
    assert report["command"][:3] == ["llama-server", "-m", str(path)]
    result = invoke("plan", *args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    run = result.stdout.split("\nRun:\n", 1)[1].splitlines()
    block = run[: next(i for i, line in enumerate(run) if not line.endswith("\\")) + 1]
    # broken between options, not wrapped; the path (longer than 80 here) whole on its own line
    assert len(block) > 1 and all(len(line) <= 80 for line in block if "my models" not in line)
    assert [line.strip() for line in block if "my models" in line] == [f"-m {shlex.quote(str(path))} \\"]
    assert all(line.endswith(" \\") for line in block[:-1])
    assert any(" -fa on" in line for line in block)
    # pasted into a shell (llama-server swapped for printf), it runs nothing and gives back the words
    pasted = "\n".join(block).replace("llama-server", "printf '%s\\n'", 1)
    shell = subprocess.run(["bash", "-c", pasted], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert shell.stdout.splitlines() == report["command"][1:]
    assert not (tmp_path / "pwned").exists()
    assert shlex.split(report["command_line"]) == report["command"]


def test_a_gguf_whose_tensors_do_not_match_its_architecture_is_not_planned(tmp_path):
    # issue 26: `kimicount gguf` caught this file (exit 1) while `plan --gguf` planned it (exit 0, no word):
    # the metadata says 128 heads, the tensors are Kimi K2's 64 (attn_q_b, attn_k_b, attn_v_b and
    # attn_output of each of the 61 layers the wrong shape)
    metadata = deepseek2_metadata("kimi-k2-thinking")
    metadata["deepseek2.attention.head_count"] = (128, GGUFValueType.UINT32)
    types = ud_types()
    (path,) = write_gguf(
        tmp_path / "k2.gguf", read_map("kimi-k2-thinking"), lambda t: types[t.name], metadata
    )
    assert invoke("gguf", str(path)).exit_code == 1
    for json_flag in ((), ("--json",)):
        result = invoke(
            "plan", "--gpus", "2xRTX3090", "--gguf", str(path), "--offload", "experts", *json_flag
        )
        assert result.exit_code == 1 and result.stdout == ""
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"kimicount: error: {path}: 244 tensors do not match the architecture")
        assert "blk.0.attn_q_b.weight: shape, expected [1536, 24576]" in line and "kimicount gguf" in line
