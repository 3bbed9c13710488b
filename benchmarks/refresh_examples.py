"""Rewrite the output of `$ kimicount …` console examples in Markdown pages with what kimicount prints now.

For the integrator, after a change that moves printed figures on purpose (e.g. a new estimate):

    python benchmarks/refresh_examples.py README.md docs/*.md --only "kimicount plan"

Each ```console block whose command contains the --only text is run exactly as tests/test_readme.py runs
it (in-process, off a terminal, COLUMNS as the command says) and its shown output replaced. Examples
that fail are left alone and named on stderr. Read the diff before committing: this makes the pages
agree with the code, it does not make the code right.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import invoke  # the test harness's in-process runner, after sys.path

EXAMPLE = re.compile(r"```console\n\$ ((?:COLUMNS=\d+ )?kimicount .*?)\n(.*?)```", re.DOTALL)


def refresh(text: str, only: str) -> tuple[str, int]:
    """`text` with the matching examples' output replaced, and how many changed."""
    changed = 0

    def run(match: re.Match[str]) -> str:
        nonlocal changed
        command, shown = match.group(1), match.group(2)
        if only not in command or "/tmp/" in command:
            return match.group(0)
        width, _, args = command.rpartition("kimicount ")
        columns = width.strip().removeprefix("COLUMNS=") or None
        result = invoke(*shlex.split(args), env={"COLUMNS": columns})
        if result.exit_code != 0:
            print(f"refresh_examples: left alone, exit {result.exit_code}: {command}", file=sys.stderr)
            return match.group(0)
        changed += result.stdout != shown
        return f"```console\n$ {command}\n{result.stdout}```"

    return EXAMPLE.sub(run, text), changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--only", default="kimicount ", help="refresh only commands containing this text")
    options = parser.parse_args()
    os.chdir(ROOT)  # examples use paths relative to the repository
    for page in options.pages:
        text, changed = refresh(page.read_text(), options.only)
        page.write_text(text)
        print(f"{page}: {changed} example(s) refreshed")


if __name__ == "__main__":
    main()
