"""The text users type for counts, sizes, dtypes and depths, read the same way by every command.
Expected values are written out by hand."""

from __future__ import annotations

import json

import pytest

from kimicount.errors import UsageError
from kimicount.options import parse_count, parse_depth, parse_dtype, parse_size

from .helpers import invoke

# --- counts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, count",
    [
        ("131072", 131_072),
        ("131,072", 131_072),
        ("131_072", 131_072),
        ("128k", 128_000),
        ("128K", 128_000),
        ("128Ki", 131_072),
        ("128ki", 131_072),
        ("1M", 1_000_000),
        ("1m", 1_000_000),
        ("1Mi", 1_048_576),
        ("1e6", 1_000_000),
        ("1E6", 1_000_000),
        ("1.5k", 1_500),
        ("2.5e3", 2_500),
        ("1G", 1_000_000_000),
        ("2T", 2_000_000_000_000),
        (" 64 ", 64),
        ("0", 0),  # in range or not is the command's to say: "--tokens 0: expected a positive integer"
        ("-5", -5),
    ],
)
def test_parse_count(text, count):
    assert parse_count(text, "--tokens") == count


@pytest.mark.parametrize(
    "text",
    ["", "k", "lots", "1.5", "1.0001k", "128kb", "128 tokens", "1,5", "12,34", "inf", "nan", "1e999", "0x10"],
)
def test_parse_count_refuses_what_is_not_a_whole_number(text):
    with pytest.raises(
        UsageError, match=rf"^--tokens '{text}': expected a whole number, such as 131072, 128k"
    ):
        parse_count(text, "--tokens")


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
    "text", ["", "GiB", "lots", "80 GiBs", "-5GiB", "80 Gb/s", "1,5", "inf", "nan", "1e999999999", "80k"]
)
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(UsageError, match=r"--budget '.*': expected a size such as 80GiB"):
        parse_size(text)


@pytest.mark.parametrize("text", ["0", "0GiB", "0.5"])
def test_parse_size_refuses_less_than_a_byte(text):
    with pytest.raises(UsageError, match="expected at least 1 byte"):
        parse_size(text)


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
    for text in ("-1", "x", "2.5", ""):
        with pytest.raises(UsageError, match=rf"--depth '{text}': expected a whole number from 0"):
            parse_depth(text)


def test_plan_reads_kv_dtypes_alike():
    result = invoke("plan", "--gpus", "16xH200", "--kv-dtype", "BF16", "--context", "128Ki", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_cache"]["dtype"] == "bf16"
