"""`kimicount measure` on the CPU: real caches at Kimi K2's true dimensions hold the predicted bytes, the
absorbed latent decode equals the naive decode, and bad input exits 2 with one line.

Expected bytes are computed by hand here (× 61 layers they are DESIGN.md's per-token figures), never by
kimicount's own formulas. The decode is checked against this file's own textbook MLA forward pass.
Only the tests marked needs_torch need torch: the others (usage errors, the install hint, rendering a
hand-built result) must pass where torch is not installed.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest
from rich.console import Console

from kimicount.kvcache import Layout
from kimicount.measure import CacheTensor, LayoutMeasurement, Measurement
from kimicount.render_measure import render_measure

from .helpers import FIXTURES, fails_cleanly, invoke, run_kimicount

try:  # torch is an optional extra: tests that build caches need it; usage errors must work without it
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(
    torch is None, reason='torch is not installed (pip install "torch==2.13.0+cpu" -e ".[measure]")'
)

# Kimi K2: 64 heads, keys 128 + 64 = 192 wide, values 128, latent 512, rotary key 64; bf16 = 2 bytes.
# × 61 layers these are DESIGN.md's bf16 figures: naive 2,498,560 B/token, flash 2,998,272, latent 70,272.
TOKENS, BATCH = 64, 2
K2_BF16_PER_TOKEN_PER_LAYER = {
    "naive": 64 * (192 + 128) * 2,  # 40,960
    "flash": 64 * (192 + 192) * 2,  # 49,152
    "latent": (512 + 64) * 2,  # 1,152
    "flashmla-fp8": 512 * 1 + 4 * 4 + 64 * 2,  # 656: fp8 latent, 4 F32 scales, bf16 rotary key
}


@pytest.fixture(scope="module")
def k2_json():
    """Kimi K2, bf16 (the model's dtype), 64 tokens × batch 2 × 1 layer, through the CLI."""
    result = invoke(
        "measure", *f"--device cpu --tokens {TOKENS} --batch {BATCH} --decode-steps 1 --json".split()
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # stdout holds the JSON and nothing else


@needs_torch
def test_json_follows_the_contract(k2_json):
    assert {"device", "tokens", "batch", "layers", "layouts"} <= k2_json.keys()
    assert (k2_json["device"], k2_json["tokens"], k2_json["batch"], k2_json["layers"]) == ("cpu", 64, 2, 1)
    assert (k2_json["model"], k2_json["dtype"], k2_json["ok"]) == (
        "moonshotai/Kimi-K2-Instruct",
        "bf16",
        True,
    )
    assert k2_json["torch_version"] == torch.__version__
    assert k2_json["note"] == ""  # Kimi K2 has no lightning indexer: every cache kv-cache counts is built
    for row in k2_json["layouts"]:
        assert {"layout", "predicted_bytes", "measured_bytes", "ratio"} <= row.keys()
        assert isinstance(row["measured_bytes"], int) and isinstance(row["predicted_bytes"], int)
        assert row["peak_bytes"] is None  # the CPU has no allocator to ask
        assert row["decode_ms"] > 0


@needs_torch
def test_measured_equals_predicted_for_every_layout(k2_json):
    measured = {row["layout"]: row["measured_bytes"] for row in k2_json["layouts"]}
    predicted = {row["layout"]: row["predicted_bytes"] for row in k2_json["layouts"]}
    expected = {layout: size * TOKENS * BATCH for layout, size in K2_BF16_PER_TOKEN_PER_LAYER.items()}
    assert expected == {"naive": 5_242_880, "flash": 6_291_456, "latent": 147_456, "flashmla-fp8": 83_968}
    assert measured == expected
    assert predicted == expected
    assert [row["ratio"] for row in k2_json["layouts"]] == [1.0, 1.0, 1.0, 1.0]


@needs_torch
def test_cache_tensors_have_the_layout_shapes(k2_json):
    tensors = {
        row["layout"]: [(t["name"], t["shape"], t["dtype"], t["bytes"]) for t in row["tensors"]]
        for row in k2_json["layouts"]
    }
    assert tensors["naive"] == [
        ("keys", [2, 64, 64, 192], "bfloat16", 2 * 64 * 64 * 192 * 2),
        ("values", [2, 64, 64, 128], "bfloat16", 2 * 64 * 64 * 128 * 2),
    ]
    assert tensors["flash"][1] == ("values", [2, 64, 64, 192], "bfloat16", 2 * 64 * 64 * 192 * 2)
    assert tensors["latent"] == [
        ("latent", [2, 64, 512], "bfloat16", 2 * 64 * 512 * 2),
        ("rope_key", [2, 64, 64], "bfloat16", 2 * 64 * 64 * 2),
    ]
    assert tensors["flashmla-fp8"] == [
        ("latent", [2, 64, 512], "float8_e4m3fn", 2 * 64 * 512),
        ("scales", [2, 64, 4], "float32", 2 * 64 * 4 * 4),
        ("rope_key", [2, 64, 64], "bfloat16", 2 * 64 * 64 * 2),
    ]


@needs_torch
def test_bf16_decodes_agree_to_bf16_precision(k2_json):
    rows = {row["layout"]: row for row in k2_json["layouts"]}
    assert rows["naive"]["decode_max_error"] is None  # the reference
    assert rows["flash"]["decode_max_error"] == 0.0  # zero padding changes nothing
    assert 0 < rows["latent"]["decode_max_error"] < 2**-5  # different numbers, both rounded to bf16
    assert rows["flashmla-fp8"]["decode_max_error"] < 0.1  # e4m3 keeps 3 mantissa bits
    assert all(row["decode_agrees"] for row in rows.values())


@needs_torch
def test_table_with_two_layers():
    result = invoke("measure", "--device", "cpu", "--tokens", "8", "--layers", "2", "--decode-steps", "1")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "bf16 cache, 8 tokens × batch 1 × 2 layers" in out
    # caches grow linearly with layers: 40,960 B × 8 tokens × 2 layers, and so on
    assert re.search(
        r"^naive\s+655,360\s+655,360\s+1\.0000\s+[\d.]+\s+reference\s+keys \[1 × 64 × 8 × 192\]",
        out,
        re.MULTILINE,
    )
    assert re.search(r"^flash\s+786,432\s+786,432\s+1\.0000\s+[\d.]+\s+\S+ ≤ 0\.03 ok", out, re.MULTILINE)
    assert re.search(r"^latent\s+18,432\s+18,432\s+1\.0000\s+[\d.]+\s+\S+ ≤ 0\.03 ok", out, re.MULTILINE)
    assert re.search(
        r"^flashmla-fp8\s+10,496\s+10,496\s+1\.0000\s+[\d.]+\s+\S+ ≤ 0\.25 ok", out, re.MULTILINE
    )
    assert "All layouts hold the predicted bytes and decode alike." in out


@needs_torch
def test_fp32_caches_decode_to_fp32_precision():
    # DeepSeek-V2-Lite also exercises q_lora_rank: null (a plain q_proj); 16 heads, same head dims.
    v2_lite = str(FIXTURES / "deepseek-v2-lite")
    args = ["--device", "cpu", "--tokens", "32", "--dtype", "fp32", "--decode-steps", "1", "--json"]
    result = invoke("measure", "--config", v2_lite, *args)
    assert result.exit_code == 0, result.output
    rows = {row["layout"]: row for row in json.loads(result.stdout)["layouts"]}
    assert rows["naive"]["measured_bytes"] == 16 * (192 + 128) * 4 * 32
    assert rows["latent"]["measured_bytes"] == (512 + 64) * 4 * 32
    assert rows["flashmla-fp8"]["measured_bytes"] == (512 + 16 + 128) * 32  # whatever --dtype says
    assert rows["latent"]["decode_max_error"] < 1e-5
    assert rows["latent"]["decode_tolerance"] == 1e-4


@needs_torch
def test_deepseek_v32_measures_the_attention_cache_and_says_the_indexer_keys_are_not_built():
    v32 = str(FIXTURES / "deepseek-v3.2-exp")
    args = ["--config", v32, "--device", "cpu", "--tokens", "8", "--decode-steps", "1"]
    result = invoke("measure", *args, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = {row["layout"]: row for row in report["layouts"]}
    # 128 heads; the attention cache alone: kv-cache's 132 B of indexer keys per token per layer are left out
    assert rows["naive"]["predicted_bytes"] == rows["naive"]["measured_bytes"] == 128 * (192 + 128) * 2 * 8
    assert rows["latent"]["predicted_bytes"] == (512 + 64) * 2 * 8
    assert report["note"] == (
        "Not built: the lightning indexer's keys (132 B per token per layer), which kimicount kv-cache adds "
        "to every layout; predicted and measured bytes are the attention cache alone."
    )
    assert report["note"] in invoke("measure", *args).stdout


# --- the decode against this file's own full-attention forward pass ----------------------------------


def _rms_norm(x):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), eps=1e-6)


def _rope(x, base=10_000.0):
    """Rotate-half RoPE of x [B, T, ..., D] at positions 0..T-1."""
    dim, length = x.shape[-1], x.shape[1]
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2).float() / dim)
    angles = torch.outer(torch.arange(length).float(), inv_freq)
    angles = torch.cat([angles, angles], -1).view(length, *[1] * (x.dim() - 3), dim)
    half = dim // 2
    return x * angles.cos() + torch.cat([-x[..., half:], x[..., :half]], -1) * angles.sin()


