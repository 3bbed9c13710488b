"""The planner's old import paths, kept for one release (until 0.2): `kimicount.plan`,
`kimicount.hardware`, `kimicount.local.builds`, … moved into kimicount.deploy (issue 28).

Importing an old path gives the module at its new one, the same module object, with a
DeprecationWarning that names the new path. The files moved whole (git mv) and no file is left at an
old path, so git follows their history and a branch that changed a file at its old path merges into
the moved file.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # its type for the checker; at run time the protocol is enough (below)
    from importlib.abc import Loader as _Loader
else:
    _Loader = object

#: Old module -> its new place; a package's submodules follow it (kimicount.local.builds).
MOVED = {
    "kimicount.hardware": "kimicount.deploy.hardware",
    "kimicount.placement": "kimicount.deploy.placement",
    "kimicount.plan": "kimicount.deploy.plan",
    "kimicount.plan_answer": "kimicount.deploy.answer",
    "kimicount.speed": "kimicount.deploy.speed",
    "kimicount.serve_command": "kimicount.deploy.serve_command",
    "kimicount.reports_plan": "kimicount.deploy.reports",
    "kimicount.render_plan": "kimicount.deploy.render_plan",
    "kimicount.render_plan_answer": "kimicount.deploy.render_answer",
    "kimicount.render_local": "kimicount.deploy.render_local",
    "kimicount.engines": "kimicount.deploy.engines",
    "kimicount.local": "kimicount.deploy.local",
}


def new_name(name: str) -> str | None:
    """Where an old module name lives now, or None for a name that did not move.

    >>> new_name("kimicount.plan"), new_name("kimicount.local.builds"), new_name("kimicount.planner")
    ('kimicount.deploy.plan', 'kimicount.deploy.local.builds', None)
    """
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


class _MovedFinder(_Loader):
    """Finds an old name first (ahead of the path finder, which would load the file a second time under
    it) and loads it as the module at its new name. A meta path finder and loader by their protocols
    (find_spec; create_module, exec_module), without importlib.abc's base classes: importing those
    costs every command ~20 ms at start-up (importlib.resources and what it brings)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        return None if new_name(fullname) is None else importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_name(spec.name)
        assert new is not None  # find_spec answered only for moved names
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes in 0.2", DeprecationWarning, stacklevel=2
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at its new name ran already."""


if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedFinder())
