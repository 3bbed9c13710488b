"""README.md and docs/ stay true: every `$ kimicount …` example prints what the page shows, and `.ci/run`
runs exactly README's test command."""

from __future__ import annotations

import os
import re
import shlex

import pytest

from .checkpoints import kimi_k2_layout
from .helpers import KIMI_K2, ROOT, invoke

README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# `$ kimicount …`, or `$ COLUMNS=80 kimicount …` for what a terminal of that width shows
EXAMPLE = re.compile(r"```console\n\$ ((?:COLUMNS=\d+ )?kimicount .*?)\n(.*?)```", re.DOTALL)
EXAMPLES = [
    (page.relative_to(ROOT).as_posix(), command, shown)
    for page in PAGES
    for command, shown in EXAMPLE.findall(page.read_text())
]


def test_readme_has_examples():
    assert sum(page == "README.md" for page, _, _ in EXAMPLES) >= 2


#: Where README's verify example finds the header-only Kimi K2 checkpoint that
#: benchmarks/make_kimi_k2_headers.py writes; the test writes it under tmp_path and reads it there.
KIMI_K2_HEADERS = "/tmp/kimi-k2-headers"


@pytest.mark.parametrize("page, command, shown", EXAMPLES, ids=[f"{p}: {c}" for p, c, _ in EXAMPLES])
def test_readme_example_prints_what_it_shows(page, command, shown, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)  # examples use paths relative to the repository
    if KIMI_K2_HEADERS in command:
        folder = kimi_k2_layout(tmp_path / "kimi-k2-headers", config=KIMI_K2 / "config.json")
        command = command.replace(KIMI_K2_HEADERS, str(folder))
        shown = shown.replace(KIMI_K2_HEADERS, str(folder))
    # README examples are rendered off a terminal, as a pipe would be (no COLUMNS, unless they set it)
    width, _, command = command.rpartition("kimicount ")
    columns = width.strip().removeprefix("COLUMNS=") or None
    result = invoke(*shlex.split(command), env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    assert result.stdout == shown


def test_ci_runs_exactly_the_readme_test_command():
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.DOTALL)
    test_command = next(c for c in commands if "pytest" in c)
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_opens_with_a_quick_start_and_its_contents_links_resolve():
    headings = re.findall(r"^#{2,3} (.+)$", README, re.MULTILINE)
    assert headings[:2] == ["Quick start", "Contents"]
    anchors = {_slug(h) for h in headings}
    links = re.findall(r"\]\(#([^)]+)\)", README)
    assert links and set(links) <= anchors