def _causal_mla_last_token(w, x, heads=64, nope=128, rope=64, v=128, rank=512):
    """Textbook MLA over all tokens of x [B, T, hidden] with expanded keys and values and torch's own
    scaled_dot_product_attention; returns the last token's output [B, hidden]."""
    batch, length, _ = x.shape
    q = (_rms_norm(x @ w["q_a_proj"].T) @ w["q_b_proj"].T).view(batch, length, heads, nope + rope)
    q = torch.cat([q[..., :nope], _rope(q[..., nope:])], -1)
    compressed = x @ w["kv_a_proj_with_mqa"].T
    up = (_rms_norm(compressed[..., :rank]) @ w["kv_b_proj"].T).view(batch, length, heads, nope + v)
    rope_key = _rope(compressed[..., rank:])[:, :, None].expand(batch, length, heads, rope)
    k = torch.cat([up[..., :nope], rope_key], -1)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), up[..., nope:].transpose(1, 2), is_causal=True
    )  # default scale 1/sqrt(192)
    return out[:, :, -1].flatten(1) @ w["o_proj"].T


@pytest.fixture(scope="module")
def k2_layer_fp32():
    """Kimi K2's attention layer in fp32 with 16 prefilled tokens and one more, batch 2."""
    from kimicount.measure import MlaLayer
    from kimicount.spec import bundled_spec

    layer = MlaLayer.random(
        torch, bundled_spec(), torch.device("cpu"), torch.float32, torch.Generator().manual_seed(1)
    )
    x = torch.randn(2, 17, 7168, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        expected = _causal_mla_last_token(layer.w, x)
    return layer, x, expected


def _decode_over(layer, layout, x, tamper=None):
    from kimicount.measure import CACHES, decode

    with torch.inference_mode():
        cache = CACHES[layout].prefill(layer, x[:, :-1], torch.arange(16), torch.float32)
        if tamper:
            cache = tamper(cache)
        return decode(layer, cache, x[:, -1:], 16, torch.float32)


def _relative(outputs, expected):
    return float((outputs - expected).abs().max() / expected.abs().max())


@needs_torch
@pytest.mark.parametrize(
    "layout, bound",
    [(Layout.naive, 1e-5), (Layout.flash, 1e-5), (Layout.latent, 1e-5), (Layout.flashmla_fp8, 0.1)],
)
def test_each_cache_decodes_what_full_attention_computes(k2_layer_fp32, layout, bound):
    layer, x, expected = k2_layer_fp32
    assert _relative(_decode_over(layer, layout, x), expected) < bound


@needs_torch
def test_a_latent_cache_with_its_tokens_out_of_order_is_caught(k2_layer_fp32):
    from kimicount.measure import LatentCache

    layer, x, expected = k2_layer_fp32

    def reverse_tokens(cache):
        return LatentCache(cache.latent.flip(1), cache.rope_key)

    # the comparison is sensitive: a cache that holds the right numbers in the wrong places is far off
    assert _relative(_decode_over(layer, Layout.latent, x, reverse_tokens), expected) > 0.1


# --- results that fail, rendered (hand-built results: no torch run can be made to fail on purpose) ----


def _layout(layout, storage, error, tolerance=0.03):
    return LayoutMeasurement(
        layout=layout,
        predicted_bytes=1000,
        measured_bytes=storage + 512,
        storage_bytes=storage,
        peak_bytes=4096,
        tensors=(CacheTensor("latent", (1, 2, 512), "bfloat16", 2048),),
        decode_ms=1.5,
        decode_error=error,
        decode_tolerance=None if error is None else tolerance,
        note="allocator +512 B",
    )


def test_a_mismatch_is_not_ok_and_is_shown():
    good = _layout(Layout.naive, 1000, None)
    wrong_size = _layout(Layout.flash, 1200, 0.0)
    wrong_decode = _layout(Layout.latent, 1000, 0.5)
    assert (good.ok, wrong_size.ok, wrong_decode.ok) == (True, False, False)
    assert good.ratio == 1.512  # measured (allocator) / predicted
    run = Measurement(
        model="m",
        device="cuda:0",
        device_name="GPU",
        torch_version="2.x",
        measured_with="allocator",
        dtype="bf16",
        compute_dtype="bf16",
        tokens=2,
        batch=1,
        layers=1,
        seed=0,
        decode_steps=1,
        layouts=(good, wrong_size, wrong_decode),
    )
    assert not run.ok
    page = io.StringIO()
    render_measure(Console(width=200, color_system=None, file=page), run)
    text = page.getvalue()
    assert re.search(r"latent\s+1,000\s+1,512\s+1\.5120\s+4,096\s+1\.50\s+5\.0e-01 ≤ 0\.03 DIFFERS", text)
    assert "Peak: torch.cuda.max_memory_allocated()" in text and "allocator +512 B" in text
    assert "MISMATCH in flash, latent" in text


# --- bad input: exit 2, one line on stderr ------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        # the same wording as kv-cache's: one shared check
        (["--tokens", "0"], "--tokens 0: expected a positive integer"),
        (["--tokens", "-5"], "--tokens -5: expected a positive integer"),
        (["--batch", "0"], "--batch 0: expected a positive integer"),
        (["--decode-steps", "0"], "--decode-steps 0: expected a positive integer"),
        (["--layers", "0"], "--layers 0: expected 1 to 61, the layers of moonshotai/Kimi-K2-Instruct"),
        (["--layers", "62"], "--layers 62: expected 1 to 61"),
        (["--dtype", "int4"], "--dtype 'int4': unknown cache dtype (expected one of: bf16, fp16, fp32, fp8,"),
        # past the largest count an option takes, 2^63 − 1: no float overflow, the same words as kv-cache
        (["--tokens", "9" * 400], f"--tokens {'9' * 400}: expected at most 9,223,372,036,854,775,807"),
        (
            ["--batch", "9223372036854775808"],
            "--batch 9223372036854775808: expected at most 9,223,372,036,854,7",
        ),
    ],
)
def test_bad_input_exits_2(args, needle):
    # refused before torch is imported: these run, and must pass, where torch is not installed
    fails_cleanly(invoke("measure", *args), needle)


