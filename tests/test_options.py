"""The text users type for counts, sizes, dtypes and depths, read the same way by every command.
Expected values are written out by hand."""

from __future__ import annotations

import json
import time
from fractions import Fraction

import pytest

from kimicount.errors import UsageError
from kimicount.options import parse_count, parse_depth, parse_dtype, parse_fraction, parse_size, vllm_reading

from .helpers import invoke

# --- counts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, count",
    [
        ("131072", 131_072),
        ("131,072", 131_072),
        ("131_072", 131_072),
        # vLLM's human_readable_int (vllm/engine/arg_utils.py): lower case decimal, upper case binary
        ("128k", 128_000),
        ("128K", 131_072),  # 128 × 1,024
        ("1m", 1_000_000),
        ("1M", 1_048_576),  # 1,024 × 1,024
        ("1g", 1_000_000_000),
        ("1G", 1_073_741_824),  # 1,024³
        ("2t", 2_000_000_000_000),
        ("2T", 2_199_023_255_552),  # 2 × 1,024⁴
        ("25.6k", 25_600),  # vLLM's own example
        ("1.5k", 1_500),
        # Ki, Mi stay binary, in any case
        ("128Ki", 131_072),
        ("128ki", 131_072),
        ("1Mi", 1_048_576),
        ("1e6", 1_000_000),
        ("1E6", 1_000_000),
        ("2.5e3", 2_500),
        (" 64 ", 64),
        ("0", 0),  # in range or not is the command's to say: "--tokens 0: expected a positive integer"
        ("-5", -5),
        ("9223372036854775807", 2**63 - 1),
        ("8388607T", 8_388_607 * 2**40),  # the largest T under 2^63 = 8,388,608 × 2^40
    ],
)
def test_parse_count(text, count):
    assert parse_count(text, "--tokens") == count


@pytest.mark.parametrize(
    "text",
    [
        "",
        "k",
        "lots",
        "1.5",
        "1.0001k",
        "128kb",
        "128 tokens",
        "1,5",
        "12,34",
        "inf",
        "nan",
        "1e999",
        "0x10",
        "²",
        "٣",
        "1" * 5000,
        "128KB",
        "1P",
    ],
)
def test_parse_count_refuses_what_is_not_a_whole_number(text):
    shown = text[:30]  # a long one is shortened
    with pytest.raises(UsageError) as refused:
        parse_count(text, "--tokens")
    assert str(refused.value).startswith(f"--tokens '{shown}"), str(refused.value)
    assert "expected a whole number, such as 131072, 128k (128,000), 128K (131,072" in str(refused.value)


@pytest.mark.parametrize("text", ["1.5K", "0.5Mi"])
def test_a_binary_suffix_takes_a_whole_number_as_in_vllm(text):
    with pytest.raises(
        UsageError, match=rf"^--tokens '{text}': a binary suffix \(\w+ = [0-9,]+\) takes a whole"
    ):
        parse_count(text, "--tokens")


@pytest.mark.parametrize(
    "text, value",
    [
        ("9223372036854775808", 2**63),
        ("8388608T", 2**63),
        ("1e19", 10**19),
        ("-1e19", -(10**19)),
        ("9" * 1000, 10**1000 - 1),
    ],
)
def test_counts_stop_at_2_63_minus_1(text, value):
    # worded as errors.require_positive words it
    with pytest.raises(UsageError) as refused:
        parse_count(text, "--batch")
    assert str(refused.value) == f"--batch {value}: expected at most 9,223,372,036,854,775,807 (2^63 − 1)"


@pytest.mark.parametrize(
    "text, note",
    [
        ("256k", "256k = 256,000 tokens, as vLLM reads it; 256K is 262,144"),
        ("128k", "128k = 128,000 tokens, as vLLM reads it; 128K is 131,072"),
        ("1m", "1m = 1,000,000 tokens, as vLLM reads it; 1M is 1,048,576"),
        ("256K", None),
        ("256Ki", None),
        ("1.5k", None),  # no upper-case twin: vLLM refuses 1.5K
        ("262144", None),
    ],
)
def test_vllm_reading(text, note):
    assert vllm_reading(text) == note


# --- sizes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, size",
    [
        ("80GiB", 80 * 2**30),
        ("80 GiB", 80 * 2**30),
        ("80gib", 80 * 2**30),
        ("80GB", 80 * 10**9),
        ("512MiB", 512 * 2**20),
        ("512MB", 512 * 10**6),
        ("1.5GiB", 3 * 2**29),
        ("2TiB", 2 * 2**40),
        ("64KiB", 65_536),
        ("1e9", 1_000_000_000),
        ("4096", 4096),
        ("4096B", 4096),
        ("1,000", 1000),  # thousands separators, as kimicount prints bytes
        ("10.7B", 10),  # whole bytes: the fraction is dropped
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text",
    ["", "GiB", "lots", "80 GiBs", "-5GiB", "80 Gb/s", "1,5", "inf", "nan", "1e999999999", "80k", "²GiB"],
)
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(UsageError, match=r"--budget '.*': expected a size such as 80GiB"):
        parse_size(text)


