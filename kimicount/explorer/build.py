"""The explorer's pages for a spec, with the code evidence when a modeling file can be found."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kimicount.anatomy import build_anatomy
from kimicount.explorer.pages import Pages, build_pages
from kimicount.spec import ModelSpec

#: What a page says when no modeling file was found.
NO_MODELING = (
    "No code evidence: it needs the model's modeling_deepseek.py. Give --modeling FILE, or --config a "
    "folder that holds it beside config.json (`hf download REPO config.json modeling_deepseek.py "
    "--local-dir DIR`), or --repo to read it from the Hub."
)


def explorer_pages(
    spec: ModelSpec,
    *,
    config: Path | None = None,
    repo: str | None = None,
    revision: str | None = None,
    modeling: Path | None = None,
    token: str | None = None,
) -> Pages:
    """Every page of the model, each with its evidence (or the note saying how to get it)."""
    pages = build_pages(build_anatomy(spec))
    return replace(pages, pages={k: replace(p, evidence_note=NO_MODELING) for k, p in pages.pages.items()})
