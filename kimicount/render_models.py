"""The `models` view: the bundled models, their parameters and where each config came from."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from kimicount.render import Column, fitted, say, show, show_fitted


def render_models(console: Console, rows: list[dict[str, Any]]) -> None:
    show(console, "[bold]Models kimicount bundles[/]: each name or repo id reads this config, no Hub needed")
    columns = (
        Column("Name"),
        Column("Repo", drop=2, hint="--json has it"),
        Column("Parameters", number=True),
        Column("Activated", number=True, drop=1),
        Column("Config", wraps=True, min_width=20),
        Column("Release", wraps=True, drop=3, min_width=14),
    )
    table_rows = [
        (
            row["name"],
            row["repo"],
            f"{row['total']:,}",
            f"{row['activated']:,}",
            row["summary"],
            row["release"],
        )
        for row in rows
    ]
    show_fitted(console, *fitted(console, columns, table_rows))
    say(
        console,
        "Names answer in any case, as does the name without its org. Derived and re-serialized configs "
        "have the values of the model's own (docs/models.md says from where); --revision REV reads the "
        "Hub's config instead.",
    )
