"""Stable component ids: one name per node of the component tree that is the same in every model that
has the part, so that two models' reports join on it (`kimicount compare`, `params --json`).

An id is the path of keys from the root, joined by "/": a block group's key is its `kind` ("moe",
"dense", or a family's "kda-moe"), never its counted name ("60 MoE blocks (layers 1–60)" and "58 MoE
blocks (layers 3–60)" are both "moe"); any other node's key is its name without a leading count or a
trailing span, as a slug ("61 transformer blocks" is "transformer-blocks"). The root of the main model
is "model" and its parts have no prefix; the other roots (the MTP module, the vision side) prefix their
parts with their own key. Pure functions of the tree's public attributes (Node.name, kind, layers,
children): nothing is looked up by model.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kimicount.anatomy import Node

#: The main model's root, whatever its name.
MODEL = "model"

_SPAN = re.compile(r"\s*\([^()]*\)$")
_COUNT = re.compile(r"^\d[\d,]*\s+")

#: Keys of one role that the tree names by its count: one shared expert, or several (DeepSeek-V2's 2).
_SAME_ROLE = {"shared-experts": "shared-expert"}


def node_key(node: Node) -> str:
    """The key of one node among its siblings.

    >>> from kimicount.anatomy import Node
    >>> node_key(Node("58 MoE blocks (layers 3–60)", 1, 58, 1, "", layers=(3,), kind="moe"))
    'moe'
    >>> node_key(Node("61 transformer blocks", 1, 1, 1, "")), node_key(Node("Key–value compression", 1, 1, 1, ""))
    ('transformer-blocks', 'key-value-compression')
    """
    if node.layers and node.kind:
        return node.kind
    key = re.sub(r"[^a-z0-9]+", "-", role_name(node).lower()).strip("-") or "part"
    return _SAME_ROLE.get(key, key)


def role_name(node: Node) -> str:
    """A node's name without a leading count or a trailing span, as every model's node of that role
    reads: "60 MoE blocks (layers 1–60)" is "MoE blocks".

    >>> from kimicount.anatomy import Node
    >>> role_name(Node("60 MoE blocks (layers 1–60)", 1, 60, 1, ""))
    'MoE blocks'
    """
    return _COUNT.sub("", _SPAN.sub("", node.name))


def walk_ids(root: Node, root_id: str = MODEL) -> Iterator[tuple[Node, str]]:
    """Every node of a tree with its id, root first, in the tree's order. Siblings whose keys agree get
    -2, -3, … in order (no bundled model has two)."""
    yield root, root_id
    prefix = "" if root_id == MODEL else f"{root_id}/"
    yield from _children(root, prefix)


def _children(node: Node, prefix: str) -> Iterator[tuple[Node, str]]:
    seen: dict[str, int] = {}
    for child in node.children:
        key = node_key(child)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key = f"{key}-{seen[key]}"
        child_id = prefix + key
        yield child, child_id
        yield from _children(child, child_id + "/")


def root_id(root: Node, main: bool) -> str:
    """The id of a tree's root: "model" for the language model, its name's key for the others
    ("multi-token-prediction", "vision")."""
    return MODEL if main else node_key(root)


def tree_ids(*roots: Node | None) -> dict[int, str]:
    """id(node) -> its component id, for the trees of one model (the first is the language model)."""
    ids: dict[int, str] = {}
    for i, root in enumerate(roots):
        if root is not None:
            ids.update((id(node), cid) for node, cid in walk_ids(root, root_id(root, i == 0)))
    return ids
