"""Code evidence without the modeling file: the lines each page cites in a bundled model's modeling file
at the revision kimicount pins for it, shipped as data (kimicount/data/evidence-index.json).

The index holds facts only: for each model, the file, its revision, and for each page the line ranges
and roles that kimicount's own locator (kimicount.explorer.evidence, Python's `ast`) finds in that file;
no line of the file itself. It is made from the real file by `benchmarks/evidence_index.py`, which runs
the explorer on it (`page_lines`), and a test runs the same on a file written with the real one's
structure and compares. Without the file a page cites these lines, with a link to them at that revision;
with the file the lines are read from it, and its git blob hash says which revision it is, when it is
one kimicount has indexed (`known_file`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kimicount.explorer.evidence import Evidence

INDEX = Path(__file__).resolve().parent.parent / "data" / "evidence-index.json"


def git_blob(data: bytes) -> str:
    """The git blob hash of a file's bytes, as `git hash-object` and the Hub's tree listing give it.

    >>> git_blob(b"")
    'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391'
    """
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class IndexedFile:
    """A modeling file kimicount has indexed: its name, git blob hash and what it is."""

    file: str
    blob: str
    description: str  # "DeepSeek-R1's modeling_deepseek.py as first released"


@dataclass(frozen=True)
class PinnedModel:
    """A bundled model's modeling file at its pinned revision, and each page's lines in it."""

    repo: str
    file: str
    revision: str | None  # None: the file's lines are known, its commit on the Hub is not
    blob: str  # the file the lines were found in
    source: str  # where that file was read, and why its lines stand for this revision
    pages: dict[str, tuple[tuple[int, int, str], ...]]

    def link(self, start: int, end: int) -> str | None:
        """The lines at the pinned revision on the Hub (None without a revision)."""
        if self.revision is None:
            return None
        lines = f"L{start}" if start == end else f"L{start}-L{end}"
        return f"https://huggingface.co/{self.repo}/blob/{self.revision}/{self.file}#{lines}"

    def evidence(self, page_id: str) -> list[Evidence]:
        """The page's lines as evidence, without excerpts (the file is not here), each with its link."""
        return [
            Evidence(self.file, self.revision, start, end, role, "", self.link(start, end))
            for start, end, role in self.pages.get(page_id, ())
        ]


@lru_cache(maxsize=1)
def _index() -> dict[str, Any]:
    return json.loads(INDEX.read_text(encoding="utf-8"))


def pinned_model(repo: str | None) -> PinnedModel | None:
    """The index of a bundled model's modeling file, or None where kimicount has none."""
    entry = _index()["models"].get(repo or "")
    if entry is None:
        return None
    pages = {page: tuple((s, e, r) for s, e, r in spans) for page, spans in entry["pages"].items()}
    return PinnedModel(repo or "", entry["file"], entry["revision"], entry["blob"], entry["source"], pages)


def known_file(data: bytes, index: dict[str, Any] | None = None) -> IndexedFile | None:
    """The indexed file these bytes are (by git blob hash), or None: a revision kimicount does not know.
    `index`: the index to look in (default: the shipped one)."""
    blob = git_blob(data)
    entry = (_index() if index is None else index)["files"].get(blob)
    return None if entry is None else IndexedFile(entry["file"], blob, entry["description"])


def page_lines(pages: Any) -> dict[str, list[list[Any]]]:
    """Each page's modeling-file lines as the index stores them ([start, end, role], in page order):
    what the explorer found in the file it was given (kimicount.explorer.build.explorer_pages)."""
    found: dict[str, list[list[Any]]] = {}
    for page in pages:
        spans = [[e.start, e.end, e.role] for e in page.evidence if e.role != "config"]
        if spans:
            found[page.id] = spans
    return found
