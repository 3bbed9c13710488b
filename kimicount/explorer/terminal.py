"""`kimicount show` for people: one page in the terminal, readable at 80 columns. Reads a Page;
computes nothing. Text that comes from a config or a modeling file is printed as text, never as rich
markup."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kimicount.explorer.formula import as_text
from kimicount.explorer.pages import Page, Pages
from kimicount.render import Column, fitted, flops_text, human_bytes, show, show_fitted

_LABEL = 10  # width of the label column of a page's fields


def _grid() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(width=_LABEL, no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    return grid


def _heading(console: Console, text: str) -> None:
    show(console, Text(""))
    show(console, Text(text, style="bold underline"))


def _link(pages: Pages, page_id: str) -> str:
    return f"{pages[page_id].name} ({page_id})" if page_id in pages.pages else page_id


def render_page(console: Console, page: Page, pages: Pages) -> None:
    show(console, Text(page.name, style="bold"))
    if page.path != (page.name,):  # a tensor's page is its own path: its name once
        show(console, Text(" › ".join(page.path)))
    kind = page.kind_text + (f"; also in {', '.join(page.also_in)}" if page.also_in else "")
    show(console, Text(kind + f" · {pages.model}", style="dim"))

    fields = _grid()
    if page.layer_note:
        fields.add_row("Layer", Text(page.layer_note))
    if page.role:
        fields.add_row("Role", Text(page.role))
    if page.formula:
        fields.add_row("Formula", Text(as_text(page.formula)))
    if page.code:
        where = f"  ({page.cls})" if page.cls else ""
        fields.add_row("Code", Text(page.code + where))
    for label, shapes in (("In", page.inputs), ("Through", page.middle), ("Out", page.outputs)):
        for i, shape in enumerate(shapes):
            fields.add_row(label if i == 0 else "", Text(shape.text))
    for i, shape in enumerate(page.cache_reads):
        fields.add_row("Cache" if i == 0 else "", Text(f"reads {shape.text}"))
    if page.explanation:
        fields.add_row("Note", Text(page.explanation))
    show(console, Text(""))
    show(console, fields)

    if page.modes:
        _heading(console, "KV cache, per mode")
        modes = _grid()
        for mode in page.modes:
            modes.add_row(mode.mode.capitalize(), Text(f"{mode.state}: {mode.cache}"))
        show(console, modes)

    if page.parameters is not None:
        _parameters(console, page, pages)
    if page.parts:
        _heading(console, "Parts (one instance)")
        columns = (
            Column("Part", wraps=True),
            Column("Count", number=True),
            Column("Parameters", number=True),
        )
        rows = [(p.name, f"{p.count:,}", f"{p.params:,}") for p in page.parts]
        show_fitted(console, *fitted(console, columns, rows))
    if page.kv:
        _kv(console, page)
    elif page.kv_note:  # a hybrid model's state layers: a state per sequence, no cache per token
        _heading(console, "State per sequence")
        show(console, Text(page.kv_note))
    _links(console, page, pages)
    _evidence(console, page, pages)


def _parameters(console: Console, page: Page, pages: Pages) -> None:
    p = page.parameters
    assert p is not None
    _heading(console, "Parameters" if page.kind != "tensor" else "Elements")
    per = _grid()
    per.add_row("Per inst.", Text(f"{p.per_instance:,} = {p.calculation}"))
    if p.formula:
        per.add_row("Formula", Text(p.formula))
    show(console, per)
    for row in p.rows:
        show(console, Text(""))
        table = _grid()
        table.add_row("Tensor", Text(row.name))
        if row.owner:
            table.add_row("Owner", Text(_link(pages, row.owner)))
        shape = "[" + ", ".join(f"{d:,}" for d in row.shape) + "]"
        stored = f"{shape}, stored {row.layout}" if row.layout else shape
        table.add_row("Shape", Text(stored + (f"; {row.bias}" if row.bias else "")))
        if row.part:
            table.add_row("Part", Text(row.part))
        count = f"{row.elements:,}"
        table.add_row("Count", Text(count if row.calculation == count else f"{row.calculation} = {count}"))
        if row.dtype or row.storage:
            table.add_row("Stored", Text(", ".join(x for x in (row.dtype, row.storage) if x)))
        show(console, table)
    show(console, Text(""))
    columns = (
        Column("Where", wraps=True, min_width=16),
        Column("Instances", number=True),
        Column("Per instance", number=True),
        Column("Total", number=True),
    )
    rows = [(x.where, f"{x.instances:,}", f"{p.per_instance:,}", f"{x.params:,}") for x in p.where]
    if len(p.where) > 1:
        rows.append(("All", f"{p.instances:,}", "", f"{p.total:,}"))
    show_fitted(console, *fitted(console, columns, rows))
    extra = _grid()
    if len(p.rows) > 1 and page.kind != "tensor":  # each tensor's share: the Router's weight without its bias
        shares = "; ".join(f"{_short(r.name)} {r.elements * p.instances:,}" for r in p.rows)
        extra.add_row("By tensor", Text(f"{shares} (× {p.instances:,} instances)"))
    if p.activated is not None:
        extra.add_row("Activated", Text(f"{p.activated:,} per token"))
    if p.stored_bytes is not None:
        extra.add_row(
            "Stored",
            Text(
                f"{p.stored_bytes:,} B ({human_bytes(p.stored_bytes)}) as the checkpoint "
                f"stores it; {p.bf16_bytes:,} B in BF16"
            ),
        )
    if p.flops_per_token is not None and p.flops_per_token:
        extra.add_row("FLOPs", Text(f"{p.flops_per_token:,} per token ({flops_text(p.flops_per_token)})"))
    if extra.row_count:
        show(console, Text(""))
        show(console, extra)


def _kv(console: Console, page: Page) -> None:
    _heading(console, "KV cache per token, by layout")
    layers = page.kv[0].layers
    columns = (
        Column("Layout"),
        Column("Calculation", drop=1),
        Column("Per layer", number=True),
        Column(f"× {layers} layers", number=True),
    )
    rows = [(k.layout, k.calculation, f"{k.per_token_per_layer:,} B", f"{k.per_token:,} B") for k in page.kv]
    show_fitted(console, *fitted(console, columns, rows))
    if page.kv_note:
        show(console, Text(page.kv_note))


def _links(console: Console, page: Page, pages: Pages) -> None:
    links = _grid()
    if page.parent:
        links.add_row("Parent", Text(_link(pages, page.parent)))
    made = page.kind in ("activation", "operation")
    for label, ids in (
        ("Children", page.children),
        ("Made by" if made else "Writes", page.writes),
        ("Read by" if made else "Reads", page.reads),
        ("Tensors", page.tensors),
    ):
        if ids:
            links.add_row(label, Text("; ".join(_link(pages, i) for i in ids)))
    if links.row_count:
        _heading(console, "Links")
        show(console, links)


def _short(name: str) -> str:
    """A tensor's name without its layer: model.layers.{1..60}.mlp.gate.weight -> mlp.gate.weight."""
    return name.split("}.", 1)[-1] if "}." in name else name


