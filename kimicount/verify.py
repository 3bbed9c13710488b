"""Verification: join a checkpoint's headers with the component tree, tensor by tensor.

Every tensor in the checkpoint is classified — a weight of a tree node, an FP8 block scale, a rotary
buffer, a weight of the multi-token-prediction module, or unknown — and every tensor the tree expects
is looked up. Names, shapes and dtypes are compared; scales are checked against their weights; the
index is checked against the headers. The result holds every mismatch and the counts side by side.
"""

from __future__ import annotations

import math
import operator
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from kimicount.anatomy import Anatomy, Node, Role
from kimicount.checkpoint import INDEX_FILE, Checkpoint
from kimicount.headers import TensorInfo
from kimicount.spec import ModelSpec

FP8_SCALE_SUFFIX = "_scale_inv"  # X.weight -> X.weight_scale_inv
ROTARY_SUFFIX = ".rotary_emb.inv_freq"

#: config torch_dtype -> the safetensors dtype name of unquantized tensors
_STORAGE_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
_FP8_DTYPES = {"e4m3": "F8_E4M3", "e5m2": "F8_E5M2"}


class ExpectedTensor(NamedTuple):
    """A tensor the trees say the checkpoint holds."""

    name: str
    shape: tuple[int, ...]
    role: Role
    mtp: bool
    layer: int | None
    #: (component id, elements it owns) per owning component: two for the tensors MLA splits
    parts: tuple[tuple[int, int], ...]
    elements: int
    #: stored as FP8 with a block scale (a Linear weight of an FP8 checkpoint)
    quantized: bool


@dataclass(frozen=True)
class Mismatch:
    tensor: str
    kind: str  # missing | unexpected | shape | dtype | scale | index | duplicate | total_size
    expected: str
    found: str


_elements = operator.attrgetter("elements")
_nbytes = operator.attrgetter("nbytes")


@dataclass
class Tally:
    tensors: int = 0
    elements: int = 0
    bytes: int = 0

    @classmethod
    def of(cls, tensors: list[TensorInfo]) -> Tally:
        return cls(
            len(tensors),
            sum(map(_elements, tensors)),
            sum(map(_nbytes, tensors)),
        )


@dataclass(frozen=True)
class Counts:
    """Expected against verified (present with the expected shape): tensors and elements."""

    expected_tensors: int
    expected_elements: int
    verified_tensors: int
    verified_elements: int

    @property
    def ok(self) -> bool:
        return (self.expected_tensors, self.expected_elements) == (
            self.verified_tensors,
            self.verified_elements,
        )


@dataclass(frozen=True)
class ComponentCheck:
    name: str
    depth: int  # in the component tree, root = 0
    counts: Counts


@dataclass(frozen=True)
class LayerCheck:
    index: int
    kind: str  # dense | moe | mtp
    counts: Counts


@dataclass(frozen=True)
class VerifyReport:
    source: str
    model: str
    tensors: int
    parameters_expected: int
    parameters_found: int
    mtp_expected: int
    weights: Tally
    mtp: Tally
    fp8_scales: Tally
    rotary_buffers: Tally
    unknown: Tally
    by_dtype: dict[str, Tally]
    index_total_size: int | None
    data_bytes: int
    components: tuple[ComponentCheck, ...]
    layers: tuple[LayerCheck, ...]
    mismatches: tuple[Mismatch, ...]
    bytes_read: int
    requests: int
    files: int

    @property
    def ok(self) -> bool:
        return not self.mismatches


def storage_dtypes(spec: ModelSpec, role: Role) -> tuple[str, ...]:
    """The dtypes a tensor of this role may be stored in, from the config.

    FP8 checkpoints (`quantization_config.quant_method: fp8`) store Linear weights in FP8 with F32
    block scales; norms, embedding, head and router stay in the checkpoint dtype; the router's
    score-correction bias is F32. Norms may also be F32: DeepSeek-V3.2 keeps them so.

    >>> storage_dtypes(k2, Role.LINEAR), storage_dtypes(k2, Role.NORM), storage_dtypes(k2, Role.ROUTER_BIAS)
    (('F8_E4M3',), ('BF16', 'F32'), ('F32',))
    """
    base = _STORAGE_DTYPES.get(spec.torch_dtype, "BF16")
    if role is Role.ROUTER_BIAS:
        return ("F32",)
    if role is Role.NORM:
        return (base,) if base == "F32" else (base, "F32")
    if role is Role.LINEAR and spec.quantization is not None:
        return (_FP8_DTYPES.get(spec.quantization.fmt, "F8_E4M3"),)
    return (base,)


def fp8_scale_shape(spec: ModelSpec, weight_shape: tuple[int, ...]) -> tuple[int, int]:
    """One F32 scale per weight_block_size block: ceil(out / block_out) × ceil(in / block_in).

    >>> fp8_scale_shape(k2, (576, 7168))  # kv_a_proj_with_mqa
    (5, 56)
    """
    assert spec.quantization is not None
    return _scale_shape(spec.quantization.block, weight_shape)


