"""Option values: the text a user types, turned into the values the library takes. One parser per kind
of value, shared by every command, so that `--tokens 128k`, `--budget 80GiB` and `--dtype bfloat16`
read the same wherever they are accepted. Errors name the option and say what was expected.

Light on purpose: the CLI imports this module for every command, `--help` included.
"""

from __future__ import annotations

import math
import re
from enum import Enum
from fractions import Fraction

from kimicount.errors import UsageError

# --- numbers: counts (tokens, sequences, GPUs) and sizes (bytes) -----------------------------------

# A number as people write it: 131072, 131,072 or 131_072, 1.5, 1e6. Digits stop at 1,000 on each side
# of the point (Python refuses to read more than 4,300 into an int); exponents at two digits: 1e99 is
# already absurd, and 1e999999999 would take minutes to expand.
_NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d{1,3}(?:_\d{3})+|\d{1,1000})(?:\.\d{0,1000})?(?:e\d{1,2})?"
_NUMBER_AND_UNIT = re.compile(rf"(?P<number>{_NUMBER})\s*(?P<unit>[a-z]*)", re.IGNORECASE)

#: Count suffixes, any case: k, M, G, T are powers of 1000 (128k = 128,000), Ki, Mi, Gi, Ti powers of
#: 1024 (128Ki = 131,072), as for sizes.
COUNT_UNITS = {
    "": 1,
    **{prefix: 1000**power for power, prefix in enumerate("kmgt", start=1)},
    **{f"{prefix}i": 1024**power for power, prefix in enumerate("kmgt", start=1)},
}

#: Size suffixes, any case: decimal (GB = 10⁹ bytes) and binary (GiB = 2³⁰ bytes); none means bytes.
SIZE_UNITS = {"": 1, **{f"{unit}b": factor for unit, factor in COUNT_UNITS.items()}}


def _scaled(text: str, units: dict[str, int]) -> Fraction | None:
    """The number in `text` times its unit's factor, exactly; None when `text` is not a number and unit."""
    match = _NUMBER_AND_UNIT.fullmatch(text.strip())
    if match is None or match["unit"].lower() not in units:
        return None
    number = Fraction(match["number"].replace(",", "").replace("_", ""))
    return number * units[match["unit"].lower()]


def parse_count(text: str, option: str) -> int:
    """A count (tokens, sequences, pages, GPUs, layers): a whole number, with an optional suffix k, M,
    G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024), thousands separators or an exponent.
    Whether the count is in range is for the command to say (errors.require_positive).

    >>> parse_count("131072", "--tokens"), parse_count("128k", "--tokens"), parse_count("128Ki", "--tokens")
    (131072, 128000, 131072)
    >>> parse_count("1M", "--tokens"), parse_count("1e6", "--tokens"), parse_count("131,072", "--tokens")
    (1000000, 1000000, 131072)
    >>> parse_count("1.5k", "--batch"), parse_count("-5", "--batch")
    (1500, -5)
    >>> parse_count("1.5", "--batch")
    Traceback (most recent call last):
    kimicount.errors.UsageError: --batch '1.5': expected a whole number, such as 131072, 128k (128,000), 128Ki (131,072) or 1e6
    """
    value = _scaled(text, COUNT_UNITS)
    if value is None or value.denominator != 1:
        raise UsageError(
            f"{option} '{text}': expected a whole number, such as 131072, 128k (128,000), 128Ki (131,072) or 1e6"
        )
    return int(value)


def parse_size(text: str, option: str = "--budget") -> int:
    """A memory size in bytes: a number (decimals and exponents allowed) with an optional unit B, KB,
    MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), any case; fractions of a byte
    are dropped.

    >>> parse_size("80GiB"), parse_size("80 GB"), parse_size("1.5MiB"), parse_size("1e9"), parse_size("4096")
    (85899345920, 80000000000, 1572864, 1000000000, 4096)
    """
    value = _scaled(text, SIZE_UNITS)
    if value is None or value < 0:
        raise UsageError(
            f"{option} '{text}': expected a size such as 80GiB, 80GB, 512MiB or a number of bytes "
            "(units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    size = math.floor(value)
    if size < 1:
        raise UsageError(f"{option} '{text}': expected at least 1 byte")
    return size


# --- dtypes ----------------------------------------------------------------------------------------

#: The one dtype vocabulary: each dtype's short name (the one kimicount prints) and the other spellings
#: it is known by: config.json's (torch) and safetensors'. Any case is accepted.
DTYPE_SPELLINGS = {
    "bf16": ("bfloat16", "BF16"),
    "fp16": ("float16", "F16", "half"),
    "fp32": ("float32", "F32", "float"),
    "fp8": ("float8_e4m3fn", "F8_E4M3", "fp8_e4m3"),
}
_DTYPES = {spelling.lower(): name for name, others in DTYPE_SPELLINGS.items() for spelling in (name, *others)}

#: How --help shows a dtype option's choices.
DTYPE_METAVAR = f"[{'|'.join(DTYPE_SPELLINGS)}]"


def parse_dtype(text: str, option: str = "--dtype") -> str:
    """A dtype's short name from any of its spellings: bf16, bfloat16 (config.json) or BF16 (safetensors).

    >>> parse_dtype("bfloat16"), parse_dtype("BF16"), parse_dtype("fp8"), parse_dtype("float32")
    ('bf16', 'bf16', 'fp8', 'fp32')
    >>> parse_dtype("fp4")
    Traceback (most recent call last):
    kimicount.errors.UsageError: --dtype 'fp4': unknown cache dtype (expected one of: bf16, fp16, fp32, fp8, or their config.json and safetensors names: bfloat16, BF16, …)
    """
    try:
        return _DTYPES[text.strip().lower()]
    except KeyError:
        raise UsageError(
            f"{option} '{text}': unknown cache dtype (expected one of: {', '.join(DTYPE_SPELLINGS)}, "
            "or their config.json and safetensors names: bfloat16, BF16, …)"
        ) from None


# --- what to show ----------------------------------------------------------------------------------


class Detail(str, Enum):
    """What the last column of the component table shows. Each member needs a branch in
    render.detail_text; --help lists the members."""

    calculation = "calculation"  # the arithmetic with numbers: 512 × 8,192
    formula = "formula"  # the same in config keys: kv_lora_rank × num_attention_heads·qk_nope_head_dim
    tensors = "tensors"  # the checkpoint tensors (or parts) the component owns
    shapes = "shapes"  # the activations in and out, with named dimensions (kimicount.flow)


def parse_depth(text: str, option: str = "--depth") -> int | None:
    """A tree depth: a whole number from 0 (the model alone), or `all` (None: every component).

    >>> parse_depth("3"), parse_depth("all"), parse_depth("0")
    (3, None, 0)
    """
    if text.strip().lower() == "all":
        return None
    if not text.strip().isdigit():
        raise UsageError(f"{option} '{text}': expected a whole number from 0 (the model alone), or all")
    return int(text)
