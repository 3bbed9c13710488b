"""kimicount.deploy.local: the KV cache each llama.cpp build gives, and where a GGUF's tensors, cache and buffers go.

Expected figures are what llama.cpp and ik_llama.cpp printed in public logs (quoted with their source),
or hand computation written out here. Test listings are built from the real tensor listings
(../shared/data/gguf, fixtures/local) with each tensor's bytes from the gguf package's block table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from kimicount.deploy.engines import IK_LLAMA_CPP, LLAMA_CPP
from kimicount.deploy.hardware import ACCELERATORS
from kimicount.deploy.local.builds import CacheLayout, parse_build
from kimicount.deploy.local.cache import make_cache, parse_cache_type, per_token_bytes
from kimicount.deploy.local.placement import Offload, fewest_cpu_moe, layer_devices, longest_context, place
from kimicount.errors import UsageError
from kimicount.spec import bundled_spec, spec_from_path
from tests.helpers import FIXTURES

SHARED = Path("/work/shared/data")
K2 = bundled_spec()
MIB = 2**20


def deepseek_v3():
    return spec_from_path(FIXTURES / "deepseek-v3" / "config.json")


def mib(count: int) -> str:
    """As llama.cpp prints sizes: "%.2f MiB"."""
    return f"{count / MIB:.2f}"


@dataclass(frozen=True)
class Listed:
    name: str
    shape: tuple[int, ...]
    ggml_type: str
    nbytes: int


def _bytes(ggml_type: str, shape: tuple[int, ...]) -> int:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]]
    elements = 1
    for n in shape:
        elements *= n
    return elements // block * size


def ud_iq3_xxs() -> list[Listed]:
    """unsloth's Kimi-K2-Instruct UD-IQ3_XXS: every tensor's real type (fixtures/local)."""
    out = []
    for line in (FIXTURES / "local" / "kimi-k2-instruct-ud-iq3_xxs.tensors").read_text().splitlines():
        if line.startswith("#"):
            continue
        name, shape_text, ggml_type = line.split()
        shape = tuple(int(n) for n in shape_text.split(","))
        out.append(Listed(name, shape, ggml_type, _bytes(ggml_type, shape)))
    return out


def test_the_ud_iq3_xxs_listing_is_the_file_llama_cpp_loaded():
    tensors = ud_iq3_xxs()
    # ik_llama.cpp #616 log: "1096 tensors", "model size = 388.003 GiB"; token_embd is Q4_K: "CPU buffer
    # size = 630.00 MiB" is the input layer's host buffer
    assert len(tensors) == 1096
    assert f"{sum(t.nbytes for t in tensors) / 2**30:.3f}" == "388.003"
    assert mib(next(t.nbytes for t in tensors if t.name == "token_embd.weight")) == "630.00"


# --- the KV cache per build -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, layout",
    [
        ("b5136", "per-head"),
        ("b5137", "latent+v"),
        ("b5331", "latent+v"),
        ("b7831", "latent+v"),
        ("b7832", "latent"),
    ],
)
def test_builds_map_to_the_prs_that_changed_the_cache(build, layout):
    # #12801 merged as daa4228 (commit 5,137 of master), #19067 as d9c6ce4 (7,832): hand-counted on a clone
    assert LLAMA_CPP.cache_layout(parse_build(build), mla_gguf=True).layout.value == layout


def test_a_gguf_without_mla_gets_the_per_head_cache_in_any_build():
    assert LLAMA_CPP.cache_layout(9000, mla_gguf=False).layout is CacheLayout.per_head


@pytest.mark.parametrize(
    "mla, fa, layout",
    [
        (0, True, "per-head"),
        (1, False, "latent+v"),
        (1, True, "latent"),
        (2, False, "latent"),
        (3, True, "latent"),
    ],
)
def test_ik_llama_cpp_mla_modes(mla, fa, layout):
    assert IK_LLAMA_CPP.cache_layout(mla=mla, mla_gguf=True, flash_attn=fa).layout.value == layout


def test_kv_per_token_of_each_layout():
    # 61 layers: per-head 64 × (192 + 128) × 2; latent+v (576 + 512) × 2; latent 576 × 2; q8_0: 576 ÷ 32 × 34
    assert per_token_bytes(K2, CacheLayout.per_head, "f16", "f16") == 61 * 64 * 320 * 2 == 2_498_560
    assert (
        per_token_bytes(deepseek_v3(), CacheLayout.per_head, "f16", "f16") == 61 * 128 * 320 * 2 == 4_997_120
    )
    assert per_token_bytes(K2, CacheLayout.latent_v, "f16", "f16") == 61 * 1088 * 2 == 132_736
    assert per_token_bytes(K2, CacheLayout.latent, "f16", "f16") == 61 * 576 * 2 == 70_272
    assert per_token_bytes(K2, CacheLayout.latent, "q8_0", "f16") == 61 * 18 * 34 == 37_332


def _cache(spec, build, context, type_k="f16"):
    choice = LLAMA_CPP.cache_layout(build, mla_gguf=True)
    return make_cache(spec, choice, type_k, "f16", context, ik=False)


def test_kimi_k2_per_head_cache_at_512_tokens():
    # llama.cpp before #12801: "KV self size  = 1220.00 MiB, K (f16):  732.00 MiB, V (f16):  488.00 MiB"
    cache = _cache(K2, 5000, 512)
    assert (
        mib(61 * cache.layer_bytes),
        mib(61 * cache.part_bytes("K")),
        mib(61 * cache.part_bytes("V")),
    ) == (
        "1220.00",
        "732.00",
        "488.00",
    )


def test_kimi_k2_latent_and_v_at_512_tokens():
    # llama.cpp #12801 to #19067: "KV self size = 64.81 MiB, c^KV (f16): 34.31 MiB, kv^T (f16): 30.50 MiB"
    cache = _cache(K2, 5331, 512)
    assert (
        mib(61 * cache.layer_bytes),
        mib(61 * cache.part_bytes("K")),
        mib(61 * cache.part_bytes("V")),
    ) == (
        "64.81",
        "34.31",
        "30.50",
    )


@pytest.mark.parametrize("type_k, printed", [("f16", "2196.00"), ("q8_0", "1166.62")])
def test_deepseek_v3_latent_at_32k(type_k, printed):
    # llama.cpp after #19067, DeepSeek-V3 at 32,768 tokens: "2196.00 MiB" (f16), "1166.62 MiB" (q8_0)
    cache = _cache(deepseek_v3(), 7832, 32_768, parse_cache_type(type_k, "-ctk"))
    assert mib(61 * cache.layer_bytes) == printed


def test_the_cache_is_padded_to_256_cells():
    assert _cache(K2, None, 5000).cells == 5120


# --- placement: the published 2 × RTX 3090 run ---------------------------------------------------------


def _ud_run(context=2048, offload=None, ram=None, gpus=2):
    offload = offload or Offload(experts_in_ram=True)
    choice = IK_LLAMA_CPP.cache_layout(mla=3, mla_gguf=True)
    cache = make_cache(K2, choice, "q8_0", "f16", context, ik=True)
    return place(K2, ud_iq3_xxs(), ACCELERATORS["RTX3090"], gpus, offload, cache, ram=ram)


def test_ud_iq3_xxs_on_two_3090s_with_experts_in_ram():
    # ik_llama.cpp #616 (build 3808, -mla 3 -fa -ctk q8_0 -ngl 99 -ot exps=CPU, n_ctx 2048):
    #   "CUDA0 buffer size =  2998.56 MiB", "CUDA1 buffer size =  3632.72 MiB"
    #   "CUDA0 KV buffer size =    37.07 MiB", "CUDA1 KV buffer size =    35.87 MiB"
    #   "KV self size  =   72.91 MiB, c^KV (q8_0):   72.91 MiB"
    layout = _ud_run()
    first, second = layout.gpus
    assert (mib(first.weights), mib(second.weights)) == ("2998.56", "3632.72")
    assert (mib(first.cache), mib(second.cache)) == ("37.07", "35.87")
    assert (len(first.layers), len(second.layers)) == (31, 30)
    assert mib(61 * layout.cache.layer_bytes) == "72.91"
    # by hand: 2,048 cells × 612 B + CUDA's 476 B row padding, to 128 B: 1,253,888 B per layer
    assert first.cache == 31 * 1_253_888 and second.cache == 30 * 1_253_888
    assert second.output and not first.output
    # the host: token_embd and every routed expert (60 layers × 3 tensors), at the file's bytes
    assert layout.host.tensors == 1 + 180
    assert layout.host.weights == sum(
        t.nbytes for t in ud_iq3_xxs() if "exps" in t.name or t.name.startswith("token_embd")
    )


def test_layers_follow_the_split_points():
    # 62 layers (61 blocks + output), splits 1/2 and 1: layer il goes to GPU 0 while il/62 < 1/2
    devices = layer_devices(61, 2, Offload())
    assert devices[:31] == [0] * 31 and devices[31:] == [1] * 31
    # -ts 3,1: il/62 < 3/4 -> blocks 0..46 on GPU 0
    assert layer_devices(61, 2, Offload(tensor_split=(3, 1))).count(0) == 47
    # -ngl 20: the last 20 layers (blocks 42..60 and the output) offloaded
    assert layer_devices(61, 1, Offload(ngl=20)) == [None] * 42 + [0] * 20


def test_n_cpu_moe_keeps_the_first_blocks_experts_in_ram():
    layout = _ud_run(offload=Offload(n_cpu_moe=31))
    experts = {t.name: t.nbytes for t in ud_iq3_xxs() if "exps" in t.name}
    in_ram = sum(b for name, b in experts.items() if int(name.split(".")[1]) < 31)
    assert layout.host.experts == in_ram
    assert layout.gpus[0].experts == 0 and layout.gpus[1].experts == sum(experts.values()) - in_ram


def test_longest_context_on_two_3090s():
    run = _ud_run()
    fit = longest_context(K2, ud_iq3_xxs(), ACCELERATORS["RTX3090"], 2, run.offload, run.cache)
    # the trained context (131,072) needs 31 × 612 × 131,072 B + padding ≈ 2.3 GiB on GPU 0: it fits
    assert fit.longest == 131_072


def test_longest_context_when_a_gpu_is_the_limit():
    run = _ud_run()
    small = ACCELERATORS["RTX3090"]
    from dataclasses import replace

    tight = replace(small, cuda_memory_bytes=4_200 * MIB)
    fit = longest_context(K2, ud_iq3_xxs(), tight, 2, run.offload, run.cache)
    # GPU 1: 3,632.72 MiB weights + 320 MiB of logits leave 247.28 MiB; at 30 × 612 B (+ padding) per
    # cell: 14,080 cells (multiple of 256); 14,336 would need 30 × (14,336 × 612 + 476 → 128) B
    per_cell = 30 * 612
    assert fit.longest == 14_080 and fit.limit == "CUDA1"
    assert 30 * -(-(14_080 * 612 + 476) // 128) * 128 <= 4_200 * MIB - run.gpus[1].weights - 320 * MIB
    assert 30 * -(-(14_336 * 612 + 476) // 128) * 128 > 4_200 * MIB - run.gpus[1].weights - 320 * MIB
    assert per_cell == 18_360


def test_fewest_cpu_moe_on_one_24gb_gpu():
    run = _ud_run()
    n = fewest_cpu_moe(K2, ud_iq3_xxs(), ACCELERATORS["RTX3090"], 1, run.offload, run.cache)
    # by hand: one 3090 (24,258 MiB to CUDA) holds the 6,631.28 MiB of non-expert weights (the two GPUs'
    # buffers above), 61 × 1,253,888 B of cache and 320 MiB of compute (the logits); the experts of the
    # last blocks fill what is left, whole blocks at a time (their rows fill 512: no CUDA padding)
    left = 24_258 * MIB - (_ud_run().gpus[0].weights + _ud_run().gpus[1].weights) - 61 * 1_253_888 - 320 * MIB
    per_block = {}
    for t in ud_iq3_xxs():
        if "exps" in t.name:
            block = int(t.name.split(".")[1])
            per_block[block] = per_block.get(block, 0) + t.nbytes
    expected = 61
    while expected > 1 and sum(per_block[b] for b in range(expected - 1, 61)) <= left:
        expected -= 1
    assert n == expected
    assert _ud_run(offload=Offload(n_cpu_moe=n), gpus=1).gpus[0].fits


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: parse_build("build5331"), "--build 'build5331': expected a llama.cpp release tag"),
        (lambda: parse_cache_type("q3_k", "-ctk"), "-ctk 'q3_k': unknown cache type"),
        (
            lambda: layer_devices(61, 2, Offload(tensor_split=(1, 1, 1))),
            "--tensor-split: 3 shares for 2 GPUs",
        ),
        (lambda: LLAMA_CPP.cache_layout(None, mla=3, mla_gguf=True), "--mla: an ik_llama.cpp option"),
        (lambda: IK_LLAMA_CPP.cache_layout(mla=4, mla_gguf=True), "--mla 4: expected 0, 1, 2 or 3"),
    ],
)
def test_bad_options_name_the_option(call, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("'", "'")):
        call()
