"""What every engine kimicount plans for is to the planner: one interface, its releases, and rules that
say which releases they hold for and the code they were read from.

An engine (engines/vllm.py, sglang.py, llama_cpp.py) is one object behind the registry
(engines/__init__.py): its name as `--engine` takes it, its releases, its memory rule, its defaults
by release, its flags and the lines it prints. The planner asks it; nothing outside the engines
compares an engine's name.

Releases: an engine knows a range of them, oldest to newest (`--engine sglang==0.5.8`, or the newest
when none is named). A rule whose value changed between releases is a list of `Ruled` values, each
with the range it holds for and its source (file, release tag, line); `rule_for` picks the one that
holds for the release asked, and the answer names that release.

    >>> Version.parse("0.5.8.post1") > Version.parse("0.5.8") > Version.parse("0.5.3")
    True
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from kimicount.errors import UsageError
from kimicount.reading import shorten

if TYPE_CHECKING:
    from kimicount.anatomy import Anatomy
    from kimicount.deploy.engines.reserve import Reserve
    from kimicount.deploy.groups import Packing, PoolGroup, StatePool
    from kimicount.deploy.hardware import Accelerator
    from kimicount.deploy.placement import Parallel, PlacedComponent, Placement
    from kimicount.deploy.plan import DeploymentOptions, PlanReport, StageMemory
    from kimicount.spec import ModelSpec

T = TypeVar("T")

#: Where an engine runs: a server sized by its own memory rule (vLLM, SGLang), or a local llama.cpp box.
Route = Literal["server", "local"]

_VERSION = re.compile(r"v?(\d{1,6}(?:\.\d{1,6}){0,3})(?:\.?post(\d{1,4}))?", re.ASCII)


@dataclass(frozen=True, order=True)
class Version:
    """A release number as engines tag them: 0.5.8, 0.5.8.post1, 0.15.0 (a leading v allowed); ordered
    by its numbers, then its post-release."""

    numbers: tuple[int, ...]
    post: int = 0

    @classmethod
    def parse(cls, text: str, option: str = "--engine") -> Version:
        """'0.5.8.post1' -> Version((0, 5, 8), 1); one line naming `option` for anything else.

        >>> Version.parse("v0.15"), str(Version.parse("0.5.8.post1"))
        (Version(numbers=(0, 15, 0), post=0), '0.5.8.post1')
        """
        match = _VERSION.fullmatch(text.strip())
        if match is None:
            raise UsageError(
                f"{option}: '{shorten(text, 40)}' is not a release number such as 0.5.8 or 0.15.0"
            )
        numbers = tuple(int(part) for part in match[1].split("."))
        numbers += (0,) * (3 - len(numbers))  # 0.15 is 0.15.0
        return cls(numbers, int(match[2] or 0))

    def __str__(self) -> str:
        text = ".".join(str(n) for n in self.numbers)
        return text + (f".post{self.post}" if self.post else "")


@dataclass(frozen=True)
class Ruled(Generic[T]):
    """One value of an engine rule, the releases it holds for (`since` up to, not including, `until`;
    None: as far back as kimicount knows the engine, or up to its newest release), and the code it was
    read from: file, release tag, line."""

    value: T
    source: str
    since: str | None = None
    until: str | None = None

    def holds(self, release: Version) -> bool:
        """Whether this value is the engine's at `release`.

        >>> rule = Ruled(1, "here", since="0.5.3", until="0.6.0")
        >>> rule.holds(Version.parse("0.5.8")), rule.holds(Version.parse("0.6.0")), rule.range
        (True, False, 'from 0.5.3 to before 0.6.0')
        """
        low = self.since is None or Version.parse(self.since) <= release
        high = self.until is None or release < Version.parse(self.until)
        return low and high

    @property
    def range(self) -> str:
        """The releases it holds for, in words: 'from 0.5.3', 'before 0.8.0', 'from 0.8.0 to before 0.11.0'."""
        if self.since and self.until:
            return f"from {self.since} to before {self.until}"
        if self.since:
            return f"from {self.since}"
        return f"before {self.until}" if self.until else "in every release kimicount knows"


def rule_for(rules: Sequence[Ruled[T]], release: Version) -> Ruled[T]:
    """The value of a rule that holds for `release`: the first whose range covers it (every engine's
    rules cover its whole range of releases; tests/test_engines.py holds that)."""
    for rule in rules:
        if rule.holds(release):
            return rule
    raise LookupError(f"no value of this rule holds for release {release}")


@dataclass(frozen=True)
class Release:
    """A release of an engine that a plan follows: the engine's label, the version, and the tag as the
    plan names it ('0.5.8.post1'; llama.cpp's 'b5331' or 'newest build')."""

    label: str
    version: Version
    tag: str = ""

    def __str__(self) -> str:
        return f"{self.label} {self.tag or self.version}"


class Engine(ABC):
    """An engine kimicount plans for. Subclasses say what it is (`name`, `label`, `route`), the
    releases it knows (`oldest` to `newest`, with what that range rests on), and implement the memory
    rule of their route (ServerEngine for deploy/plan.py, LocalEngine for deploy/local/)."""

    #: As --engine takes it: vllm, sglang, llama.cpp, ik_llama.cpp.
    name: str
    #: As its own docs write it: vLLM, SGLang, llama.cpp, ik_llama.cpp.
    label: str
    route: Route
    #: The releases kimicount knows the rules of, oldest and newest; the one a plan follows unless it
    #: names one (`default`; None: the newest).
    oldest: str
    newest: str
    default: str | None = None
    #: What the release range rests on, in a line (the runs and the code read).
    releases_source: str

    def release(self, text: str | None, option: str = "--engine") -> Release:
        """The release a plan follows: `text` (0.5.8, v0.15.0), or the newest kimicount knows; one line
        naming the range for a release outside it (its rules were not read).

        >>> from kimicount.deploy.engines import engine_named
        >>> str(engine_named("sglang").release(None)), str(engine_named("vllm").release("0.11"))
        ('SGLang 0.5.8.post1', 'vLLM 0.11.0')
        """
        if text is None:
            return Release(self.label, Version.parse(self.default or self.newest))
        version = Version.parse(text, option)
        if not Version.parse(self.oldest) <= version <= Version.parse(self.newest):
            raise UsageError(
                f"{option} {self.name}=={shorten(text, 40)}: kimicount knows {self.label}'s rules from "
                f"{self.oldest} to {self.newest} ({self.releases_source})"
            )
        return Release(self.label, version)

    def rules(self) -> dict[str, Sequence[Ruled[Any]]]:
        """Every rule of this engine that changed between releases, by name (docs/engines.md lists
        them; the tests check each covers the whole range)."""
        return {}

    def __repr__(self) -> str:
        return f"<engine {self.name}>"


@dataclass(frozen=True)
class MemoryRow:
    """One row of one GPU's memory as the engine's rule takes it apart: label, bytes, and whether a
    negative figure is shown with its sign."""

    label: str
    bytes: int
    signed: bool = False


class ServerEngine(Engine, ABC):
    """A serving engine that sizes its KV pool itself (vLLM, SGLang): the planner's questions to it.

    The memory rule reads the model's cache groups (deploy/groups.py): one per-token group, which
    `pool_tokens` packs; a family's own groups (DeepSeek V4's windows, compressed entries and
    compressor states), which `pack` packs by the engine's rule for them into a Packing; a hybrid
    model's state pool adds groups, packed by the engine's own rule (vLLM's hybrid KV-cache manager,
    SGLang's mamba_full_memory_ratio split) once that rule is written there."""

    route: Route = "server"
    #: The concurrency cap: the DeploymentOptions field and its flag.
    sequence_cap: tuple[str, str]
    #: How its rule words the memory it sizes against and what it keeps back ('usable', 'reserve').
    usable_words: tuple[str, str]
    #: Its BF16 copies of an FP8 kv_b_proj (placement's ABSORPTION rows), and the note about them.
    absorption_copies: str
    absorption_note: str
    #: The estimate its pool rests on besides the CUDA total: 'reserve' or 'preload'.
    reserve_input: str
    #: Whether its plans are written back as kimicount's layout options, so other layouts are tried.
    layouts_as_options: bool = True
    #: The share of memory it may be told to use that a way out tries (DeploymentOptions field, value,
    #: where that value is run); None: its rule has none to raise.
    memory_share: tuple[str, Fraction, str] | None = None
    #: Whether its DP attention splits the dense MLP, shared expert and head over all TP × DP ranks.
    dense_over_dp: bool = False
    #: Its serve-command flags (engines/flags.py), by name; --kv-cache-dtype's choices and what each is to
    #: the plan (None: the model's dtype); the speculative methods that draft with the MTP layer.
    flags: dict[str, Any]
    kv_cache_dtypes: dict[str, str | None]
    #: Choices of its --kv-cache-dtype that kimicount has no cache layout for (refused as such).
    unmodelled_kv_cache_dtypes: frozenset[str] = frozenset()
    mtp_methods: frozenset[str]
    #: How it is started: the modules of `python -m MODULE`, whether `NAME serve` takes the model first
    #: (a positional), where its command names the model (for the message when it names none).
    modules: tuple[str, ...]
    positional_model: bool = False
    model_flag: str
    #: Its images (docker run IMAGE), and the launcher an image runs when no command follows it.
    images: tuple[str, ...] = ()
    image_entrypoint: str | None = None
    #: Whether its MLA pool keeps the V3.2 indexer's keys on every layer, a model's shared-indexer layers
    #: too (SGLang's NSATokenToKVPool), rather than on the layers with an indexer (vLLM).
    indexer_every_layer: bool = False

    # --- the options -------------------------------------------------------------------------------

    @abstractmethod
    def check(self, options: DeploymentOptions) -> None:
        """Refuse, in one line, an option this engine does not take (naming its own)."""

    @abstractmethod
    def parallel(self, options: DeploymentOptions, spec: ModelSpec, gpus: int) -> Parallel:
        """The layout of `gpus` GPUs the options describe, in this engine's terms, checked."""

    @abstractmethod
    def page(self, options: DeploymentOptions) -> int:
        """Tokens per KV page."""

    def flag_name(self, typed: str) -> str:
        """A flag as its parser reads it (the name it looks the table up by)."""
        return typed

    def count_note(self, setting: str, text: str) -> str | None:
        """How it read a count typed for `setting`, when that differs from how it looks; None."""
        return None

    def kv_cache_dtype(self, text: str, shown: str) -> str | None:
        """A --kv-cache-dtype value, by its own list of choices: the plan's cache dtype (None: the
        model's); one line for anything else."""
        key = text.strip()
        if key in self.unmodelled_kv_cache_dtypes:
            raise UsageError(
                f"{shown} {key}: a KV cache dtype of {self.label}'s that kimicount does not model (it models "
                f"{', '.join(self.kv_cache_dtypes)})"
            )
        if key not in self.kv_cache_dtypes:
            raise UsageError(
                f"{shown} '{shorten(text, 40)}': not a KV cache dtype {self.label} takes (its choices: "
                f"{', '.join(self.kv_cache_dtypes)})"
            )
        return self.kv_cache_dtypes[key]

    @abstractmethod
    def serve_settings(
        self, values: dict[str, object], flags: dict[str, str], memory: list[str]
    ) -> dict[str, object]:
        """A serve command's settings in kimicount's layout terms, with its defaults (TP, PP, DP of 1)
        made explicit; `memory` gains what it reads that the plan does not model."""

    # --- the memory rule ---------------------------------------------------------------------------

    @abstractmethod
    def usable(self, gpu: Accelerator, options: DeploymentOptions) -> int:
        """What the engine sizes against. [bytes]"""

    @abstractmethod
    def reserve(
        self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator, parallel: Parallel
    ) -> Reserve:
        """What it keeps back from the pool besides the weights: given, or estimated with its terms."""

    @abstractmethod
    def least_reserve(self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator) -> int:
        """The least it keeps back under any layout, for the --min-gpus search's early stop. [bytes]"""

    def static_fraction(
        self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator, parallel: Parallel
    ) -> StaticFraction | None:
        """The share of memory the rule is told or picks (SGLang's mem_fraction_static); None where the
        rule has none."""
        return None

    def load_extras(
        self, options: DeploymentOptions, anatomy: Anatomy, gpu: Accelerator, placement: Placement
    ) -> tuple[PlacedComponent, ...]:
        """What loading the weights allocates beside them, by this engine's code on this platform
        (rows of the weights table, not in the checkpoint); none by default."""
        return ()

    def loaded(self, weights: Sequence[int]) -> list[int]:
        """The weights each stage's pool is sized after: its own by default. [bytes]"""
        return list(weights)

    def pool_tokens(self, pool: int, groups: Sequence[PoolGroup], page: int) -> int:
        """Tokens whose cache fits in `pool`, in whole pages, for the model's cache groups: one
        per-token group, floor(pool ÷ (page × bytes per token)) × page. Other kinds are packed by
        each engine's own rule: refused until it is written. [tokens]"""
        from kimicount.deploy.groups import single_per_token

        group = single_per_token(groups, self.label)
        assert group.cache is not None  # single_per_token returns only an MLA layout's group
        return group.cache.max_tokens(pool) if pool > 0 else 0

    def pack(
        self,
        pool: int,
        groups: Sequence[PoolGroup],
        options: DeploymentOptions,
        spec: Any,
        gpu: Accelerator,
        parallel: Parallel,
    ) -> Packing | None:
        """A family's own groups (DeepSeek V4's) packed into `pool` by this engine's rule for them; None
        for groups pool_tokens packs (or refuses). The base engine has no such rule."""
        return None

    def pack_state(
        self,
        pool: int,
        groups: Sequence[PoolGroup],
        options: DeploymentOptions,
        context: int,
        parallel: Parallel,
    ) -> StatePool:
        """The pool of a model with a per-sequence state beside its per-token cache (the Kimi Linear
        family's KDA state), packed by the engine's own rule (engines/vllm_hybrid.py, sglang_mamba.py);
        refused in one line by an engine without one."""
        raise UsageError(f"{self.label}'s memory rule for a per-sequence state (KDA) is not modelled")

    def state_dtypes(self, options: DeploymentOptions, spec: ModelSpec) -> tuple[str, str]:
        """The dtypes of a state's convolution windows and recurrent state (conv, ssm): the model's and
        fp32 unless the engine's flags say otherwise."""
        from kimicount.kvcache import default_dtype

        return default_dtype(spec), "fp32"

    def default_kv_dtype(self, spec: ModelSpec, release: Release) -> str | None:
        """The cache dtype the engine picks for this model when --kv-cache-dtype is auto, by release;
        None: the model's own (its torch_dtype)."""
        return None

    def floor_release(self, spec: ModelSpec) -> str | None:
        """The first release that runs this model, when the default release does not; None: any."""
        return None

    def model_note(self, spec: ModelSpec) -> str | None:
        """A line the plan adds for this model under this engine (which releases run it); None."""
        return None

    # --- what it prints and how the plan words it ----------------------------------------------------

    def sized_by(self, release: Release) -> str:
        """Whose rules size the plan, for its first line: ' (vLLM 0.15.0)'."""
        return f" ({release})"

    @abstractmethod
    def max_sequences(self, report: PlanReport) -> int:
        """The most sequences it runs at once per replica (its cap, given or its default)."""

    def max_running(self, report: PlanReport) -> int | None:
        """The cap it prints at start-up (SGLang's max_running_requests); None where it prints none."""
        return None

    @abstractmethod
    def memory_rows(self, report: PlanReport, stage: StageMemory) -> list[MemoryRow]:
        """One GPU's memory as its rule takes it apart, from the total to the pool."""

    @abstractmethod
    def reserve_lines(self, report: PlanReport) -> tuple[list[str], bool]:
        """The sentences before and after the reserve's terms, and whether to show the terms."""

    @abstractmethod
    def printed_lines(self, report: PlanReport) -> list[str]:
        """What it would print at start-up for this plan, in its own words and units."""

    def json_figures(self, report: PlanReport) -> tuple[str, dict[str, Any] | None]:
        """Its own figures for `plan --json`, under the key it has there ('sglang': null for vLLM)."""
        return "sglang", None


@dataclass(frozen=True)
class StaticFraction:
    """A share of memory an engine's rule takes (SGLang's mem_fraction_static), given or as it picks
    it, with the calculation in words and what each step rests on."""

    value: Fraction
    given: bool
    calculation: str = ""
    #: As the engine prints it (SGLang: its float, 0.8260405859375).
    printed: str = ""
    #: Why it is what it is, in sentences (what is set aside, for what).
    why: tuple[str, ...] = ()


class LocalEngine(Engine, ABC):
    """An engine for a local box (llama.cpp, ik_llama.cpp): its cache layout by build or mode, and the
    command it is run with (deploy/local/)."""

    route: Route = "local"

    @abstractmethod
    def describe(self, build: int | None) -> str:
        """How the plan names it: 'llama.cpp (newest build)', 'llama.cpp b5331', 'ik_llama.cpp'."""
