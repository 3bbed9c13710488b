"""The command line: parse options, call the library, render with rich or print --json. Nothing else.

One module per command (params, verify, kv_cache, measure, flops, plan, gguf, models, show, explore,
compare), each the same
shape, so that a new one slots in the same way:
- its options are the shared annotated types of `common`: the model (a positional ORG/NAME, --repo,
  --config, --revision), and counts, sizes and dtypes as text that kimicount.options reads the same
  everywhere;
- its body calls the library, then prints --json or hands the result to its view (render*.py);
- an option the chosen view does not use is named on stderr (`common.ignored`), never silently dropped.
Library modules are imported inside the commands, so that --help, --version and errors import neither
rich nor the anatomy (a test checks this with -X importtime). How a run ends (exit codes, one-line
errors, output in any encoding) is `exits`; the typer app and its root options are `root`.

A run registers only the command it names (`load`): typer reads every registered command's signature
at start-up, and the other five cost a tenth of a `params` run. `from kimicount.cli import app` gives
the app with every command.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

#: Each command's name and the module that registers it, in the order `kimicount --help` lists them.
COMMANDS = {
    "compare": "compare",
    "diff": "compare",
    "explore": "explore",
    "flops": "flops",
    "gguf": "gguf",
    "kv-cache": "kv_cache",
    "measure": "measure",
    "models": "models",
    "params": "params",
    "plan": "plan",
    "show": "show",
    "verify": "verify",
}


def load(args: Sequence[str] = ()) -> typer.Typer:
    """The app with the command that `args` (the command line after the program) begins with registered;
    none for --version (it prints before any command is looked at); every command otherwise (`--help`,
    `-h params`, a misspelt name: the root help lists them all, click suggests one)."""
    first = args[0] if args else None
    if first in COMMANDS:
        modules = [COMMANDS[first]]
    else:
        modules = [] if first == "--version" else list(COMMANDS.values())
    for module in modules:
        # __import__, not importlib.import_module: only the former shows in `python -X importtime`,
        # by which a test checks what a run imports.
        __import__(f"kimicount.cli.{module}")
    from kimicount.cli.root import app

    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # every command, as a test or a program that embeds the CLI expects
        return load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
