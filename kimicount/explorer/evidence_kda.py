"""Code evidence for the Kimi Linear family: what its modeling file leaves to the configuration class,
and which file holds the language model's code.

modeling_kimi_linear.py chooses each layer's attention by asking its configuration
(`if config.is_kda_layer(layer_idx): self.self_attn = KimiDeltaAttention(…)` `elif config.is_mla:
… KimiMLAAttention(…)`, KimiDecoderLayer.__init__), which config.json answers only through
configuration_kimi.py's KimiLinearConfig (as public copies keep it):

- `is_kda_layer(layer_idx)`: `linear_attn_config is not None and (layer_idx + 1) in
  linear_attn_config["kda_layers"]`, the list counting from 1;
- `is_mla`: any of q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim set, or
  mla_use_nope true;
- `is_moe`: num_experts set.

kimicount.explorer.evidence's evaluator asks `config_call` and `config_property` for these, and
`chosen_assignment` decides which of an if/elif chain's assignments a layer's constructor runs, so that
its `self_attn` resolves to the one class it holds (both classes have a q_proj and an o_proj).

Kimi K3's config names its multimodal wrapper's code (modeling_kimi_k3.py) at the top and its language
model's (modeling_kimi_linear.py, KimiLinearForCausalLM) under text_config; the tree's tensors are the
language model's (without the checkpoint's `language_model.` prefix), so `language_config` gives the
evidence text_config's auto_map and values.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def config_call(config: Mapping[str, Any], method: str, args: Sequence[Any]) -> tuple[bool, Any]:
    """(known, value) of `config.<method>(*args)` as KimiLinearConfig computes it from config.json, and
    of `config.<key>.get(name, default)` on a nested object.

    >>> layers = {"linear_attn_config": {"kda_layers": [1, 2, 3, 5]}}  # 1-based: layer 3 is the fourth
    >>> config_call(layers, "is_kda_layer", [3]), config_call(layers, "is_kda_layer", [4])
    ((True, False), (True, True))
    """
    key, _, call = method.rpartition(".")
    nested = config.get(key) if key else None
    if call == "get" and isinstance(nested, Mapping) and args and type(args[0]) is str:
        # config.linear_attn_config.get("use_full_rank_gate", False): a nested value, or its default
        return True, nested.get(args[0], args[1] if len(args) > 1 else None)
    if method == "is_kda_layer" and len(args) == 1 and type(args[0]) is int:
        linear = config.get("linear_attn_config")
        if linear is None:
            return True, False
        layers = linear.get("kda_layers") if isinstance(linear, Mapping) else None
        if isinstance(layers, list):
            return True, (args[0] + 1) in layers
    return False, None


def config_property(config: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """(known, value) of the property `config.<name>` KimiLinearConfig derives from config.json.

    >>> config_property({"kv_lora_rank": 512}, "is_mla"), config_property({}, "is_moe")
    ((True, True), (True, False))
    """
    if name == "is_mla":
        return True, any(config.get(key) is not None for key in _MLA_KEYS) or config.get(
            "mla_use_nope"
        ) is True
    if name == "is_moe":
        return True, config.get("num_experts") is not None
    return False, None


def has_deepseek_passages(spec: Any) -> bool:
    """Whether the pages cite modeling_deepseek.py's attention passages (ModelingIndex.
    attention_passages: its q_pe, cos/sin and attn_output statements): not in this family's file, whose
    layer 0 runs KDA and whose MLA forward names its tensors otherwise (q_pass, k_rot)."""
    return getattr(spec, "FAMILY", "") != "kimi_linear"


def language_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The config whose auto_map and values the evidence reads: Kimi K3's text_config (model_type
    kimi_k3, which names its language model's own code), else the config itself.

    >>> language_config({"model_type": "kimi_k3", "text_config": {"auto_map": {}}})
    {'auto_map': {}}
    """
    text = config.get("text_config")
    if (
        config.get("model_type") == "kimi_k3"
        and isinstance(text, Mapping)
        and isinstance(text.get("auto_map"), dict)
    ):
        return text
    return config


def chosen_assignment(
    functions: Sequence[ast.FunctionDef | ast.AsyncFunctionDef],
    statements: Sequence[ast.stmt],
    decide: Callable[[ast.expr], bool | None],
) -> ast.stmt:
    """Of the statements of `functions` (a class's __init__) that assign one attribute, the one the
    config chooses: KimiDecoderLayer sets `self.self_attn` in an if/elif chain, on
    `config.is_kda_layer(layer_idx)` then `config.is_mla`. A statement is out when a condition on the
    way to it is decided against it (`decide`: True, False, or None when the config does not say);
    of those left, the last (as for an attribute assigned twice in a row); the last of all when none
    is left."""
    conditions: dict[int, tuple[tuple[ast.expr, bool], ...]] = {}
    for function in functions:
        _collect(function.body, (), conditions)

    def possible(statement: ast.stmt) -> bool:
        for test, wanted in conditions.get(id(statement), ()):
            decided = decide(test)
            if decided is not None and decided != wanted:
                return False
        return True

    left = [s for s in statements if possible(s)]
    return (left or list(statements))[-1]


def _collect(
    body: Sequence[ast.stmt], path: tuple[tuple[ast.expr, bool], ...], into: dict[int, tuple]
) -> None:
    """Each statement's conditions on the way to it: (test, whether it must hold)."""
    for statement in body:
        into[id(statement)] = path
        if isinstance(statement, ast.If):
            _collect(statement.body, (*path, (statement.test, True)), into)
            _collect(statement.orelse, (*path, (statement.test, False)), into)
        elif isinstance(statement, ast.For | ast.While | ast.With | ast.Try):
            for block in ("body", "orelse", "finalbody"):
                _collect(getattr(statement, block, ()), path, into)


def state_writes(index: Any, cls_name: str, variable: str) -> list[Any]:
    """The statements of the class's forward pass that store `variable` into a cache object it was
    given (`cache_params.recurrent_states[self.layer_idx] = recurrent_state`): where a KDA layer keeps
    its state for the next step, each a use."""
    node = index.classes.get(cls_name)
    forward = next(
        (f for f in getattr(node, "body", ()) if isinstance(f, ast.FunctionDef) and f.name == "forward"), None
    )
    if forward is None:
        return []
    found = []
    for statement in ast.walk(forward):
        if not isinstance(statement, ast.Assign):
            continue
        into_cache = any(
            isinstance(t, ast.Subscript)
            and isinstance(t.value, ast.Attribute)
            and isinstance(t.value.value, ast.Name)
            and t.value.value.id != "self"
            for t in statement.targets
        )
        reads = any(isinstance(n, ast.Name) and n.id == variable for n in ast.walk(statement.value))
        if into_cache and reads:
            found.append(index.lines(statement.lineno, statement.end_lineno or statement.lineno, "use"))
    return found