@needs_torch
@pytest.mark.parametrize(
    "args, needle",
    [
        (["--tokens", "100000000", "--batch", "1000"], "GiB free on cpu; lower --tokens"),
        # a run that could never be allocated is refused the same way, without float overflow
        (
            ["--tokens", "9223372036854775807"],
            "--tokens 9,223,372,036,854,775,807 --batch 1 --layers 1 needs about",
        ),
    ],
)
def test_a_run_too_big_for_memory_exits_2(args, needle):
    fails_cleanly(invoke("measure", "--device", "cpu", *args), needle)


@needs_torch
def test_cuda_without_a_gpu_exits_2():
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this runs on GPU machines too
    result = run_kimicount("measure", "--device", "cuda", env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1
    assert "--device cuda: torch" in result.stderr and "sees no CUDA GPU" in result.stderr


def test_without_torch_it_says_how_to_install_it():
    # torch really cannot be imported in this interpreter: None in sys.modules makes `import torch` fail
    code = (
        "import sys; sys.modules['torch'] = None; sys.argv = ['kimicount', 'measure']; "
        "from kimicount.__main__ import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("kimicount: error: measure needs torch, which is not installed: ")
    # a hint that works from a checkout (kimicount is on no index) and pins torch's CPU build
    hint = 'from a kimicount checkout, pip install "torch==2.13.0+cpu" -e ".[measure]" --extra-index-url '
    assert hint in result.stderr


def test_help_names_the_extra_to_install():
    out = invoke("measure", "--help", env={"COLUMNS": "200"}).stdout
    assert 'pip install "torch==2.13.0+cpu" -e ".[measure]"' in " ".join(out.split())
    assert "--tokens" in out and "[default: 4096]" in out