@lru_cache(maxsize=256)  # a checkpoint has a handful of weight shapes and 70,000 scales
def _scale_shape(block: tuple[int, int], weight_shape: tuple[int, ...]) -> tuple[int, int]:
    return (-(-weight_shape[0] // block[0]), -(-weight_shape[1] // block[1]))


class _Component(NamedTuple):
    node: Node
    depth: int
    chain: tuple[int, ...]  # ids of the component's ancestors, root first, ending with its own


def _components(anatomy: Anatomy) -> list[_Component]:
    """Every node of the trees (main model, then MTP) in display order, numbered by position."""
    rows: list[_Component] = []

    def visit(node: Node, depth: int, ancestors: tuple[int, ...]) -> None:
        chain = (*ancestors, len(rows))
        rows.append(_Component(node, depth, chain))
        for child in node.children:
            visit(child, depth + 1, chain)

    for root in [anatomy.model] + ([anatomy.mtp] if anatomy.mtp else []):
        visit(root, 0, ())
    return rows


def expected_tensors(
    anatomy: Anatomy, components: list[_Component] | None = None
) -> dict[str, ExpectedTensor]:
    """Every tensor name the trees expect, with its shape, role, layer and owning components."""
    components = components or _components(anatomy)
    mtp_root = len(components) - sum(1 for _ in anatomy.mtp.walk()) if anatomy.mtp else len(components)
    fp8 = anatomy.spec.quantization is not None
    expected: dict[str, ExpectedTensor] = {}
    for component_id, (node, _, _) in enumerate(components):
        for ref in node.tensors:
            part = (component_id, ref.elements)
            elements = math.prod(ref.shape)
            quantized = fp8 and ref.role is Role.LINEAR
            for layer, name in ref.layer_names():
                known = expected.get(name)
                parts = (*known.parts, part) if known else (part,)
                expected[name] = ExpectedTensor(
                    name, ref.shape, ref.role, component_id >= mtp_root, layer, parts, elements, quantized
                )
    return expected


def verify(anatomy: Anatomy, checkpoint: Checkpoint) -> VerifyReport:
    """Check every tensor of the checkpoint against the anatomy; collect counts and mismatches."""
    spec = anatomy.spec
    components = _components(anatomy)
    expected = expected_tensors(anatomy, components)
    found = checkpoint.tensors
    mismatches: list[Mismatch] = []

    # Every checkpoint tensor: classify it and check it against what the tree says.
    groups: dict[str, list[TensorInfo]] = defaultdict(list)
    dtypes = {role: storage_dtypes(spec, role) for role in Role}
    for name, tensor in found.items():
        want = expected.get(name)
        if want is not None:
            groups["mtp" if want.mtp else "weights"].append(tensor)
            if tensor.shape != want.shape:
                mismatches.append(Mismatch(name, "shape", str(list(want.shape)), str(list(tensor.shape))))
            if tensor.dtype not in dtypes[want.role]:
                mismatches.append(Mismatch(name, "dtype", " or ".join(dtypes[want.role]), tensor.dtype))
        elif name.endswith(FP8_SCALE_SUFFIX):
            groups["fp8_scales"].append(tensor)
            mismatches += _check_scale(spec, expected, tensor)
        elif name.endswith(ROTARY_SUFFIX):
            groups["rotary_buffers"].append(tensor)
        else:
            groups["unknown"].append(tensor)
            mismatches.append(Mismatch(name, "unexpected", "no such tensor in the model", _describe(tensor)))

    # Every tensor the tree expects: present? (and its scale, if quantized); counts per part.
    parts = _PartCounts(spec, components)
    for name, want in expected.items():
        tensor = found.get(name)
        parts.add(want, tensor is not None and tensor.shape == want.shape)
        if tensor is None:
            mismatches.append(Mismatch(name, "missing", _describe_expected(spec, want), "absent"))
        elif want.quantized and name + FP8_SCALE_SUFFIX not in found:
            scale = fp8_scale_shape(spec, want.shape)
            mismatches.append(Mismatch(name + FP8_SCALE_SUFFIX, "scale", f"{list(scale)} F32", "absent"))

    mismatches += _check_index(checkpoint)
    tallies = {group: Tally.of(tensors) for group, tensors in groups.items()}
    by_dtype: dict[str, list[TensorInfo]] = defaultdict(list)
    for tensor in found.values():
        by_dtype[tensor.dtype].append(tensor)
    empty = Tally()
    return VerifyReport(
        source=checkpoint.source,
        model=spec.name,
        tensors=len(found),
        parameters_expected=anatomy.total,
        parameters_found=tallies.get("weights", empty).elements + tallies.get("unknown", empty).elements,
        mtp_expected=anatomy.mtp.params if anatomy.mtp else 0,
        weights=tallies.get("weights", empty),
        mtp=tallies.get("mtp", empty),
        fp8_scales=tallies.get("fp8_scales", empty),
        rotary_buffers=tallies.get("rotary_buffers", empty),
        unknown=tallies.get("unknown", empty),
        by_dtype={dtype: Tally.of(by_dtype[dtype]) for dtype in sorted(by_dtype)},
        index_total_size=checkpoint.index.total_size if checkpoint.index else None,
        data_bytes=checkpoint.data_bytes,
        components=parts.component_checks(),
        layers=parts.layer_checks(),
        mismatches=tuple(mismatches),
        bytes_read=checkpoint.bytes_read,
        requests=checkpoint.requests,
        files=len(checkpoint.files),
    )


def _describe(tensor: TensorInfo) -> str:
    return f"{list(tensor.shape)} {tensor.dtype}"


def _describe_expected(spec: ModelSpec, want: ExpectedTensor) -> str:
    return f"{list(want.shape)} {' or '.join(storage_dtypes(spec, want.role))}"


def _check_scale(spec: ModelSpec, expected: dict[str, ExpectedTensor], scale: TensorInfo) -> list[Mismatch]:
    """An FP8 block scale must belong to a quantized Linear weight and have one F32 per block."""
    weight = expected.get(scale.name.removesuffix(FP8_SCALE_SUFFIX))
    if weight is None or not weight.quantized:
        return [
            Mismatch(scale.name, "scale", "no scale (no FP8-quantized weight of that name)", _describe(scale))
        ]
    want = _scale_shape(spec.quantization.block, weight.shape)
    if scale.shape != want or scale.dtype != "F32":
        return [Mismatch(scale.name, "scale", f"{list(want)} F32", _describe(scale))]
    return []


def _check_index(checkpoint: Checkpoint) -> list[Mismatch]:
    """The index must name the file that really holds each tensor, and declare the data size."""
    mismatches = [
        Mismatch(name, "duplicate", "in one file", "in several files") for name in checkpoint.duplicates
    ]
    index = checkpoint.index
    if index is None:
        return mismatches
    if index.total_size is not None and index.total_size != checkpoint.data_bytes:
        mismatches.append(
            Mismatch(
                INDEX_FILE,
                "total_size",
                f"{checkpoint.data_bytes:,} (sum of the headers)",
                f"{index.total_size:,}",
            )
        )
    located = {name: tensor.file for name, tensor in checkpoint.tensors.items()}
    if index.weight_map is None or index.weight_map == located:  # the common case, compared in C
        return mismatches
    for name, tensor in checkpoint.tensors.items():
        listed = index.weight_map.get(name)
        if listed != tensor.file:
            mismatches.append(
                Mismatch(name, "index", f"listed in {INDEX_FILE}", f"in {tensor.file}, listed in {listed}")
            )
    for name, file in index.weight_map.items():
        if name not in checkpoint.tensors:
            mismatches.append(Mismatch(name, "index", f"in {file}, as {INDEX_FILE} says", "in no file"))
    return mismatches


class _PartCounts:
    """Expected against verified tensors and elements, per component and per layer.

    Tensors are counted by what decides their rows (owning components, layer, size) and spread over
    the components at the end: one dict update per tensor keeps a 1T checkpoint's 70,000 weights fast.
    A tensor counts once in every component above its owners, so the tensors MLA splits between two
    components count once in the group that holds both."""

    def __init__(self, spec: ModelSpec, components: list[_Component]):
        self.spec = spec
        self.components = components
        self.counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])

    def add(self, want: ExpectedTensor, verified: bool) -> None:
        count = self.counts[want.parts, want.layer, want.elements]
        count[0] += 1
        count[1] += verified

    def component_checks(self) -> tuple[ComponentCheck, ...]:
        n = len(self.components)
        tensors, verified, verified_elements = [0] * n, [0] * n, [0] * n
        for (parts, _, _), (expected_count, verified_count) in self.counts.items():
            chains = [self.components[component_id].chain for component_id, _ in parts]
            for ancestor in set(chains[0]).union(*chains[1:]):
                tensors[ancestor] += expected_count
                verified[ancestor] += verified_count
            for chain, (_, elements) in zip(chains, parts):
                for ancestor in chain:
                    verified_elements[ancestor] += verified_count * elements
        return tuple(
            ComponentCheck(
                c.node.name, c.depth, Counts(tensors[i], c.node.params, verified[i], verified_elements[i])
            )
            for i, c in enumerate(self.components)
        )

    def layer_checks(self) -> tuple[LayerCheck, ...]:
        rows: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for (_, layer, elements), (expected_count, verified_count) in self.counts.items():
            if layer is not None:
                row = rows[layer]
                row[0] += expected_count
                row[1] += expected_count * elements
                row[2] += verified_count
                row[3] += verified_count * elements
        return tuple(LayerCheck(i, self._kind(i), Counts(*rows[i])) for i in sorted(rows))

    def _kind(self, layer: int) -> str:
        if layer >= self.spec.num_hidden_layers:
            return "mtp"
        return "moe" if self.spec.is_moe_layer(layer) else "dense"
