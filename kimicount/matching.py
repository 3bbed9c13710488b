"""compressed-tensors' module matching: which Linears a config's `targets` and `ignore` name, by module
name or by `re:` regular expression, and a deadline on the expressions; and NVIDIA ModelOpt's
`exclude_modules` wildcards (Wildcards).

The patterns come from config files nobody here wrote, and Python's `re` has no time limit: a pattern
that backtracks without end (`re:((\\w|\\.)+)+!` tries every way to cut a name into runs, 2^33 of them
for model.layers.0.self_attn.q_a_proj) would match for ever. So each batch of names is matched under one
timer: SIGALRM, which `re` answers while it backtracks. Real patterns decide Kimi K2.5's 69,120 expert
Linears in a few hundredths of a second, so one timer per batch, not per name, costs nothing measurable.
Where no timer can be set (off the main thread, on Windows, or when the program has its own SIGALRM
handler), names are matched without one.
"""

from __future__ import annotations

import json
import operator
import re
import signal
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import repeat

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
    one: re.Pattern[str] | None  # all of them as one alternation, where that means the same (_one_of)

    @classmethod
    def of(cls, patterns: Iterable[str]) -> Patterns:
        """Compiled once: a 1T checkpoint asks about 70,000 modules. (The spec has checked that each
        expression compiles.)"""
        patterns = tuple(patterns)
        expressions = tuple(p[3:] for p in patterns if p.startswith("re:"))
        names = frozenset(p for p in patterns if not p.startswith("re:"))
        compiled = tuple(re.compile(e) for e in expressions)
        return cls(names, expressions, compiled, _one_of(compiled))

    def matches(self, module: str) -> bool:
        return self.each((module,))[0]

    def each(self, modules: Iterable[str]) -> list[bool]:
        """Whether each module name is one of the names or matches an expression: 69,120 names on
        K2.5, so with no Python call per name where the expressions are one."""
        names, one, compiled = self.names, self.one, self.compiled
        if one is not None and not names:  # Kimi K3's ignore list: expressions only, in C
            return list(map(operator.is_not, map(one.match, modules), repeat(None)))
        if one is not None or not compiled:
            match = one.match if one is not None else _no_match
            return [module in names or match(module) is not None for module in modules]
        return [module in names or any(p.match(module) for p in compiled) for module in modules]


def _no_match(_module: str) -> None:
    return None


def _one_of(compiled: tuple[re.Pattern[str], ...]) -> re.Pattern[str] | None:
    """The expressions as one `(?:a)|(?:b)|…`, which matches a name from its start exactly when one of
    them does, and tries them all in one pass of `re`'s engine: twice as fast as one call each on K2.5's
    69,120 expert Linears. Only where joining keeps each expression's meaning:
    - no expression sets a global flag (`(?i)…`): joined, it would apply to all, or fail to compile;
    - at most one has groups, and it goes first: a backreference or conditional (`\\1`, `(?(1)…)`)
      counts groups from the start of the whole pattern, so only the first keeps its numbers;
    - the joined pattern compiles (two groups of one name do not).
    Otherwise None, and each is tried on its own.

    >>> _one_of((re.compile(".*self_attn.*"), re.compile(r".*mlp\\.(gate|up)_proj.*"))).pattern
    '(?:.*mlp\\\\.(gate|up)_proj.*)|(?:.*self_attn.*)'
    >>> _one_of((re.compile("(a)\\1"), re.compile("(b)\\1"))) is None
    True
    """
    if len(compiled) < 2:
        return compiled[0] if compiled else None
    if any(p.flags != _DEFAULT_FLAGS for p in compiled):
        return None
    grouped = [p for p in compiled if p.groups]
    if len(grouped) > 1:
        return None
    ordered = grouped + [p for p in compiled if not p.groups]
    try:
        return re.compile("|".join(f"(?:{p.pattern})" for p in ordered))
    except re.error:
        return None


_DEFAULT_FLAGS = re.compile("").flags


