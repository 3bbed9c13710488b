"""compressed-tensors' `targets` and `ignore`, as kimicount.matching matches them: names exactly, `re:`
expressions from the start of the module name; tried as one alternation only where that means what
trying each on its own means (the expected answers are written out by hand)."""

from __future__ import annotations

import pytest

from kimicount.matching import Patterns, packed

K25_IGNORE = [
    "lm_head",
    "re:.*self_attn.*",
    "re:.*shared_experts.*",
    r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
]


def test_kimi_k25_ignore_list():
    # K2.5 packs the routed experts only: attention, shared experts, dense MLPs and lm_head stay BF16.
    modules = [
        "model.layers.1.mlp.experts.0.up_proj",  # routed expert: packed
        "model.layers.60.mlp.experts.383.down_proj",  # routed expert: packed
        "model.layers.1.self_attn.kv_b_proj",
        "model.layers.1.mlp.shared_experts.gate_proj",
        "model.layers.0.mlp.gate_proj",  # the dense first layer
        "lm_head",
        "model.lm_head",  # a name, not an expression: only "lm_head" itself
    ]
    ignore = Patterns.of(K25_IGNORE)
    assert ignore.one is not None  # one expression with groups, first: joined
    assert packed(ignore, Patterns.of([]), True, modules, "config") == [
        True,
        True,
        False,
        False,
        False,
        False,
        True,
    ]


@pytest.mark.parametrize(
    "expressions, joined, answers",
    [
        # a global flag applies to its own expression only: "X.MLP.y" is not ".*mlp.*"
        (
            ["re:(?i).*SELF_ATTN.*", "re:.*mlp.*"],
            False,
            {"a.self_attn.b": True, "X.MLP.y": False, "a.mlp": True},
        ),
        # backreferences count groups from the start of their own expression
        ([r"re:(a)\1.*", r"re:(b)\1.*"], False, {"aa.x": True, "bb.x": True, "ab.x": False}),
        # one expression with groups, written last: it goes first, and its \1 is still its own
        (["re:.*foo.*", r"re:(x)\1.*"], True, {"xx.y": True, "a.foo": True, "xy.z": False}),
        # two groups of one name cannot be one pattern
        (["re:(?P<n>a).*", "re:(?P<n>b).*"], False, {"a.x": True, "b.x": True, "c.x": False}),
        # from the start of the name, as re.match: "x.lm_head" is not "lm_head.*"
        (
            ["re:lm_head.*", "re:.*experts.*"],
            True,
            {"lm_head": True, "x.lm_head": False, "m.experts.1": True},
        ),
    ],
)
def test_expressions_mean_the_same_joined_or_not(expressions, joined, answers):
    patterns = Patterns.of(expressions)
    assert (patterns.one is not None) == joined
    assert {name: patterns.matches(name) for name in answers} == answers
    assert patterns.each(list(answers)) == list(answers.values())


def test_targets_by_name_and_expression():
    # Without "Linear" in targets, only what the targets name is packed, and ignore still wins.
    targets = Patterns.of(["model.layers.1.mlp.experts.0.up_proj", r"re:.*experts\.1\..*"])
    ignore = Patterns.of([r"re:.*down_proj"])
    modules = [
        "model.layers.1.mlp.experts.0.up_proj",
        "model.layers.1.mlp.experts.1.gate_proj",
        "model.layers.1.mlp.experts.1.down_proj",
        "model.layers.1.mlp.experts.2.up_proj",
    ]
    assert packed(ignore, targets, False, modules, "config") == [True, True, False, False]
