"""The `measure` view: predicted against measured cache bytes, decode agreement and timings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from kimicount.render import Column, fitted, plural, show, show_fitted

if TYPE_CHECKING:  # annotations only: torch is imported by the command that runs it
    from kimicount.measure import CacheTensor, LayoutMeasurement, Measurement


def render_measure(console: Console, measurement: Measurement) -> None:
    """The `measure` table: per layout predicted and measured bytes, their ratio, decode time and the
    decode check against the naive cache, then how each column was obtained."""
    m = measurement
    show(
        console,
        f"[bold]{m.model}[/]: KV caches built and measured on {m.device} ({m.device_name}), "
        f"torch {m.torch_version}",
    )
    show(
        console,
        f"{m.dtype} cache, {plural(m.tokens, 'token')} × batch {m.batch} × {plural(m.layers, 'layer')}, "
        f"seeded random weights (seed {m.seed})",
    )
    show_fitted(console, *_measure_table(console, m))
    show(console)
    for line in _measure_notes(m):
        show(console, line)


def _measure_table(console: Console, m: Measurement) -> tuple[Table, list[Column]]:
    with_peak = any(r.peak_bytes is not None for r in m.layouts)
    with_note = any(r.note for r in m.layouts)
    columns = [
        Column("Layout"),
        Column("Predicted B", number=True),
        Column("Measured B", number=True),
        Column("Ratio", number=True, drop=4),
    ]
    if with_peak:
        columns.append(Column("Peak B", number=True, drop=2))
    columns += [
        Column("Decode ms/step", number=True, drop=3),
        Column("Decode vs naive", number=True),
        Column("Cache tensors per layer", wraps=True, drop=5, min_width=30, hint="--json lists them"),
    ]
    if with_note:
        columns.append(Column("Note", wraps=True, drop=1, min_width=20))
    rows, styles = [], []
    for r in m.layouts:
        row = [r.layout.value, f"{r.predicted_bytes:,}", f"{r.measured_bytes:,}", f"{r.ratio:.4f}"]
        if with_peak:
            row.append(f"{r.peak_bytes:,}")
        row += [f"{r.decode_ms:.2f}", _agreement(r), "; ".join(_tensor_text(t) for t in r.tensors)]
        if with_note:
            row.append(r.note)
        rows.append(row)
        styles.append(None if r.ok else "bold red")
    return fitted(console, columns, rows, styles=styles)


def _agreement(r: LayoutMeasurement) -> str:
    if r.decode_error is None:
        return "reference"
    verdict = "ok" if r.decode_agrees else "DIFFERS"
    return f"{r.decode_error:.1e} ≤ {r.decode_tolerance:g} {verdict}"


def _tensor_text(tensor: CacheTensor) -> str:
    return f"{tensor.name} [{' × '.join(str(d) for d in tensor.shape)}] {tensor.dtype}"


def _measure_notes(m: Measurement) -> list[str]:
    lines = [f"Measured: {m.measured_with}."]
    if m.note:
        lines.append(m.note)
    if any(r.peak_bytes is not None for r in m.layouts):
        lines.append(
            "Peak: torch.cuda.max_memory_allocated() during the prefill above what was held before it: the "
            "cache plus the transient projections (the up-projected keys and values)."
        )
    lines.append(
        f"Decode: one more token (position {m.tokens:,}) attends over each cache and itself; error = "
        "max |output − naive output| / max |naive output|."
    )
    lines.append(
        "latent and flashmla-fp8 absorb kv_b_proj's key half into the query and its value half into the "
        "output, as DeepSeek's inference does."
    )
    tighter = "" if m.dtype == "fp32" else " (--dtype fp32 shows about 1e-6)"
    lines.append(
        f"The caches store different numbers, each rounded to {m.dtype} (flashmla-fp8's latent to fp8), "
        f"so they agree to that precision{tighter}."
    )
    lines.append(
        f"Decode ms/step: median of {plural(m.decode_steps, 'step')} through {plural(m.layers, 'layer')} "
        f"in {m.compute_dtype}, the new token's projections included; reported, not asserted."
    )
    bad = [r.layout.value for r in m.layouts if not r.ok]
    lines.append(
        f"[bold red]MISMATCH in {', '.join(bad)}[/]"
        if bad
        else "All layouts hold the predicted bytes and decode alike."
    )
    return lines
