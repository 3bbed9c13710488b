"""The serve command people already have, read as a plan: `vllm serve MODEL --tensor-parallel-size 8 …`,
`python -m vllm.entrypoints.openai.api_server --model …`, `python -m sglang.launch_server --model-path …
--tp 16 …`, `sglang serve …`, or any of them run from the engine's image (`docker run … IMAGE …`) ->
the model, the engine and its release, the DeploymentOptions fields its flags set, and the flags
kimicount does not model. Pure: a list of words in, a ServeCommand out; bad input raises UsageError in
one line, quoting at most an excerpt of what was typed and its length.

The flag tables are each engine's own (engines/vllm_flags.py, engines/sglang_flags.py), with their
sources; how each engine reads what the tables do not say is its own too (vLLM's FlexibleArgumentParser
reads `--flag_name` as `--flag-name`, and its counts with a lower-case suffix as thousands: 256k is
256,000). The release: an engine image's tag (`vllm/vllm-openai:v0.15.0`, `lmsysorg/sglang:v0.5.8.post1-…`,
`rocm/sgl-dev:v0.5.8.post1-rocm720-mi35x-…`) says which release runs; `latest` or no tag says nothing,
and the plan follows the newest release kimicount knows.

Layouts keep each engine's terms, as DeploymentOptions reads them: vLLM's `tp` GPUs per attention
group and `dp` groups (EP over all TP × DP GPUs); SGLang's `--tp-size` counts every GPU of a stage, and
with `--enable-dp-attention` (dp_attention) its attention runs in `--dp-size` groups of tp ÷ dp GPUs.
SGLang's `--dp-size` without DP attention starts that many independent servers: the plan is for one of
them, and says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from kimicount.deploy.engines import ENGINES
from kimicount.deploy.engines.base import ServerEngine, Version
from kimicount.deploy.engines.flags import Flag
from kimicount.deploy.options import PLAN_FLAGS
from kimicount.errors import UsageError
from kimicount.kvcache import parse_mamba_dtype
from kimicount.options import parse_count, parse_dtype, parse_fraction, parse_ratio
from kimicount.reading import shorten

#: What a message quotes of a word typed in a serve command (shorten adds the length past it).
QUOTED = 60
#: The deepest JSON a --speculative-config may nest (the engines' own are two or three deep); deeper is
#: refused before it is parsed, in time linear in its length (json.loads recurses once per level).
MAX_JSON_DEPTH = 32


def _servers() -> list[ServerEngine]:
    return [engine for engine in ENGINES.values() if isinstance(engine, ServerEngine)]


def engine_kv_dtype(text: str, option: str) -> str | None:
    """A KV-cache dtype as plan's --kv-dtype takes it: a dtype name (bf16, bfloat16, fp8, …) or any
    engine's own choice ('auto' is the model's: None; fp8_e4m3, fp8_e5m2, fp8_ds_mla are one byte an
    element, the layout saying which record). Anything else is refused in one line.

    >>> engine_kv_dtype("auto", "--kv-cache-dtype"), engine_kv_dtype("fp8_e5m2", "--kv-cache-dtype")
    (None, 'fp8')
    >>> engine_kv_dtype("bfloat16", "--kv-cache-dtype")
    'bf16'
    """
    key = text.strip()
    for engine in _servers():
        if key in engine.kv_cache_dtypes:
            value: str | None = engine.kv_cache_dtypes[key]
            return value
    return parse_dtype(shorten(text, QUOTED), option)


# --- what a serve command says ----------------------------------------------------------------------


@dataclass(frozen=True)
class ServeCommand:
    """What a serve command says that the plan reads. `settings` are DeploymentOptions fields by name
    (SGLang's among them: mem_fraction_static, page_size, dp_attention, redundant_experts,
    max_running_requests, engine; `release` when an image's tag gave one); `flags` the flag each came
    from, as typed (shortened); `unmodelled` the words of each flag kimicount does not model, those that
    change memory first; `notes` how the engine read what was typed (vLLM: a token count written with a
    lower-case suffix, options.vllm_reading: 256k is 256,000, 256K 262,144)."""

    engine: str  # the engine's --engine name
    launcher: str  # how it was started: "vllm serve", "python -m sglang.launch_server", …
    model: str | None
    revision: str | None
    nodes: int | None
    settings: dict[str, object] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)
    unmodelled: tuple[str, ...] = ()
    memory_unmodelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    release: str | None = None  # the release an image's tag named
    image: str | None = None


#: Flags whose values are secrets: named without them.
SECRETS = frozenset({"--api-key", "--hf-token"})

_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
#: The release at the start of an image's tag: v0.15.0, v0.5.8.post1-rocm720-mi35x-20260218.
_TAG_RELEASE = re.compile(r"v?(\d{1,6}(?:\.\d{1,6}){1,3}(?:\.?post\d{1,4})?)(?:[-+_].*)?", re.ASCII)

#: What kimicount accepts as a serve command, for the message that refuses anything else.
LAUNCHERS = (
    "vllm serve MODEL, python -m vllm.entrypoints.openai.api_server --model MODEL, "
    "python -m sglang.launch_server --model-path MODEL or sglang serve --model-path MODEL "
    "(or one of them after docker run … IMAGE)"
)


def _strip_env(words: list[str]) -> list[str]:
    rest = list(words)
    while rest and _ENV.fullmatch(rest[0]):  # CUDA_VISIBLE_DEVICES=0,1 vllm serve …
        rest = rest[1:]
    return rest


def is_serve_command(words: list[str]) -> bool:
    """Whether `words` start like a serve command (after any NAME=value environment words)."""
    rest = _strip_env(words)
    if not rest:
        return False
    first = PurePosixPath(rest[0]).name
    return first in ("docker", "podman") or first in ENGINES or bool(_PYTHON.fullmatch(first))


@dataclass(frozen=True)
class _Launch:
    engine: ServerEngine
    launcher: str
    rest: list[str]
    positional: bool  # the model may come first, as a positional
    release: str | None = None
    image: str | None = None


def _image(words: list[str]) -> tuple[list[str], ServerEngine | None, str | None, str | None]:
    """`docker run [OPTIONS] IMAGE [COMMAND] [ARG…]` (docker's own syntax): the words after the first
    word that is an engine's image, that engine, its image, and the release its tag names (None for
    `latest` or no tag). Words before a known image are docker's and are not read."""
    for index, word in enumerate(words):
        name, _, tag = word.rpartition(":") if ":" in word.rsplit("/", 1)[-1] else (word, "", "")
        name = name.removeprefix("docker.io/")
        for engine in _servers():
            if name in engine.images:
                match = _TAG_RELEASE.fullmatch(tag) if tag else None
                return words[index + 1 :], engine, word, None if match is None else match[1]
    raise UsageError(
        "the serve command after --: docker run without an engine's image "
        f"({', '.join(image for engine in _servers() for image in engine.images)})"
    )


def _launcher(words: list[str]) -> _Launch:
    """The engine, how it was started, the words after that, and what an image said."""
    rest = _strip_env(words)
    if not rest:
        raise UsageError(f"the serve command after --: expected one of {LAUNCHERS}")
    image_engine, image, release = None, None, None
    if PurePosixPath(rest[0]).name in ("docker", "podman"):
        rest, image_engine, image, release = _image(rest)
        if image_engine is not None and image_engine.image_entrypoint and not _starts_launcher(rest):
            # the image's entrypoint is the launcher (vllm/vllm-openai: `vllm serve`)
            return _Launch(
                image_engine, f"{image_engine.image_entrypoint} ({image})", rest, True, release, image
            )
    launch = _named_launcher(rest)
    if image_engine is not None and launch.engine is not image_engine:
        raise UsageError(
            f"the serve command runs {launch.launcher} in {shorten(str(image), QUOTED)}, {image_engine.label}'s image"
        )
    return _Launch(launch.engine, launch.launcher, launch.rest, launch.positional, release, image)


def _starts_launcher(words: list[str]) -> bool:
    try:
        _named_launcher(words)
    except UsageError:
        return False
    return True


def _named_launcher(rest: list[str]) -> _Launch:
    if not rest:
        raise UsageError(f"the serve command after --: expected one of {LAUNCHERS}")
    first = PurePosixPath(rest[0]).name
    for engine in _servers():
        if first == engine.name and len(rest) > 1 and rest[1] == "serve":
            return _Launch(engine, f"{first} serve", rest[2:], engine.positional_model)
        if _PYTHON.fullmatch(first) and len(rest) > 2 and rest[1] == "-m" and rest[2] in engine.modules:
            return _Launch(engine, f"python -m {rest[2]}", rest[3:], False)
    raise UsageError(
        f"the serve command '{shorten(' '.join(rest[:3]), QUOTED)}': expected one of {LAUNCHERS}"
    )


def json_depth(text: str) -> int:
    """How deep a JSON text nests its arrays and objects, in one pass that skips strings.

    >>> json_depth('{"method": "mtp"}'), json_depth('[[["]]]"]]]')
    (1, 3)
    """
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _read(engine: ServerEngine, flag: Flag, shown: str, value: str) -> object:
    """A flag's value as the setting takes it; one line naming the flag when it cannot be read."""
    quoted = shorten(value, QUOTED)
    if flag.kind == "count":
        count = parse_count(quoted, shown) if len(value) > QUOTED else parse_count(value, shown)
        if flag.setting == "redundant_experts" and count == 0:  # the engines' default, written out
            return count
        if count < 1:
            raise UsageError(f"{shown} {quoted}: expected a positive whole number")
        return count
    if flag.kind == "fraction":
        return parse_fraction(quoted, shown) if len(value) > QUOTED else parse_fraction(value, shown)
    if flag.kind == "ratio":
        return parse_ratio(quoted, shown)
    if flag.kind == "mamba_dtype":
        return parse_mamba_dtype(quoted, shown)
    if flag.kind == "kv_dtype":
        return engine.kv_cache_dtype(value, shown)
    if flag.kind == "speculative_config":
        example = 'expected JSON such as \'{"method": "mtp"}\''
        if json_depth(value) > MAX_JSON_DEPTH:
            raise UsageError(f"{shown} '{quoted}': {example}, not nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            config = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise UsageError(f"{shown} '{quoted}': {example}") from None
        method = config.get("method") if isinstance(config, dict) else None
        return method in engine.mtp_methods
    if flag.kind == "speculative_algorithm":
        return value.upper() in engine.mtp_methods
    return value


def parse_serve_command(words: list[str]) -> ServeCommand:
    """Read a serve command's words (as a shell splits them).

    >>> command = parse_serve_command(["vllm", "serve", "moonshotai/Kimi-K2-Thinking", "-tp", "8"])
    >>> command.engine, command.model, command.settings
    ('vllm', 'moonshotai/Kimi-K2-Thinking', {'tp': 8, 'pp': 1, 'dp': 1})
    >>> parse_serve_command(["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp=16",
    ...     "--dp", "8", "--enable-dp-attention"]).settings
    {'tp': 16, 'dp': 8, 'dp_attention': True, 'pp': 1, 'engine': 'sglang'}
    """
    launch = _launcher(words)
    engine, launcher, rest, positional = launch.engine, launch.launcher, launch.rest, launch.positional
    table = engine.flags
    values: dict[str, object] = {}
    flags: dict[str, str] = {}
    unmodelled: list[str] = []
    memory: list[str] = []
    notes: list[str] = []
    model = None
    if positional and rest and not rest[0].startswith("-"):
        model, rest = rest[0], rest[1:]
        flags["model"] = "its first argument"
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if positional and model is None and not word.startswith("-"):  # vllm serve -tp 8 MODEL
            model = word
            flags["model"] = "its argument"
            continue
        if not word.startswith("-") or word == "-":
            raise UsageError(
                f"the serve command's '{shorten(word, QUOTED)}': not the value of a flag kimicount knows "
                f"({launcher} takes the model {'first' if positional else 'from its model flag'})"
            )
        typed, equals, inline = word.partition("=")
        name = engine.flag_name(typed)
        typed = shorten(typed, QUOTED)
        flag = table.get(name)
        if flag is None:
            # a flag kimicount does not know: fine when its form shows whether it takes a value
            if equals or i >= len(rest) or rest[i].startswith("-"):
                unmodelled.append(typed)  # its name only: a value could be a secret
                continue
            raise UsageError(
                f"the serve command's {typed}: a flag kimicount does not know, so it cannot tell whether "
                f"'{shorten(rest[i], 40)}' is its value; write {typed}={shorten(rest[i], 40)}, or leave it out"
            )
        if flag.kind in ("switch", "off"):
            if equals:
                raise UsageError(
                    f"the serve command's {typed}: a switch, it takes no value ('{shorten(word, QUOTED)}')"
                )
            value: object = flag.kind == "switch"
            shown = typed
        else:
            if equals:
                text = inline
            elif i < len(rest) and not (rest[i].startswith("-") and not re.fullmatch(r"-\d.*", rest[i])):
                text = rest[i]
                i += 1
            elif flag.kind == "optional":  # nargs="?": the flag alone
                unmodelled.append(typed)
                continue
            else:
                raise UsageError(f"the serve command's {typed}: expected a value after it")
            if name in SECRETS:
                shown = f"{typed} …"
            else:
                shown = shorten(word, QUOTED) if equals else f"{typed} {shorten(text, QUOTED)}"
            if flag.kind == "values":  # nargs="+": more words until the next flag
                more = []
                while i < len(rest) and not rest[i].startswith("-"):
                    more.append(rest[i])
                    i += 1
                if more:
                    shown += " " + shorten(" ".join(more), QUOTED)
            if flag.setting is None:
                (memory if flag.memory else unmodelled).append(shown)
                continue
            if flag.setting == "max_model_len" and text.strip().lower() in ("-1", "auto"):
                memory.append(
                    f"{shown} (the engine fits it to memory; a try line says the longest that fits)"
                )
                continue
            value = _read(engine, flag, typed, text)
            note = engine.count_note(flag.setting, text)
            if note is not None:
                notes.append(f"the serve command's {typed} {note}")
        if flag.setting is None:
            (memory if flag.memory else unmodelled).append(shown)
            continue
        setting = flag.setting
        if flag.kind in ("speculative_config", "speculative_algorithm") and not value:
            memory.append(shown)  # a draft model, n-gram lookup…: not the MTP layer
            continue
        if setting in values and values[setting] != value:
            raise UsageError(f"the serve command gives {flags[setting]} and {shown}: which one?")
        if setting == "model":
            if model is not None and model != value:
                raise UsageError(
                    f"the serve command names two models: {shorten(model, QUOTED)} and {shorten(str(value), QUOTED)}"
                )
            model = str(value)
        values[setting] = value
        flags[setting] = shown
    revision = values.pop("revision", None)
    values.pop("model", None)
    nodes = values.pop("nodes", None)
    settings = engine.serve_settings(values, flags, memory)
    if launch.release is not None:
        engine.release(launch.release, f"the serve command's image {shorten(str(launch.image), QUOTED)}")
        settings["release"] = str(Version.parse(launch.release))
        flags["release"] = f"its image {shorten(str(launch.image), QUOTED)}"
    return ServeCommand(
        engine.name,
        launcher,
        model,
        None if revision is None else str(revision),
        None if nodes is None else int(str(nodes)),
        settings,
        flags,
        tuple(unmodelled),
        tuple(memory),
        tuple(notes),
        settings.get("release") if isinstance(settings.get("release"), str) else None,  # type: ignore[arg-type]
        launch.image,
    )


def deployment_settings(
    serve: ServeCommand | None,
    given: dict[str, object],
    typed: dict[str, str],
    gpus: int,
    *,
    expert_parallel: bool = False,
) -> dict[str, object]:
    """The DeploymentOptions fields of a plan: the serve command's settings (its engine and release
    among them) and the plan options `given` (by field; `typed` names each as typed), which must agree
    where both set one; vLLM's --enable-expert-parallel made an EP size (TP × DP, TP what --pp and --dp
    leave of `gpus`).

    >>> deployment_settings(None, {"dp": 8}, {}, 8, expert_parallel=True)
    {'dp': 8, 'ep': 8}
    """
    settings: dict[str, object] = {} if serve is None else {"engine": serve.engine, **serve.settings}
    for name, value in given.items():
        if name in settings and settings[name] != value:
            theirs = (
                serve.flags.get(name, serve.launcher if name == "engine" else name)
                if serve is not None
                else name
            )
            raise UsageError(
                f"{typed.get(name, PLAN_FLAGS[name][0])} and the serve command's {theirs} disagree: give it once"
            )
        settings[name] = value
    if expert_parallel:
        pp, dp = _whole(settings.get("pp", 1)), _whole(settings.get("dp", 1))
        tp = _whole(settings.get("tp") or (gpus // (pp * dp) if gpus % (pp * dp) == 0 else 1))
        ep = tp * dp
        if settings.get("ep") not in (None, ep):
            raise UsageError(
                f"--enable-expert-parallel and --ep {settings['ep']} disagree: EP spans TP × DP = {ep}"
            )
        settings["ep"] = ep
    return settings


def _whole(value: object) -> int:
    """A layout size the settings hold (an int, from a count option or a serve command's flag)."""
    assert isinstance(value, int)
    return value
