"""`kimicount plan`'s local route: the options as typed -> a LocalRequest (everything checked that needs
no model) -> its answer: the listing (a GGUF's header, checked against the architecture as `kimicount
gguf` checks it, or a --quant estimate) -> the plan (deploy/local/plan.py); with neither, which quants
fit (deploy/local/choice.py). The views are the CLI's (deploy/render_local.py, deploy/local/reports.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kimicount.deploy.engines import local_engine
from kimicount.deploy.hardware import Accelerator, parse_bandwidth, parse_gpus, typed_gpu
from kimicount.deploy.local.builds import CacheLayout
from kimicount.deploy.local.cache import parse_cache_type
from kimicount.deploy.local.floor import DISK_BANDWIDTH
from kimicount.deploy.local.floor import ram_bandwidth as channel_bandwidth
from kimicount.deploy.local.placement import Offload
from kimicount.deploy.local.plan import LocalOptions, LocalPlan, is_mla_gguf, local_plan
from kimicount.errors import UsageError
from kimicount.options import parse_count, parse_size
from kimicount.reading import shorten

if TYPE_CHECKING:
    from kimicount.deploy.local.choice import QuantChoice
    from kimicount.deploy.request import ModelChoice, PlanArgs
    from kimicount.gguf.layout import GGUFReport
    from kimicount.gguf.reader import GGUFListing
    from kimicount.spec import ModelSpec


@dataclass(frozen=True)
class LocalRequest:
    """A local llama.cpp or ik_llama.cpp run asked for: everything read from the options that needs no
    model (read_local reads them); `answer` reads the GGUF (or sizes a --quant) and plans, or with
    neither sizes every quant (`offload_asked`: --offload, --n-cpu-moe or -ngl given, which it keeps)."""

    model: ModelChoice
    gguf: Path | None
    quant: str | None
    count: int
    gpu: Accelerator | None
    options: LocalOptions
    offload_asked: bool = False

    @property
    def needs_model(self) -> bool:
        """Whether the model's config is read (a --quant estimate); a GGUF carries its own."""
        return self.gguf is None

    def answer(self, spec: ModelSpec | None) -> LocalPlan | QuantChoice:
        if self.gguf is None and self.quant is None:
            from kimicount.deploy.local.choice import quant_choice

            assert spec is not None  # without a GGUF the model's config is read
            return quant_choice(spec, self.gpu, self.count, self.options, offload_asked=self.offload_asked)
        return local_answer(self, spec)


def read_local(args: PlanArgs, engine: str, release: str | None, model: ModelChoice) -> LocalRequest:
    """Read the local options: the GPUs, the engine and its build (`release`: llama.cpp's bNNNN, as
    `--engine llama.cpp==b5331` or --build gives it), the offload, the cache, the RAM."""
    if args.gguf is not None and args.quant is not None:
        raise UsageError(
            "plan on a local box: give --gguf FILE or --quant TYPE (one of them), or neither for the quants that fit"
        )
    if args.quant is not None:
        from kimicount.gguf.quantize import parse_quant

        parse_quant(args.quant)  # before the model is read
    count, gpu = parse_gpus(args.gpus)
    gpu = typed_gpu(
        args.gpus,
        count,
        gpu,
        gpu_memory=args.gpu_memory,
        hbm_bandwidth=args.hbm_bandwidth,
        peak_bf16=args.peak_bf16,
        example="RTX3090",
    )
    offload = args.offload
    if offload is not None and offload.strip().lower() != "experts":
        raise UsageError(
            f"--offload '{shorten(offload, 40)}': expected experts (the routed experts in RAM, -ot exps=CPU)"
        )
    chosen = local_engine(engine)
    if release is not None and args.build is not None and release != args.build:
        raise UsageError(f"--engine {chosen.name}=={shorten(release, 20)} and --build disagree: give it once")
    build_text = args.build if release is None else release
    build = None if build_text is None else chosen.release(build_text, "--build").version.numbers[0]
    layout = None
    if args.cache_layout is not None:
        try:
            layout = CacheLayout(args.cache_layout.strip().lower())
        except ValueError:
            raise UsageError(
                f"--cache-layout '{shorten(args.cache_layout, 40)}': expected per-head, latent+v or latent"
            ) from None
    split = None
    if args.tensor_split is not None:
        split = tuple(parse_count(part, "--tensor-split") for part in args.tensor_split.split(","))
        if any(part < 0 for part in split):
            raise UsageError(
                f"--tensor-split '{shorten(args.tensor_split, 40)}': expected shares of 0 or more"
            )
    bandwidth = None
    if args.ram_bandwidth is not None:
        bandwidth = parse_bandwidth(args.ram_bandwidth, "--ram-bandwidth")
    elif (args.ram_channels is None) != (args.ram_speed is None):
        raise UsageError("--ram-channels and --ram-speed: give both (or --ram-bandwidth)")
    elif args.ram_channels is not None and args.ram_speed is not None:
        bandwidth = channel_bandwidth(
            parse_count(args.ram_channels, "--ram-channels"), parse_count(args.ram_speed, "--ram-speed")
        )
    disk = None if args.disk_bandwidth is None else parse_bandwidth(args.disk_bandwidth, "--disk-bandwidth")
    layers = None if args.ngl is None else parse_count(args.ngl, "-ngl")
    if layers is not None and layers < 0:
        raise UsageError(f"-ngl {args.ngl}: expected 0 or more layers")
    cpu_moe = 0 if args.n_cpu_moe is None else parse_count(args.n_cpu_moe, "--n-cpu-moe")
    if cpu_moe < 0:
        raise UsageError(f"--n-cpu-moe {args.n_cpu_moe}: expected 0 or more blocks")
    options = LocalOptions(
        engine=chosen,
        build=build,
        mla=None if args.mla is None else parse_count(args.mla, "--mla"),
        layout=layout,
        type_k=parse_cache_type(args.cache_type_k, "-ctk"),
        type_v=parse_cache_type(args.cache_type_v, "-ctv"),
        offload=Offload(layers, offload is not None, cpu_moe, split),
        context=None if args.context is None else parse_count(args.context, "--context"),
        ram=None if args.ram is None else parse_size(args.ram, "--ram"),
        ram_bandwidth=bandwidth,
        disk_bandwidth=DISK_BANDWIDTH if disk is None else disk,
        mmap=not args.no_mmap,
        ubatch=parse_count(args.ubatch, "--ubatch"),
        parallel=None if args.parallel is None else parse_count(args.parallel, "--parallel"),
    )
    asked = offload is not None or args.n_cpu_moe is not None or layers is not None
    return LocalRequest(model, args.gguf, args.quant, count, gpu, options, asked)


