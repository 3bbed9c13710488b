"""The one-way order of the package's imports (docs/architecture.md draws it), read from the source with
ast: every import a module makes when it runs, its function-level ones too (an `if TYPE_CHECKING:` block
is for the type checker only and is left out).

- Nothing outside kimicount/cli/ imports the CLI (kimicount/__main__.py, the entry point, starts it).
- Nothing below the views imports rich or a view: the views are the renderers (render.py, render_*.py,
  gguf/render.py, deploy/render_*.py), chart.py, the explorer's terminal and HTML pages, and the CLI.
- In the planner's house (kimicount/deploy/), the engines read no plan, the plan no answer, request or
  view, and only the request, the views and the CLI read the request.
- No engine's name is compared as a string outside kimicount/deploy/engines/: the planner asks the
  engine's object instead.
- The model (spec, families, cache groups, kv-cache's reports, flow, storage) and the readers import
  nothing of the planner's house: an engine's rule over a model's cache lives in deploy/engines/ and is
  attached from above (kv-cache's DeepSeek V4 pages: deploy/engines/deepseek_v4.py).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import ROOT

PACKAGE = ROOT / "kimicount"
ENGINE_NAMES = {"vllm", "sglang", "llama.cpp", "ik_llama.cpp"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, except what sits under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports(name: str) -> set[str]:
    """The modules `name` imports when it runs, as dotted names (`from a import b` counts a and a.b)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def is_view(name: str) -> bool:
    last = name.rpartition(".")[2]
    return (
        last.startswith("render")
        or name in ("kimicount.chart", "kimicount.explorer.terminal", "kimicount.explorer.html")
        or name == "kimicount.__main__"  # the entry point, above the CLI
        or name == "kimicount.cli"
        or name.startswith("kimicount.cli.")
    )


def test_the_import_reader_sees_the_imports_a_module_makes():
    # cli/plan.py imports the request inside its command and the model's spec only for the type checker
    plan_cli = imports("kimicount.cli.plan")
    assert "kimicount.deploy.request" in plan_cli and "kimicount.spec" not in plan_cli
    assert "kimicount.deploy.engines.base" in imports("kimicount.deploy.engines.vllm")


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if not n.startswith("kimicount.cli") and n != "kimicount.__main__")
)
def test_nothing_outside_the_cli_imports_the_cli(name):
    assert not {m for m in imports(name) if m == "kimicount.cli" or m.startswith("kimicount.cli.")}


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not is_view(n)))
def test_nothing_below_the_views_imports_rich_or_a_view(name):
    imported = imports(name)
    assert not {m for m in imported if m == "rich" or m.startswith("rich.")}
    assert not {m for m in imported if m in MODULES and is_view(m)}


#: The planner's house, layer by layer: a module imports none of the modules of the layers above it.
DEPLOY_LAYERS = [
    {
        "kimicount.deploy.hardware",
        "kimicount.deploy.placement",
        "kimicount.deploy.groups",
        "kimicount.deploy.options",
    },
    {m for m in MODULES if m.startswith("kimicount.deploy.engines")},
    {"kimicount.deploy.plan", "kimicount.deploy.serve_command"},
    {"kimicount.deploy.answer", "kimicount.deploy.speed"},
    {"kimicount.deploy.request", "kimicount.deploy.local.request"},
    {"kimicount.deploy.reports", *(m for m in MODULES if m.startswith("kimicount.deploy.render_"))},
]


@pytest.mark.parametrize("layer", range(len(DEPLOY_LAYERS)))
def test_the_planner_imports_one_way(layer):
    above = set().union(*DEPLOY_LAYERS[layer + 1 :])
    for name in DEPLOY_LAYERS[layer]:
        assert not imports(name) & above, name


def _compared_strings(node: ast.Compare) -> Iterator[str]:
    for part in (node.left, *node.comparators):
        elements = part.elts if isinstance(part, (ast.Tuple, ast.List, ast.Set)) else [part]
        for element in elements:
            if isinstance(element, ast.Constant) and isinstance(element.value, str):
                yield element.value


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not n.startswith("kimicount.deploy.engines")))
def test_no_engine_name_is_compared_as_a_string_outside_the_engines(name):
    tree = ast.parse(MODULES[name].read_text())
    compared = {
        text.lower()
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for text in _compared_strings(node)
    }
    assert not compared & ENGINE_NAMES


#: Above the model: the planner itself, the CLI, the views, the JSON, the old paths' shim, and compare
#: (models side by side with their weights on one GPU, placed by the planner's rule).
ABOVE_THE_MODEL = (
    "kimicount.deploy",
    "kimicount.cli",
    "kimicount.reports",
    "kimicount._moved",
    "kimicount.compare",
)


@pytest.mark.parametrize(
    "name",
    sorted(n for n in MODULES if not is_view(n) and not n.startswith(ABOVE_THE_MODEL) and n != "kimicount"),
)
def test_the_model_imports_no_planner(name):
    assert not {m for m in imports(name) if m == "kimicount.deploy" or m.startswith("kimicount.deploy.")}, (
        name
    )
