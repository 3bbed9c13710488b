"""Shared test helpers. Nothing here reuses kimicount's own counting code: expected figures come from
DESIGN.md, the real checkpoint listing in fixtures/, or hand computation in the tests."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kimicount.cli import app

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
KIMI_K2 = FIXTURES / "kimi-k2-instruct"


def invoke(*args: str, env: dict[str, str] | None = None):
    """Run the CLI in-process, the way typer's tutorials test apps."""
    return CliRunner().invoke(app, list(args), env=env)


def run_kimicount(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run `python -m kimicount` in a fresh interpreter (for env vars read at import, and import checks)."""
    inherited = {k: v for k, v in os.environ.items() if k != "KIMICOUNT_DEBUG"}
    full_env = {**inherited, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "kimicount", *args],
        check=False,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


def fails_cleanly(result, *needles: str) -> str:
    """A run that failed as bad input must: exit 2, nothing on stdout, one line on stderr starting
    "kimicount: error: " that holds every needle and no traceback; returns that line."""
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kimicount: error: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


def imported_modules(stderr: str) -> set[str]:
    """The modules a run imported, from what PYTHONPROFILEIMPORTTIME=1 (-X importtime) wrote on its
    stderr: the last column of each `import time: … | … | module` line."""
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if "|" in line}


#: What a light module must not pull in: the table library, torch, the Hub client and the CLI framework.
HEAVY = ("rich", "torch", "huggingface_hub", "typer")


def heavy_imports(*modules: str) -> list[str]:
    """The HEAVY packages a fresh interpreter holds after importing `modules`, sorted (none: [])."""
    code = (
        f"import json, sys, {', '.join(modules)}; "
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def expand_listing_name(pattern: str) -> list[str]:
    """Expand the listing's `{a..b}` notation: model.layers.{0..1}.x -> model.layers.0.x, model.layers.1.x."""
    match = _RANGE.search(pattern)
    if not match:
        return [pattern]
    first, last = int(match.group(1)), int(match.group(2))
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [name for i in range(first, last + 1) for name in expand_listing_name(f"{head}{i}{tail}")]


def real_kimi_k2_tensors() -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor of the real Kimi-K2-Instruct checkpoint: name -> (shape, dtype)."""
    listing = json.loads((KIMI_K2 / "tensors.json").read_text())
    tensors = {}
    for entry in listing["tensors"]:
        names = expand_listing_name(entry["name"])
        assert len(names) == entry["count"], entry["name"]
        for name in names:
            tensors[name] = (tuple(entry["shape"]), entry["dtype"])
    return tensors


def elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
