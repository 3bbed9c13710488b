"""Verification: join a checkpoint's headers with the component trees, tensor by tensor.

Every tensor the trees expect is looked up: its name, shape and dtype, and the FP8 block scale or the
packed INT4 form that stores it (kimicount.storage says how each is stored). Every other tensor of the
checkpoint is classified: an FP8 scale (it must belong to a quantized weight), a rotary buffer, or
unknown. The index is checked against the headers. The result holds every mismatch and the counts,
expected against found, per component and per layer.
"""

from __future__ import annotations

import math
import operator
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from kimicount.anatomy import Anatomy, Node, Role, TensorRef
from kimicount.checkpoint import INDEX_FILE, Checkpoint
from kimicount.headers import TensorInfo
from kimicount.spec import ModelSpec
from kimicount.storage import (
    FP8_SCALE_SUFFIX,
    PACKED_SUFFIXES,
    config_packs,
    fp8_quantized,
    fp8_scale_shape,
    packable,
    packed_layout,
    plain_dtypes,
    require_modelled,
)

ROTARY_SUFFIX = ".rotary_emb.inv_freq"
#: The trees of an anatomy, as verification names them.
MODULES = ("model", "mtp", "vision")


@dataclass(frozen=True)
class Mismatch:
    tensor: str
    kind: str  # missing | unexpected | shape | dtype | scale | packed | storage | index | duplicate | total_size
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
        return cls(len(tensors), sum(map(_elements, tensors)), sum(map(_nbytes, tensors)))

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.tensors + other.tensors, self.elements + other.elements, self.bytes + other.bytes)


@dataclass(frozen=True)
class Counts:
    """Expected against verified (present with the expected shape and dtype): tensors and elements."""

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
class PackedLinears:
    """How a pack-quantized checkpoint stores its Linears: its names decide; the config says what was
    meant, and disagreements are counted (not mismatches: real checkpoints keep some targeted layers,
    such as routers, unpacked)."""

    packed: int = 0
    plain: int = 0
    packed_against_config: int = 0
    plain_against_config: int = 0


@dataclass(frozen=True)
class VerifyReport:
    source: str
    model: str
    tensors: int
    parameters_expected: int
    parameters_found: int  # the language model's weights (packed ones as their logical size) + unknown
    weights: Tally
    mtp_expected: int
    mtp: Tally
    vision_expected: int
    vision: Tally
    fp8_scales: Tally
    int4_metadata: Tally
    rotary_buffers: Tally
    unknown: Tally
    by_dtype: dict[str, Tally]
    index_total_size: int | None
    data_bytes: int
    components: tuple[ComponentCheck, ...]
    layers: tuple[LayerCheck, ...]
    mismatches: tuple[Mismatch, ...]
    bytes_read: int | None
    requests: int
    files: int
    packed_linears: PackedLinears | None = None

    @property
    def ok(self) -> bool:
        return not self.mismatches


class _Component(NamedTuple):
    node: Node
    depth: int
    chain: tuple[int, ...]  # ids of the component's ancestors, root first, ending with its own
    module: str  # model | mtp | vision


def _components(anatomy: Anatomy) -> list[_Component]:
    """Every node of the trees (model, MTP, vision) in display order, numbered by position."""
    rows: list[_Component] = []

    def visit(node: Node, depth: int, ancestors: tuple[int, ...], module: str) -> None:
        chain = (*ancestors, len(rows))
        rows.append(_Component(node, depth, chain, module))
        for child in node.children:
            visit(child, depth + 1, chain, module)

    for module in MODULES:
        root = getattr(anatomy, module)
        if root is not None:
            visit(root, 0, (), module)
    return rows


@dataclass(frozen=True)
class ExpectedGroup:
    """Tensors the trees expect under one name pattern (a tensor in every layer, or in every expert of
    every layer), all of one shape and role; `parts` are the components that own them (two for the
    tensors MLA splits between components, each with the elements it owns)."""

    shape: tuple[int, ...]
    role: Role
    module: str
    parts: tuple[tuple[int, int], ...]  # (component id, elements owned per tensor)
    names: tuple[str, ...]
    layers: tuple[int | None, ...]  # each name's layer index; None outside the language model's layers
    dtypes: tuple[str, ...]  # when stored as itself
    fp8_scale: tuple[int, int] | None  # the block scale each tensor has, in FP8 checkpoints
    packable: bool  # a Linear a pack-quantized checkpoint may store packed

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def expected_groups(anatomy: Anatomy, components: list[_Component]) -> list[ExpectedGroup]:
    """Every tensor the trees expect, grouped by name pattern; the references that split one tensor
    between components (same pattern, same layers) become one group with two parts."""
    spec = anatomy.spec
    refs: dict[tuple, list[tuple[int, TensorRef]]] = defaultdict(list)
    for component_id, component in enumerate(components):
        for ref in component.node.tensors:
            refs[ref.pattern, ref.layers, ref.experts].append((component_id, ref))
    groups = []
    for owners in refs.values():
        component_id, ref = owners[0]
        module = components[component_id].module
        layers, names = zip(*ref.layer_names())
        groups.append(
            ExpectedGroup(
                shape=ref.shape,
                role=ref.role,
                module=module,
                parts=tuple((owner, r.elements) for owner, r in owners),
                names=names,
                layers=layers if module != "vision" else (None,) * len(names),
                dtypes=plain_dtypes(spec, ref.role),
                fp8_scale=fp8_scale_shape(spec, ref.shape) if fp8_quantized(spec, ref.role) else None,
                packable=packable(spec, ref.role) and module != "vision",
            )
        )
    return groups


