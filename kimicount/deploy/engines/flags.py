"""How an engine's serve-command flag reads: the setting it gives and the kind of its value. The
tables of each engine's own flags are engines/vllm_flags.py and engines/sglang_flags.py; the parser
that reads a pasted command with them is deploy/serve_command.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """One flag an engine takes: the setting it gives (None: not modelled) and how its value reads."""

    setting: str | None
    # count | fraction | kv_dtype | switch | off | text | values (nargs="+") | optional (nargs="?") |
    # speculative_config | speculative_algorithm
    kind: str
    memory: bool = False  # not modelled, and changes memory


def flag_table(*rows: tuple[tuple[str, ...], Flag]) -> dict[str, Flag]:
    """Each flag name of each row -> its Flag: a row gives the aliases that read alike."""
    return {name: flag for names, flag in rows for name in names}


#: A flag not modelled that takes a value, one that is a switch, one that takes values until the next flag.
VALUE, SWITCH, VALUES = Flag(None, "text"), Flag(None, "switch"), Flag(None, "values")