@pytest.mark.parametrize("text", ["0", "0GiB", "0.5"])
def test_parse_size_refuses_less_than_a_byte(text):
    with pytest.raises(UsageError, match="expected at least 1 byte"):
        parse_size(text)


def test_sizes_stop_at_2_63_minus_1_bytes():
    assert parse_size("9223372036854775807") == 2**63 - 1
    assert parse_size("8388607.999TiB") == 9_223_372_035_755_264_180  # floor(2^63 − 2^40 + 0.999 × 2^40)
    for text, size in (("9223372036854775808", 2**63), ("8388608TiB", 2**63), ("1e30GiB", 10**30 * 2**30)):
        with pytest.raises(UsageError) as refused:
            parse_size(text, "--gpu-memory")
        assert str(refused.value) == (
            f"--gpu-memory {size}: expected at most 9,223,372,036,854,775,807 bytes (2^63 − 1)"
        )
    with pytest.raises(UsageError, match="expected a size such as 80GiB"):
        parse_size("8EiB")  # no such unit


# --- fractions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("0.9", Fraction(9, 10)),
        ("1", Fraction(1)),
        (".5", Fraction(1, 2)),
        ("0.95", Fraction(19, 20)),
        ("9e-1", Fraction(9, 10)),
    ],
)
def test_parse_fraction(text, value):
    assert parse_fraction(text, "--gpu-memory-utilization") == value


@pytest.mark.parametrize(
    "text", ["1.0000001", "0", "nan", "inf", "-inf", "1e309", "-0.5", "2", "0x1p-1", "", "½"]
)
def test_parse_fraction_refuses_what_is_not_in_0_1_quoting_it(text):
    with pytest.raises(UsageError) as refused:
        parse_fraction(text, "--gpu-memory-utilization")
    assert str(refused.value) == f"--gpu-memory-utilization {text}: expected a fraction in (0, 1]"


# --- dtypes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, name",
    [
        ("bf16", "bf16"),
        ("bfloat16", "bf16"),  # config.json's torch_dtype
        ("BF16", "bf16"),  # safetensors'
        ("BFloat16", "bf16"),
        ("fp16", "fp16"),
        ("float16", "fp16"),
        ("F16", "fp16"),
        ("fp32", "fp32"),
        ("float32", "fp32"),
        ("F32", "fp32"),
        ("fp8", "fp8"),
        ("float8_e4m3fn", "fp8"),
        ("F8_E4M3", "fp8"),
    ],
)
def test_parse_dtype_reads_every_spelling(text, name):
    assert parse_dtype(text) == name


@pytest.mark.parametrize("text", ["fp4", "int8", "F8_E5M2", "", "b f16"])
def test_parse_dtype_refuses_others(text):
    with pytest.raises(
        UsageError, match=rf"--dtype '{text}': unknown cache dtype \(expected one of: bf16, fp16"
    ):
        parse_dtype(text)


@pytest.mark.parametrize("command", ["kv-cache", "measure"])
def test_every_command_reads_dtypes_alike(command):
    # the same refusal, word for word, from each command that takes a dtype
    result = invoke(command, "--dtype", "fp4", "--json")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "kimicount: error: --dtype 'fp4': unknown cache dtype (expected one of: bf16"
    )


# --- depths ------------------------------------------------------------------------------------


def test_parse_depth():
    assert (parse_depth("0"), parse_depth("5"), parse_depth("all"), parse_depth("ALL")) == (0, 5, None, None)
    assert (parse_depth("1e3"), parse_depth("1,000"), parse_depth("1k")) == (1000, 1000, 1000)  # as counts
    for text in ("-1", "x", "2.5", "", "²", "٣"):
        with pytest.raises(UsageError, match=rf"--depth '{text}': expected a whole number from 0"):
            parse_depth(text)


