"""compressed-tensors' module matching: which Linears a config's `targets` and `ignore` name, by module
name or by `re:` regular expression, and a deadline on the expressions.

The patterns come from config files nobody here wrote, and Python's `re` has no time limit: a pattern
that backtracks without end (`re:(\\w|\\w\\w|\\.)+!` tries every way to cut a name into pieces) would
match for ever. So each batch of names is matched under one timer: SIGALRM, which `re` answers while it
backtracks. Real patterns decide Kimi K2.5's 69,120 expert Linears in a few hundredths of a second, so
one timer per batch, not per name, costs nothing measurable. Where no timer can be set (off the main
thread, on Windows, or when the program has its own SIGALRM handler), names are matched without one.
"""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kimicount.errors import ConfigError

#: How long the `re:` patterns may take over one batch of module names [s].
MATCH_SECONDS = 5.0


@dataclass(frozen=True)
class Patterns:
    """One list of compressed-tensors patterns: module names, matched exactly, and `re:` expressions,
    matched from the start of the name (`re.match`), as compressed-tensors matches them.

    >>> ignore = Patterns.of(("lm_head", "re:.*self_attn.*"))
    >>> ignore.matches("lm_head"), ignore.matches("model.layers.1.self_attn.o_proj"), ignore.matches("x.lm_head")
    (True, True, False)
    """

    names: frozenset[str]
    expressions: tuple[str, ...]
    compiled: tuple[
        re.Pattern[str], ...
    ]  # each on its own: flags, group names and backreferences are its own

    @classmethod
    def of(cls, patterns: Iterable[str]) -> Patterns:
        """Compiled once: a 1T checkpoint asks about 70,000 modules. (The spec has checked that each
        expression compiles.)"""
        patterns = tuple(patterns)
        expressions = tuple(p[3:] for p in patterns if p.startswith("re:"))
        names = frozenset(p for p in patterns if not p.startswith("re:"))
        return cls(names, expressions, tuple(re.compile(e) for e in expressions))

    def matches(self, module: str) -> bool:
        if module in self.names:
            return True
        for pattern in self.compiled:
            if pattern.match(module):
                return True
        return False


def packed(
    ignore: Patterns, targets: Patterns, every_linear: bool, modules: Iterable[str], where: str
) -> list[bool]:
    """For each Linear module name, whether the config means it to be packed: not ignored, and targeted
    (by the class name "Linear", `every_linear`, or by name or expression). All names are matched under
    one MATCH_SECONDS deadline; past it, a ConfigError names `where` and the expressions.

    >>> packed(Patterns.of(["re:.*self_attn.*"]), Patterns.of([]), True, ["a.mlp.up_proj", "a.self_attn.o_proj"], "config")
    [True, False]
    """
    answers: list[bool] = []
    module = ""
    try:
        with _deadline(MATCH_SECONDS):
            for module in modules:
                answers.append(not ignore.matches(module) and (every_linear or targets.matches(module)))
    except _TooSlow:
        keys = " and ".join(
            f"'{key}'" for key, p in (("ignore", ignore), ("targets", targets)) if p.expressions
        )
        expressions = ", ".join(json.dumps(f"re:{e}") for e in ignore.expressions + targets.expressions)
        raise ConfigError(
            f"{where}: key{'s' if ' and ' in keys else ''} {keys}: the patterns {expressions} take more than {MATCH_SECONDS:g} s to match "
            f"the module names (stopped at '{module}'): a pattern that backtracks without end"
        ) from None
    return answers


class _TooSlow(Exception):
    """The deadline passed."""


def _alarm(_signal: int, _frame: object) -> None:
    raise _TooSlow


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise _TooSlow in the block once `seconds` have passed, where a timer can be set."""
    if (
        not hasattr(signal, "setitimer")  # Windows
        or threading.current_thread() is not threading.main_thread()  # signals reach the main thread only
        or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN)  # someone else's timer
    ):
        yield
        return
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
