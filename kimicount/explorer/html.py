"""`kimicount explore`: the whole explorer as one self-contained HTML file.

The pages are the same data `show --json` prints (kimicount.explorer.pages), rendered by one jinja2
Environment with autoescape on over templates shipped in the package (pdoc's way): every string from a
config, a modeling file or a repo name is escaped; the only markup not escaped is the MathML that
kimicount.explorer.formula builds, itself from escaped text. No network: no CDN, no font, no image;
CSS and the search script are inline. Every page is a <section> shown by :target, so the tree and the
pages read without JavaScript; only the search box needs it.
"""

from __future__ import annotations

from pathlib import Path

from kimicount.explorer.formula import as_mathml
from kimicount.explorer.page_json import page_json
from kimicount.explorer.pages import Pages
from kimicount.render import flops_text, human_bytes

TEMPLATES = Path(__file__).parent / "templates"


def _number(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def render_html(pages: Pages) -> str:
    """The explorer of `pages` as one HTML document."""
    import jinja2  # only explore needs it
    from markupsafe import Markup

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["num"] = _number
    environment.filters["bytes"] = lambda n: "" if n is None else human_bytes(n)
    environment.filters["flops"] = lambda n: "" if n is None else flops_text(n)
    data = []
    for page in pages:
        item = page_json(page, pages)
        item["mathml"] = Markup(as_mathml(page.formula)) if page.formula else ""
        item["kind_key"] = page.kind
        data.append(item)
    index = [
        {
            "id": p.id,
            "name": p.name,
            "kind": p.kind_text,
            "aliases": sorted({*(a for a in p.aliases if a), *p.synonyms}),
        }
        for p in pages
    ]
    lists = [
        ("Activations", [pages[i] for i in pages.activations]),
        ("Operations", [pages[i] for i in pages.operations]),
        ("Checkpoint tensors", [pages[i] for i in pages.tensors]),
    ]
    return environment.get_template("explorer.html.jinja2").render(
        model=pages.model,
        model_type=pages.model_type,
        storage=pages.storage,
        evidence_source=pages.evidence_source,
        tree=pages.tree,
        lists=lists,
        pages=data,
        index=index,
        first=pages.tree[0].id if pages.tree else "",
    )
