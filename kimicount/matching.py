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
    #: Where every expression is `.*` and a choice of literals (`.*mlp\.(gate|up)_proj.*`): the literals,
    #: one of which a name that matches contains (_substrings); else None.
    substrings: frozenset[str] | None = None

    @classmethod
    def of(cls, patterns: Iterable[str]) -> Patterns:
        """Compiled once: a 1T checkpoint asks about 70,000 modules. (The spec has checked that each
        expression compiles.)"""
        patterns = tuple(patterns)
        expressions = tuple(p[3:] for p in patterns if p.startswith("re:"))
        names = frozenset(p for p in patterns if not p.startswith("re:"))
        compiled = tuple(re.compile(e) for e in expressions)
        substrings: frozenset[str] | None = frozenset()
        for expression in expressions:
            literals = _substrings(expression)
            substrings = None if literals is None or substrings is None else substrings | literals
        return cls(names, expressions, compiled, _one_of(compiled), substrings)

    def matches(self, module: str) -> bool:
        return self.each((module,))[0]

    def none_of(self, modules: list[str]) -> bool:
        """True when no module name is one of the names or matches an expression, as decided without
        `re` where the expressions allow: each then matches exactly the names that contain one of
        `substrings` (`.` matches anything but a newline, and no name holds one), and a search of the
        names joined by newlines, one literal at a time, finds none. Kimi K3's ignore list against its
        248,064 routed-expert Linears: 0.06 s, against 0.16 s for `re` (which tries `.*` at every cut
        of every name). False where that cannot be decided so: `each` decides."""
        if self.substrings is None or not modules:
            return False
        text = "\n".join(modules)
        return (
            text.count("\n") == len(modules) - 1  # no name holds a newline
            and not any(map(text.__contains__, self.substrings))
            and self.names.isdisjoint(modules)
        )

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


#: What stands for itself in an expression when it is not escaped.
_META = frozenset(".^$*+?{}[]\\|()")
#: At most this many literals are taken from one expression (its choices multiply out).
_MAX_LITERALS = 256


def _substrings(expression: str) -> frozenset[str] | None:
    r"""The literals that `.*E` or `.*E.*` matches (with re.match) a name exactly when it contains one,
    for an E of literal characters, escaped punctuation and groups of choices (`(a|b)`, `(?:a|b)`):
    anything else (a class, a quantifier, a flag, an anchor, a backreference, a `|` outside a group,
    which would split `.*` from the rest) is None, and `re` decides.

    >>> sorted(_substrings(r".*mlp\.(gate|up)_proj.*")), sorted(_substrings(".*lm_head"))
    (['mlp.gate_proj', 'mlp.up_proj'], ['lm_head'])
    >>> [_substrings(e) for e in ("lm_head.*", r".*experts\.[0-9]+.*", r".*a\.*", ".*a|b.*", ".*(a|b)*")]
    [None, None, None, None, None]
    """
    if not expression.startswith(".*"):
        return None
    body = expression[2:]
    if body.endswith(".*") and (len(body) - 2 - len(body[:-2].rstrip("\\"))) % 2 == 0:
        body = body[:-2]  # a trailing `.*` whose dot is not escaped: it matches whatever follows
    literals, end = _sequence(body, 0)
    if literals is None or end != len(body) or any("\n" in literal for literal in literals):
        return None
    return frozenset(literals)


def _choices(text: str, pos: int) -> tuple[list[str] | None, int]:
    """The literals of `a|b|…` from `pos` up to a `)` or the end, and where it stopped."""
    literals: list[str] = []
    while True:
        sequence, pos = _sequence(text, pos)
        if sequence is None:
            return None, pos
        literals += sequence
        if pos < len(text) and text[pos] == "|":
            pos += 1
            continue
        return (literals if len(literals) <= _MAX_LITERALS else None), pos


def _sequence(text: str, pos: int) -> tuple[list[str] | None, int]:
    """The literals of one choice, up to a `|`, a `)` or the end: its atoms in turn, a group's choices
    multiplying them out."""
    literals = [""]
    while pos < len(text) and text[pos] not in "|)":
        char = text[pos]
        if char == "(":
            start = pos + 3 if text.startswith("(?:", pos) else pos + 1
            if text.startswith("(?", pos) and start == pos + 1:  # a flag, a name, a lookaround
                return None, pos
            atom, pos = _choices(text, start)
            if atom is None or pos >= len(text) or text[pos] != ")":
                return None, pos
            pos += 1
        elif char == "\\":
            if pos + 1 >= len(text) or text[pos + 1].isalnum() or text[pos + 1].isspace():
                return None, pos  # \d, \1, \n, \b…: not one literal character
            atom, pos = [text[pos + 1]], pos + 2
        elif char in _META:
            return None, pos
        else:
            atom, pos = [char], pos + 1
        if pos < len(text) and text[pos] in "*+?{":  # the atom repeated (or optional): no literal
            return None, pos
        if len(literals) * len(atom) > _MAX_LITERALS:
            return None, pos
        literals = [head + tail for head in literals for tail in atom]
    return literals, pos


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
            ignored = [False] * len(modules) if ignore.none_of(modules) else ignore.each(pending)
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
