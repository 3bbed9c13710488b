"""Verification: join a checkpoint's headers with the component tree, tensor by tensor.

Every tensor in the checkpoint is classified — a weight of a tree node, an FP8 block scale, a rotary
buffer, a weight of the multi-token-prediction module, or unknown — and every tensor the tree expects
is looked up. Names, shapes and dtypes are compared; scales are checked against their weights; the
index is checked against the headers. The result holds every mismatch and the counts side by side.
"""

from __future__ import annotations

import math
import operator
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from kimicount.anatomy import Anatomy, Node, Role, TensorRef
from kimicount.checkpoint import INDEX_FILE, Checkpoint
from kimicount.headers import TensorInfo
from kimicount.spec import ModelSpec

FP8_SCALE_SUFFIX = "_scale_inv"  # X.weight -> X.weight_scale_inv
ROTARY_SUFFIX = ".rotary_emb.inv_freq"

#: config torch_dtype -> the safetensors dtype name of unquantized tensors
_STORAGE_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
_FP8_DTYPES = {"e4m3": "F8_E4M3", "e5m2": "F8_E5M2"}


@dataclass(frozen=True)
class ExpectedGroup:
    """Tensors the trees expect under one name pattern (a tensor in every layer, or in every expert of
    every layer), all of one shape and role; `parts` are the components that own them (two for the
    tensors MLA splits between components, each with the elements it owns)."""

    shape: tuple[int, ...]
    role: Role
    mtp: bool
    parts: tuple[tuple[int, int], ...]  # (component id, elements owned per tensor)
    names: tuple[str, ...]
    layers: tuple[int | None, ...]  # each name's layer index (None outside the layers)
    scale_shape: tuple[int, int] | None  # the FP8 block scale each tensor has, if quantized

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


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


def expected_groups(anatomy: Anatomy, components: list[_Component]) -> list[ExpectedGroup]:
    """Every tensor the trees expect, grouped by name pattern; the references that split one tensor
    between components (same pattern, same layers) become one group with two parts."""
    spec = anatomy.spec
    mtp_first = len(components) - sum(1 for _ in anatomy.mtp.walk()) if anatomy.mtp else len(components)
    refs: dict[tuple, list[tuple[int, TensorRef]]] = defaultdict(list)
    for component_id, component in enumerate(components):
        for ref in component.node.tensors:
            refs[ref.pattern, ref.layers, ref.experts].append((component_id, ref))
    groups = []
    for owners in refs.values():
        ref = owners[0][1]
        layers, names = zip(*ref.layer_names())
        quantized = spec.quantization is not None and ref.role is Role.LINEAR
        groups.append(
            ExpectedGroup(
                shape=ref.shape,
                role=ref.role,
                mtp=owners[0][0] >= mtp_first,
                parts=tuple((component_id, r.elements) for component_id, r in owners),
                names=names,
                layers=layers,
                scale_shape=fp8_scale_shape(spec, ref.shape) if quantized else None,
            )
        )
    return groups


def verify(anatomy: Anatomy, checkpoint: Checkpoint) -> VerifyReport:
    """Check every tensor of the checkpoint against the anatomy; collect counts and mismatches."""
    spec = anatomy.spec
    components = _components(anatomy)
    groups = expected_groups(anatomy, components)
    found = checkpoint.tensors
    mismatches: list[Mismatch] = []
    kinds: dict[str, list[TensorInfo]] = defaultdict(list)
    parts = _PartCounts(spec, components)

    # Every tensor the trees expect: present, of its shape and dtype, with its scale if quantized.
    # (Column-wise comprehensions: a 1T checkpoint has 70,000 expected tensors.)
    for group in groups:
        dtypes = storage_dtypes(spec, group.role)
        tensors = [found.get(name) for name in group.names]
        verified = [t is not None and t.shape == group.shape for t in tensors]
        parts.add(group, Counter(zip(group.layers, verified)))
        present = [t for t in tensors if t is not None]
        kinds["mtp" if group.mtp else "weights"] += present
        mismatches += [
            Mismatch(name, "missing", f"{list(group.shape)} {' or '.join(dtypes)}", "absent")
            for name, t in zip(group.names, tensors)
            if t is None
        ]
        mismatches += [
            Mismatch(t.name, "shape", str(list(group.shape)), str(list(t.shape)))
            for t in present
            if t.shape != group.shape
        ]
        mismatches += [
            Mismatch(t.name, "dtype", " or ".join(dtypes), t.dtype) for t in present if t.dtype not in dtypes
        ]
        if group.scale_shape is not None:
            mismatches += _check_scales(
                [t.name + FP8_SCALE_SUFFIX for t in present], group.scale_shape, found
            )

    # Every other tensor of the checkpoint: an FP8 scale (checked above with its weight), a rotary
    # buffer, or unknown.
    others = found.keys() - {name for group in groups for name in group.names}
    scales = {name for name in others if name.endswith(FP8_SCALE_SUFFIX)}
    rotary = {name for name in others if name.endswith(ROTARY_SUFFIX)}
    unknown = others - scales - rotary
    orphans = scales - {
        name + FP8_SCALE_SUFFIX for group in groups if group.scale_shape for name in group.names
    }
    kinds["fp8_scales"] = [found[name] for name in scales]
    kinds["rotary_buffers"] = [found[name] for name in rotary]
    kinds["unknown"] = [found[name] for name in sorted(unknown)]
    mismatches += [
        Mismatch(name, "scale", "no scale (no FP8-quantized weight of that name)", _describe(found[name]))
        for name in sorted(orphans)
    ]
    mismatches += [
        Mismatch(t.name, "unexpected", "no such tensor in the model", _describe(t)) for t in kinds["unknown"]
    ]

    mismatches += _check_index(checkpoint)
    tallies = {kind: Tally.of(tensors) for kind, tensors in kinds.items()}
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


def _check_scales(names: list[str], shape: tuple[int, int], found: dict[str, TensorInfo]) -> list[Mismatch]:
    """Quantized weights' FP8 block scales: present, one F32 per block."""
    scales = [found.get(name) for name in names]
    expected = f"{list(shape)} F32"
    return [
        Mismatch(name, "scale", expected, "absent" if scale is None else _describe(scale))
        for name, scale in zip(names, scales)
        if scale is None or scale.shape != shape or scale.dtype != "F32"
    ]


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

    def add(self, group: ExpectedGroup, tally: Counter) -> None:
        """Count a group's tensors from a Counter of (layer, verified) pairs."""
        for (layer, verified), n in tally.items():
            count = self.counts[group.parts, layer, group.elements]
            count[0] += n
            count[1] += n if verified else 0

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
