"""Build each KV-cache layout for real in torch and measure the bytes it holds.

`kimicount kv-cache` predicts `bytes_per_token_per_layer × tokens × batch × layers`; this module checks
the prediction of the attention cache against real tensors (DeepSeek-V3.2's lightning-indexer keys,
which kv-cache adds to every layout, are neither built nor predicted here; `not_built` says so). It
runs one Multi-head Latent Attention layer (DeepSeek-V3 style) at the model's true dimensions with
seeded random weights, fills each layout's cache by a real prefill of T tokens, and measures the bytes
the cache holds:

- on the CPU, the storage bytes of the distinct cache tensors (`untyped_storage().nbytes()`);
- on CUDA, what the caching allocator holds after the fill minus before (`memory_allocated`), and its
  peak during the fill, so allocator rounding shows up instead of being hidden.

It then decodes one more token over every cache and compares the outputs with the naive cache's: the
latent caches are decoded with the key and value up-projections absorbed into the query and the output,
as DeepSeek's inference does, so agreement shows the latent is a complete cache, not just a size.

What is modelled and what is not: RMSNorm on the query and key-value latents, rotary embedding on the
qk_rope_head_dim-wide query and key parts (rotate-half form, base 10,000; the model's rope_theta and YaRN
scaling change which angle each position gets and the softmax scale, not what is cached or its size),
softmax scale 1/sqrt(qk_head_dim). Layers share one set of weights (weights are not what is measured);
each layer's cache is filled from its own seeded hidden states, which in a real model would be the layer
below's output: with random weights there is nothing meaningful to pass up.

torch is imported inside functions only: importing this module costs nothing, and the rest of kimicount
never pays for torch.
"""

from __future__ import annotations

import math
import platform
import statistics
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from kimicount.errors import MeasureError, UsageError, require_positive
from kimicount.kvcache import (
    FP8_SCALE_GROUP,
    Layout,
    bytes_per_token_per_layer,
    default_dtype,
    element_bytes,
    indexer_keys_size,
)
from kimicount.spec import ModelSpec

if TYPE_CHECKING:
    from torch import Tensor

#: How to install torch, in the CLI's error and help: from a checkout (kimicount is not on an index), with
#: torch pinned to the version the tests run, its CPU build unless there is a CUDA GPU.
INSTALL_HINT = (
    'from a kimicount checkout, pip install "torch==2.13.0+cpu" -e ".[measure]" --extra-index-url '
    'https://download.pytorch.org/whl/cpu (with a CUDA GPU: pip install torch==2.13.0 -e ".[measure]")'
)

#: The layouts measured, in report order; naive is first because it is the decode reference.
LAYOUTS = (Layout.naive, Layout.flash, Layout.latent, Layout.flashmla_fp8)

#: Cache dtype name -> torch dtype attribute.
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "float8_e4m3fn"}

#: Dtype the attention is computed in, per cache dtype: fp8 caches are dequantized to bf16 (torch has no
#: portable fp8 matmul); the others compute in the cache dtype, as an engine does.
COMPUTE_DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8": "bf16"}

#: Decode agreement, per dtype the cache is stored in: max |output − naive output| / max |naive output|
#: must not exceed this. The two caches store different numbers (the latent vs its up-projection), each
#: rounded to the cache dtype, so they agree to that dtype's precision: fp32 ~1e-7 per element, bf16 2^-9,
#: fp8 e4m3 2^-4. Each bound is at least 4× what Kimi K2 shows (bf16: 6e-3 to 7e-3 at 64 to 4,096
#: tokens); a wrong cache or a wrong absorption is off by the order of the output itself.
DECODE_TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 3e-2, "fp8": 2.5e-1}

#: Largest finite float8_e4m3fn: FP8 scales map each 128-group's largest magnitude onto it.
FP8_E4M3_MAX = 448.0

RMS_NORM_EPS = 1e-6
ROPE_BASE = 10_000.0

#: How measured_bytes is obtained on each kind of device.
MEASURED_WITH = {
    "cpu": "storage bytes of the distinct cache tensors (untyped_storage().nbytes())",
    "cuda": "torch.cuda.memory_allocated() after each layer's prefill minus before, summed over layers",
}

# Generator streams: one seed gives weights, decode token and each layer's prefill their own numbers.
_WEIGHTS, _DECODE_TOKEN, _FIRST_PREFILL = 0, 1, 2


