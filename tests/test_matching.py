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


K3_IGNORE = [  # fixtures/kimi-k3/config.json, text_config.quantization_config.ignore
    "re:.*self_attn.*",
    "re:.*shared_experts.*",
    r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
    "re:.*lm_head.*",
    "re:.*vision_tower.*",
    "re:.*mm_projector.*",
]


def test_kimi_k3_ignore_list_is_decided_by_substrings():
    # Each of K3's expressions is `.*`, literals, `.*`: a name matches exactly when it contains one.
    ignore = Patterns.of(K3_IGNORE)
    assert ignore.substrings == {
        "self_attn",
        "shared_experts",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.gate_up_proj",
        "mlp.down_proj",
        "lm_head",
        "vision_tower",
        "mm_projector",
    }
    experts = [
        f"model.layers.{layer}.mlp.experts.{e}.{w}_proj" for layer in (1, 92) for e in (0, 895) for w in "gud"
    ]
    assert ignore.none_of(experts)
    assert packed(ignore, Patterns.of([]), True, experts, "config") == [True] * 12
    # one ignored name among them: `re` decides, name by name
    names = [*experts, "model.layers.3.mlp.shared_experts.down_proj"]
    assert not ignore.none_of(names)
    assert packed(ignore, Patterns.of([]), True, names, "config") == [True] * 12 + [False]


# Expressions where taking literals would go wrong if done carelessly, with the literals (written out)
# that decide them, or None where `re` must; `re.match` itself, not kimicount, gives each answer.
TRICKY = [
    (".*a|b.*", None),  # `|` outside a group: `.*a` or `b.*` (starts with b), not "contains a or b"
    (".*(a|b)*", None),  # a repeated group matches the empty string: every name
    (r".*x\.*", None),  # an escaped dot, repeated: contains x
    (r".*x\\.*", {"x\\"}),  # an escaped backslash, then `.*`: contains x\
    (".*(?:ab|c)d.*", {"abd", "cd"}),
    (".*ab?c.*", None),
    (".*[ab]c.*", None),
    (".*(?P<n>a)", None),
    (r".*a\b", None),  # a word boundary, not a letter
    (".*", {""}),  # every name
    (r".*e\.1.*", {"e.1"}),
]
NAMES = ["a", "b", "ba", "xb", "x", "x\\y", "abd", "cd", "ac", "abc", "e.1", "e11", "", "zz"]


@pytest.mark.parametrize("expression, literals", TRICKY)
def test_substrings_agree_with_re(expression, literals):
    import re

    compiled = re.compile(expression)
    patterns = Patterns.of([f"re:{expression}"])
    assert patterns.substrings == literals
    for name in NAMES:
        expected = compiled.match(name) is not None
        assert patterns.each([name]) == [expected], name
        if literals is not None:
            assert patterns.none_of([name]) == (not expected), name
        else:
            assert not patterns.none_of([name])  # undecided: `each` decides
    # a name with a newline: `.` stops there, so literals cannot decide
    assert not Patterns.of(["re:.*zz.*"]).none_of(["a\nzz"])
    assert Patterns.of(["re:.*zz.*"]).each(["a\nzz"]) == [False]
