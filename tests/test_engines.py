"""kimicount.deploy.engines: one interface behind a registry, and releases.

- vLLM's rule is V1's, its default engine from v0.8.0 (V0, vllm/worker/worker.py, is not modelled); the
  pool was checked on the published Kimi-K2.5 run on 8 × H100, 0.15.0 (tests/test_reserve.py); the newest
  release known is 0.22.0, issue #44376's DeepSeek-V4-Flash run (tests/test_vllm_deepseek_v4.py).
- SGLang's default mem_fraction_static is PR #10975's heuristic (merged 2025-09-27, first released in
  0.5.3), read at v0.5.8.post1 (tests/test_sglang.py's MI355X run).
- llama.cpp's releases are its builds (b5137: MLA, PR #12801; b7832: the V-less cache, PR #19067).
"""

from __future__ import annotations

import pytest

from kimicount.deploy.engines import ENGINES, LLAMA_CPP, SGLANG, VLLM_ENGINE, parse_engine
from kimicount.deploy.engines.base import Version, rule_for
from kimicount.errors import UsageError

from .helpers import fails_cleanly, invoke
from .test_plan import K25, plan_json


def test_the_registry_holds_the_four_engines_by_their_names():
    assert list(ENGINES) == ["vllm", "sglang", "llama.cpp", "ik_llama.cpp"]
    assert [(e.label, e.route) for e in ENGINES.values()] == [
        ("vLLM", "server"),
        ("SGLang", "server"),
        ("llama.cpp", "local"),
        ("ik_llama.cpp", "local"),
    ]


@pytest.mark.parametrize("engine", [VLLM_ENGINE, SGLANG])
def test_every_rule_covers_every_release_the_engine_knows(engine):
    for name, rules in engine.rules().items():
        for release in (engine.oldest, engine.newest):
            rule = rule_for(rules, Version.parse(release))
            assert rule.source and "\n" not in rule.source, name
        for rule in rules:  # each range's ends are releases
            for end in (rule.since, rule.until):
                assert end is None or Version.parse(end)


def test_releases_order_as_the_engines_tag_them():
    assert (
        Version.parse("0.5.8") < Version.parse("0.5.8.post1") < Version.parse("0.5.9") < Version.parse("0.15")
    )
    assert parse_engine("sglang==0.5.8") == (SGLANG, "0.5.8")
    assert parse_engine("vLLM") == (VLLM_ENGINE, None)


def test_the_plan_names_the_release_whose_rules_it_applied():
    args = ("--config", K25, "--text-only", "--gpus", "8xH200", "--kv-memory", "40GiB")
    newest = plan_json(*args)
    assert (newest["engine_release"], newest["engine_rules"]) == ("0.22.0", "vLLM 0.22.0")
    pinned = plan_json(*args, "--engine", "sglang==0.5.8")
    assert (pinned["engine"], pinned["engine_rules"]) == ("sglang", "SGLang 0.5.8")
    assert plan_json(*args, "--engine", "sglang", "--engine-version", "0.5.3")["engine_release"] == "0.5.3"
    assert "TP8 (SGLang 0.5.8):" in invoke("plan", *args, "--engine", "sglang==0.5.8").stdout


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--engine", "vllm==0.7.3"], ["vllm==0.7.3", "from 0.8.0 to 0.22.0", "V0 not modelled"]),
        (["--engine", "sglang==0.4.9"], ["sglang==0.4.9", "from 0.5.3 to 0.5.18"]),
        (["--engine", "sglang==latest"], ["'latest' is not a release number"]),
        (["--engine", "sglang=="], ["expected a release after =="]),
        (["--engine", "sglang==0.5.8", "--engine-version", "0.5.3"], ["disagree"]),
    ],
)
def test_a_release_kimicount_does_not_know_is_refused_in_one_line(args, needles):
    fails_cleanly(invoke("plan", "--gpus", "8xH200", *args), *needles)


def test_a_llama_cpp_release_is_its_build():
    assert str(LLAMA_CPP.release("b5331")) == "llama.cpp b5331"
    with pytest.raises(UsageError, match="build"):
        LLAMA_CPP.release("5.0.1")
