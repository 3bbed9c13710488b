"""Where llama.cpp puts each tensor of a GGUF, its KV cache and its compute buffers, and the longest
context that fits.

The rules, read from llama.cpp (src/llama-model.cpp, llama_model::load_tensors, and the same code in
ik_llama.cpp's src/llama.cpp):

- The input layer (token_embd) always stays in host memory ("there is very little benefit to
  offloading the input layer").
- `-ngl N` offloads the last N of the n_layer + 1 "layers" (the blocks, then the output layer):
  i_gpu_start = max(n_layer + 1 − N, 0). -ngl 99 offloads every block and the output layer
  (output, output_norm).
- An offloaded layer il goes to GPU upper_bound(splits, (il − i_gpu_start) ÷ act_gpu_layers), where
  splits are the cumulative shares of --tensor-split, by default of each GPU's free memory (equal
  GPUs: equal shares; 2 GPUs and 62 layers: blocks 0–30 on the first, 31–60 and the output on the
  second).
- `-ot REGEX=CPU` (--override-tensor) keeps every tensor whose name the regex finds in host memory:
  `-ot exps=CPU` keeps the routed experts (ffn_{gate,up,down}_exps) there. `--n-cpu-moe N` is `-ot`
  of `blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps` for each i < N (common/arg.cpp,
  llm_ffn_exps_block_regex).
- The KV cache of a layer lives on that layer's device (src/llama-kv-cache.cpp: model.dev_layer(il)),
  so it splits across GPUs by whole layers, following the blocks; a block kept in RAM keeps its cache
  there. A hybrid's recurrent state (Kimi Linear's KDA layers) is placed the same way
  (src/llama-memory-recurrent.cpp lines 85–88: model.dev_layer(i)), in its own "RS buffer".
- A GPU buffer holds each tensor padded as kimicount.deploy.local.cache.device_bytes says (that is how the
  printed "CUDA0 buffer size" comes out); host tensors are the file's bytes (mmap) or a copy of them.

Compute buffers are an estimate (see `compute_estimate`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Protocol

from kimicount.deploy.hardware import Accelerator
from kimicount.deploy.local.cache import Cache, device_bytes, padded_cells
from kimicount.errors import UsageError
from kimicount.spec import ModelSpec

MIB = 2**20

_BLOCK = re.compile(r"blk\.(\d+)\.")
#: common/common.h LLM_FFN_EXPS_REGEX, what --n-cpu-moe keeps in RAM per block.
_EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")

#: ik_llama.cpp's compute buffer on a GPU without the output layer, in the one published run we
#: reproduce (PR #616, Kimi K2 UD-IQ3_XXS, -ub 512, -c 2048, -fa -mla 3): "CUDA0 compute buffer size =
#: 263.00 MiB"; the GPU with the output printed 334.00 MiB, the host 162.01 MiB.
PUBLISHED_COMPUTE = 263 * MIB
PUBLISHED_HOST_COMPUTE = 162 * MIB
PUBLISHED_UBATCH = 512
COMPUTE_SOURCE = (
    "estimate: the larger of the logits (vocab × ubatch × 4 B, on the GPU with the output layer) and "
    "263 MiB per 512 tokens of ubatch (ik_llama.cpp #616 log: 263 and 334 MiB at -ub 512 -c 2048 -fa)"
)


class Tensor(Protocol):
    """A GGUF tensor as kimicount.gguf lists it (read-only: its listings are frozen)."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def ggml_type(self) -> str: ...
    @property
    def nbytes(self) -> int: ...


def block_of(name: str) -> int | None:
    """The block a tensor belongs to (blk.N.…), None for token_embd, output, output_norm.

    >>> block_of("blk.12.ffn_up_exps.weight"), block_of("output.weight")
    (12, None)
    """
    match = _BLOCK.match(name)
    return int(match[1]) if match else None


def is_routed_expert(name: str) -> bool:
    """A routed-experts tensor (3-D, every expert): what `-ot exps=CPU` and --n-cpu-moe keep in RAM.

    >>> is_routed_expert("blk.3.ffn_down_exps.weight"), is_routed_expert("blk.3.ffn_down_shexp.weight")
    (True, False)
    """
    return _EXPERTS.search(name) is not None


@dataclass(frozen=True)
class Offload:
    """How a run offloads: -ngl, -ot exps=CPU, --n-cpu-moe, --tensor-split."""

    ngl: int | None = None  # None: every layer (-ngl 99)
    experts_in_ram: bool = False  # -ot exps=CPU
    n_cpu_moe: int = 0
    tensor_split: tuple[int, ...] | None = None  # None: by free memory (equal GPUs: equal)

    def flags(self) -> list[str]:
        """The llama.cpp flags that say this."""
        out = ["-ngl", "99" if self.ngl is None else str(self.ngl)]
        if self.experts_in_ram:
            out += ["-ot", "exps=CPU"]
        elif self.n_cpu_moe:
            out += ["--n-cpu-moe", str(self.n_cpu_moe)]
        if self.tensor_split is not None:
            out += ["-ts", ",".join(map(str, self.tensor_split))]
        return out