def local_answer(request: LocalRequest, spec: ModelSpec | None) -> LocalPlan:
    """Read the GGUF (its tensors checked against the architecture, as `kimicount gguf` checks them:
    a mismatch is refused, exit 1) or size the --quant estimate, then plan."""
    if request.gguf is not None:
        from kimicount.gguf.layout import spec_from_metadata
        from kimicount.gguf.reader import read_gguf

        listing = read_gguf(request.gguf)
        spec = spec_from_metadata(listing)
        _check_gguf(listing, spec, str(request.gguf))
        source, estimate, path = str(request.gguf), None, str(request.gguf)
        mla_gguf = is_mla_gguf(listing.metadata, listing.tensors)
        tensors = listing.tensors
    else:
        from kimicount.gguf.quantize import estimate_uniform, parse_quant

        assert spec is not None and request.quant is not None  # a --quant request reads the model
        ftype = parse_quant(request.quant)
        estimated = estimate_uniform(spec, ftype)
        tensors = estimated.tensors
        source, mla_gguf = f"{ftype} (llama-quantize, uniform)", True
        path = f"{spec.name.rsplit('/', 1)[-1]}-{ftype}.gguf"
        estimate = (
            "estimate: llama-quantize's rules for a uniform conversion; dynamic quants differ (give --gguf)"
        )
    return local_plan(
        spec,
        tensors,
        request.gpu,
        request.count,
        request.options,
        source=source,
        mla_gguf=mla_gguf,
        estimate=estimate,
        model_path=path,
    )


class GGUFMismatch(Exception):
    """The GGUF's tensors do not match the architecture its metadata gives, as `kimicount gguf` finds them:
    a failed check (the CLI exits 1, as `gguf` does), not bad input; nothing is planned from it."""

    def __init__(self, where: str, report: GGUFReport) -> None:
        self.report = report
        first = report.mismatches[0]
        count = len(report.mismatches)
        super().__init__(
            f"{shorten(where, 120)}: {count:,} tensor{'s' if count != 1 else ''} do{'es' if count == 1 else ''} not "
            f"match the architecture its metadata gives ({shorten(first.tensor, 80)}: {first.kind}, expected "
            f"{shorten(first.expected, 60)}, found {shorten(first.found, 60)}); not planned: `kimicount gguf` "
            "lists them"
        )


def _check_gguf(listing: GGUFListing, spec: ModelSpec, where: str) -> None:
    """`kimicount gguf`'s check (kimicount/gguf/layout.py check_listing): every tensor against what the
    architecture implies; a missing, unexpected or wrong-shaped tensor stops the plan (GGUFMismatch)."""
    from kimicount.gguf.layout import check_listing

    report = check_listing(listing, spec)
    if not report.ok:
        raise GGUFMismatch(where, report)
