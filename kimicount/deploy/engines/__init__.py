"""The engines kimicount plans for, behind one registry: vLLM and SGLang (servers that size their own KV
pool, deploy/plan.py), llama.cpp and ik_llama.cpp (a local box, deploy/local/). Each is one object
implementing engines/base.py's interface; the planner looks an engine up here by the name `--engine`
(or a pasted serve command) gives and asks it, and compares no engine name itself.

Each engine module reads only the spec, the accelerator table and the placement (never the plan), so
imports point one way: engines -> plan -> answer -> views.

    >>> engine_named("SGLang").label, parse_engine("sglang==0.5.8")
    ('SGLang', (<engine sglang>, '0.5.8'))
"""

from __future__ import annotations

from kimicount.deploy.engines.base import Engine, LocalEngine, ServerEngine
from kimicount.deploy.engines.llama_cpp import IK_LLAMA_CPP, LLAMA_CPP, LlamaCpp
from kimicount.deploy.engines.sglang import SGLang
from kimicount.deploy.engines.vllm import VLLM
from kimicount.errors import UsageError
from kimicount.reading import shorten

VLLM_ENGINE = VLLM()
SGLANG = SGLang()

#: Every engine by its --engine name, servers first (vLLM, the default, first of all).
ENGINES: dict[str, Engine] = {
    engine.name: engine for engine in (VLLM_ENGINE, SGLANG, LLAMA_CPP, IK_LLAMA_CPP)
}
#: The default engine of a server plan, and of a local one.
DEFAULT_SERVER, DEFAULT_LOCAL = VLLM_ENGINE.name, LLAMA_CPP.name


def engine_named(name: str, option: str = "--engine") -> Engine:
    """The engine `name` (any case); one line naming the known ones otherwise."""
    engine = ENGINES.get(name.strip().lower())
    if engine is None:
        raise UsageError(f"{option} {shorten(name, 40)}: expected one of {', '.join(ENGINES)}")
    return engine


def parse_engine(text: str, option: str = "--engine") -> tuple[Engine, str | None]:
    """`--engine NAME` or `NAME==RELEASE` (pip's pin): the engine and the release asked (None: its newest).
    The release is checked by the engine (Engine.release)."""
    name, pinned, release = text.partition("==")
    engine = engine_named(name, option)
    if pinned and not release.strip():
        raise UsageError(
            f"{option} {shorten(text, 60)}: expected a release after ==, such as {engine.name}==0.5.8"
        )
    return engine, release.strip() if pinned else None


def server_engine(name: str, option: str = "--engine") -> ServerEngine:
    """A serving engine by name: vLLM or SGLang."""
    engine = engine_named(name, option)
    if not isinstance(engine, ServerEngine):
        raise UsageError(f"{option} {engine.name}: a local engine; a server plan takes {', '.join(SERVERS)}")
    return engine


def local_engine(name: str, option: str = "--engine") -> LlamaCpp:
    """A local engine by name: llama.cpp or ik_llama.cpp."""
    engine = engine_named(name, option)
    if not isinstance(engine, LlamaCpp):
        raise UsageError(f"{option} '{shorten(name, 40)}': expected {' or '.join(LOCALS)}")
    return engine


#: The names of each route's engines, as messages list them.
SERVERS = tuple(name for name, engine in ENGINES.items() if isinstance(engine, ServerEngine))
LOCALS = tuple(name for name, engine in ENGINES.items() if isinstance(engine, LocalEngine))

__all__ = [
    "ENGINES",
    "IK_LLAMA_CPP",
    "LLAMA_CPP",
    "LOCALS",
    "SERVERS",
    "SGLANG",
    "VLLM_ENGINE",
    "Engine",
    "LocalEngine",
    "ServerEngine",
    "engine_named",
    "local_engine",
    "parse_engine",
    "server_engine",
]
