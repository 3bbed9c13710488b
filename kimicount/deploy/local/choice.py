"""Which quant fits: every uniform llama-quantize type of the model (kimicount.gguf.quantize), placed on
these GPUs and in this RAM as llama.cpp places a GGUF (deploy/local/placement.py), largest file first,
each with the offload and the context it allows. A local plan asked without --gguf or --quant answers
this.

For each ftype, from the largest file down:

- its listing, estimated from the config (gguf.quantize.estimate_uniform: llama.cpp's per-tensor rules);
- its offload: the one asked (--offload experts, --n-cpu-moe, -ngl); otherwise every layer on the GPUs
  when that fits, else the routed experts in RAM (-ot exps=CPU), which leaves the GPUs the attention,
  the dense and shared parts, the output and the KV cache; without --ram, the GPUs alone (every layer
  on them);
- it fits when every GPU, and RAM when --ram is given, holds its tensors, its share of the KV cache and
  its compute buffers at --context, or, without --context, at MIN_CONTEXT tokens or more (the row then
  has the longest context that fits, at most the trained one). RAM must hold the host tensors even under
  mmap: a quant whose weights are read from disk at every token (deploy/local/floor.py) is no fit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.local.cache import padded_cells
from kimicount.deploy.local.floor import Floors, floors
from kimicount.deploy.local.placement import DeviceLoad, Offload
from kimicount.deploy.local.plan import LocalOptions, Sized, run_flags, size_run

if TYPE_CHECKING:
    from kimicount.gguf.reader import GGUFListing
    from kimicount.spec import ModelSpec

#: The least context a quant must leave room for to count as fitting, when --context is not given.
MIN_CONTEXT = 4096


@dataclass(frozen=True)
class QuantFit:
    """One ftype on this box: its estimated listing, whether an importance matrix makes it, the offload
    tried last, the run sized with it (None: the file is larger than the GPUs and RAM together), whether
    it fits, and the command."""

    quant: str
    listing: GGUFListing
    imatrix: bool
    offload: Offload
    sized: Sized | None
    fits: bool
    flags: tuple[str, ...]
    floors: Floors | None

    @property
    def file_bytes(self) -> int:
        """Its tensors, as llama.cpp's "file size" counts them. [bytes]"""
        return self.listing.tensor_bytes

    @property
    def bits_per_weight(self) -> float:
        """llama.cpp's BPW: tensor bytes × 8 ÷ elements."""
        return self.listing.tensor_bytes * 8 / self.listing.elements

    @property
    def gpu_bytes(self) -> int:
        """What the GPUs hold together: weights, KV cache, compute buffers. [bytes]"""
        return 0 if self.sized is None else sum(load.total for load in self.sized.layout.gpus)

    @property
    def ram_bytes(self) -> int:
        """What RAM holds: the host tensors, its KV cache and buffers. [bytes]"""
        return 0 if self.sized is None else self.sized.layout.host.total

    @property
    def context(self) -> int | None:
        """The context it is planned at: --context, or the longest that fits (None: none fits)."""
        if self.sized is None or not self.fits:
            return None
        return self.sized.context

    @property
    def full(self) -> tuple[DeviceLoad, ...]:
        """The devices that do not hold their load at its context (none when it was not sized)."""
        if self.sized is None:
            return ()
        return tuple(load for load in (*self.sized.layout.gpus, self.sized.layout.host) if load.fits is False)


@dataclass(frozen=True)
class QuantChoice:
    """Every ftype on one box, largest file first; `fitting` those that fit."""

    spec: ModelSpec
    gpu: Accelerator | None
    count: int
    options: LocalOptions
    rows: tuple[QuantFit, ...]
    offload_asked: bool
    min_context: int

    @property
    def fitting(self) -> tuple[QuantFit, ...]:
        return tuple(row for row in self.rows if row.fits)

    @property
    def memory(self) -> int:
        """The GPUs' memory and --ram together. [bytes]"""
        gpus = 0 if self.gpu is None else self.gpu.cuda_memory_bytes * self.count
        return gpus + (self.options.ram or 0)

    @property
    def next_larger(self) -> QuantFit | None:
        """The smallest quant larger than the largest that fits (the first that does not, from the top
        when none fits: the smallest of all)."""
        fitting = self.fitting
        if not fitting:
            return self.rows[-1] if self.rows else None
        larger = [row for row in self.rows if not row.fits and row.file_bytes > fitting[0].file_bytes]
        return larger[-1] if larger else None


def _fits(sized: Sized, options: LocalOptions, least: int) -> bool:
    if options.context is not None:
        return sized.layout.fits
    return sized.fit.longest is not None and sized.fit.longest >= least and sized.layout.fits


def _offloads(options: LocalOptions, asked: bool) -> list[Offload]:
    """The offloads to try, in turn: the one asked, or every layer on the GPUs, then (with --ram) the
    routed experts in RAM."""
    if asked:
        return [options.offload]
    tried = [Offload(tensor_split=options.offload.tensor_split)]
    if options.ram is not None:
        tried.append(Offload(experts_in_ram=True, tensor_split=options.offload.tensor_split))
    return tried


def quant_choice(
    spec: ModelSpec, gpu: Accelerator | None, count: int, options: LocalOptions, *, offload_asked: bool
) -> QuantChoice:
    """Every ftype of gguf.quantize.FTYPES sized on the box (see the module docstring)."""
    from kimicount.gguf.quantize import FTYPES, estimate_uniform

    least = min(MIN_CONTEXT, spec.max_position_embeddings)
    gpus = 0 if gpu is None else gpu.cuda_memory_bytes * count
    memory = gpus + (options.ram or 0) if options.ram is not None else None
    name = spec.name.rsplit("/", 1)[-1]
    rows = []
    for ftype in FTYPES:
        listing = estimate_uniform(spec, ftype)
        imatrix = bool(listing.metadata.get("kimicount.imatrix"))
        tried = replace(options, in_ram=True)
        sized: Sized | None = None
        offload = options.offload
        if memory is None or listing.tensor_bytes <= memory:
            for offload in _offloads(options, offload_asked):
                tried = replace(options, offload=offload, in_ram=True)
                sized = size_run(spec, listing.tensors, gpu, count, tried, mla_gguf=True)
                if _fits(sized, tried, least):
                    break
        fits = sized is not None and _fits(sized, tried, least)
        flags: tuple[str, ...] = ()
        speed = None
        if sized is not None:
            flags = run_flags(
                tried, sized.choice, padded_cells(sized.context, sized.choice.pad), f"{name}-{ftype}.gguf"
            )
            if fits and options.ram_bandwidth is not None and gpu is not None:
                speed = floors(
                    spec,
                    listing.tensors,
                    sized.layout,
                    gpu,
                    context=sized.context,
                    ram_bandwidth=options.ram_bandwidth,
                    pcie_bandwidth=options.pcie_bandwidth,
                )
        rows.append(QuantFit(ftype, listing, imatrix, offload, sized, fits, flags, speed))
    rows.sort(key=lambda row: -row.file_bytes)  # stable: FTYPES' order among equal sizes
    return QuantChoice(spec, gpu, count, options, tuple(rows), offload_asked, least)