@dataclass(frozen=True)
class Wildcards:
    """NVIDIA ModelOpt's `exclude_modules`: module names where `*` stands for any run of characters,
    matched against the whole name (ModelOpt's is_layer_excluded: `re.escape(pattern)` with `\\*` made
    `.*`, re.fullmatch). Names without a `*` are compared whole and names ending in their only `*` as
    prefixes, in C (Kimi K2.6-NVFP4's 124 patterns are all of those); the others as expressions.

    >>> excluded = Wildcards.of(["lm_head", "model.layers.0*", "model.*.self_attn*"])
    >>> excluded.each(["lm_head", "model.layers.0.mlp.up_proj", "model.layers.3.self_attn.o_proj", "model.layers.3.mlp.up_proj"])
    [True, True, True, False]
    """

    names: frozenset[str]
    prefixes: tuple[str, ...]
    expressions: tuple[re.Pattern[str], ...]

    @classmethod
    def of(cls, patterns: Iterable[str]) -> Wildcards:
        patterns = tuple(patterns)
        names = frozenset(p for p in patterns if "*" not in p)
        prefixes = tuple(p[:-1] for p in patterns if p.endswith("*") and "*" not in p[:-1])
        others = [p for p in patterns if "*" in p and not (p.endswith("*") and "*" not in p[:-1])]
        expressions = tuple(re.compile(re.escape(p).replace(r"\*", ".*") + r"\Z", re.DOTALL) for p in others)
        return cls(names, prefixes, expressions)

    def each(self, modules: Iterable[str]) -> list[bool]:
        names, prefixes, expressions = self.names, self.prefixes, self.expressions
        return [
            module in names or module.startswith(prefixes) or any(e.match(module) for e in expressions)
            for module in modules
        ]


def excluded(wildcards: Wildcards, modules: Iterable[str], where: str) -> list[bool]:
    """For each module name, whether ModelOpt's `exclude_modules` exclude it; the expressions under one
    MATCH_SECONDS deadline (a pattern of many `*`s backtracks), past which a ConfigError names `where`
    (the file and the key)."""
    modules = list(modules)
    try:
        with _deadline(MATCH_SECONDS):
            return wildcards.each(modules)
    except _TooSlow:
        patterns = ", ".join(json.dumps(e.pattern) for e in wildcards.expressions)
        raise ConfigError(
            f"{where}: the wildcards (as {patterns}) take more than "
            f"{MATCH_SECONDS:g} s to match the module names: a pattern that backtracks without end"
        ) from None


def packed(
    ignore: Patterns, targets: Patterns, every_linear: bool, modules: Iterable[str], where: str
) -> list[bool]:
    """For each Linear module name, whether the config means it to be packed: not ignored, and targeted
    (by the class name "Linear", `every_linear`, or by name or expression). All names are matched under
    one MATCH_SECONDS deadline; past it, a ConfigError names `where` and the expressions.

    >>> packed(Patterns.of(["re:.*self_attn.*"]), Patterns.of([]), True, ["a.mlp.up_proj", "a.self_attn.o_proj"], "config")
    [True, False]
    """
    modules = list(modules)
    pending = iter(modules)  # each pass takes names from it, so what is left says where time ran out
    try:
        with _deadline(MATCH_SECONDS):
            ignored = ignore.each(pending)
            pending = iter(modules)
            targeted = repeat(True) if every_linear else targets.each(pending)
    except _TooSlow:
        stopped = modules[len(modules) - sum(1 for _ in pending) - 1]  # the name taken last
        keys = " and ".join(
            f"'{key}'" for key, p in (("ignore", ignore), ("targets", targets)) if p.expressions
        )
        expressions = ", ".join(json.dumps(f"re:{e}") for e in ignore.expressions + targets.expressions)
        raise ConfigError(
            f"{where}: key{'s' if ' and ' in keys else ''} {keys}: the patterns {expressions} take more than {MATCH_SECONDS:g} s to match "
            f"the module names (stopped at '{stopped}'): a pattern that backtracks without end"
        ) from None
    if every_linear:
        return list(map(operator.not_, ignored))
    return [wanted and not skipped for skipped, wanted in zip(ignored, targeted)]


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
