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

Both are floors: ideal bandwidths, no attention FLOPs, no kernel overhead, no overlap lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.local.placement import Layout, Tensor, is_routed_expert, tensor_device
from kimicount.errors import UsageError
from kimicount.spec import ModelSpec

#: PCIe 4.0 x16, one direction: 16 GT/s × 16 lanes × 128/130 encoding ÷ 8 bits.
PCIE4_X16 = 16 * 10**9 * 16 * 128 // 130 // 8


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
    reads: tuple[DeviceRead, ...]
    decode_seconds: float
    ubatch: int
    ram_weights: int
    pcie_bandwidth: int
    activated: Fraction  # weights' elements a token uses
    prompt_seconds: float  # per ubatch
    prompt_bound: str  # "PCIe" or "compute"

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


def floors(
    spec: ModelSpec,
    tensors: list[Tensor] | tuple[Tensor, ...],
    layout: Layout,
    gpu: Accelerator,
    *,
    context: int,
    ram_bandwidth: int,
    pcie_bandwidth: int = PCIE4_X16,
) -> Floors:
    """The decode and prompt floors of a layout (see the module docstring)."""
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
    per_layer_token = layout.cache.token_bytes()
    loads = (*layout.gpus, layout.host)
    reads = tuple(
        DeviceRead(
            load.name,
            weights[i],
            experts[i],
            per_layer_token * len(load.layers) * context,
            ram_bandwidth if i == slots - 1 else gpu.hbm_bandwidth,
        )
        for i, load in enumerate(loads)
    )
    decode = sum(r.seconds for r in reads)
    ubatch = layout.ubatch
    transfer = layout.host.weights / pcie_bandwidth
    compute = float(2 * ubatch * activated) / gpu.bf16_flops  # the GPUs take the layers in turn
    return Floors(
        context,
        reads,
        decode,
        ubatch,
        layout.host.weights,
        pcie_bandwidth,
        activated,
        max(transfer, compute),
        "PCIe" if transfer >= compute else "compute",
    )
