"""Kimi Linear in llama.cpp's kimi-linear arch: the GGUF its converter writes, checked by `kimicount gguf`
and sized at a --quant; the plan's KV cells (MLA layers only) and recurrent state (KDA layers, one cell
per sequence, `--parallel N`).

Expected figures come from outside the code under test:
- the tensors of a kimi-linear GGUF are written here by hand from llama.cpp's own loader
  (src/models/kimi-linear.cpp @ 3af988f, load_arch_tensors: names and GGUF dims, ne0 first) and
  converter (conversion/kimi_linear.py, conversion/base.py: which tensors are F32), with the sizes of
  the bundled config (kimicount/data/kimi-linear-48b-a3b.values.json: hidden 2304, 27 layers, KDA at
  1-based layers 1–3, 5–7, 9–11, 13–15, 17–19, 21–23, 25–26, 32 heads of 128, conv 4, 256 experts of
  1024, one shared, the first layer dense with 9216, kv_lora_rank 512, qk_nope 128, qk_rope 64,
  v_head 128, vocab 163,840);
- the parameter total is the released checkpoint's index: total_size 98,245,528,576 B is 2 B per
  parameter plus 2 more for the 82,560 F32 ones (A_log and dt_bias), so (98,245,528,576 − 2 × 82,560)
  ÷ 2 = 49,122,681,728 parameters.
"""

from __future__ import annotations

import json

from gguf import GGUFValueType

from .gguf_files import MapTensor, write_gguf
from .helpers import invoke

PARAMETERS = (98_245_528_576 - 2 * 82_560) // 2
KDA = [i - 1 for i in (*range(1, 4), *range(5, 8), *range(9, 12), *range(13, 16), *range(17, 20),
                       *range(21, 24), 25, 26)]  # fmt: skip
H, D, E, V = 2304, 128, 256, 163_840  # hidden, KDA head_dim, experts, vocab
F32 = {"f32"}


def _t(name: str, shape: tuple[int, ...], dtype: str = "bf16") -> MapTensor:
    elements = 1
    for d in shape:
        elements *= d
    return MapTensor(name, shape, dtype, elements, elements * (4 if dtype == "f32" else 2))


def kimi_linear_tensors() -> list[MapTensor]:
    """Every tensor llama.cpp's load_arch_tensors asks of Kimi-Linear-48B-A3B, GGUF dims, in a BF16
    conversion (F32: the 1-D ones, *_norm.weight, ffn_gate_inp, ssm_conv1d_*, ssm_a)."""
    out = [
        _t("token_embd.weight", (H, V)),
        _t("output_norm.weight", (H,), "f32"),
        _t("output.weight", (H, V)),
    ]
    for i in range(27):
        b = f"blk.{i}."
        out.append(_t(b + "attn_norm.weight", (H,), "f32"))
        if i in KDA:
            for part in "qkv":
                out.append(_t(b + f"ssm_conv1d_{part}.weight", (4, 1, 32 * D, 1), "f32"))
                out.append(_t(b + f"attn_{part}.weight", (H, 32 * D)))
            out += [
                _t(b + "ssm_f_a.weight", (H, D)),
                _t(b + "ssm_f_b.weight", (D, 32 * D)),
                _t(b + "ssm_beta.weight", (H, 32)),
                _t(b + "ssm_a", (1, 32, 1, 1), "f32"),
                _t(b + "ssm_dt.bias", (32 * D,), "f32"),
                _t(b + "ssm_g_a.weight", (H, D)),
                _t(b + "ssm_g_b.weight", (D, 32 * D)),
                _t(b + "ssm_norm.weight", (D,), "f32"),
                _t(b + "attn_output.weight", (32 * D, H)),
            ]
        else:  # MLA without q compression: attn_q [n_embd, n_head × 192]; kv_b split per head
            out += [
                _t(b + "attn_kv_a_norm.weight", (512,), "f32"),
                _t(b + "attn_q.weight", (H, 32 * 192)),
                _t(b + "attn_kv_a_mqa.weight", (H, 512 + 64)),
                _t(b + "attn_k_b.weight", (128, 512, 32)),
                _t(b + "attn_v_b.weight", (512, 128, 32)),
                _t(b + "attn_output.weight", (32 * 128, H)),
            ]
        out.append(_t(b + "ffn_norm.weight", (H,), "f32"))
        if i == 0:
            out += [_t(b + "ffn_gate.weight", (H, 9216)), _t(b + "ffn_down.weight", (9216, H)),
                    _t(b + "ffn_up.weight", (H, 9216))]  # fmt: skip
        else:
            out += [
                _t(b + "ffn_gate_inp.weight", (H, E), "f32"),
                _t(b + "ffn_gate_exps.weight", (H, 1024, E)),
                _t(b + "ffn_down_exps.weight", (1024, H, E)),
                _t(b + "ffn_up_exps.weight", (H, 1024, E)),
                _t(b + "ffn_gate_shexp.weight", (H, 1024)),
                _t(b + "ffn_down_shexp.weight", (1024, H)),
                _t(b + "ffn_up_shexp.weight", (H, 1024)),
                _t(b + "exp_probs_b.bias", (E,), "f32"),
            ]
    return out