@dataclass(frozen=True)
class CacheTensor:
    """One tensor of a layer's cache, as it lies in memory. [bytes] = storage bytes."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int


@dataclass(frozen=True)
class LayoutMeasurement:
    """One layout: predicted and measured bytes of the cache of all measured layers, and its decode.

    `measured_bytes` is the allocator's count on CUDA and the storage bytes on the CPU; `storage_bytes`
    is always the storage, so measured − storage is the allocator's rounding. `decode_error` is None
    for the naive layout, the reference the others are compared with.
    """

    layout: Layout
    predicted_bytes: int
    measured_bytes: int
    storage_bytes: int
    peak_bytes: int | None
    tensors: tuple[CacheTensor, ...]
    decode_ms: float
    decode_error: float | None
    decode_tolerance: float | None
    note: str

    @property
    def ratio(self) -> float:
        return self.measured_bytes / self.predicted_bytes

    @property
    def decode_agrees(self) -> bool:
        return self.decode_error is None or (
            self.decode_tolerance is not None and self.decode_error <= self.decode_tolerance
        )

    @property
    def ok(self) -> bool:
        """The cache stores exactly the predicted bytes and decodes what the naive cache decodes."""
        return self.storage_bytes == self.predicted_bytes and self.decode_agrees


@dataclass(frozen=True)
class Measurement:
    """A `kimicount measure` run: where, what sizes, and one result per layout. `note` is a sentence on
    what `kimicount kv-cache` counts that the run does not build ('' when it builds all of it)."""

    model: str
    device: str
    device_name: str
    torch_version: str
    measured_with: str
    dtype: str
    compute_dtype: str
    tokens: int
    batch: int
    layers: int
    seed: int
    decode_steps: int
    layouts: tuple[LayoutMeasurement, ...]
    note: str = ""

    @property
    def ok(self) -> bool:
        return all(result.ok for result in self.layouts)


def measure(
    spec: ModelSpec,
    *,
    tokens: int,
    batch: int,
    layers: int,
    device: str = "auto",
    dtype: str | None = None,
    seed: int = 0,
    decode_steps: int = 5,
) -> Measurement:
    """Fill every layout's cache for `tokens` × `batch` × `layers` and measure it; see the module doc.

    `dtype` is the cache dtype (default: the model's, bf16 for Kimi K2); `decode_steps` decode steps are
    timed after one warm-up step and the median is reported.
    """
    _check_sizes(spec, tokens=tokens, batch=batch, layers=layers, decode_steps=decode_steps)
    dtype = dtype or default_dtype(spec)
    element_bytes(dtype)  # an unknown cache dtype is a usage error, before torch is even loaded
    torch = import_torch()
    where = pick_device(torch, device)
    compute = getattr(torch, TORCH_DTYPES[COMPUTE_DTYPES[dtype]])
    _check_memory(torch, where, spec, tokens=tokens, batch=batch, layers=layers, dtype=dtype)

    results = []
    try:
        run = _Run(torch, where, spec, tokens=tokens, batch=batch, layers=layers, seed=seed, compute=compute)
        with torch.inference_mode():
            run.warm_up(dtype)
            reference = None
            for layout in LAYOUTS:
                result, outputs = run.measure_layout(CACHES[layout], dtype, decode_steps, reference)
                reference = outputs if reference is None else reference
                results.append(result)
    except torch.cuda.OutOfMemoryError as error:  # the estimate of _check_memory is only an estimate
        raise MeasureError(f"out of GPU memory on {where}; lower --tokens, --batch or --layers") from error
    return Measurement(
        model=spec.name,
        device=str(where),
        device_name=_device_name(torch, where),
        torch_version=torch.__version__,
        measured_with=MEASURED_WITH[where.type],
        dtype=dtype,
        compute_dtype=COMPUTE_DTYPES[dtype],
        tokens=tokens,
        batch=batch,
        layers=layers,
        seed=seed,
        decode_steps=decode_steps,
        layouts=tuple(results),
        note=not_built(spec),
    )


def not_built(spec: ModelSpec) -> str:
    """What `kimicount kv-cache` counts for `spec` that a run does not build, in words; '' when nothing.

    >>> not_built(k2)  # Kimi K2 has no lightning indexer; DeepSeek-V3.2's keys take 132 B
    ''
    """
    if spec.indexer is None:
        return ""
    _, indexer_bytes = indexer_keys_size(spec.mla, 1)
    return (
        f"Not built: the lightning indexer's keys ({indexer_bytes} B per token per layer), which kimicount "
        "kv-cache adds to every layout; predicted and measured bytes are the attention cache alone."
    )


# --- the environment: torch, device, memory -----------------------------------------------------------


def import_torch() -> Any:
    """torch, or a MeasureError saying how to install it (it is an optional extra). measure needs no
    NumPy: torch's warning that it cannot find it (two lines on stderr) is left out."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
            import torch
    except ImportError as error:
        if isinstance(error, ModuleNotFoundError) and error.name == "torch":
            raise MeasureError(f"measure needs torch, which is not installed: {INSTALL_HINT}") from None
        raise MeasureError(f"torch is installed but cannot be imported: {error}") from None
    return torch


def pick_device(torch: Any, requested: str) -> Any:
    """auto: the GPU when torch sees one, else the CPU; cuda without a GPU is an error, not a fallback."""
    cuda = torch.cuda.is_available()
    if requested == "cuda" and not cuda:
        raise MeasureError(
            f"--device cuda: torch {torch.__version__} sees no CUDA GPU here; use --device cpu or auto"
        )
    if requested == "cuda" or (requested == "auto" and cuda):
        return torch.device("cuda", torch.cuda.current_device())
    if requested in ("auto", "cpu"):
        return torch.device("cpu")
    raise UsageError(f"unknown device '{requested}' (expected auto, cuda or cpu)")


def _device_name(torch: Any, where: Any) -> str:
    if where.type == "cuda":
        return torch.cuda.get_device_name(where)
    return f"{platform.machine()} CPU, {torch.get_num_threads()} threads"


def _check_sizes(spec: ModelSpec, *, tokens: int, batch: int, layers: int, decode_steps: int) -> None:
    for option, value in (("--tokens", tokens), ("--batch", batch), ("--decode-steps", decode_steps)):
        require_positive(option, value)
    if not 1 <= layers <= spec.num_hidden_layers:
        raise UsageError(
            f"--layers {layers}: expected 1 to {spec.num_hidden_layers}, "
            f"the layers of {spec.name} (num_hidden_layers)"
        )


def estimated_peak_bytes(spec: ModelSpec, *, tokens: int, batch: int, layers: int, dtype: str) -> int:
    """Memory a run needs at most, roughly: the weights, the largest cache (flash) of all layers, and one
    layer's prefill transients (hidden states, latent, up-projection, keys and padded values), in the
    compute dtype. [bytes]"""
    e_cache = element_bytes(dtype)
    e_compute = element_bytes(COMPUTE_DTYPES[dtype])
    heads = spec.num_attention_heads
    cache = bytes_per_token_per_layer(spec.mla, Layout.flash, e_cache) * tokens * batch * layers
    per_token = (
        spec.hidden_size
        + spec.kv_lora_rank
        + spec.qk_rope_head_dim
        + heads * (spec.qk_nope_head_dim + spec.v_head_dim)
        + 2 * heads * spec.qk_head_dim
    )
    return _weight_elements(spec) * 4 + cache + per_token * tokens * batch * e_compute


def _weight_elements(spec: ModelSpec) -> int:
    heads, hidden = spec.num_attention_heads, spec.hidden_size
    query_in = spec.q_lora_rank or hidden
    query = (hidden * spec.q_lora_rank if spec.q_lora_rank else 0) + query_in * heads * spec.qk_head_dim
    key_value = hidden * (spec.kv_lora_rank + spec.qk_rope_head_dim)
    up = spec.kv_lora_rank * heads * (spec.qk_nope_head_dim + spec.v_head_dim)
    return query + key_value + up + heads * spec.v_head_dim * hidden


def _available_bytes(torch: Any, where: Any) -> int | None:
    """Free memory on the device: the GPU's free memory, or the host's available RAM (None if unknown)."""
    if where.type == "cuda":
        return torch.cuda.mem_get_info(where)[0]
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def _check_memory(torch: Any, where: Any, spec: ModelSpec, **sizes: Any) -> None:
    """Refuse a run that cannot fit, rather than let the OS kill it halfway."""
    need = estimated_peak_bytes(spec, **sizes)
    free = _available_bytes(torch, where)
    if free is not None and need > free:
        raise MeasureError(
            f"--tokens {sizes['tokens']:,} --batch {sizes['batch']:,} --layers {sizes['layers']} needs about "
            f"{gib(need)} GiB, more than the {gib(free)} GiB free on {where}; "
            "lower --tokens, --batch or --layers"
        )


def gib(count: int) -> str:
    """Bytes in GiB to one decimal, rounded half to even, in integer arithmetic: the sizes asked for may
    be too big for a float.

    >>> gib(3 * 2**29), gib(2**30 * 12_345), gib(2**1100 + 2**29) == f"{2**1070:,}.5"
    ('1.5', '12,345.0', True)
    """
    tenths = round(Fraction(count * 10, 2**30))
    return f"{tenths // 10:,}.{tenths % 10}"


def _sync(torch: Any, where: Any) -> None:
    if where.type == "cuda":
        torch.cuda.synchronize(where)


# --- the MLA layer ------------------------------------------------------------------------------------


class MlaLayer:
    """One DeepSeek-V3 attention layer's weights, [out, in] like nn.Linear, and its projections.

    Weights are drawn with std 1/sqrt(fan_in) so activations stay O(1); norm weights are ones.
    """

    def __init__(self, torch: Any, spec: ModelSpec, weights: dict[str, Tensor]):
        self.torch = torch
        self.spec = spec
        self.w = weights
        heads = spec.num_attention_heads
        up = weights["kv_b_proj"].view(heads, spec.qk_nope_head_dim + spec.v_head_dim, spec.kv_lora_rank)
        #: W_UK [H, qk_nope, kv_lora] and W_UV [H, v, kv_lora]: kv_b_proj's key and value rows per head
        self.w_uk = up[:, : spec.qk_nope_head_dim]
        self.w_uv = up[:, spec.qk_nope_head_dim :]
        self.softmax_scale = spec.qk_head_dim**-0.5

    @classmethod
    def random(cls, torch: Any, spec: ModelSpec, where: Any, dtype: Any, generator: Any) -> MlaLayer:
        heads, hidden = spec.num_attention_heads, spec.hidden_size
        shapes = {
            "kv_a_proj_with_mqa": (spec.kv_lora_rank + spec.qk_rope_head_dim, hidden),
            "kv_b_proj": (heads * (spec.qk_nope_head_dim + spec.v_head_dim), spec.kv_lora_rank),
            "o_proj": (hidden, heads * spec.v_head_dim),
        }
        if spec.q_lora_rank is None:  # DeepSeek-V2-Lite: one plain query projection
            shapes["q_proj"] = (heads * spec.qk_head_dim, hidden)
        else:
            shapes["q_a_proj"] = (spec.q_lora_rank, hidden)
            shapes["q_b_proj"] = (heads * spec.qk_head_dim, spec.q_lora_rank)
        weights = {}
        for name, (rows, fan_in) in shapes.items():
            # drawn in fp32 and then cast, so runs in different dtypes hold the same weights
            drawn = torch.randn(rows, fan_in, generator=generator, device=where) * fan_in**-0.5
            weights[name] = drawn.to(dtype)
        return cls(torch, spec, weights)

    def query(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Per-head query parts of hidden states x [B, T, hidden]: q_nope [B, T, H, qk_nope] and the
        rotated q_rope [B, T, H, qk_rope]. q = q_b_proj(RMSNorm(q_a_proj(x))), or q_proj(x)."""
        spec = self.spec
        if spec.q_lora_rank is None:
            q = x @ self.w["q_proj"].T
        else:
            q = _rms_norm(self.torch, x @ self.w["q_a_proj"].T) @ self.w["q_b_proj"].T
        q = q.unflatten(-1, (spec.num_attention_heads, spec.qk_head_dim))
        q_nope, q_rope = q.split([spec.qk_nope_head_dim, spec.qk_rope_head_dim], dim=-1)
        return q_nope, _rotate(self.torch, q_rope, positions)

    def latent(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """What MLA caches: the normed key-value latent [B, T, kv_lora_rank] and the rotated shared
        rotary key [B, T, qk_rope], both from kv_a_proj_with_mqa(x)."""
        spec = self.spec
        compressed = x @ self.w["kv_a_proj_with_mqa"].T
        latent, rope_key = compressed.split([spec.kv_lora_rank, spec.qk_rope_head_dim], dim=-1)
        return _rms_norm(self.torch, latent), _rotate(self.torch, rope_key, positions)

    def expand(self, latent: Tensor) -> tuple[Tensor, Tensor]:
        """kv_b_proj(latent) split per head: key content [B, T, H, qk_nope] and value [B, T, H, v]."""
        spec = self.spec
        up = (latent @ self.w["kv_b_proj"].T).unflatten(-1, (spec.num_attention_heads, -1))
        return up.split([spec.qk_nope_head_dim, spec.v_head_dim], dim=-1)

    def output(self, heads: Tensor) -> Tensor:
        """o_proj over the concatenated per-head outputs [B, H, v] -> [B, hidden]."""
        return heads.flatten(-2) @ self.w["o_proj"].T


def _rms_norm(torch: Any, x: Tensor) -> Tensor:
    """RMSNorm with unit weight, computed in fp32 as the reference implementations do."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + RMS_NORM_EPS)).to(x.dtype)


def _rotate(torch: Any, x: Tensor, positions: Tensor) -> Tensor:
    """Rotary embedding, rotate-half form, of x [B, T, ..., D] at positions [T]."""
    dim = x.shape[-1]
    inv_freq = ROPE_BASE ** -(torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim)
    angles = positions.float()[:, None] * inv_freq[None]
    angles = torch.cat([angles, angles], dim=-1).view(len(positions), *[1] * (x.dim() - 3), dim)
    first, second = x.float().chunk(2, dim=-1)
    rotated_half = torch.cat([-second, first], dim=-1)
    return (x.float() * angles.cos() + rotated_half * angles.sin()).to(x.dtype)


def _store(torch: Any, source: Tensor, dtype: Any, width: int | None = None) -> Tensor:
    """Write `source` into a fresh cache buffer of its own, as an engine writes into its cache: a view of
    a bigger projection output would keep that whole output alive. With `width`, the last dimension is
    zero-padded to it (the flash layout's values)."""
    width = width or source.shape[-1]
    make = torch.zeros if width > source.shape[-1] else torch.empty
    buffer = make(*source.shape[:-1], width, dtype=dtype, device=source.device)
    buffer[..., : source.shape[-1]].copy_(source)
    return buffer


# --- the cache layouts --------------------------------------------------------------------------------


class NaiveCache:
    """Per head, the full key (content + rotary, 192 wide) and value (128 wide), as HF's cache holds
    them: keys [B, H, T, qk_head_dim], values [B, H, T, v_head_dim]."""

    layout = Layout.naive

    def __init__(self, keys: Tensor, values: Tensor):
        self.keys, self.values = keys, values

    @classmethod
    def value_width(cls, spec: ModelSpec) -> int:
        return spec.v_head_dim

    @classmethod
    def prefill(cls, layer: MlaLayer, x: Tensor, positions: Tensor, dtype: Any) -> NaiveCache:
        torch, spec = layer.torch, layer.spec
        latent, rope_key = layer.latent(x, positions)
        key_content, value = layer.expand(latent)
        heads = spec.num_attention_heads
        keys = torch.cat([key_content, rope_key[:, :, None].expand(-1, -1, heads, -1)], dim=-1)
        return cls(
            _store(torch, keys.transpose(1, 2), dtype),
            _store(torch, value.transpose(1, 2), dtype, cls.value_width(spec)),
        )

    def named_tensors(self) -> dict[str, Tensor]:
        return {"keys": self.keys, "values": self.values}

    @staticmethod
    def prepare_query(layer: MlaLayer, q_nope: Tensor, q_rope: Tensor) -> Any:
        """The query as this cache needs it: per head, content and rotary parts side by side [B, H, 192]."""
        return layer.torch.cat([q_nope, q_rope], dim=-1)

    def scores(self, query: Tensor) -> Tensor:
        """Unscaled q·k for every cached token: [B, H, T]."""
        return (self.keys.to(query.dtype) @ query[..., None]).squeeze(-1)

    def mix(self, weights: Tensor) -> Tensor:
        """Attention-weighted sum of the cached values: weights [B, H, T] -> [B, H, value width]."""
        return (weights[..., None, :] @ self.values.to(weights.dtype)).squeeze(-2)

    @staticmethod
    def head_outputs(layer: MlaLayer, mixed: Tensor) -> Tensor:
        return mixed[..., : layer.spec.v_head_dim]  # drop the flash layout's padding


class FlashCache(NaiveCache):
    """As naive, but each value zero-padded to the key width before it is stored (flash-attention kernels
    want equal head dims for keys and values): values [B, H, T, qk_head_dim]."""

    layout = Layout.flash

    @classmethod
    def value_width(cls, spec: ModelSpec) -> int:
        return max(spec.qk_head_dim, spec.v_head_dim)


class LatentCache:
    """MLA's own cache: one key-value latent per token for all heads, latent [B, T, kv_lora_rank], and the
    shared rotary key, rope_key [B, T, qk_rope]. Decoding absorbs the up-projections:

        score_h = (q_nope_h · W_UK_h) · c + q_rope_h · k_rope     (W_UK_h: [qk_nope, kv_lora])
        out_h   = W_UV_h · Σ_t p_t c_t                             (W_UV_h: [v, kv_lora])

    which equals attending over the expanded keys k_h = W_UK_h c and values v_h = W_UV_h c.
    """

    layout = Layout.latent

    def __init__(self, latent: Tensor, rope_key: Tensor):
        self.latent, self.rope_key = latent, rope_key

    @classmethod
    def prefill(cls, layer: MlaLayer, x: Tensor, positions: Tensor, dtype: Any) -> LatentCache:
        torch = layer.torch
        latent, rope_key = layer.latent(x, positions)
        return cls(_store(torch, latent, dtype), _store(torch, rope_key, dtype))

    def named_tensors(self) -> dict[str, Tensor]:
        return {"latent": self.latent, "rope_key": self.rope_key}

    def latent_values(self, dtype: Any) -> Tensor:
        return self.latent.to(dtype)

    @staticmethod
    def prepare_query(layer: MlaLayer, q_nope: Tensor, q_rope: Tensor) -> Any:
        """W_UK absorbed: each head's content query becomes a kv_lora-wide query on the latent."""
        return layer.torch.einsum("bhn,hnc->bhc", q_nope, layer.w_uk), q_rope

    def scores(self, query: Any) -> Tensor:
        latent_query, q_rope = query
        latent = self.latent_values(latent_query.dtype)
        rope_key = self.rope_key.to(q_rope.dtype)
        return latent_query @ latent.transpose(-1, -2) + q_rope @ rope_key.transpose(-1, -2)

    def mix(self, weights: Tensor) -> Tensor:
        """The attention-weighted latent per head: [B, H, T] -> [B, H, kv_lora_rank]."""
        return weights @ self.latent_values(weights.dtype)

    @staticmethod
    def head_outputs(layer: MlaLayer, mixed: Tensor) -> Tensor:
        """W_UV absorbed into the output: each head's weighted latent -> its v_head_dim output."""
        return layer.torch.einsum("bhc,hvc->bhv", mixed, layer.w_uv)


class FlashMlaFp8Cache(LatentCache):
    """FlashMLA's FP8 cache: the latent in float8_e4m3fn with one F32 scale per 128 values, and the rotary
    key in bf16 whatever the cache dtype: latent [B, T, kv_lora], scales [B, T, kv_lora / 128],
    rope_key [B, T, qk_rope] = 512 + 16 + 128 = 656 bytes per token for Kimi K2."""

    layout = Layout.flashmla_fp8

    def __init__(self, latent: Tensor, scales: Tensor, rope_key: Tensor):
        super().__init__(latent, rope_key)
        self.scales = scales

    @classmethod
    def prefill(cls, layer: MlaLayer, x: Tensor, positions: Tensor, dtype: Any) -> FlashMlaFp8Cache:
        """`dtype` is ignored: this format fixes its own (fp8 latent, F32 scales, bf16 rotary key)."""
        torch = layer.torch
        latent, rope_key = layer.latent(x, positions)
        quantized, scales = _quantize_fp8(torch, latent)
        return cls(quantized, scales, _store(torch, rope_key, torch.bfloat16))

    def named_tensors(self) -> dict[str, Tensor]:
        return {"latent": self.latent, "scales": self.scales, "rope_key": self.rope_key}

    def latent_values(self, dtype: Any) -> Tensor:
        return _dequantize_fp8(self.latent, self.scales).to(dtype)


def _groups_of_128(values: Tensor, dtype: Any) -> Tensor:
    """[..., C] -> [..., ceil(C / 128), 128] in `dtype`, the last group zero-padded."""
    width = values.shape[-1]
    groups = math.ceil(width / FP8_SCALE_GROUP)
    padded = values.new_zeros((*values.shape[:-1], groups * FP8_SCALE_GROUP), dtype=dtype)
    padded[..., :width] = values
    return padded.unflatten(-1, (groups, FP8_SCALE_GROUP))


def _quantize_fp8(torch: Any, values: Tensor) -> tuple[Tensor, Tensor]:
    """Per group of 128: scale = max |value| / 448 (F32), stored value = value / scale in e4m3."""
    groups = _groups_of_128(values, torch.float32)
    scales = groups.abs().amax(-1).clamp(min=torch.finfo(torch.float32).tiny) / FP8_E4M3_MAX
    quantized = (groups / scales[..., None]).flatten(-2)[..., : values.shape[-1]]
    return quantized.to(torch.float8_e4m3fn), scales


def _dequantize_fp8(quantized: Tensor, scales: Tensor) -> Tensor:
    """value = stored e4m3 value × its group's F32 scale."""
    return (_groups_of_128(quantized, scales.dtype) * scales[..., None]).flatten(-2)[
        ..., : quantized.shape[-1]
    ]


CACHES = {cache.layout: cache for cache in (NaiveCache, FlashCache, LatentCache, FlashMlaFp8Cache)}


def decode(layer: MlaLayer, cache: Any, x: Tensor, position: int, dtype: Any) -> Tensor:
    """One decode step of the token with hidden state x [B, 1, hidden] at `position`, attending over the
    cache and over itself (its own entry is written in the cache's layout and `dtype`, as an engine
    appends it): softmax(q·k / sqrt(qk_head_dim)) over the T + 1 tokens, values mixed, o_proj.
    Returns [B, hidden]."""
    torch = layer.torch
    positions = torch.tensor([position], device=x.device)
    q_nope, q_rope = layer.query(x, positions)
    entry = type(cache).prefill(layer, x, positions, dtype)
    query = cache.prepare_query(layer, q_nope[:, 0], q_rope[:, 0])
    scores = torch.cat([cache.scores(query), entry.scores(query)], dim=-1)
    weights = torch.softmax(scores.float() * layer.softmax_scale, dim=-1).to(x.dtype)
    cached = scores.shape[-1] - 1
    mixed = cache.mix(weights[..., :cached]) + entry.mix(weights[..., cached:])
    return layer.output(cache.head_outputs(layer, mixed))


def decode_tolerance(layout: Layout, dtype: str) -> float:
    """The agreement bound of a layout's decode with the naive decode, both caches in `dtype`: the looser
    of the two caches' precisions (FlashMLA's FP8 latent is fp8 whatever `dtype` is)."""
    if layout is Layout.flashmla_fp8:
        return max(DECODE_TOLERANCE[dtype], DECODE_TOLERANCE["fp8"])
    return DECODE_TOLERANCE[dtype]


# --- one run: fill, measure, decode, compare ----------------------------------------------------------


class _Run:
    """The shared state of one measurement: device, weights, sizes and the seeded inputs."""

    def __init__(self, torch: Any, where: Any, spec: ModelSpec, *, seed: int, compute: Any, **sizes: int):
        self.torch, self.where, self.spec, self.seed, self.compute = torch, where, spec, seed, compute
        self.tokens, self.batch, self.layers = sizes["tokens"], sizes["batch"], sizes["layers"]
        with torch.inference_mode():
            self.layer = MlaLayer.random(torch, spec, where, compute, self._generator(_WEIGHTS))
            self.decode_inputs = self._hidden_states(_DECODE_TOKEN, (self.layers, self.batch, 1))
        self.positions = torch.arange(self.tokens, device=where)

    def _generator(self, stream: int) -> Any:
        return self.torch.Generator(device=self.where).manual_seed(self.seed * 1000 + stream)

    def _hidden_states(self, stream: int, leading: tuple[int, ...]) -> Tensor:
        shape = (*leading, self.spec.hidden_size)
        generator = self._generator(stream)
        return self.torch.randn(shape, generator=generator, device=self.where).to(self.compute)

    def warm_up(self, dtype: str) -> None:
        """Run every layout's prefill and decode once on one token before anything is measured: cuBLAS
        allocates its workspace through the caching allocator on the first matmul and keeps it, which
        would otherwise be charged to the first cache measured."""
        store = getattr(self.torch, TORCH_DTYPES[dtype])
        x = self.decode_inputs[0]
        for cache_type in CACHES.values():
            cache = cache_type.prefill(self.layer, x, self.positions[:1], store)
            decode(self.layer, cache, x, 1, store)
        _sync(self.torch, self.where)

    def measure_layout(
        self, cache_type: Any, dtype: str, decode_steps: int, reference: Tensor | None
    ) -> tuple[LayoutMeasurement, Tensor]:
        """Fill, measure and decode one layout; returns the result and its decode outputs."""
        store = getattr(self.torch, TORCH_DTYPES[dtype])
        caches, allocated, peak = self._fill(cache_type, store)
        storage = storage_bytes([t for cache in caches for t in cache.named_tensors().values()])
        measured = storage if allocated is None else allocated
        per_layer = bytes_per_token_per_layer(self.spec.mla, cache_type.layout, element_bytes(dtype))
        predicted = per_layer * self.tokens * self.batch * self.layers
        outputs, ms = self._time_decode(caches, store, decode_steps)
        tensors = tuple(_describe(name, t) for name, t in caches[0].named_tensors().items())
        del caches  # free this layout's cache before the next one is filled
        result = LayoutMeasurement(
            layout=cache_type.layout,
            predicted_bytes=predicted,
            measured_bytes=measured,
            storage_bytes=storage,
            peak_bytes=peak,
            tensors=tensors,
            decode_ms=ms,
            decode_error=None if reference is None else _relative_error(outputs, reference),
            decode_tolerance=None if reference is None else decode_tolerance(cache_type.layout, dtype),
            note=_difference_note(predicted, storage, measured),
        )
        return result, outputs

    def _fill(self, cache_type: Any, store: Any) -> tuple[list[Any], int | None, int | None]:
        """Prefill every layer's cache. On CUDA also what the allocator holds afterwards minus before, and
        its peak above the memory held before the first layer (cache plus transient projections)."""
        torch, where, cuda = self.torch, self.where, self.where.type == "cuda"
        caches, retained, peak = [], 0, 0
        for index in range(self.layers):
            x = self._hidden_states(_FIRST_PREFILL + index, (self.batch, self.tokens))
            if cuda:
                torch.cuda.synchronize(where)
                torch.cuda.reset_peak_memory_stats(where)
                before = torch.cuda.memory_allocated(where)
            caches.append(cache_type.prefill(self.layer, x, self.positions, store))
            if cuda:
                torch.cuda.synchronize(where)
                peak = max(peak, retained + torch.cuda.max_memory_allocated(where) - before)
                retained += torch.cuda.memory_allocated(where) - before
            del x
        return caches, (retained if cuda else None), (peak if cuda else None)

    def _time_decode(self, caches: list[Any], dtype: Any, steps: int) -> tuple[Tensor, float]:
        """One warm-up decode step (whose outputs are compared), then the median of `steps` timed ones.
        [ms per step, all layers]"""

        def step() -> Tensor:
            return self.torch.stack(
                [
                    decode(self.layer, cache, x, self.tokens, dtype)
                    for cache, x in zip(caches, self.decode_inputs)
                ]
            )

        outputs = step()
        times = []
        for _ in range(steps):
            _sync(self.torch, self.where)
            start = time.perf_counter()
            step()
            _sync(self.torch, self.where)
            times.append(time.perf_counter() - start)
        return outputs, statistics.median(times) * 1000


def storage_bytes(tensors: list[Any]) -> int:
    """Bytes of the distinct storages behind `tensors` (a storage shared by two views counts once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def _relative_error(outputs: Tensor, reference: Tensor) -> float:
    """max |outputs − reference| / max |reference|, in fp32."""
    difference = (outputs.float() - reference.float()).abs().max()
    return float(difference / reference.float().abs().max())


def _describe(name: str, tensor: Tensor) -> CacheTensor:
    dtype = str(tensor.dtype).removeprefix("torch.")
    return CacheTensor(name, tuple(tensor.shape), dtype, tensor.untyped_storage().nbytes())


def _difference_note(predicted: int, storage: int, measured: int) -> str:
    """Why measured differs from predicted, in words; empty when they are equal."""
    notes = []
    if storage != predicted:
        notes.append(f"the cache tensors hold {storage - predicted:+,} B against the prediction")
    if measured != storage:
        notes.append(
            f"allocator {measured - storage:+,} B over the tensors' storage: CUDA's caching allocator rounds "
            "each block up to a multiple of 512 B and does not split off a remainder under 1 MiB"
        )
    return "; ".join(notes)