def layer_devices(n_layer: int, gpus: int, offload: Offload) -> list[int | None]:
    """The device of each of the n_layer blocks and, last, of the output layer: a GPU index, or None
    for host memory (load_tensors' get_layer_buft_list).

    >>> devices = layer_devices(61, 2, Offload())
    >>> devices.count(0), devices.count(1), devices[-1]
    (31, 31, 1)
    >>> layer_devices(61, 2, Offload(ngl=10))[:52].count(None), layer_devices(61, 2, Offload(ngl=10))[52:]
    (52, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    """
    layers = n_layer + 1
    ngl = layers if offload.ngl is None else offload.ngl
    shares = offload.tensor_split or (1,) * gpus
    if len(shares) != gpus:
        raise UsageError(f"--tensor-split: {len(shares)} shares for {gpus} GPUs")
    total = sum(shares)
    if total <= 0:
        raise UsageError("--tensor-split: expected shares that add up to more than 0")
    splits, running = [], 0
    for share in shares:
        running += share
        splits.append(Fraction(running, total))
    start = max(layers - ngl, 0)
    active = 0 if gpus == 0 else min(ngl, layers)
    devices: list[int | None] = []
    for il in range(layers):
        if il < start or il - start >= active:
            devices.append(None)
            continue
        x = Fraction(il - start, active)
        devices.append(next((i for i, s in enumerate(splits) if s > x), gpus - 1))
    return devices


def tensor_device(tensor: Tensor, devices: Sequence[int | None], offload: Offload) -> int | None:
    """Where one tensor goes: a GPU index, or None for host memory."""
    block = block_of(tensor.name)
    if block is None:
        return None if tensor.name.startswith("token_embd") else devices[-1]
    if block >= len(devices) - 1:
        return None  # a block the model does not load (DeepSeek's MTP layer): stays in the file
    if is_routed_expert(tensor.name) and (offload.experts_in_ram or block < offload.n_cpu_moe):
        return None
    return devices[block]


@dataclass(frozen=True)
class DeviceLoad:
    """What one device holds. `weights` as its buffer holds them; `experts` the routed experts among
    them (unpadded file bytes, for the decode floor), `other` the rest (file bytes)."""

    name: str
    weights: int
    experts: int
    other: int
    tensors: int
    layers: tuple[int, ...]  # blocks whose cache it holds
    cache: int  # its KV buffer
    compute: int  # estimate
    output: bool  # holds the output layer
    memory: int | None  # what it has (CUDA total; --ram for the host)
    state: int = 0  # its recurrent-state (RS) buffer: a hybrid's per-sequence state

    @property
    def total(self) -> int:
        """weights + cache + state + compute. [bytes]"""
        return self.weights + self.cache + self.state + self.compute

    @property
    def fits(self) -> bool | None:
        """Whether it fits what the device has (None when that is unknown)."""
        return None if self.memory is None else self.total <= self.memory


def compute_estimate(spec: ModelSpec, ubatch: int, output: bool, cells: int, flash_attn: bool) -> int:
    """A GPU's compute buffer, estimated (see COMPUTE_SOURCE); without flash attention llama.cpp also
    materialises the scores, n_head × cells × ubatch × 4 B. [bytes]

    >>> compute_estimate(k2, 512, True, 2048, True) // MIB, compute_estimate(k2, 512, False, 2048, True) // MIB
    (320, 263)
    """
    graph = PUBLISHED_COMPUTE * ubatch // PUBLISHED_UBATCH
    logits = spec.vocab_size * ubatch * 4 if output else 0
    scores = 0 if flash_attn else spec.num_attention_heads * cells * ubatch * 4
    return max(graph, logits) + scores


@dataclass(frozen=True)
class Layout:
    """Every device's load for one offload and one cache."""

    gpus: tuple[DeviceLoad, ...]
    host: DeviceLoad
    cache: Cache
    offload: Offload
    ubatch: int
    file_bytes: int

    @property
    def fits(self) -> bool:
        """Every GPU fits (the host too, when --ram is given)."""
        return all(g.fits is not False for g in self.gpus) and self.host.fits is not False