def test_plan_reads_kv_dtypes_alike():
    result = invoke("plan", "--gpus", "16xH200", "--kv-dtype", "BF16", "--context", "128Ki", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_cache"]["dtype"] == "bf16"


# --- the CLI: every number option bounded, said as given, and never a run away (issue 19) ------------


def refused(*args: str) -> str:
    """The one error line of a CLI run that must refuse its input (exit 2, nothing on stdout)."""
    result = invoke(*args)
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert [line.startswith("kimicount: error: ") for line in lines].count(True) == 1, result.stderr
    assert lines[-1].startswith("kimicount: error: "), result.stderr
    return lines[-1].removeprefix("kimicount: error: ")


BYTES = {  # each size in bytes, by hand
    "1e30GiB": 10**30 * 2**30,
    "1e99TiB": 10**99 * 2**40,
    "9223372036854775808": 2**63,
}


@pytest.mark.parametrize("size", list(BYTES))
def test_plan_bounds_the_gpu_memory(size):
    assert refused("plan", "--gpus", "8", "--gpu-memory", size) == (
        f"--gpu-memory {BYTES[size]}: expected at most 9,223,372,036,854,775,807 bytes (2^63 − 1)"
    )


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e309", "1.0000001", "0", "abc"])
def test_plan_refuses_a_utilization_outside_0_1_as_given(text):
    assert refused("plan", "--gpus", "8xH200", "--gpu-memory-utilization", text) == (
        f"--gpu-memory-utilization {text}: expected a fraction in (0, 1]"
    )


@pytest.mark.parametrize(
    "gpus, message",
    [
        ("9999999999999999999xH200", "expected at most 9,223,372,036,854,775,807 GPUs (2^63 − 1)"),
        ("9223372036854775808", "expected at most 9,223,372,036,854,775,807 GPUs (2^63 − 1)"),
        ("0xH200", "expected at least 1 GPU"),
    ],
)
def test_plan_says_what_gpu_count_it_was_given(gpus, message):
    assert refused("plan", "--gpus", gpus, "--gpu-memory", "80GiB") == f"--gpus '{gpus}': {message}"


@pytest.mark.parametrize("command", ["params", "verify", "flops"])
@pytest.mark.parametrize("depth", ["²", "9" * 5000, "-1", "٣"])
def test_depth_is_read_as_every_count(command, depth):
    args = ["--path", "."] if command == "verify" else []
    line = refused(command, *args, "--depth", depth)
    assert line.startswith(f"--depth '{depth[:30]}") and "expected a whole number from 0" in line, line


def test_a_binary_suffix_is_read_as_vllm_reads_it():
    # 128K = 128 × 1,024 tokens, as `vllm serve --max-model-len 128K` reads it; no warning for it
    result = invoke("kv-cache", "--tokens", "128K", "--json")
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    assert json.loads(result.stdout)["tokens"] == 131_072


@pytest.mark.parametrize(
    "args",
    [
        ("kv-cache", "--tokens", "100k", "--json"),
        ("flops", "--context", "100k", "--json"),
        ("plan", "--gpus", "8xH200", "--max-model-len", "100k", "--json"),
    ],
)
def test_a_lower_case_token_suffix_is_said_once(args):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert result.stderr == "kimicount: warning: 100k = 100,000 tokens, as vLLM reads it; 100K is 102,400\n"


def test_a_warning_and_an_error_make_one_error_line():
    # The warning is said as the option is read; the run then fails on --batch: its one error line
    # comes last, after the warning that says how the context was read.
    result = invoke("plan", "--gpus", "8xH200", "--context", "256k", "--batch", "0")
    assert result.exit_code == 2
    assert result.stderr == (
        "kimicount: warning: 256k = 256,000 tokens, as vLLM reads it; 256K is 262,144\n"
        "kimicount: error: --batch 0: expected a positive integer\n"
    )


#: Kimi K2's routed experts, all 60 MoE layers × 384 experts, each gate, up and down 7,168 × 2,048 in FP8
#: (one byte) with an F32 scale per 128 × 128 block (56 × 16 of them per matrix): 1,014,933,749,760
#: bytes; a TP8 GPU holds an eighth of each.
K2_EXPERT_BYTES_PER_TP8_GPU = 60 * 384 * 3 * (7168 * 2048 + 56 * 16 * 4) // 8


@pytest.mark.parametrize(
    "args, saturated",
    [
        (("--batch", "1e7"), ["decode"]),  # 10^7 sequences of one token each
        (("--context", "10M"), ["prefill"]),  # a prompt of 10 × 2^20 tokens
        (("--context", "10m", "--batch", "512"), ["prefill"]),
        (("--batch", "1e18", "--context", "1e18"), ["decode", "prefill"]),
    ],
)
def test_plan_answers_huge_batches_and_contexts_at_once(args, saturated):
    start = time.monotonic()
    result = invoke("plan", "--gpus", "8xH200", *args, "--json")
    seconds = time.monotonic() - start
    assert result.exit_code == 0, result.output
    assert seconds < 5, seconds  # about 0.1 s; the exact power took minutes at 10^7 and never ended at 10^18
    report = json.loads(result.stdout)
    for step in saturated:  # so many tokens touch every expert: the step reads all that a GPU holds
        assert (
            report[step]["stages"][0]["expected_expert_bytes"]
            == K2_EXPERT_BYTES_PER_TP8_GPU
            == 126_866_718_720
        )


def test_plan_answers_2_63_minus_1_gpus_with_dp_and_ep_alike():
    most = str(2**63 - 1)
    start = time.monotonic()
    result = invoke("plan", "--gpus", f"{most}xH200", "--dp", most, "--ep", most, "--batch", "1", "--json")
    assert time.monotonic() - start < 5
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("kimicount: error: ")


@pytest.mark.parametrize(
    ("parse", "option"),
    [(parse_count, "--tokens"), (parse_size, "--budget"), (parse_dtype, "--dtype"), (parse_depth, "--depth")],
)
def test_a_value_is_quoted_short_in_its_error(parse, option):
    # 128 KiB typed (or pasted) into an option: an 80-character excerpt and the length (issue 26)
    text = "x" * 131_072
    with pytest.raises(UsageError) as refused:
        parse(text, option)
    assert f"{option} '{'x' * 80}… (131,072 characters)'" in str(refused.value)
    assert len(str(refused.value)) < 400
