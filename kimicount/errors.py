"""Error types. Each one is a user-facing failure that the CLI turns into one line and exit code 2.

Library code raises these; it never prints. Messages name the file, key or tensor at fault and say
what was expected, because the message is all a user sees (``KIMICOUNT_DEBUG=1`` shows the traceback).
Checks that several commands share live here too, so that they say the same thing the same way.
"""

from __future__ import annotations


class KimicountError(Exception):
    """Base class: bad input or an unreachable source. The CLI exits with 2."""


class ConfigError(KimicountError):
    """config.json is unreadable, not JSON, or has a missing, mistyped or out-of-range key."""


class CheckpointError(KimicountError):
    """A safetensors file or index is malformed (bad header length, JSON, dtype, shape or offsets)."""


class SourceError(KimicountError):
    """A repo, revision, file or folder cannot be reached or does not exist."""


class UnreachableError(SourceError):
    """The source could not be asked: no connection, no answer in time, offline mode, or every try
    failed. It says nothing of whether the repo or file is there (a bundled config may stand in)."""


class UsageError(KimicountError):
    """An option value that parses but makes no sense (a budget, a TP degree that does not divide heads)."""


class MeasureError(KimicountError):
    """`measure` cannot run here (torch missing, CUDA asked for without a GPU)."""


#: The largest count an option takes (tokens, sequences, pages, GPUs, bytes): 2^63 − 1, the largest int64,
#: which engines and torch count in. Anything larger is a typo; refusing it also keeps every product of
#: counts printable (Python refuses to print an int of more than 4,300 digits).
MAX_COUNT = 2**63 - 1


def require_positive(option: str, value: int) -> int:
    """`value`, when it is a positive integer of at most MAX_COUNT; otherwise a UsageError naming the option.

    >>> require_positive("--tokens", 4096)
    4096
    >>> require_positive("--tokens", 0)
    Traceback (most recent call last):
    kimicount.errors.UsageError: --tokens 0: expected a positive integer
    """
    if value < 1:
        raise UsageError(f"{option} {value}: expected a positive integer")
    if value > MAX_COUNT:
        raise UsageError(f"{option} {value}: expected at most {MAX_COUNT:,} (2^63 − 1)")
    return value
