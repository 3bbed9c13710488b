"""The speed floor of a hybrid llama.cpp run: GPUs and the CPU taking turns, layer by layer.

Decode, one sequence, one token at context L (llama.cpp runs the layers one after another, each on the
device that holds it, so the times add up):

    bytes(device) = its weights every token reads (all but the routed experts; token_embd: one row)
                  + its routed experts × k ÷ E (one token picks k of the E experts of each MoE layer)
                  + its layers' KV cache at L positions
    time ≥ Σ over GPUs bytes ÷ HBM bandwidth + bytes(RAM) ÷ RAM bandwidth

Prompt (one ubatch of U tokens): llama.cpp runs a matmul with a batch of 32 or more on the GPU even
when its weights sit in RAM (ggml-backend's scheduler offloads the op and copies the weights over;
ggml-cuda.cu, ggml_backend_cuda_device_offload_op: batch ≥ 32), so every RAM-resident weight crosses
PCIe once per ubatch, and the GPUs do the FLOPs:

    time(ubatch) ≥ max(bytes in RAM ÷ PCIe bandwidth, 2 × U × activated weights ÷ the GPU's BF16 peak)

Weights that do not fit in RAM: with mmap (llama.cpp's default) the page cache holds what RAM leaves
after the host's KV cache and buffers, and every other page is read from the file again when a token
touches it. Which experts stay cached is the kernel's choice; under uniform routing an even share of
each layer's experts is, so a token reads the uncached share of its experts' bytes from disk:

    bytes(disk) = (host tensors − page cache) ÷ the host's routed experts × their bytes a token reads
    time ≥ … + bytes(disk) ÷ the disk's read rate       (and each ubatch reads the uncached bytes once)

Skewed routing keeps the hot experts cached and reads less. The disk's rate is --disk-bandwidth, by
default DISK_BANDWIDTH, the ceiling of a PCIe 4.0 ×4 NVMe drive's link (no such drive reads faster;
page faults under mmap read in small pieces and get less).

All are floors: ideal bandwidths, no attention FLOPs, no kernel overhead, no overlap lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.local.cache import Cache
from kimicount.deploy.local.placement import Layout, Tensor, is_routed_expert, tensor_device
from kimicount.errors import UsageError
from kimicount.spec import ModelSpec

#: PCIe 4.0 x16, one direction: 16 GT/s × 16 lanes × 128/130 encoding ÷ 8 bits.
PCIE4_X16 = 16 * 10**9 * 16 * 128 // 130 // 8
#: The disk's read rate unless --disk-bandwidth gives it: a PCIe 4.0 ×4 NVMe link, 16 GT/s × 4 lanes ×
#: 128/130 ÷ 8 bits (7.88 GB/s; PCIe 4.0 drives' datasheets give up to about 7.4 GB/s sequential).
DISK_BANDWIDTH = 16 * 10**9 * 4 * 128 // 130 // 8
DISK_SOURCE = (
    "a PCIe 4.0 ×4 NVMe link's ceiling, 16 GT/s × 4 lanes × 128/130 ÷ 8 bits (--disk-bandwidth sets yours)"
)


def ram_bandwidth(channels: int, mts: int) -> int:
    """Peak DRAM bandwidth: channels × MT/s × 8 bytes (a 64-bit channel). [bytes/s]

    >>> ram_bandwidth(8, 3200), ram_bandwidth(12, 4800)  # EPYC 7003 (8 × DDR4-3200), 9004 (12 × DDR5-4800)
    (204800000000, 460800000000)
    """
    if channels < 1 or mts < 1:
        raise UsageError("--ram-channels, --ram-speed: expected positive numbers")
    return channels * mts * 10**6 * 8


@dataclass(frozen=True)
class DeviceRead:
    name: str
    weights: int  # read whole every token
    experts: Fraction  # routed experts' bytes × k ÷ E
    cache: int  # KV read at L
    bandwidth: int

    @property
    def bytes(self) -> Fraction:
        return self.weights + self.experts + self.cache

    @property
    def seconds(self) -> float:
        return float(self.bytes) / self.bandwidth


@dataclass(frozen=True)
class Floors:
    context: int
    reads: tuple[
        DeviceRead, ...
    ]  # the GPUs, RAM, and the disk when the page cache cannot hold the host tensors
    decode_seconds: float
    ubatch: int
    ram_weights: int
    pcie_bandwidth: int
    activated: Fraction  # weights' elements a token uses
    prompt_seconds: float  # per ubatch
    prompt_bound: str  # "PCIe", "disk" or "compute"
    uncached: int = 0  # host tensors' bytes the page cache cannot hold, read from disk
    disk_bandwidth: int = DISK_BANDWIDTH

    @property
    def disk(self) -> DeviceRead | None:
        """What a token reads from disk, when any."""
        return next((read for read in self.reads if read.name == "disk"), None)

    @property
    def decode_tokens_per_s(self) -> float:
        return 1 / self.decode_seconds

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.ubatch / self.prompt_seconds


def _elements(tensor: Tensor) -> int:
    count = 1
    for n in tensor.shape:
        count *= n
    return count


def _cache_read(cache: Cache, layers: tuple[int, ...], context: int) -> int:
    """What one decoded token reads of a device's cache: the KV of its attention layers at `context`
    and, for a hybrid, one sequence's recurrent state in its recurrent layers. [bytes/token]"""
    held = set(layers)
    read = cache.token_bytes() * len(held.intersection(cache.layers)) * context
    if cache.state is not None:
        read += cache.state.sequence_bytes * len(held.intersection(cache.state.layers))
    return read