def _lines(e) -> str:
    return f"line {e.start}" if e.start == e.end else f"lines {e.start}–{e.end}"


def _evidence(console: Console, page: Page, pages: Pages) -> None:
    if not page.evidence and not page.evidence_note and not page.findings:
        return
    _heading(console, "Evidence")
    indexed = [e for e in page.evidence if not e.excerpt]  # lines of the pinned index: no file here
    if pages.evidence_source and not indexed:
        show(console, Text(f"Modeling file: {pages.evidence_source}", style="dim"))
    if indexed:
        first = indexed[0]
        spans = ", ".join(f"{_lines(e)} ({e.role})" for e in indexed)
        revision = f"@{first.revision[:12]}" if first.revision else ""
        # each piece's link to its lines at that revision is in --json and the HTML (a terminal folds a URL)
        show(console, Text(f"{first.file}{revision} {spans}", style="bold"))
    for e in page.evidence:
        if not e.excerpt:
            continue
        revision = f"@{e.revision[:12]}" if e.revision else ""
        show(console, Text(f"{e.file}{revision} {_lines(e)} ({e.role})", style="bold"))
        # a long line folds under its own code, not under the line numbers
        excerpt = Table.grid(padding=(0, 2))
        excerpt.add_column(justify="right", no_wrap=True)
        excerpt.add_column(overflow="fold")
        for number, line in enumerate(e.excerpt.split("\n"), start=e.start):
            excerpt.add_row(str(number), Text(line))
        show(console, excerpt)
    if page.evidence_note:
        show(console, Text(page.evidence_note))
    for finding in page.findings:
        show(console, Text(f"Finding: {finding}"))