def place(
    spec: ModelSpec,
    tensors: Sequence[Tensor],
    gpu: Accelerator | None,
    count: int,
    offload: Offload,
    cache: Cache,
    *,
    ram: int | None = None,
    ubatch: int = 512,
    flash_attn: bool = True,
) -> Layout:
    """Each device's weights, cache and compute buffer."""
    n_layer = spec.num_hidden_layers
    devices = layer_devices(n_layer, count if gpu else 0, offload)
    gpus = count if gpu else 0
    weights = [0] * (gpus + 1)  # the last: host
    experts = [0] * (gpus + 1)
    other = [0] * (gpus + 1)
    counts = [0] * (gpus + 1)
    for tensor in tensors:
        where = tensor_device(tensor, devices, offload)
        slot = gpus if where is None else where
        cuda = where is not None
        row = tensor.shape[0] if tensor.shape else None
        weights[slot] += device_bytes(tensor.ggml_type, tensor.nbytes, row, cuda) if cuda else tensor.nbytes
        if is_routed_expert(tensor.name):
            experts[slot] += tensor.nbytes
        else:
            other[slot] += tensor.nbytes
        counts[slot] += 1
    layer_lists: list[list[int]] = [[] for _ in range(gpus + 1)]
    for il in range(n_layer):
        device = devices[il]
        layer_lists[gpus if device is None else device].append(il)
    loads = []
    for i in range(gpus + 1):
        host = i == gpus
        holds_output = (devices[-1] is None) if host else devices[-1] == i
        per_layer = cache.layer_device_bytes(cuda=not host)
        kv_count = len(set(layer_lists[i]).intersection(cache.layers))
        state = cache.state
        state_bytes = (
            0
            if state is None
            else state.layer_device_bytes(cuda=not host) * len(set(layer_lists[i]).intersection(state.layers))
        )
        compute = (
            PUBLISHED_HOST_COMPUTE * ubatch // PUBLISHED_UBATCH
            if host
            else compute_estimate(spec, ubatch, holds_output, cache.cells, flash_attn)
        )
        loads.append(
            DeviceLoad(
                "RAM" if host else f"CUDA{i}",
                weights[i],
                experts[i],
                other[i],
                counts[i],
                tuple(layer_lists[i]),
                per_layer * kv_count,
                compute,
                holds_output,
                ram if host else (gpu.cuda_memory_bytes if gpu else None),
                state_bytes,
            )
        )
    file_bytes = sum(t.nbytes for t in tensors)
    return Layout(tuple(loads[:gpus]), loads[gpus], cache, offload, ubatch, file_bytes)


@dataclass(frozen=True)
class Fit:
    """The longest context that fits, and the fewest blocks' experts in RAM that fit at the context asked."""

    longest: int | None  # tokens (a multiple of the padding); None: not even the padding fits
    limit: str  # what stops it: a device's name, or the model's trained context
    fewest_cpu_moe: int | None = field(default=None)


def longest_context(
    spec: ModelSpec,
    tensors: Sequence[Tensor],
    gpu: Accelerator | None,
    count: int,
    offload: Offload,
    cache: Cache,
    *,
    ram: int | None = None,
    ubatch: int = 512,
    flash_attn: bool = True,
) -> Fit:
    """The most cells (a multiple of the build's padding, at most the trained context) at which every
    device fits; found by bisection, each step placing everything again (the cache and, without
    flash attention, the scores grow with the context)."""
    pad = cache.choice.pad
    trained = padded_cells(spec.max_position_embeddings, pad)

    def layout_at(cells: int) -> Layout:
        sized = replace(cache, cells=cells)
        return place(spec, tensors, gpu, count, offload, sized, ram=ram, ubatch=ubatch, flash_attn=flash_attn)

    def first_full(cells: int) -> str:
        layout = layout_at(cells)
        return next(d.name for d in (*layout.gpus, layout.host) if d.fits is False)

    if layout_at(trained).fits:
        return Fit(spec.max_position_embeddings, "the trained context (max_position_embeddings)")
    low, high = 0, trained // pad  # fits at low × pad (0: nothing), not at high × pad
    if not layout_at(pad).fits:
        return Fit(None, first_full(pad))
    low = 1
    while high - low > 1:
        mid = (low + high) // 2
        if layout_at(mid * pad).fits:
            low = mid
        else:
            high = mid
    return Fit(low * pad, first_full(high * pad))


def fewest_cpu_moe(
    spec: ModelSpec,
    tensors: Sequence[Tensor],
    gpu: Accelerator | None,
    count: int,
    offload: Offload,
    cache: Cache,
    *,
    ram: int | None = None,
    ubatch: int = 512,
    flash_attn: bool = True,
) -> int | None:
    """The smallest --n-cpu-moe N (the most routed experts on the GPUs) at which everything fits at the
    cache's context; None when even every block's experts in RAM does not fit."""
    for n in range(spec.num_hidden_layers + 1):
        trial = Offload(offload.ngl, False, n, offload.tensor_split)
        layout = place(spec, tensors, gpu, count, trial, cache, ram=ram, ubatch=ubatch, flash_attn=flash_attn)
        if layout.fits:
            return n
    return None
