"""GPU benchmark: `kimicount measure` at full size on a CUDA device, results written to a file.

Fills every KV-cache layout (naive, flash, latent, FlashMLA-fp8) of Kimi K2 by a real prefill of
T = 32,768 tokens at batch 1 and 8, measures each cache with CUDA's allocator, decodes one more token
over it and times decode steps. Sized to take well under five minutes on one recent GPU: the largest
cache, flash at batch 8, is 12.9 GB and the prefill should peak at about 40 GB (estimates: the script
has not run on a GPU yet).

    pip install torch -e ".[measure]"      # a CUDA build of torch
    python benchmarks/measure_gpu.py                       # writes benchmarks/results/measure_gpu.{json,md}
    python benchmarks/measure_gpu.py --out /tmp/run.json   # and /tmp/run.md

`--smoke` runs the same script on the CPU at small sizes (T = 64, batch 1 and 2), to check it anywhere.
The markdown table is printed as well; it is what README.md shows.

It also sets each naive and latent decode step beside its floor (kimicount.deploy.speed.mla_decode_floor: one
layer's weights and the cache read at the GPU's HBM bandwidth, or its FLOPs at the dense BF16 peak,
whichever is longer) and prints measured ÷ floor. The floor is the table's GPU that the device name
matches, or --floor-gpu; under --smoke it is an H200's, which says nothing about a CPU run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from kimicount.deploy.hardware import ACCELERATORS, Accelerator, find_accelerator
from kimicount.deploy.speed import mla_decode_floor
from kimicount.errors import KimicountError
from kimicount.flow import Mla
from kimicount.kvcache import Layout, bytes_per_token_per_layer, element_bytes
from kimicount.measure import COMPUTE_DTYPES, measure
from kimicount.reports import measure_json
from kimicount.source import load_spec
from kimicount.spec import ModelSpec

RESULTS = Path(__file__).resolve().parent / "results"
FULL = {"device": "cuda", "tokens": 32_768, "batches": (1, 8)}
SMOKE = {"device": "cpu", "tokens": 64, "batches": (1, 2)}
#: The decode steps set beside a floor: the cache layout and the way it is attended.
FLOOR_WAYS = {"naive": Mla.naive, "latent": Mla.absorbed}


def floor_gpu(requested: str | None, device_name: str) -> Accelerator:
    """The table's entry for the GPU the run was on (its name in the device's, longest name first, so an
    H200 is not an H20), or --floor-gpu."""
    if requested:
        return find_accelerator(requested)
    try:  # the table knows the names the tools print ('NVIDIA H200', 'NVIDIA H100 80GB HBM3')
        return find_accelerator(device_name)
    except KimicountError:
        pass
    for name in sorted(ACCELERATORS, key=len, reverse=True):
        if name.split("-")[0].upper() in device_name.upper():
            return ACCELERATORS[name]
    raise SystemExit(f"measure_gpu: no floor for '{device_name}'; name one with --floor-gpu (e.g. H200)")


def floors(spec: ModelSpec, gpu: Accelerator, report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each naive and latent decode step of a measure report beside its floor on `gpu`: the attention
    over the T cached positions and the new one, in every measured layer."""
    rows = []
    weight_bytes = element_bytes(COMPUTE_DTYPES[report["dtype"]])
    for row in report["layouts"]:
        way = FLOOR_WAYS.get(row["layout"])
        if way is None:
            continue
        per_token = bytes_per_token_per_layer(spec, Layout(row["layout"]), element_bytes(report["dtype"]))
        floor = mla_decode_floor(
            spec,
            gpu,
            way,
            batch=report["batch"],
            context=report["tokens"] + 1,
            cache_bytes_per_token=per_token,
            element_bytes=weight_bytes,
        )
        floor_ms = floor.seconds * report["layers"] * 1000
        rows.append(
            {
                "batch": report["batch"],
                "layout": row["layout"],
                "attention": way.value,
                "measured_ms": row["decode_ms"],
                "floor_ms": floor_ms,
                "floor_bytes": floor.bytes * report["layers"],
                "floor_flops": floor.flops * report["layers"],
                "bound": floor.bound,
                "measured_over_floor": row["decode_ms"] / floor_ms,
            }
        )
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One `measure` per batch size; returns every report and the wall time."""
    sizes = SMOKE if args.smoke else FULL
    spec = load_spec(args.config)
    start = time.perf_counter()
    reports = []
    for batch in sizes["batches"]:
        measurement = measure(
            spec,
            device=sizes["device"],
            tokens=args.tokens or sizes["tokens"],
            batch=batch,
            layers=args.layers,
            dtype=args.dtype,
            decode_steps=args.decode_steps,
        )
        reports.append(measure_json(measurement))
        print(f"batch {batch}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    gpu = floor_gpu(args.floor_gpu or ("H200" if args.smoke else None), reports[0]["device_name"])
    return {
        "elapsed_s": round(time.perf_counter() - start, 1),
        "runs": reports,
        "floor_gpu": gpu.name,
        "floors": [row for report in reports for row in floors(spec, gpu, report)],
    }


def markdown(results: dict[str, Any]) -> str:
    """A markdown table of every run: one row per batch size and layout."""
    first = results["runs"][0]
    layers = f"{first['layers']} layer" + ("" if first["layers"] == 1 else "s")
    title = (
        f"{first['model']} on {first['device_name']} ({first['device']}), torch {first['torch_version']}, "
        f"{first['dtype']} cache, T = {first['tokens']:,} tokens, {layers}; {results['elapsed_s']} s in all."
    )
    lines = [
        title,
        f"Measured: {first['measured_with']}.",
        "",
        "| batch | layout | predicted B | measured B | ratio | peak B | decode ms/step | decode vs naive | note |",
        "|---:|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for report in results["runs"]:
        for row in report["layouts"]:
            peak = "—" if row["peak_bytes"] is None else f"{row['peak_bytes']:,}"
            if row["decode_max_error"] is None:
                agreement = "reference"
            else:
                agreement = f"{row['decode_max_error']:.1e} ≤ {row['decode_tolerance']:g}"
            lines.append(
                f"| {report['batch']} | {row['layout']} | {row['predicted_bytes']:,} | {row['measured_bytes']:,} | "
                f"{row['ratio']:.4f} | {peak} | {row['decode_ms']:.2f} | {agreement} | {row['note']} |"
            )
    heading = (
        f"Decode step against its floor on an {results['floor_gpu']} (max(bytes ÷ HBM bandwidth, FLOPs ÷ "
        "dense BF16 peak); one layer's attention weights and cache):"
    )
    lines += [
        "",
        heading,
        "",
        "| batch | layout | attention | measured ms/step | floor ms/step | floor bound | measured ÷ floor |",
        "|---:|---|---|---:|---:|---|---:|",
    ]
    for row in results["floors"]:
        lines.append(
            f"| {row['batch']} | {row['layout']} | {row['attention']} | {row['measured_ms']:.3f} | "
            f"{row['floor_ms']:.4f} | {row['bound']} | {row['measured_over_floor']:,.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes on the CPU, to check the script")
    parser.add_argument("--config", type=Path, help="a config.json (default: the bundled Kimi K2)")
    parser.add_argument("--tokens", type=int, help="override T (default 32,768; --smoke: 64)")
    parser.add_argument("--layers", type=int, default=1, help="layers whose caches are filled (default 1)")
    parser.add_argument("--dtype", help="cache dtype (default: the model's, bf16 for Kimi K2)")
    parser.add_argument("--decode-steps", type=int, default=20, help="decode steps timed (default 20)")
    parser.add_argument("--out", type=Path, help="results JSON; the markdown goes next to it as .md")
    parser.add_argument("--floor-gpu", help="the table's GPU to compare with (default: the device's)")
    args = parser.parse_args()
    out = args.out or RESULTS / ("measure_smoke.json" if args.smoke else "measure_gpu.json")

    try:
        results = run(args)
    except KimicountError as error:
        raise SystemExit(f"measure_gpu: {error}") from None
    table = markdown(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(table)
    print(table)
    print(f"written: {out} and {out.with_suffix('.md')}", file=sys.stderr)
    if not all(report["ok"] for report in results["runs"]):
        raise SystemExit("measure_gpu: a cache did not hold the predicted bytes or did not decode alike")


if __name__ == "__main__":
    main()