def kimi_linear_metadata() -> dict[str, tuple[object, GGUFValueType]]:
    """What KimiLinearModel.set_gguf_parameters writes (conversion/kimi_linear.py), from the config."""
    u32 = GGUFValueType.UINT32
    keys: dict[str, tuple[object, GGUFValueType]] = {
        "block_count": (27, u32),
        "context_length": (1_048_576, u32),
        "embedding_length": (H, u32),
        "feed_forward_length": (9216, u32),
        "attention.head_count": (32, u32),
        "expert_count": (E, u32),
        "expert_used_count": (8, u32),
        "expert_feed_forward_length": (1024, u32),
        "expert_shared_count": (1, u32),
        "leading_dense_block_count": (1, u32),
        "expert_gating_func": (2, u32),
        "attention.kv_lora_rank": (512, u32),
        "rope.dimension_count": (64, u32),
        "attention.key_length": (576, u32),
        "attention.value_length": (72, u32),  # TextModel's head_dim, left as written
        "attention.key_length_mla": (192, u32),
        "attention.value_length_mla": (128, u32),
        "ssm.conv_kernel": (4, u32),
        "kda.head_dim": (D, u32),
        "vocab_size": (V, u32),
        # 0 for a KDA layer, 1 (n_head_kv made 1 for MLA's MQA form) for the seven MLA layers
        "attention.head_count_kv": ([0 if i in KDA else 1 for i in range(27)], GGUFValueType.ARRAY),
    }
    return {f"kimi-linear.{k}": v for k, v in keys.items()}


def write_kimi_linear(path, tensors=None):
    (file,) = write_gguf(
        path,
        tensors or kimi_linear_tensors(),
        lambda t: t.dtype.upper(),
        kimi_linear_metadata(),
        arch="kimi-linear",
    )
    return file