def floors(
    spec: ModelSpec,
    tensors: list[Tensor] | tuple[Tensor, ...],
    layout: Layout,
    gpu: Accelerator,
    *,
    context: int,
    ram_bandwidth: int,
    pcie_bandwidth: int = PCIE4_X16,
    page_cache: int | None = None,
    disk_bandwidth: int = DISK_BANDWIDTH,
) -> Floors:
    """The decode and prompt floors of a layout (see the module docstring); `page_cache`: the host
    tensors' bytes RAM holds under mmap (None: all of them)."""
    if gpu.hbm_bandwidth <= 0 or gpu.bf16_flops <= 0:
        raise UsageError("the speed floor needs the GPU's --hbm-bandwidth and --peak-bf16")
    share = Fraction(spec.num_experts_per_tok, spec.n_routed_experts)
    from kimicount.deploy.local.placement import layer_devices

    devices = layer_devices(spec.num_hidden_layers, len(layout.gpus), layout.offload)
    slots = len(layout.gpus) + 1
    weights = [0] * slots
    experts = [Fraction(0)] * slots
    activated = Fraction(0)
    for tensor in tensors:
        where = tensor_device(tensor, devices, layout.offload)
        slot = slots - 1 if where is None else where
        if tensor.name.startswith("token_embd"):
            rows = tensor.shape[-1]
            weights[slot] += tensor.nbytes // rows
            activated += _elements(tensor) // rows
        elif is_routed_expert(tensor.name):
            experts[slot] += tensor.nbytes * share
            activated += _elements(tensor) * share
        else:
            weights[slot] += tensor.nbytes
            activated += _elements(tensor)
    host = layout.host
    uncached = 0 if page_cache is None else min(max(host.weights - page_cache, 0), host.experts)
    on_disk = Fraction(uncached, host.experts) if host.experts else Fraction(0)
    loads = (*layout.gpus, host)
    reads = tuple(
        DeviceRead(
            load.name,
            weights[i],
            experts[i] * (1 - on_disk) if i == slots - 1 else experts[i],
            _cache_read(layout.cache, load.layers, context),
            ram_bandwidth if i == slots - 1 else gpu.hbm_bandwidth,
        )
        for i, load in enumerate(loads)
    )
    if uncached:
        reads += (DeviceRead("disk", 0, experts[-1] * on_disk, 0, disk_bandwidth),)
    decode = sum(r.seconds for r in reads)
    ubatch = layout.ubatch
    transfer = host.weights / pcie_bandwidth
    from_disk = uncached / disk_bandwidth
    compute = float(2 * ubatch * activated) / gpu.bf16_flops  # the GPUs take the layers in turn
    bound = max(("PCIe", transfer), ("disk", from_disk), ("compute", compute), key=lambda kind: kind[1])[0]
    return Floors(
        context,
        reads,
        decode,
        ubatch,
        layout.host.weights,
        pcie_bandwidth,
        activated,
        max(transfer, from_disk, compute),
        bound,
        uncached,
        disk_bandwidth,
    )
