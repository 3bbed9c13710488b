"""Option values: the text a user types, turned into the values the library takes. One parser per kind
of value, shared by every command, so that `--tokens 128k`, `--budget 80GiB` and `--dtype bfloat16`
read the same wherever they are accepted. Errors name the option and say what was expected.

Light on purpose: the CLI imports this module for every command, `--help` included.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

from kimicount.errors import MAX_COUNT, UsageError
from kimicount.reading import shorten

# --- numbers: counts (tokens, sequences, GPUs) and sizes (bytes) -----------------------------------

# A number as people write it: 131072, 131,072 or 131_072, 1.5, 1e6, in ASCII digits only (Python's \d
# also takes ٣ and int() takes more). Digits stop at 1,000 on each side of the point (Python refuses to
# read more than 4,300 into an int); exponents at two digits: 1e99 is already absurd, and 1e999999999
# would take minutes to expand.
_NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d{1,3}(?:_\d{3})+|\d{1,1000})(?:\.\d{0,1000})?(?:[eE]\d{1,2})?"
_NUMBER_AND_UNIT = re.compile(rf"(?P<number>{_NUMBER})\s*(?P<unit>[a-zA-Z]*)", re.ASCII)

#: Count suffixes, as vLLM reads --max-model-len, --max-num-batched-tokens and --kv-cache-memory-bytes
#: (vllm/engine/arg_utils.py, human_readable_int, which _compute_kwargs gives those options as their
#: type): lower case is decimal, k m g t = 10^3 … 10^12, and takes a fraction (25.6k = 25,600); upper
#: case is binary, K M G T = 2^10 … 2^40, whole numbers only (vLLM refuses 1.5K). So 128k = 128,000 and
#: 128K = 131,072, 1M = 1,048,576. Ki, Mi, Gi, Ti (any case) are binary too, as for sizes; vLLM does not
#: take them, and they say what they mean whatever the case.
DECIMAL_COUNT_UNITS = {prefix: 1000**power for power, prefix in enumerate("kmgt", start=1)}
BINARY_COUNT_UNITS = {
    **{prefix: 1024**power for power, prefix in enumerate("KMGT", start=1)},
    **{f"{prefix}{i}": 1024**power for power, prefix in enumerate("kmgt", start=1) for i in "iI"},
    **{f"{prefix}{i}": 1024**power for power, prefix in enumerate("KMGT", start=1) for i in "iI"},
}
COUNT_UNITS = {"": 1, **DECIMAL_COUNT_UNITS, **BINARY_COUNT_UNITS}

#: Size suffixes, any case: decimal (GB = 10⁹ bytes) and binary (GiB = 2³⁰ bytes); none means bytes.
SIZE_UNITS = {
    "": 1,
    "b": 1,
    **{f"{prefix}b": 1000**power for power, prefix in enumerate("kmgt", start=1)},
    **{f"{prefix}ib": 1024**power for power, prefix in enumerate("kmgt", start=1)},
}

_COUNT_EXAMPLES = "such as 131072, 128k (128,000), 128K (131,072, as vLLM reads it) or 1e6"


def _split(text: str) -> tuple[Fraction, str] | None:
    """The number in `text` exactly, and the unit written after it; None when `text` is not that."""
    match = _NUMBER_AND_UNIT.fullmatch(text.strip())
    if match is None:
        return None
    return Fraction(match["number"].replace(",", "").replace("_", "")), match["unit"]


def _too_large(option: str, value: int, what: str = "") -> UsageError:
    """Worded as errors.require_positive words it, which the commands apply to the counts they take."""
    return UsageError(f"{option} {value}: expected at most {MAX_COUNT:,}{what} (2^63 − 1)")


def parse_count(text: str, option: str) -> int:
    """A count (tokens, sequences, pages, GPUs, layers): a whole number, with an optional suffix as vLLM
    reads one (COUNT_UNITS: k, m, g, t powers of 1000; K, M, G, T and Ki, Mi, Gi, Ti powers of 1024),
    thousands separators or an exponent; at most 2^63 − 1 either way. Whether the count is in range is
    for the command to say (errors.require_positive).

    >>> parse_count("131072", "--tokens"), parse_count("128k", "--tokens"), parse_count("128K", "--tokens")
    (131072, 128000, 131072)
    >>> parse_count("1M", "--tokens"), parse_count("1m", "--tokens"), parse_count("1e6", "--tokens")
    (1048576, 1000000, 1000000)
    >>> parse_count("1.5k", "--batch"), parse_count("-5", "--batch"), parse_count("128Ki", "--tokens")
    (1500, -5, 131072)
    >>> parse_count("1.5", "--batch")
    Traceback (most recent call last):
    kimicount.errors.UsageError: --batch '1.5': expected a whole number, such as 131072, 128k (128,000), 128K (131,072, as vLLM reads it) or 1e6
    """
    parts = _split(text)
    unit = COUNT_UNITS.get(parts[1]) if parts else None
    if parts is None or unit is None:
        raise UsageError(f"{option} '{shorten(text, 80)}': expected a whole number, {_COUNT_EXAMPLES}")
    number, suffix = parts
    if suffix in BINARY_COUNT_UNITS and number.denominator != 1:  # vLLM refuses these too
        raise UsageError(
            f"{option} '{shorten(text, 80)}': a binary suffix ({suffix} = {unit:,}) takes a whole number, as "
            f"in vLLM; {suffix[0].lower()} is decimal (1.5k = 1,500)"
        )
    value = number * unit
    if value.denominator != 1:
        raise UsageError(f"{option} '{shorten(text, 80)}': expected a whole number, {_COUNT_EXAMPLES}")
    if abs(value) > MAX_COUNT:
        raise _too_large(option, int(value))
    return int(value)


def vllm_reading(text: str) -> str | None:
    """What to tell a user whose token count has a lower-case decimal suffix, where the upper-case one
    they may have meant is binary: vLLM reads both so (parse_count). None for any other count.

    >>> vllm_reading("256k")
    '256k = 256,000 tokens, as vLLM reads it; 256K is 262,144'
    >>> vllm_reading("256K"), vllm_reading("1.5k"), vllm_reading("4096")
    (None, None, None)
    """
    parts = _split(text)
    if parts is None or parts[1] not in DECIMAL_COUNT_UNITS or parts[0].denominator != 1:
        return None
    number, suffix = parts
    decimal, binary = int(number) * COUNT_UNITS[suffix], int(number) * COUNT_UNITS[suffix.upper()]
    if max(abs(decimal), abs(binary)) > MAX_COUNT:
        return None
    typed = text.strip()[: -len(suffix)].rstrip()
    return f"{typed}{suffix} = {decimal:,} tokens, as vLLM reads it; {typed}{suffix.upper()} is {binary:,}"


def parse_size(text: str, option: str = "--budget") -> int:
    """A memory size in bytes: a number (decimals and exponents allowed) with an optional unit B, KB,
    MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), any case; fractions of a byte
    are dropped; at most 2^63 − 1 bytes.

    >>> parse_size("80GiB"), parse_size("80 GB"), parse_size("1.5MiB"), parse_size("1e9"), parse_size("4096")
    (85899345920, 80000000000, 1572864, 1000000000, 4096)
    """
    parts = _split(text)
    unit = SIZE_UNITS.get(parts[1].lower()) if parts else None
    if parts is None or unit is None or parts[0] < 0:
        raise UsageError(
            f"{option} '{shorten(text, 80)}': expected a size such as 80GiB, 80GB, 512MiB or a number of bytes "
            "(units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    size = math.floor(parts[0] * unit)
    if size < 1:
        raise UsageError(f"{option} '{shorten(text, 80)}': expected at least 1 byte")
    if size > MAX_COUNT:
        raise _too_large(option, size, " bytes")
    return size


def parse_fraction(text: str, option: str) -> Fraction:
    """A share in (0, 1], such as 0.9 or 9/10, exactly; refusals quote what was given.

    >>> parse_fraction("0.9", "--gpu-memory-utilization"), parse_fraction("1", "--gpu-memory-utilization")
    (Fraction(9, 10), Fraction(1, 1))
    >>> parse_fraction("1.0000001", "--gpu-memory-utilization")
    Traceback (most recent call last):
    kimicount.errors.UsageError: --gpu-memory-utilization 1.0000001: expected a fraction in (0, 1]
    """
    refusal = UsageError(f"{option} {shorten(text, 40)}: expected a fraction in (0, 1]")
    # Decimal notation only: nan, inf, 1e309 and hexadecimal floats are no share, and say so in one line.
    if _FRACTION.fullmatch(text.strip()) is None:
        raise refusal
    value = Fraction(text.strip())
    if not 0 < value <= 1:
        raise refusal
    return value


_FRACTION = re.compile(r"(?:\d{1,3}(?:\.\d{0,100})?|\.\d{1,100})(?:[eE][-+]?\d{1,2})?", re.ASCII)

#: The largest ratio parse_ratio takes (a state pool a thousand times the KV pool is no deployment).
MAX_RATIO = 1000


def parse_ratio(text: str, option: str) -> Fraction:
    """A positive ratio such as 0.9 or 7.21 (SGLang's --mamba-full-memory-ratio), exactly, at most 1,000;
    refusals quote what was given.

    >>> parse_ratio("7.21", "--mamba-full-memory-ratio")
    Fraction(721, 100)
    >>> parse_ratio("0", "--mamba-full-memory-ratio")
    Traceback (most recent call last):
    kimicount.errors.UsageError: --mamba-full-memory-ratio 0: expected a positive ratio of at most 1,000
    """
    refusal = UsageError(f"{option} {shorten(text, 40)}: expected a positive ratio of at most {MAX_RATIO:,}")
    if _FRACTION.fullmatch(text.strip()) is None:
        raise refusal
    value = Fraction(text.strip())
    if not 0 < value <= MAX_RATIO:
        raise refusal
    return value


def parse_seconds(text: str, shown: str, upper: float = 10**6) -> float:
    """A positive, finite number of seconds of at most `upper` (11.6 days), from an option or variable
    (`shown` names it as it was given)."""
    try:
        seconds = float(text)
    except ValueError:
        raise UsageError(f"{shown}: expected a number of seconds") from None
    if not (math.isfinite(seconds) and 0 < seconds <= upper):
        raise UsageError(f"{shown}: expected a positive number of seconds (at most {upper:,.0f})")
    return seconds


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
            f"{option} '{shorten(text, 80)}': unknown cache dtype (expected one of: {', '.join(DTYPE_SPELLINGS)}, "
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
    """A tree depth: a whole number from 0 (the model alone), read as every count is, or `all` (None:
    every component).

    >>> parse_depth("3"), parse_depth("all"), parse_depth("0"), parse_depth("1e3")
    (3, None, 0, 1000)
    """
    if text.strip().lower() == "all":
        return None
    refusal = UsageError(
        f"{option} '{shorten(text, 80)}': expected a whole number from 0 (the model alone), or all"
    )
    try:
        depth = parse_count(text, option)
    except UsageError:
        raise refusal from None
    if depth < 0:
        raise refusal
    return depth


# --- the Hub -----------------------------------------------------------------------------------------

#: The default deadline for everything one command asks of the Hub [s]: room for Kimi K2's 61 shard
#: headers and 13 MB index on a slow link, and still an end to a server that never finishes answering.
DEFAULT_TIMEOUT = 300.0
#: A request fails when its transfer moves fewer than SPEED_LIMIT bytes a second over SPEED_TIME
#: seconds (a silent server: no byte in SPEED_TIME), as curl's --speed-limit and --speed-time do; it is
#: tried TRIES times in all. With these, a request that keeps failing ends within 3 × 10 s plus 1 + 2 s of
#: back-off: 33 s (docs/hub.md).
DEFAULT_SPEED_LIMIT = 1024
DEFAULT_SPEED_TIME = 10.0
DEFAULT_TRIES = 3

#: The environment variables that set them (tests make them short; no option, they are rarely changed).
SPEED_LIMIT_VARIABLE = "KIMICOUNT_SPEED_LIMIT"
SPEED_TIME_VARIABLE = "KIMICOUNT_SPEED_TIME"
TRIES_VARIABLE = "KIMICOUNT_TRIES"


def _nothing(_text: str) -> None:
    pass


@dataclass(frozen=True)
class HubOptions:
    """How to talk to the Hub for --repo: the token (None: huggingface_hub's own, HF_TOKEN or the
    login's), the deadline for the whole operation [s], the progress each request must make
    (`speed_limit` bytes/s over `speed_time` s) and how many times it is tried, and where to say what is
    happening: `status` (what is being fetched from where, replaced by the next) and `note` (a retry, a
    fallback to the cache: worth keeping)."""

    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    status: Callable[[str], None] = _nothing
    note: Callable[[str], None] = _nothing
    speed_limit: int = DEFAULT_SPEED_LIMIT
    speed_time: float = DEFAULT_SPEED_TIME
    tries: int = DEFAULT_TRIES

    def __post_init__(self) -> None:
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise UsageError(f"timeout {self.timeout}: expected a positive number of seconds")
        if not (math.isfinite(self.speed_time) and self.speed_time > 0):
            raise UsageError(f"speed_time {self.speed_time}: expected a positive number of seconds")
        if not (0 <= self.speed_limit <= MAX_COUNT and 1 <= self.tries <= 100):
            raise UsageError(
                f"speed_limit {self.speed_limit}, tries {self.tries}: expected 0 to 2^63 − 1 bytes/s, 1 to 100 tries"
            )


def hub_limits(environ: Mapping[str, str]) -> dict[str, float | int]:
    """The HubOptions fields the environment sets (KIMICOUNT_SPEED_LIMIT bytes/s, KIMICOUNT_SPEED_TIME
    seconds, KIMICOUNT_TRIES), checked; errors name the variable.

    >>> hub_limits({"KIMICOUNT_SPEED_TIME": "0.5", "KIMICOUNT_TRIES": "2"})
    {'speed_time': 0.5, 'tries': 2}
    """
    limits: dict[str, float | int] = {}
    if SPEED_TIME_VARIABLE in environ:
        text = environ[SPEED_TIME_VARIABLE]
        limits["speed_time"] = parse_seconds(text, f"{SPEED_TIME_VARIABLE}={shorten(text, 40)}", upper=3600)
    for name, field, lowest, what in (
        (SPEED_LIMIT_VARIABLE, "speed_limit", 0, "a number of bytes a second, 0 or more"),
        (TRIES_VARIABLE, "tries", 1, "a number of tries from 1 to 100"),
    ):
        if name in environ:
            text = environ[name]
            try:
                value = parse_count(text, name)
            except UsageError:
                value = -1
            if not lowest <= value <= (100 if field == "tries" else MAX_COUNT):
                raise UsageError(f"{name}={shorten(text, 40)}: expected {what}")
            limits[field] = value
    return limits