@dataclass
class _Findings:
    """What the checks gather as they go."""

    mismatches: list[Mismatch] = field(default_factory=list)
    present: dict[str, list[TensorInfo]] = field(default_factory=lambda: defaultdict(list))
    packed: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))  # logical size, packed bytes
    int4_metadata: list[TensorInfo] = field(default_factory=list)
    claimed: set[str] = field(default_factory=set)  # packed-form names checked with their Linear
    linears: Counter = field(default_factory=Counter)


def verify(anatomy: Anatomy, checkpoint: Checkpoint) -> VerifyReport:
    """Check every tensor of the checkpoint against the anatomy; collect counts and mismatches."""
    spec = anatomy.spec
    require_modelled(spec)
    components = _components(anatomy)
    groups = expected_groups(anatomy, components)
    found = checkpoint.tensors
    findings = _Findings()
    parts = _PartCounts(spec, components)
    for group in groups:
        verified = (_check_packable if group.packable else _check_stored)(spec, group, found, findings)
        parts.add(group, Counter(zip(group.layers, verified)))
    kinds = _classify_the_rest(groups, found, findings)

    mismatches = findings.mismatches + _check_index(checkpoint)
    tally = {module: Tally.of(findings.present[module]) + findings.packed[module] for module in MODULES}
    by_dtype: dict[str, list[TensorInfo]] = defaultdict(list)
    for tensor in (t for file in checkpoint.files for t in file.tensors):  # duplicates too, as stored
        by_dtype[tensor.dtype].append(tensor)
    linears = findings.linears
    return VerifyReport(
        source=checkpoint.source,
        model=spec.name,
        tensors=len(found),
        parameters_expected=anatomy.total,
        parameters_found=tally["model"].elements + kinds["unknown"].elements,
        weights=tally["model"],
        mtp_expected=anatomy.mtp.params if anatomy.mtp else 0,
        mtp=tally["mtp"],
        vision_expected=anatomy.vision.params if anatomy.vision else 0,
        vision=tally["vision"],
        fp8_scales=kinds["fp8_scales"],
        int4_metadata=Tally.of(findings.int4_metadata),
        rotary_buffers=kinds["rotary_buffers"],
        unknown=kinds["unknown"],
        by_dtype={dtype: Tally.of(by_dtype[dtype]) for dtype in sorted(by_dtype)},
        index_total_size=checkpoint.index.total_size if checkpoint.index else None,
        data_bytes=checkpoint.data_bytes,
        components=parts.component_checks(),
        layers=parts.layer_checks(),
        mismatches=tuple(mismatches),
        bytes_read=checkpoint.bytes_read,
        requests=checkpoint.requests,
        files=len(checkpoint.files),
        packed_linears=PackedLinears(**linears) if any(g.packable for g in groups) else None,
    )


def _check_stored(spec: ModelSpec, group: ExpectedGroup, found: dict[str, TensorInfo], findings: _Findings):
    """Tensors stored as themselves: present, of their shape and dtype, with their FP8 scale if any.
    Column by column (a 1T checkpoint has 70,000 of them). Returns which names are verified."""
    shape, dtypes = group.shape, group.dtypes
    tensors = [found.get(name) for name in group.names]
    verified = [t is not None and t.shape == shape and t.dtype in dtypes for t in tensors]
    present = tensors if all(verified) else [t for t in tensors if t is not None]
    findings.present[group.module] += present
    if not all(verified):  # say what is wrong with each tensor that is not
        findings.mismatches += [
            Mismatch(name, "missing", f"{list(shape)} {' or '.join(dtypes)}", "absent")
            for name, t in zip(group.names, tensors)
            if t is None
        ]
        findings.mismatches += [
            Mismatch(t.name, "shape", str(list(shape)), str(list(t.shape)))
            for t in present
            if t.shape != shape
        ]
        findings.mismatches += [
            Mismatch(t.name, "dtype", " or ".join(dtypes), t.dtype) for t in present if t.dtype not in dtypes
        ]
    if group.fp8_scale is not None:
        findings.mismatches += _check_scales(
            [t.name + FP8_SCALE_SUFFIX for t in present], group.fp8_scale, found
        )
    return verified


