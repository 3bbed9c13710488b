"""Cross-check and benchmark: `kimicount params --json` against building the same model with
transformers on PyTorch's meta device, which is what a user would otherwise do to count parameters.

For each config it runs both in fresh processes, compares the counts module by module (embedding,
each layer's attention and MLP, final norm, head, total) and prints time and peak memory side by side.
Times are medians of repeated runs, interleaved (kimicount params, kimicount kv-cache, the meta build,
again ...) so that a busy machine slows all three alike; the ratios are what to compare across machines.
`--startup` adds a table of what a run costs before it counts anything (--version, --help, an error).

    pip install torch==2.13.0 transformers==5.24.0   # not test dependencies; only this script needs them
    python benchmarks/params_vs_meta.py [--runs 7] [--meta-runs 3] [--startup]

Differences that are conventions, not errors, are printed with their reason:
- transformers registers the router's `e_score_correction_bias` as a buffer, not a parameter;
  kimicount counts it as a parameter of the Router (DESIGN.md), so buffers of that name are added.
- transformers does not build the multi-token-prediction layer; kimicount reports it apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "Kimi-K2-Instruct": ROOT / "fixtures/kimi-k2-instruct/config.json",
    "DeepSeek-V3": ROOT / "fixtures/deepseek-v3/config.json",
    "DeepSeek-V3.2-Exp": ROOT / "fixtures/deepseek-v3.2-exp/config.json",
    "DeepSeek-V2-Lite": ROOT / "fixtures/deepseek-v2-lite/config.json",
}
# model_type -> transformers classes, imported in the child process only
TRANSFORMERS_CLASSES = {
    "kimi_k2": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
    "deepseek_v32": ("DeepseekV32Config", "DeepseekV32ForCausalLM"),
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),
}


def meta_counts(config_path: Path) -> dict:
    """(child process) Build the model on the meta device and count parameters per module."""
    import torch
    import transformers

    raw = json.loads(config_path.read_text())
    config_name, model_name = TRANSFORMERS_CLASSES[raw["model_type"]]
    # quantization_config would make transformers ask for an FP8 backend; counts do not depend on it
    kwargs = {k: v for k, v in raw.items() if k not in ("auto_map", "architectures", "quantization_config")}
    config = getattr(transformers, config_name)(**kwargs)
    with torch.device("meta"):
        model = getattr(transformers, model_name)(config)

    def count(module) -> int:
        params = sum(p.numel() for p in module.parameters())
        bias = sum(b.numel() for n, b in module.named_buffers() if n.endswith("e_score_correction_bias"))
        return params + bias

    layers = model.model.layers
    return {
        "total": sum(p.numel() for p in model.parameters()),
        "router_bias_buffers": sum(
            b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")
        ),
        "embedding": count(model.model.embed_tokens),
        "final_norm": count(model.model.norm),
        "head": 0 if config.tie_word_embeddings else count(model.lm_head),
        "layers": [count(layer) for layer in layers],
        "attention": [count(layer.self_attn) for layer in layers],
        "mlp": [count(layer.mlp) for layer in layers],
    }


def kimicount_counts(report: dict) -> dict:
    """The same figures read off `kimicount params --json`."""
    tree = report["tree"]
    by_name = {child["name"]: child for child in tree["children"]}
    attention, mlp = {}, {}
    for block_group in next(c for c in tree["children"] if c["name"].endswith("transformer blocks"))[
        "children"
    ]:
        parts = {c["name"]: c for c in block_group["children"]}
        mlp_node = parts.get("Mixture of experts") or parts["Dense MLP"]
        for layer in _layers(block_group["name"], report):
            attention[layer] = parts["Latent attention"]["params_per_instance"]
            mlp[layer] = mlp_node["params_per_instance"]
    n = len(report["layers"])
    return {
        "total": report["total"],
        "embedding": by_name["Token embedding"]["params"],
        "final_norm": by_name["Final RMSNorm"]["params"],
        "head": by_name["Output head"]["params"] if "Output head" in by_name else 0,
        "layers": [row["params"] for row in report["layers"]],
        "attention": [attention[i] for i in range(n)],
        "mlp": [mlp[i] for i in range(n)],
    }


def _layers(group_name: str, report: dict) -> list[int]:
    kind = "moe" if "MoE" in group_name else "dense"
    return [row["index"] for row in report["layers"] if row["kind"] == kind]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meta-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=sorted(CONFIGS), help="one model instead of all")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each kimicount command (median)")
    parser.add_argument(
        "--meta-runs", type=int, default=3, help="timed meta-device builds per model (median)"
    )
    parser.add_argument("--startup", action="store_true", help="also time --version, --help and an error")
    args = parser.parse_args()
    if args.meta_child:
        print(json.dumps(meta_counts(args.meta_child)))
        return

    kimicount = [sys.executable, "-m", "kimicount"]
    rows = []
    for name, config in CONFIGS.items():
        if args.only and name != args.only:
            continue
        params, kv, meta = [], [], []
        for run in range(max(args.runs, args.meta_runs)):
            if run < args.runs:
                params.append(_run_with_rusage([*kimicount, "params", "--config", str(config), "--json"]))
                kv.append(_run_with_rusage([*kimicount, "kv-cache", "--config", str(config), "--json"]))
            if run < args.meta_runs:
                meta.append(_run_with_rusage([sys.executable, __file__, "--meta-child", str(config)]))
        ours, theirs = kimicount_counts(json.loads(params[0][0])), json.loads(meta[0][0])
        mismatches = [
            f"{key}[{i}]: kimicount {a:,} vs meta {b:,}"
            for key in ("layers", "attention", "mlp")
            for i, (a, b) in enumerate(zip(ours[key], theirs[key]))
            if a != b
        ] + [
            f"{key}: kimicount {ours[key]:,} vs meta {theirs[key]:,}"
            for key in ("embedding", "final_norm", "head")
            if ours[key] != theirs[key]
        ]
        meta_total = theirs["total"] + theirs["router_bias_buffers"]
        if ours["total"] != meta_total:
            mismatches.append(f"total: kimicount {ours['total']:,} vs meta {meta_total:,}")
        rows.append((name, ours, theirs, mismatches, params, kv, meta))

    print(
        "| model | kimicount total | meta-device parameters + router-bias buffers | modules compared | "
        "kimicount params | kimicount kv-cache | meta build | params speed-up | kv-cache speed-up | "
        "params peak RSS | meta build peak RSS |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, ours, theirs, mismatches, params, kv, meta in rows:
        modules = 3 + 3 * len(ours["layers"])
        verdict = f"{modules} equal" if not mismatches else f"{len(mismatches)} differ"
        params_s, kv_s, meta_s = (_median(t for _, t, _ in runs) for runs in (params, kv, meta))
        params_rss, meta_rss = (_median(r for _, _, r in runs) for runs in (params, meta))
        print(
            f"| {name} | {ours['total']:,} | {theirs['total']:,} + {theirs['router_bias_buffers']:,} | {verdict} | "
            f"{params_s:.3f} s | {kv_s:.3f} s | {meta_s:.2f} s | {meta_s / params_s:.0f}× | {meta_s / kv_s:.0f}× | "
            f"{params_rss / 2**20:.0f} MiB | {meta_rss / 2**20:.0f} MiB ({meta_rss / params_rss:.1f}×) |"
        )
    print(
        f"\nMedians of {args.runs} runs of each kimicount command and {args.meta_runs} meta-device builds per model, "
        "interleaved."
    )
    failed = False
    for name, _, _, mismatches, *_ in rows:
        for line in mismatches:
            print(f"{name}: {line}")
            failed = True
    print(
        "router-bias buffers: transformers registers e_score_correction_bias as a buffer; kimicount counts it"
    )
    print(
        "as a Router parameter. MTP layers: transformers does not build them; kimicount reports them apart."
    )
    if args.startup:
        _startup(kimicount, args.runs)
    if failed:
        raise SystemExit(1)


def _startup(kimicount: list[str], runs: int) -> None:
    """What a run costs before it counts anything, against the interpreter alone (medians, interleaved)."""
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "kimicount --version": [*kimicount, "--version"],
        "kimicount params --help": [*kimicount, "params", "--help"],
        "kimicount params --by nothing (an error)": [*kimicount, "params", "--by", "nothing"],
        "kimicount params --json": [*kimicount, "params", "--json"],
        "kimicount params (tables)": [*kimicount, "params"],
        "kimicount kv-cache --json": [*kimicount, "kv-cache", "--json"],
    }
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, command in commands.items():
            times[label].append(_run_with_rusage(command, check=False)[1])
    print(f"\n| command | median of {runs} |")
    print("|---|---:|")
    for label, values in times.items():
        print(f"| `{label}` | {_median(values) * 1000:.0f} ms |")


def _median(values) -> float:
    return statistics.median(list(values))


def _run_with_rusage(command: list[str], check: bool = True) -> tuple[str, float, int]:
    """Run a command to completion; return stdout, wall seconds and that child's peak RSS in bytes."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout = process.stdout.read()
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if check and os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr.decode()}")
    return stdout.decode(), elapsed, usage.ru_maxrss * 1024


if __name__ == "__main__":
    main()
