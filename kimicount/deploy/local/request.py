"""`kimicount plan`'s local route: the options as typed -> the listing (a GGUF's header, or a --quant
estimate) -> the plan -> the view (kimicount.deploy.render_local) or JSON. Imports rich only to render, so a
bad option costs no more than the message."""

from __future__ import annotations

from pathlib import Path

from kimicount.spec import ModelSpec


def run_local_plan(
    spec: ModelSpec | None,
    *,
    gpus: str,
    gpu_memory: str | None,
    hbm_bandwidth: str | None,
    peak_bf16: str | None,
    gguf: Path | None,
    quant: str | None,
    ram: str | None,
    offload: str | None,
    n_cpu_moe: str | None,
    ngl: str | None,
    engine: str,
    build: str | None,
    mla: str | None,
    cache_layout: str | None,
    cache_type_k: str,
    cache_type_v: str,
    tensor_split: str | None,
    ubatch: str,
    no_mmap: bool,
    ram_bandwidth: str | None,
    ram_channels: str | None,
    ram_speed: str | None,
    context: str | None,
    as_json: bool,
) -> None:
    """`kimicount plan` for a local box: parse what was typed, read or estimate the listing, plan, show."""
    from kimicount.deploy.hardware import parse_bandwidth, parse_gpus, typed_gpu
    from kimicount.deploy.local.builds import CacheLayout, Engine, parse_build
    from kimicount.deploy.local.cache import parse_cache_type
    from kimicount.deploy.local.floor import ram_bandwidth as channel_bandwidth
    from kimicount.deploy.local.placement import Offload
    from kimicount.deploy.local.plan import LocalOptions, is_mla_gguf, local_plan
    from kimicount.errors import UsageError
    from kimicount.options import parse_count, parse_size

    if (gguf is None) == (quant is None):
        raise UsageError("plan on a local box: give --gguf FILE or --quant TYPE (one of them)")
    count, gpu = parse_gpus(gpus)
    gpu = typed_gpu(
        gpus,
        count,
        gpu,
        gpu_memory=gpu_memory,
        hbm_bandwidth=hbm_bandwidth,
        peak_bf16=peak_bf16,
        example="RTX3090",
    )
    if offload is not None and offload.strip().lower() != "experts":
        raise UsageError(f"--offload '{offload}': expected experts (the routed experts in RAM, -ot exps=CPU)")
    try:
        chosen_engine = Engine(engine.strip().lower())
    except ValueError:
        raise UsageError(f"--engine '{engine}': expected llama.cpp or ik_llama.cpp") from None
    layout = None
    if cache_layout is not None:
        try:
            layout = CacheLayout(cache_layout.strip().lower())
        except ValueError:
            raise UsageError(
                f"--cache-layout '{cache_layout}': expected per-head, latent+v or latent"
            ) from None
    split = None
    if tensor_split is not None:
        split = tuple(parse_count(part, "--tensor-split") for part in tensor_split.split(","))
        if any(part < 0 for part in split):
            raise UsageError(f"--tensor-split '{tensor_split}': expected shares of 0 or more")
    bandwidth = None
    if ram_bandwidth is not None:
        bandwidth = parse_bandwidth(ram_bandwidth, "--ram-bandwidth")
    elif (ram_channels is None) != (ram_speed is None):
        raise UsageError("--ram-channels and --ram-speed: give both (or --ram-bandwidth)")
    elif ram_channels is not None and ram_speed is not None:
        bandwidth = channel_bandwidth(
            parse_count(ram_channels, "--ram-channels"), parse_count(ram_speed, "--ram-speed")
        )
    layers = None if ngl is None else parse_count(ngl, "-ngl")
    if layers is not None and layers < 0:
        raise UsageError(f"-ngl {ngl}: expected 0 or more layers")
    cpu_moe = 0 if n_cpu_moe is None else parse_count(n_cpu_moe, "--n-cpu-moe")
    if cpu_moe < 0:
        raise UsageError(f"--n-cpu-moe {n_cpu_moe}: expected 0 or more blocks")
    options = LocalOptions(
        engine=chosen_engine,
        build=None if build is None else parse_build(build),
        mla=None if mla is None else parse_count(mla, "--mla"),
        layout=layout,
        type_k=parse_cache_type(cache_type_k, "-ctk"),
        type_v=parse_cache_type(cache_type_v, "-ctv"),
        offload=Offload(layers, offload is not None, cpu_moe, split),
        context=None if context is None else parse_count(context, "--context"),
        ram=None if ram is None else parse_size(ram, "--ram"),
        ram_bandwidth=bandwidth,
        mmap=not no_mmap,
        ubatch=parse_count(ubatch, "--ubatch"),
    )
    if gguf is not None:
        from kimicount.gguf.layout import spec_from_metadata
        from kimicount.gguf.reader import read_gguf

        listing = read_gguf(gguf)
        spec = spec_from_metadata(listing)
        source, estimate, path = str(gguf), None, str(gguf)
        mla_gguf = is_mla_gguf(listing.metadata, listing.tensors)
    else:
        from kimicount.gguf.quantize import estimate_uniform, parse_quant

        ftype = parse_quant(quant)
        listing = estimate_uniform(spec, ftype)
        source, mla_gguf = f"{ftype} (llama-quantize, uniform)", True
        path = f"{spec.name.rsplit('/', 1)[-1]}-{ftype}.gguf"
        estimate = (
            "estimate: llama-quantize's rules for a uniform conversion; dynamic quants differ (give --gguf)"
        )
    plan = local_plan(
        spec,
        listing.tensors,
        gpu,
        count,
        options,
        source=source,
        mla_gguf=mla_gguf,
        estimate=estimate,
        model_path=path,
    )
    if as_json:
        from kimicount.cli.common import print_json
        from kimicount.deploy.local.reports import local_plan_json

        print_json(local_plan_json(plan))
        return
    from kimicount.deploy.render_local import render_local_plan
    from kimicount.render import make_console

    render_local_plan(make_console(), plan)