def _check_scales(names: list[str], shape: tuple[int, int], found: dict[str, TensorInfo]) -> list[Mismatch]:
    """Quantized weights' FP8 block scales: present, one F32 per block."""
    scales = [found.get(name) for name in names]
    expected = f"{list(shape)} F32"
    return [
        Mismatch(name, "scale", expected, "absent" if scale is None else _describe(scale))
        for name, scale in zip(names, scales)
        if scale is None or scale.shape != shape or scale.dtype != "F32"
    ]


def _check_packable(spec: ModelSpec, group: ExpectedGroup, found: dict[str, TensorInfo], findings: _Findings):
    """Linears of a pack-quantized checkpoint: each stored either as itself (`X.weight`) or as the packed
    triple (`X.weight_packed`, `X.weight_scale`, `X.weight_shape`), never both, never half. The common
    case, a complete triple and no `.weight`, is checked inline (K2.5 packs 69,120 Linears); the rest
    goes to `_check_unusual`. Returns which names are verified."""
    layout = tuple(packed_layout(spec, group.shape).values())
    companions = [[f"{name[:-7]}.{suffix}" for suffix in PACKED_SUFFIXES] for name in group.names]
    findings.claimed.update(n for triple in companions for n in triple)
    verified, weights = [], []
    for name, triple in zip(group.names, companions):
        tensors = [found.get(n) for n in triple]
        if None in tensors or name in found:
            verified.append(
                _check_unusual(spec, group, name, dict(zip(PACKED_SUFFIXES, tensors)), found, findings)
            )
            continue
        wrong = [t for t, (shape, dtype) in zip(tensors, layout) if t.shape != shape or t.dtype != dtype]
        findings.mismatches += [
            Mismatch(t.name, "packed", f"{list(shape)} {dtype}", _describe(t))
            for t, (shape, dtype) in zip(tensors, layout)
            if t in wrong
        ]
        verified.append(not wrong)
        weights.append(tensors[0])
        findings.int4_metadata += tensors[1:]
    findings.packed[group.module] += Tally(
        len(weights), len(weights) * group.elements, sum(map(_nbytes, weights))
    )
    findings.linears["packed"] += len(weights)
    findings.linears["packed_against_config"] += sum(not config_packs(spec, t.name) for t in weights)
    return verified


def _check_unusual(spec, group, name, packed, found, findings: _Findings) -> bool:
    """A Linear stored as itself, both ways, half-packed, or not at all."""
    base = name.removesuffix(".weight")
    parts = {suffix: t for suffix, t in packed.items() if t is not None}
    plain = found.get(name)
    if plain is not None and parts:
        findings.mismatches.append(
            Mismatch(
                base, "storage", "X.weight or the packed triple", "both: .weight and " + ", ".join(parts)
            )
        )
        return False
    if parts:  # some of the triple, not all
        absent = [suffix for suffix in PACKED_SUFFIXES if suffix not in parts]
        findings.mismatches.append(
            Mismatch(
                base,
                "storage",
                "weight_packed, weight_scale and weight_shape",
                f"half-packed: no {', '.join(absent)}",
            )
        )
        findings.int4_metadata += [t for suffix, t in parts.items() if suffix != "weight_packed"]
        return False
    if plain is None:
        findings.mismatches.append(
            Mismatch(name, "missing", f"{list(group.shape)} as itself or packed", "absent")
        )
        return False
    findings.linears["plain"] += 1
    findings.linears["plain_against_config"] += config_packs(spec, name)
    return _check_stored(
        spec, replace(group, names=(name,), layers=(None,), fp8_scale=None), found, findings
    )[0]


def _classify_the_rest(groups: list[ExpectedGroup], found: dict[str, TensorInfo], findings: _Findings):
    """Every tensor no group claims: an FP8 scale (its weight's scale was checked with the weight; a
    scale without a quantized weight is a mismatch), a rotary buffer, or unknown."""
    expected = {name for group in groups for name in group.names}
    others = found.keys() - expected - findings.claimed
    scales = {name for name in others if name.endswith(FP8_SCALE_SUFFIX)}
    rotary = {name for name in others if name.endswith(ROTARY_SUFFIX)}
    unknown = sorted(others - scales - rotary)
    with_scale = {name + FP8_SCALE_SUFFIX for group in groups if group.fp8_scale for name in group.names}
    findings.mismatches += [
        Mismatch(name, "scale", "no scale (no FP8-quantized weight of that name)", _describe(found[name]))
        for name in sorted(scales - with_scale)
    ]
    findings.mismatches += [
        Mismatch(name, "unexpected", "no such tensor in the model", _describe(found[name]))
        for name in unknown
    ]
    return {
        "fp8_scales": Tally.of([found[name] for name in scales]),
        "rotary_buffers": Tally.of([found[name] for name in rotary]),
        "unknown": Tally.of([found[name] for name in unknown]),
    }


def _describe(tensor: TensorInfo) -> str:
    return f"{list(tensor.shape)} {tensor.dtype}"


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
    the components at the end: one dict update per group and layer keeps a 1T checkpoint's 70,000
    weights fast. A tensor counts once in every component above its owners, so the tensors MLA splits
    between two components count once in the group that holds both."""

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