def gguf_json(*args: str, code: int = 0) -> dict:
    result = invoke("gguf", *args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


#: The F32 elements of a BF16 conversion, by hand: attn_norm and ffn_norm 2 × 27 × 2304 and output_norm
#: 2304; per KDA layer (20) the three convolutions 3 × 4 × 4096, ssm_a 32, ssm_dt.bias 4096, ssm_norm
#: 128; per MLA layer (7) attn_kv_a_norm 512; per MoE layer (26) ffn_gate_inp 2304 × 256 and
#: exp_probs_b 256.
F32_ELEMENTS = 55 * 2304 + 20 * (3 * 4 * 4096 + 32 + 4096 + 128) + 7 * 512 + 26 * (2304 * 256 + 256)


def test_a_kimi_linear_gguf_checks_clean(tmp_path):
    file = write_kimi_linear(tmp_path / "kimi-linear-bf16.gguf")
    report = gguf_json(str(file))
    assert report["ok"] and report["mismatches"] == []
    assert report["tensors"] == 20 * 17 + 7 * 8 + 26 * 8 + 3 + 3 == 610
    assert report["parameters"]["expected"] == report["parameters"]["found"] == PARAMETERS
    assert report["by_type"]["F32"] == {"tensors": 1 + 27 * 2 + 20 * 6 + 7 + 26 * 2,
                                        "elements": F32_ELEMENTS, "bytes": 4 * F32_ELEMENTS}  # fmt: skip
    assert report["file_size"]["bytes"] == 2 * (PARAMETERS - F32_ELEMENTS) + 4 * F32_ELEMENTS


def test_a_kimi_linear_gguf_with_a_wrong_tensor_is_named(tmp_path):
    tensors = [t for t in kimi_linear_tensors() if t.name != "blk.5.ssm_a"]
    tensors = [t if t.name != "blk.3.attn_k_b.weight" else _t(t.name, (128, 512, 16)) for t in tensors]
    file = write_kimi_linear(tmp_path / "bad.gguf", tensors)
    report = gguf_json(str(file), code=1)
    assert {(m["tensor"], m["kind"], m["expected"]) for m in report["mismatches"]} == {
        ("blk.5.ssm_a", "missing", "[1, 32, 1, 1]"),
        ("blk.3.attn_k_b.weight", "shape", "[128, 512, 32]"),
    }


def test_quant_bf16_of_kimi_linear_is_the_written_file():
    report = gguf_json("kimi-linear-48b-a3b", "--quant", "BF16")
    assert report["ok"] and report["tensors"] == 610
    assert report["file_size"]["bytes"] == 2 * (PARAMETERS - F32_ELEMENTS) + 4 * F32_ELEMENTS
    assert report["by_type"]["F32"]["elements"] == F32_ELEMENTS


def test_quant_q4_k_m_of_kimi_linear_types_attn_v_by_llama_quantize():
    # llama-quant.cpp's attn_v rule at Q4_K_M: Q6_K where use_more_bits(i_attention_wv, n_attention_wv)
    # with n = 20 (attn_v only in the KDA layers): i < 2, i >= 17, or (i - 2) % 3 == 2 -> 10 of the 20.
    assert [i for i in range(20) if i < 2 or i >= 17 or (i - 2) % 3 == 2] == [
        0,
        1,
        4,
        7,
        10,
        13,
        16,
        17,
        18,
        19,
    ]
    # ffn_down by layer, use_more_bits(i, 27): i < 3, i >= 23, or (i - 3) % 3 == 2: layers 0-2, 5, 8, ...,
    # 20, 23-26 = 13 layers, layer 0 dense (ffn_down), 12 MoE (ffn_down_exps + ffn_down_shexp)
    layers = [i for i in range(27) if i < 3 or i >= 23 or (i - 3) % 3 == 2]
    assert len(layers) == 13
    report = gguf_json("kimi-linear-48b-a3b", "--quant", "Q4_K_M")
    by_type = {k: v["tensors"] for k, v in report["by_type"].items()}
    # Q6_K: output.weight, 10 attn_v, 1 + 12 × 2 ffn_down; Q5_0: rows of 128 that Q4_K's 256 blocks
    # do not divide (attn_k_b 7, ssm_f_b and ssm_g_b 20 each); F32: the BF16 file's F32 tensors
    assert by_type == {
        "Q6_K": 1 + 10 + 1 + 12 * 2,
        "Q5_0": 7 + 20 + 20,
        "F32": 234,
        "Q4_K": 610 - 36 - 47 - 234,
    }
    assert report["by_type"]["F32"]["elements"] == F32_ELEMENTS


# --- the plan: KV cells for the 7 MLA layers, recurrent state for the 20 KDA layers ------------------

#: Per KDA layer per cell (llama-hparams.cpp n_embd_r / n_embd_s, F32 both: llama-model.cpp
#: create_memory): r = 3 × (d_conv − 1) × n_head × head_dim = 3 × 3 × 32 × 128 = 36,864 values,
#: s = head_dim² × n_head = 128 × 128 × 32 = 524,288 values.
R, S = 3 * (4 - 1) * 32 * 128, 128 * 128 * 32
assert (R, S, 4 * R, 4 * S) == (36_864, 524_288, 147_456, 2_097_152)
PER_SEQUENCE = 20 * (4 * R + 4 * S)  # 44,892,160 B
#: Per token: the 7 MLA layers (1-based 4, 8, 12, 16, 20, 24, 27) × the latent K 512 + 64 in f16, V a
#: view of K (the V-less cache, #19067)
PER_TOKEN = 7 * (512 + 64) * 2


def plan_json(*args: str, code: int = 0) -> dict:
    result = invoke(
        "plan", "kimi-linear-48b-a3b", "--engine", "llama.cpp", "--quant", "Q4_K_M", *args, "--json"
    )
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_plan_parallel_4_gives_the_kda_layers_four_cells():
    plan = plan_json("--gpus", "1xH100", "--context", "65536", "--parallel", "4")
    kv, state = plan["kv_cache"], plan["per_sequence_state"]
    assert kv["layers"] == [3, 7, 11, 15, 19, 23, 26] and kv["bytes_per_token"] == PER_TOKEN == 8_064
    assert kv["cells"] == 65_536 and kv["total_bytes"] == 65_536 * 8_064 == 528_482_304
    assert state["layers"] == KDA and len(KDA) == 20
    assert (state["r_elements_per_layer"], state["s_elements_per_layer"], state["type"]) == (R, S, "f32")
    assert state["bytes_per_sequence"] == PER_SEQUENCE == 44_892_160
    assert state["cells"] == state["sequences"] == state["parallel"] == 4
    assert state["total_bytes"] == 4 * PER_SEQUENCE == 179_568_640
    (gpu,) = plan["devices"][:1]
    # every block on the GPU: its KV buffer (7 layers, K of 65,536 × 1,152 B, a multiple of 128) and
    # its RS buffer (20 layers × r and s, each a multiple of 128)
    assert gpu["kv_cache_bytes"] == 528_482_304 and gpu["state_bytes"] == 179_568_640
    assert state["limit"] == "context"
    assert state["limit_words"].startswith("The context limits: the KV cache (504.00 MiB at 65,536 tokens)")
    assert "the state (171.25 MiB for --parallel 4)" in state["limit_words"]
    assert plan["command"][-3:] == ["-np", "4", "-kvu"]


def test_plan_many_sequences_short_context_says_the_sequences_limit():
    plan = plan_json("--gpus", "1xH100", "--context", "8192", "--parallel", "16")
    state = plan["per_sequence_state"]
    assert state["total_bytes"] == 16 * PER_SEQUENCE == 718_274_560
    assert plan["kv_cache"]["total_bytes"] == 8_192 * PER_TOKEN == 66_060_288
    assert state["limit"] == "sequences"
    assert state["limit_words"].startswith("The sequences limit: the state (685.00 MiB for --parallel 16)")
    # 44,892,160 B = 42.8125 MiB a sequence
    assert state["limit_words"].endswith(
        "outweighs the KV cache (63.00 MiB at 8,192 tokens); each sequence fewer frees 42.81 MiB."
    )


def test_plan_without_parallel_sizes_llama_servers_four_auto_slots():
    plan = plan_json("--gpus", "1xH100", "--context", "4096")
    state = plan["per_sequence_state"]
    assert state["parallel"] is None and state["cells"] == 4  # tools/server/server.cpp: auto -> 4
    assert "llama-server's 4 slots" in state["limit_words"]
    assert "-np" not in plan["command"]


def test_plan_text_prints_the_state_beside_the_per_token_cache():
    result = invoke("plan", "kimi-linear-48b-a3b", "--engine", "llama.cpp", "--quant", "Q4_K_M", "--gpus", "1xH100",
                    "--context", "65536", "-np", "4")  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "8,064 B per token (7 MLA layers)" in text
    assert "20 KDA layers × (r 36,864 + s 524,288 values" in text
    assert "44,892,160 B per sequence; 4 cells for 4 sequences: 171.25 MiB" in text
    assert "The context limits" in text


def test_parallel_is_refused_where_it_means_nothing():
    result = invoke("plan", "kimi-k2-instruct", "--gpus", "8xH200", "--parallel", "4")
    assert result.exit_code == 2 and "--parallel: llama-server's -np" in result.stderr
    result = invoke("plan", "kimi-linear-48b-a3b", "--engine", "llama.cpp", "--quant", "Q4_K_M", "--gpus", "1xH100",
                    "--parallel", "0")  # fmt: skip
    assert result.exit_code == 2 and "--parallel" in result.stderr


def test_ik_llama_cpp_refuses_the_family_in_one_line():
    for model in ("kimi-linear-48b-a3b", "kimi-k3"):
        result = invoke("plan", model, "--engine", "ik_llama.cpp", "--quant", "Q2_K", "--gpus", "8xH200")
        assert (
            result.exit_code == 2
            and "ik_llama.cpp has no kimi-linear or kimi-k3 architecture" in result.stderr
        )
        assert len(result.stderr.strip().splitlines()) == 1


def test_deepseek2_plans_keep_every_layer_in_the_kv_cache():
    result = invoke(
        "plan", "--engine", "llama.cpp", "--quant", "Q2_K", "--gpus", "8xH200", "--context", "4096", "--json"
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["per_sequence_state"] is None and plan["kv_cache"]["layers"] == list(range(61))
    assert plan["kv_cache"]["bytes_per_token"] == 61 * 576 * 2  # Kimi K2, the V-less latent in f16


def test_plan_of_a_kimi_linear_gguf_reads_its_metadata(tmp_path):
    file = write_kimi_linear(tmp_path / "kimi-linear-bf16.gguf")
    result = invoke(
        "plan", "--gguf", str(file), "--gpus", "2xH100", "--context", "65536", "--parallel", "4", "--json"
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["kv_cache"]["layout"] == "latent"  # key_length_mla 192 in the file: MLA, V a view of K
    assert plan["kv_cache"]["total_bytes"] == 65_536 * PER_TOKEN
    assert plan["per_sequence_state"]["total_bytes"] == 4 * PER_SEQUENCE
    # blocks 0-13 on the first GPU, 14-26 and the output on the second (equal shares of 28 layers):
    # MLA layers 3, 7, 11 / 15, 19, 23, 26; KDA 11 / 9 of the 20
    first, second = plan["devices"][:2]
    assert (first["kv_cache_bytes"], second["kv_cache_bytes"]) == (3 * 65_536 * 1_152, 4 * 65_536 * 1_152)
    assert (first["state_bytes"], second["state_bytes"]) == (
        11 * 4 * (4 * R + 4 * S),
        9 * 4 * (4 * R + 4 * S),
    )
