"""`kimicount plan` on a local box without --gguf or --quant: which uniform llama-quantize types fit these GPUs
and this RAM, largest first (kimicount.deploy.local.choice), and what reading weights from disk does to the
decode floor (kimicount.deploy.local.floor).

The fit is held by hand, from the real Kimi-K2-Thinking conversion's shapes (fixtures/gguf) and ggml's block
sizes (ggml/src/ggml-common.h: IQ2_XXS 66 B, IQ2_XS 74 B, Q2_K 84 B per 256 elements): with -ot exps=CPU, RAM
holds token_embd and every routed expert, and llama-quantize's IQ1/IQ2 rule (llama-quant.cpp b10572, 515–520)
gives the first 61 ÷ 8 = 7 ffn_down tensors in load order Q2_K: blk.0's dense one (on the GPU) and blocks
1–3's routed and shared ones.
"""

from __future__ import annotations

import json
import shlex

import pytest

from tests.gguf_files import read_map
from tests.helpers import FIXTURES, heavy_imports, invoke

GIB = 2**30
MIB = 2**20
HOST_COMPUTE = 162 * MIB  # ik_llama.cpp #616's host compute buffer at -ub 512 (deploy/local/placement.py)


def plan_json(*args: str) -> dict:
    result = invoke("plan", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def host_bytes(expert_block: int) -> int:
    """RAM under -ot exps=CPU at an IQ2 ftype: the routed experts at `expert_block` bytes per 256 elements
    (blocks 1–3's ffn_down_exps at Q2_K's 84) and token_embd at Q2_K (llama-quant.cpp 487–496)."""
    real = read_map("kimi-k2-thinking")
    experts = [t for t in real if "_exps." in t.name]
    assert len(experts) == 60 * 3 and all(t.elements == 7168 * 2048 * 384 for t in experts)
    total = sum(t.elements // 256 * expert_block for t in experts)
    total += sum(t.elements // 256 * (84 - expert_block) for t in experts if t.name in EARLY_DOWN)
    (embd,) = (t for t in real if t.name == "token_embd.weight")
    return total + embd.elements // 256 * 84


EARLY_DOWN = {f"blk.{i}.ffn_down_exps.weight" for i in (1, 2, 3)}


def test_one_4090_and_256_gib_which_kimi_k2_quant():
    # issue 27: "I have one RTX 4090 and 256 GB of RAM: which Kimi K2 quant can I run?"
    report = plan_json("--gpus", "1xRTX4090", "--ram", "256GiB")
    ram = 256 * GIB
    # IQ2_XXS: 263,173,177,344 B of host tensors + 162 MiB of buffers ≤ 256 GiB; IQ2_XS: 294,353,633,280 B do not
    assert host_bytes(66) == 263_173_177_344 and host_bytes(66) + HOST_COMPUTE <= ram
    assert host_bytes(74) == 294_353_633_280 and host_bytes(74) + HOST_COMPUTE > ram
    assert report["fitting"] == ["IQ2_XXS", "IQ1_M", "IQ1_S"]
    rows = {row["quant"]: row for row in report["quants"]}
    assert rows["IQ2_XXS"]["ram_bytes"] == host_bytes(66) + HOST_COMPUTE
    assert rows["IQ2_XS"]["fits"] is False
    assert rows["IQ2_XS"]["full"] == [
        {"device": "RAM", "total_bytes": host_bytes(74) + HOST_COMPUTE, "memory_bytes": ram}
    ]
    # Q2_K, the smallest type sized before, does not fit either
    assert rows["Q2_K"]["fits"] is False
    # the flags and the context each allows: experts in RAM, the trained context on the 24 GB card
    assert rows["IQ2_XXS"]["offload"] == ["-ngl", "99", "-ot", "exps=CPU"]
    assert rows["IQ2_XXS"]["context"] == 131_072
    assert rows["IQ2_XXS"]["command"] == [
        "llama-server", "-m", "Kimi-K2-Instruct-IQ2_XXS.gguf", "-ngl", "99", "-ot", "exps=CPU", "-c", "131072",
        "-fa", "on",
    ]  # fmt: skip
    assert rows["IQ2_XXS"]["imatrix"] is True  # llama-quantize refuses IQ2_XXS tensors without one


def test_every_quant_is_listed_largest_first():
    report = plan_json("--gpus", "1xRTX4090", "--ram", "256GiB")
    sizes = [row["file_bytes"] for row in report["quants"]]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == 30
    assert {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M",
            "IQ4_XS", "IQ4_NL", "Q2_K", "Q3_K_M", "Q4_K_M", "Q6_K"} <= {row["quant"] for row in report["quants"]}  # fmt: skip
    assert report["quants"][-1]["quant"] == "IQ1_S"
    # more RAM: more fits, still largest first, and every fitting row's command fits as --quant plans it
    bigger = plan_json("--gpus", "1xRTX4090", "--ram", "512GiB")
    assert bigger["fitting"][0] == "IQ4_XS" and set(report["fitting"]) < set(bigger["fitting"])


def test_each_fitting_row_is_a_plan_that_fits():
    report = plan_json("--gpus", "2xRTX3090", "--ram", "384GiB", "-ctk", "q8_0")
    assert report["fitting"]
    for row in (r for r in report["quants"] if r["fits"]):
        context = str(row["context"])
        planned = plan_json(
            "--gpus", "2xRTX3090", "--ram", "384GiB", "-ctk", "q8_0", "--quant", row["quant"], "--offload",
            "experts", "--context", context, "--no-mmap",
        )  # fmt: skip
        assert all(device["fits"] for device in planned["devices"]), row["quant"]
        assert planned["command"][3:-1] == row["command"][3:], row["quant"]  # the same flags, --no-mmap aside


def test_the_gpus_alone_and_the_offload_asked():
    # no --ram: the GPUs alone, every layer on them (token_embd stays in host memory)
    report = plan_json("--gpus", "8xH200", "--engine", "llama.cpp")
    assert report["ram_bytes"] is None and report["fitting"][0] == "Q8_0"
    assert all(row["offload"] == ["-ngl", "99"] for row in report["quants"] if row["fits"])
    # --n-cpu-moe asked: kept for every quant
    asked = plan_json("--gpus", "1xRTX5090", "--ram", "512GiB", "--n-cpu-moe", "58")
    assert all(
        row["offload"] == ["-ngl", "99", "--n-cpu-moe", "58"] for row in asked["quants"] if row["fits"]
    )
    # --context asked: a quant fits at that context
    long = plan_json("--gpus", "1xRTX4090", "--ram", "256GiB", "--context", "65536")
    assert {row["context"] for row in long["quants"] if row["fits"]} == {65_536}


@pytest.mark.parametrize("model, arch", [("deepseek-v3", "deepseek2"), ("glm-5", "glm-dsa")])
def test_every_model_with_a_gguf_layout(model, arch):
    report = plan_json("--config", str(FIXTURES / model), "--gpus", "1xRTX4090", "--ram", "256GiB")
    assert report["fitting"] and report["quants"][-1]["quant"] == "IQ1_S"


def test_the_text_answer():
    result = invoke("plan", "--gpus", "1xRTX4090", "--ram", "256GiB")
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert out.startswith(
        "moonshotai/Kimi-K2-Instruct on 1 × RTX4090 + 256 GiB RAM, llama.cpp (newest build): 3 uniform "
        "llama-quantize types fit, largest first:"
    )
    assert (
        "The next larger, IQ2_XS (278 GiB), does not fit: at 4,096 tokens it would take RAM 274 GiB of 256 GiB"
        in out
    )
    run = result.stdout.split("Run the largest (IQ2_XXS):\n", 1)[1].splitlines()[0]
    assert shlex.split(run) == plan_json("--gpus", "1xRTX4090", "--ram", "256GiB")["quants"][-3]["command"]


def test_nothing_fits():
    result = invoke("plan", "--gpus", "1xRTX4090", "--ram", "128GiB")
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    # IQ1_S's 190 GiB are more than 24 GB of GPU and 128 GiB of RAM together
    assert (
        "no uniform llama-quantize type fits" in out and "The smallest, IQ1_S (190 GiB), does not fit" in out
    )
    assert "Run the largest" not in out


def test_the_choice_imports_neither_rich_nor_torch_nor_the_hub():
    assert heavy_imports("kimicount.deploy.local.choice") == []


# --- weights read from disk --------------------------------------------------------------------------


def test_weights_ram_cannot_hold_are_read_from_disk_at_the_disks_rate():
    # issue 27: with the weights over RAM the plan said they are read from disk, then printed a decode floor
    # as if they were in RAM. Q2_K on 1 × RTX 4090 + 256 GiB: the page cache holds 256 GiB less the host's
    # buffers (no KV in RAM: every block on the GPU); the rest of the host tensors is read from disk
    args = ("--gpus", "1xRTX4090", "--quant", "Q2_K", "--ram", "256GiB", "--offload", "experts", "-ctk", "q8_0",
            "--context", "32768", "--ram-bandwidth", "204.8GB/s", "--disk-bandwidth", "5GB/s")  # fmt: skip
    report = plan_json(*args)
    _, ram = report["devices"]
    floor = report["floor"]
    cached = 256 * GIB - ram["compute_bytes_estimate"] - ram["kv_cache_bytes"]
    uncached = ram["weights_bytes"] - cached
    assert floor["disk_bytes_uncached"] == uncached > 0
    gpu_read, ram_read, disk_read = floor["reads"]
    # uniform routing: an even share of each layer's experts is cached; a token reads 8 of 384 per layer,
    # the uncached share of them from disk
    read = ram["routed_expert_bytes"] * 8 / 384
    share = uncached / ram["routed_expert_bytes"]
    assert disk_read == {
        "device": "disk",
        "bytes": pytest.approx(read * share),
        "bandwidth_bytes_per_s": 5 * 10**9,
    }
    assert ram_read["bytes"] == pytest.approx(
        read * (1 - share) + 7168 // 256 * 84
    )  # and a row of token_embd
    expected = gpu_read["bytes"] / gpu_read["bandwidth_bytes_per_s"] + ram_read["bytes"] / 204.8e9
    expected += read * share / 5e9
    assert floor["decode_seconds_per_token"] == pytest.approx(expected)
    # each 512-token ubatch reads the uncached bytes from disk once: 86.6 GiB at 5 GB/s, more than PCIe's
    assert floor["prompt_bound"] == "disk"
    assert floor["prompt_seconds_per_ubatch"] == pytest.approx(uncached / 5e9)
    # the default rate, labelled with its source
    default = plan_json(*args[:-2])["floor"]
    assert default["disk_bandwidth_bytes_per_s"] == 16 * 10**9 * 4 * 128 // 130 // 8  # 7,876,923,076 B/s
    assert "PCIe 4.0 ×4 NVMe" in default["disk_bandwidth_source"]
    result = invoke("plan", *args)
    assert "Read from disk: the page cache holds" in " ".join(result.stdout.split())


def test_weights_ram_holds_read_nothing_from_disk():
    report = plan_json("--gpus", "1xRTX4090", "--quant", "IQ1_S", "--ram", "256GiB", "--offload", "experts",
                       "--ram-bandwidth", "204.8GB/s")  # fmt: skip
    assert report["floor"]["disk_bytes_uncached"] == 0
    assert [read["device"] for read in report["floor"]["reads"]] == ["CUDA0", "RAM"]


def test_a_bad_disk_bandwidth_is_one_line():
    result = invoke("plan", "--gpus", "1xRTX4090", "--quant", "Q2_K", "--disk-bandwidth", "fast")
    assert result.exit_code == 2 and "--disk-bandwidth" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
