"""Verification: join a checkpoint's headers with the component trees, tensor by tensor.

Every tensor the trees expect is looked up: its name, shape and dtype, and the FP8 block scale, the
packed INT4 form or the FP4 pairs and scales that store it (kimicount.storage says how each is stored). Every other tensor of the
checkpoint is classified: an FP8 scale (it must belong to a quantized weight), a rotary buffer, or
unknown. The index is checked against the headers. The result holds every mismatch and the counts,
expected against found, per component and per layer.
"""

from __future__ import annotations

import math
import operator
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain, compress, repeat
from typing import NamedTuple

from kimicount.anatomy import Anatomy, Node, Role, TensorRef
from kimicount.checkpoint import INDEX_FILE, Checkpoint, Index, index_agrees, paused_gc
from kimicount.component_ids import tree_ids
from kimicount.headers import Kind, TensorInfo, kind_of, kind_parts
from kimicount.spec import ModelSpec
from kimicount.storage import (
    FP8_SCALE_SUFFIX,
    PACKED_SUFFIXES,
    block_scale_dtype,
    config_fp4,
    config_packed,
    fp4_e2m1_layout,
    fp4_layout,
    fp4_quantizable,
    fp4_quantized,
    fp8_quantized,
    fp8_scale_shape,
    packable,
    packed_layout,
    plain_dtypes,
    require_modelled,
    scale_names,
    scale_suffix,
    suffixed_scale_names,
)

ROTARY_SUFFIX = ".rotary_emb.inv_freq"
#: At most this many tensors that no group claims are looked up file by file (Checkpoint.kinds_of).
FEW_LEFT = 4096
#: The trees of an anatomy, as verification names them.
MODULES = ("model", "mtp", "vision")


@dataclass(frozen=True)
class Mismatch:
    tensor: str
    kind: str  # missing | unexpected | shape | dtype | scale | packed | fp4 | storage | index | duplicate | total_size
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
    id: str = ""  # its stable component id (kimicount.component_ids)


@dataclass(frozen=True)
class LayerCheck:
    index: int
    kind: str  # the block group's kind (dense | moe for the DeepSeek-V3 family, kda-moe, ...) | mtp
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
    fp4_scales: Tally = field(default_factory=Tally)  # FP4 group, global and input scales

    @property
    def ok(self) -> bool:
        return not self.mismatches


class _Component(NamedTuple):
    node: Node
    depth: int
    chain: tuple[int, ...]  # ids of the component's ancestors, root first, ending with its own
    module: str  # model | mtp | vision
    id: str  # the stable component id


def _components(anatomy: Anatomy) -> list[_Component]:
    """Every node of the trees (model, MTP, vision) in display order, numbered by position."""
    rows: list[_Component] = []
    ids = tree_ids(anatomy.model, anatomy.mtp, anatomy.vision)

    def visit(node: Node, depth: int, ancestors: tuple[int, ...], module: str) -> None:
        chain = (*ancestors, len(rows))
        rows.append(_Component(node, depth, chain, module, ids[id(node)]))
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
    ref: TensorRef  # the pattern its names come from (`names`)
    layer_counts: tuple[tuple[int | None, int], ...]  # (layer, names in it), in the order of `names`
    dtypes: tuple[str, ...]  # when stored as itself
    fp8_scale: tuple[int, int] | None  # the block scale each tensor has, in FP8 (and V4's FP4) checkpoints
    packable: bool  # a Linear a pack-quantized checkpoint may store packed
    fp4: bool = False  # a Linear an FP4 checkpoint stores in FP4 when its config says so
    #: The scale's dtype and names (X.weight_scale_inv in F32; DeepSeek V4: X.scale in F8_E8M0).
    scale_dtype: str = "F32"
    scale_suffix: str = FP8_SCALE_SUFFIX
    #: The shape each tensor is stored in when it is not its logical shape (FP4: two values a byte).
    stored: tuple[int, ...] | None = None
    #: Its names, once made (`with_names`), or given (a group of one, checked tensor by tensor).
    listed: tuple[str, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The tensor names, made each time they are asked for unless `listed`: a 1T checkpoint's half
        million are not all kept at once, each group's made just before it is checked (still in the
        cache when they are looked up) and let go after."""
        return self.listed if self.listed is not None else _names(self.ref)

    def with_names(self) -> ExpectedGroup:
        return replace(self, listed=self.names)

    def without_names(self) -> ExpectedGroup:
        return self if self.listed is None else replace(self, listed=None)

    @property
    def count(self) -> int:
        """How many tensors (names)."""
        return sum(n for _, n in self.layer_counts)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def layers(self) -> tuple[int | None, ...]:
        """Each name's layer index; None outside the language model's layers."""
        return tuple(chain.from_iterable(repeat(layer, n) for layer, n in self.layer_counts))

    @property
    def stored_shape(self) -> tuple[int, ...]:
        return self.shape if self.stored is None else self.stored

    @cached_property
    def kinds(self) -> frozenset[Kind]:
        """The shape and dtype each tensor may have when stored as itself."""
        return frozenset(kind_of(dtype, self.stored_shape) for dtype in self.dtypes)

    @property
    def scale_names(self) -> list[str]:  # made when asked (250,000 names for a 1T FP8 checkpoint), not kept
        return [] if self.fp8_scale is None else suffixed_scale_names(self.scale_suffix, self.names)

    @property
    def scale_kind(self) -> Kind:
        assert self.fp8_scale is not None
        return kind_of(self.scale_dtype, self.fp8_scale)

    def tally(self, found: Counter) -> Tally:
        """The tensors found of this group (a Counter of kinds), as parameters: their logical elements
        when stored packed (FP4), else as stored."""
        if self.stored is None:
            return _tally(found)
        stored = _tally(found)
        return Tally(stored.tensors, stored.tensors * self.elements, stored.bytes)


def _form_names(weights: Iterable[str], suffix: str) -> list[str]:
    """The names of one stored form of these Linears, `X.weight` -> `X.<suffix>`, in C: a suffix that
    begins `weight` by one concatenation (X.weight + `_packed`), any other by a cut and a concatenation."""
    if suffix.startswith("weight"):
        return list(map(operator.add, weights, repeat(suffix.removeprefix("weight"))))
    stems = map(operator.getitem, weights, repeat(slice(None, -len(".weight"))))
    return list(map(operator.add, stems, repeat(f".{suffix}")))


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
        layers = ref.layers or (None,)
        layer_counts = tuple((layer, ref.experts or 1) for layer in layers)
        if module == "vision":
            layer_counts = ((None, len(layers) * (ref.experts or 1)),)
        dtypes, stored, scale, scale_dtype = plain_dtypes(spec, ref.role), None, None, "F32"
        if fp4_quantized(spec, ref):
            layout = fp4_e2m1_layout(ref.shape)
            (stored, dtype), (scale, scale_dtype) = layout["weight"], layout["scale"]
            dtypes = (dtype,)
        elif fp8_quantized(spec, ref.role):
            scale, scale_dtype = fp8_scale_shape(spec, ref.shape), block_scale_dtype(spec)
        groups.append(
            ExpectedGroup(
                shape=ref.shape,
                role=ref.role,
                module=module,
                parts=tuple((owner, r.elements) for owner, r in owners),
                ref=ref,
                layer_counts=layer_counts,
                dtypes=dtypes,
                fp8_scale=scale,
                packable=packable(spec, ref.role) and module != "vision",
                fp4=fp4_quantizable(spec, ref.role) and module != "vision",
                scale_dtype=scale_dtype,
                scale_suffix=scale_suffix(spec),
                stored=stored,
            )
        )
    return groups


def _names(ref: TensorRef) -> tuple[str, ...]:
    """The names `ref.layer_names()` gives, in its order: the 69,120 expert names of Kimi K2 joined in C
    (the layer filled once, then only the expert index)."""
    layers = ref.layers or (None,)
    if not ref.experts:
        return tuple(ref.pattern.format(layer=layer) for layer in layers)
    names: list[str] = []
    tails: list[str] = []
    for layer in layers:
        head, tail = ref.pattern.format(layer=layer, expert="\0").split("\0")
        if not tails or tails[0] != f"0{tail}":  # each expert's index and what follows it, once
            tails = [f"{expert}{tail}" for expert in range(ref.experts)]
        names += map(operator.add, repeat(head), tails)  # one join per name
    return tuple(names)


@dataclass
class _Findings:
    """What the checks gather as they go."""

    mismatches: list[Mismatch] = field(default_factory=list)
    weights: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))  # stored as themselves
    packed: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))  # logical size, packed bytes
    int4_metadata: Tally = field(default_factory=Tally)
    fp4_scales: Tally = field(default_factory=Tally)
    #: The packed or FP4 forms checked with their Linears: (their group, which of its Linears take that
    #: form (None: all), the suffix that takes the place of `.weight`), their names made again only
    #: when some tensor is left unclaimed.
    claimed: list[tuple[ExpectedGroup, list[bool] | None, str]] = field(default_factory=list)
    present: int = 0  # names that groups verified whole found in the checkpoint (scales, packed forms too)
    linears: Counter = field(default_factory=Counter)


def verify(anatomy: Anatomy, checkpoint: Checkpoint) -> VerifyReport:
    """Check every tensor of the checkpoint against the anatomy; collect counts and mismatches.

    Group by group (one name pattern: the 69,120 up_proj weights of the routed experts are one): the
    (dtype, shape) of every name in the group, as a set, must be among the group's; then the totals are
    count × elements. Only a group that fails is checked again tensor by tensor, to name what is wrong."""
    spec = anatomy.spec
    require_modelled(spec)
    with paused_gc():
        components = _components(anatomy)
        groups = expected_groups(anatomy, components)
        findings = _Findings()
        parts = _PartCounts(anatomy, components)
        whole = []  # the groups verified whole (FP8 scales included)
        for group in groups:
            check = _check_fp4 if group.fp4 else _check_packable if group.packable else _check_stored
            verified = check(spec, group.with_names(), checkpoint, findings)
            whole.append(verified is None)
            if verified is None:
                parts.add_all(group)
            else:
                parts.add(group, Counter(zip(group.layers, verified)))
        kinds = _classify_the_rest(spec, groups, whole, checkpoint, findings)
        mismatches = findings.mismatches + _check_index(checkpoint)
        by_dtype: dict[str, Tally] = defaultdict(Tally)
        for header in checkpoint.files:  # duplicates too, as stored
            for kind, count in header.kind_counts.items():
                by_dtype[kind_parts(kind)[0]] += _times(count, kind)
    tally = {module: findings.weights[module] + findings.packed[module] for module in MODULES}
    linears = findings.linears
    return VerifyReport(
        source=checkpoint.source,
        model=spec.name,
        tensors=len(checkpoint.tensor_names),
        parameters_expected=anatomy.total,
        parameters_found=tally["model"].elements + kinds["unknown"].elements,
        weights=tally["model"],
        mtp_expected=anatomy.mtp.params if anatomy.mtp else 0,
        mtp=tally["mtp"],
        vision_expected=anatomy.vision.params if anatomy.vision else 0,
        vision=tally["vision"],
        fp8_scales=kinds["fp8_scales"],
        int4_metadata=findings.int4_metadata,
        rotary_buffers=kinds["rotary_buffers"],
        unknown=kinds["unknown"],
        by_dtype={dtype: by_dtype[dtype] for dtype in sorted(by_dtype)},
        index_total_size=checkpoint.index.total_size if checkpoint.index else None,
        data_bytes=checkpoint.data_bytes,
        components=parts.component_checks(),
        layers=parts.layer_checks(),
        mismatches=tuple(mismatches),
        bytes_read=checkpoint.bytes_read,
        requests=checkpoint.requests,
        files=len(checkpoint.files),
        packed_linears=PackedLinears(**linears) if any(g.packable for g in groups) else None,
        fp4_scales=findings.fp4_scales,
    )


def _times(count: int, kind: Kind) -> Tally:
    """`count` tensors of one kind: count × elements, count × bytes."""
    _, _, elements, nbytes = kind_parts(kind)
    return Tally(count, count * elements, count * nbytes)


def _tally(kinds: Iterable[Kind] | Counter) -> Tally:
    """The tensors of these kinds (one entry per tensor, or a Counter of them), kind by kind."""
    total = Tally()
    for kind, count in (kinds if isinstance(kinds, Counter) else Counter(kinds)).items():
        total += _times(count, kind)
    return total


def _check_stored(spec: ModelSpec, group: ExpectedGroup, checkpoint: Checkpoint, findings: _Findings):
    """Tensors stored as themselves: present, of their shape and dtype, with their FP8 scale if any.
    As a set of kinds; the tensors of a group that fails go to `_check_each_stored`. Returns None when
    every tensor is verified, else which are."""
    found = checkpoint.kind_counts(group.names)  # a missing name's kind is None, which no group has
    if found.keys() <= group.kinds and (
        group.fp8_scale is None or checkpoint.kind_counts(group.scale_names).keys() == {group.scale_kind}
    ):
        findings.weights[group.module] += group.tally(found)
        findings.present += group.count * (1 if group.fp8_scale is None else 2)
        return None
    return _check_each_stored(spec, group, checkpoint.tensors, findings)


def _check_each_stored(
    spec: ModelSpec, group: ExpectedGroup, found: dict[str, TensorInfo], findings: _Findings
):
    """`_check_stored` tensor by tensor, naming each mismatch. Returns which names are verified."""
    shape, dtypes = group.stored_shape, group.dtypes
    tensors = [found.get(name) for name in group.names]
    verified = [t is not None and t.shape == shape and t.dtype in dtypes for t in tensors]
    present = [t for t in tensors if t is not None]  # all of them when all are verified
    findings.weights[group.module] += group.tally(Counter(_describe(t) for t in present))
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
            scale_names(spec, [t.name for t in present]), group.fp8_scale, group.scale_dtype, found
        )
    return verified


def _check_scales(
    names: list[str], shape: tuple[int, int], dtype: str, found: dict[str, TensorInfo]
) -> list[Mismatch]:
    """Quantized weights' block scales: present, one `dtype` per block (F32; V4's F8_E8M0)."""
    scales = [found.get(name) for name in names]
    expected = f"{list(shape)} {dtype}"
    return [
        Mismatch(name, "scale", expected, "absent" if scale is None else _describe(scale))
        for name, scale in zip(names, scales)
        if scale is None or scale.shape != shape or scale.dtype != dtype
    ]


def _check_packable(spec: ModelSpec, group: ExpectedGroup, checkpoint: Checkpoint, findings: _Findings):
    """Linears of a pack-quantized checkpoint: each stored either as itself (`X.weight`) or as the packed
    triple (`X.weight_packed`, `X.weight_scale`, `X.weight_shape`), never both, never half. A group
    stored all one way is checked as sets of kinds (K2.5 packs 69,120 Linears in 180 groups and keeps
    the rest as themselves); any other goes to `_check_each_packable`. Returns None when every Linear
    is verified, else which are."""
    triples = [_form_names(group.names, suffix) for suffix in PACKED_SUFFIXES]
    lazy = group.without_names()
    findings.claimed += [(lazy, None, suffix) for suffix in PACKED_SUFFIXES]
    count = group.count
    every = checkpoint.tensor_names
    plain = set() if every.isdisjoint(group.names) else every.intersection(group.names)
    expected = _packed_kinds(spec, group)
    if not plain and all(
        checkpoint.kind_counts(names).keys() == {kind} for names, kind in zip(triples, expected)
    ):
        weights, *metadata = (_times(count, kind) for kind in expected)
        findings.packed[group.module] += Tally(count, count * group.elements, weights.bytes)
        findings.int4_metadata += sum(metadata, Tally())
        findings.linears["packed"] += count
        findings.linears["packed_against_config"] += count - config_packed(spec, group.names)
        findings.present += len(PACKED_SUFFIXES) * count
        return None
    if len(plain) == count and checkpoint.kind_counts(list(chain.from_iterable(triples))).keys() == {None}:
        found = checkpoint.kind_counts(group.names)
        if found.keys() <= group.kinds:
            findings.weights[group.module] += _tally(found)
            findings.linears["plain"] += count
            findings.linears["plain_against_config"] += config_packed(spec, group.names)
            findings.present += count
            return None
    return _check_each_packable(spec, group, checkpoint.tensors, findings)


def _packed_kinds(spec: ModelSpec, group: ExpectedGroup) -> tuple[Kind, ...]:
    """The kinds of weight_packed, weight_scale and weight_shape for this group's Linears."""
    return tuple(kind_of(dtype, shape) for shape, dtype in packed_layout(spec, group.shape).values())


def _check_each_packable(spec, group: ExpectedGroup, found: dict[str, TensorInfo], findings: _Findings):
    """`_check_packable` Linear by Linear: the complete triple and no `.weight` checked inline, the rest
    by `_check_unusual`. Returns which names are verified."""
    layout = tuple(packed_layout(spec, group.shape).values())
    verified, weights = [], []
    for name in group.names:
        tensors = [found.get(f"{name[:-7]}.{suffix}") for suffix in PACKED_SUFFIXES]
        if None in tensors or name in found:
            verified.append(
                _check_unusual(spec, group, name, dict(zip(PACKED_SUFFIXES, tensors)), found, findings)
            )
            continue
        triple = [t for t in tensors if t is not None]  # all three: checked just above
        wrong = [t for t, (shape, dtype) in zip(triple, layout) if t.shape != shape or t.dtype != dtype]
        findings.mismatches += [
            Mismatch(t.name, "packed", f"{list(shape)} {dtype}", _describe(t))
            for t, (shape, dtype) in zip(triple, layout)
            if t in wrong
        ]
        verified.append(not wrong)
        weights.append(triple[0])
        findings.int4_metadata += Tally.of(triple[1:])
    findings.packed[group.module] += Tally(
        len(weights), len(weights) * group.elements, sum(map(_nbytes, weights))
    )
    findings.linears["packed"] += len(weights)
    findings.linears["packed_against_config"] += len(weights) - config_packed(
        spec, (t.name[: -len(".weight_packed")] + ".weight" for t in weights)
    )
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
        findings.int4_metadata += Tally.of([t for suffix, t in parts.items() if suffix != "weight_packed"])
        return False
    if plain is None:
        findings.mismatches.append(
            Mismatch(name, "missing", f"{list(group.shape)} as itself or packed", "absent")
        )
        return False
    findings.linears["plain"] += 1
    findings.linears["plain_against_config"] += config_packed(spec, [name])
    return _check_each_stored(
        spec, replace(group, listed=(name,), layer_counts=((None, 1),), fp8_scale=None), found, findings
    )[0]


def _check_fp4(spec: ModelSpec, group: ExpectedGroup, checkpoint: Checkpoint, findings: _Findings):
    """Linears of an FP4 checkpoint: those the config quantizes as its FP4 tensors (kimicount.storage
    fp4_layout: the U8 pairs, the group scales, NVFP4's global scale, the input scale), the others as
    themselves. As sets of kinds when every tensor is as expected; otherwise Linear by Linear, naming
    each mismatch. Returns None when every Linear is verified, else which are."""
    quantized = config_fp4(spec, group.names)
    fp4 = list(compress(group.names, quantized))
    plain = list(compress(group.names, map(operator.not_, quantized)))
    parts = [
        (suffix, kind_of(dtype, shape)) for suffix, (shape, dtype) in fp4_layout(spec, group.shape).items()
    ]
    lazy = group.without_names()
    findings.claimed += [(lazy, quantized, suffix) for suffix, _ in parts]
    found = checkpoint.kind_counts(plain)
    # a missing tensor's kind is None, which no {kind} holds: one pass over each part's names, made in turn
    if found.keys() <= group.kinds and all(
        checkpoint.kind_counts(_form_names(fp4, suffix)).keys() <= {kind} for suffix, kind in parts
    ):
        count = len(fp4)
        (_, weight), *scales = parts
        findings.weights[group.module] += _tally(found)
        findings.packed[group.module] += Tally(count, count * group.elements, _times(count, weight).bytes)
        findings.fp4_scales += sum((_times(count, kind) for _, kind in scales), Tally())
        findings.present += len(plain) + len(parts) * count
        return None
    return _check_each_fp4(spec, group, quantized, checkpoint.tensors, findings)


def _check_each_fp4(spec, group: ExpectedGroup, quantized: list[bool], found, findings: _Findings):
    """`_check_fp4` Linear by Linear. Returns which names are verified."""
    layout = fp4_layout(spec, group.shape)
    verified = []
    for name, fp4 in zip(group.names, quantized):
        if not fp4:
            single = replace(group, listed=(name,), layer_counts=((None, 1),), fp8_scale=None)
            verified.append(_check_each_stored(spec, single, found, findings)[0])
            continue
        stem = name[: -len(".weight")]
        ok = True
        for index, (suffix, (shape, dtype)) in enumerate(layout.items()):
            tensor = found.get(f"{stem}.{suffix}")
            expected = f"{list(shape)} {dtype}"
            if tensor is None or tensor.shape != shape or tensor.dtype != dtype:
                what = "absent" if tensor is None else _describe(tensor)
                findings.mismatches.append(Mismatch(f"{stem}.{suffix}", "fp4", expected, what))
                ok = False
            elif index == 0:
                findings.packed[group.module] += Tally(1, group.elements, tensor.nbytes)
            else:
                findings.fp4_scales += Tally.of([tensor])
        verified.append(ok)
    return verified


def _classify_the_rest(
    spec: ModelSpec,
    groups: list[ExpectedGroup],
    whole: list[bool],
    checkpoint: Checkpoint,
    findings: _Findings,
) -> dict[str, Tally]:
    """Every tensor no group claims: an FP8 scale (its weight's scale was checked with the weight; a
    scale without a quantized weight is a mismatch), a rotary buffer, or unknown. The scales of a group
    verified whole are all there, of one kind: counted as count × elements. (No name the trees expect
    or a packed Linear claims is a scale's: those end in `_scale_inv`, or DeepSeek V4's `.scale`.)"""
    rest = _unclaimed(groups, whole, checkpoint, findings)
    # Only the names in `rest` are looked up: where they are few (Kimi K2's 61 rotary buffers) their kinds
    # alone, else every name's.
    kinds: dict[str, Kind] = checkpoint.kinds if len(rest) > FEW_LEFT else {}
    if len(rest) <= FEW_LEFT:  # each is in some file: None for none of them
        listed = sorted(rest)
        kinds = {name: kind for name, kind in zip(listed, checkpoint.kinds_of(listed)) if kind is not None}
    scales = Tally()
    for group, verified in zip(groups, whole):
        if group.fp8_scale is None:
            continue
        if verified:
            scales += _times(group.count, group.scale_kind)  # each name's one scale
        else:
            present = rest.intersection(group.scale_names)
            scales += _tally(map(kinds.__getitem__, present))
            rest -= present
    suffix = scale_suffix(spec)
    stray_scales = {name for name in rest if name.endswith(suffix)}
    rotary = {name for name in rest if name.endswith(ROTARY_SUFFIX)}
    unknown = sorted(rest - stray_scales - rotary)
    findings.mismatches += [
        Mismatch(name, "scale", "no scale (no FP8-quantized weight of that name)", kinds[name])
        for name in sorted(stray_scales)
    ]
    findings.mismatches += [
        Mismatch(name, "unexpected", "no such tensor in the model", kinds[name]) for name in unknown
    ]
    return {
        "fp8_scales": scales + _tally(map(kinds.__getitem__, stray_scales)),
        "rotary_buffers": _tally(map(kinds.__getitem__, rotary)),
        "unknown": _tally(map(kinds.__getitem__, unknown)),
    }


def _unclaimed(
    groups: list[ExpectedGroup], whole: list[bool], checkpoint: Checkpoint, findings: _Findings
) -> set[str]:
    """The names of the checkpoint that no group claims, less the FP8 scales of the groups verified
    whole (all there: they were checked with their weights). When every group is verified whole and
    found as many names as the checkpoint has, none: no two groups claim one name (the names the trees
    expect are distinct, tests/test_verify.py checks it for every bundled model), so each name is
    claimed. That spares taking Kimi K2.5's 208,550 names out of a set of them."""
    every = checkpoint.tensor_names
    if all(whole) and findings.present == len(every):
        return set()
    rest = set(every)
    for group in groups:
        rest.difference_update(group.names)
    for group, chosen, suffix in findings.claimed:
        weights = group.names if chosen is None else compress(group.names, chosen)
        rest.difference_update(_form_names(weights, suffix))
    for group, verified in zip(groups, whole):
        if verified and group.fp8_scale is not None:
            rest.difference_update(group.scale_names)
    return rest


def _describe(tensor: TensorInfo) -> str:
    return kind_of(tensor.dtype, tensor.shape)


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
    if not checkpoint.duplicates and index_agrees(index, checkpoint.files):
        return mismatches
    weight_map = index.weight_map
    if weight_map is None:  # read without its map (kimicount.checkpoint.assemble reads it again): per file
        return mismatches + _listing_mismatches(index, checkpoint)
    located = checkpoint.located
    for name, file in located.items():
        listed = weight_map.get(name)
        if listed != file:
            mismatches.append(
                Mismatch(name, "index", f"listed in {INDEX_FILE}", f"in {file}, listed in {listed}")
            )
    for name, file in weight_map.items():
        if name not in located:
            mismatches.append(Mismatch(name, "index", f"in {file}, as {INDEX_FILE} says", "in no file"))
    return mismatches


def _listing_mismatches(index: Index, checkpoint: Checkpoint) -> list[Mismatch]:
    """Each file whose tensors the index does not list, all of them and no other (counted: which names
    only its map can say)."""
    headers = {header.file: header for header in checkpoint.files}
    mismatches = []
    for file in sorted(set(headers) | set(index.listings)):
        header, listing = headers.get(file), index.listings.get(file)
        if (
            header is not None
            and listing is not None
            and index_agrees(replace(index, listings={file: listing}), [header])
        ):
            continue
        mismatches.append(
            Mismatch(
                file,
                "index",
                f"{0 if header is None else len(header.names):,} tensors, as its header says",
                f"{INDEX_FILE} lists {0 if listing is None else listing.tensors:,}, not the same",
            )
        )
    return mismatches


class _PartCounts:
    """Expected against verified tensors and elements, per component and per layer.

    Tensors are counted by what decides their rows (owning components, layer, size) and spread over
    the components at the end: one dict update per group and layer keeps a 1T checkpoint's 70,000
    weights fast. A tensor counts once in every component above its owners, so the tensors MLA splits
    between two components count once in the group that holds both."""

    def __init__(self, anatomy: Anatomy, components: list[_Component]):
        # each main layer's kind, as its block group names it (dense, moe, kda-moe, ...); the rest are MTP
        self.kinds = {row.index: row.kind for row in anatomy.layers()}
        self.components = components
        self.counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])

    def add_all(self, group: ExpectedGroup) -> None:
        """Count a group whose every tensor is verified."""
        for layer, n in group.layer_counts:
            count = self.counts[group.parts, layer, group.elements]
            count[0] += n
            count[1] += n

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
            for ancestry, (_, elements) in zip(chains, parts):
                for ancestor in ancestry:
                    verified_elements[ancestor] += verified_count * elements
        return tuple(
            ComponentCheck(
                c.node.name,
                c.depth,
                Counts(tensors[i], c.node.params, verified[i], verified_elements[i]),
                c.id,
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
        return self.kinds.get(layer, "mtp")


# --- an index alone ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexReport:
    """A model.safetensors.index.json checked alone against the trees: its tensor names (every name the
    trees expect, as the config's storage keeps it, and no other but rotary buffers) and its metadata
    totals (total_size against the trees' bytes as stored, total_parameters against their elements)."""

    source: str
    model: str
    entries: int
    files: int
    expected_names: int
    rotary_buffers: int
    total_size: int | None
    expected_size: int | None  # None: the config's quantization is not modelled
    total_parameters: int | None
    expected_parameters: int
    mismatches: tuple[Mismatch, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches


def verify_index(anatomy: Anatomy, index: Index, source: str) -> IndexReport:
    """Check an index's names and totals against the trees, reading nothing else.

    A packable Linear (pack-quantized configs) may be listed as itself or as its packed triple; an FP8
    weight must come with its block scale. Rotary buffers (`*.rotary_emb.inv_freq`) are allowed and
    counted apart: their bytes are in total_size but no config determines them, so total_size is
    compared exactly only when there are none."""
    from kimicount.storage import memory_map, modelled, stored_elements

    spec = anatomy.spec
    listed = index.weight_map
    if listed is None:
        raise ValueError("verify_index needs the index's map: read it with keep_map")
    mismatches: list[Mismatch] = []
    claimed: set[str] = set()
    expected = 0
    for group in expected_groups(anatomy, _components(anatomy)):
        for name in group.names:
            if group.packable and name not in listed:
                triple = [f"{name[:-7]}.{suffix}" for suffix in PACKED_SUFFIXES]
                if all(t in listed for t in triple):
                    claimed.update(triple)
                    expected += len(triple)
                    continue
            wanted = [name] + (scale_names(spec, [name]) if group.fp8_scale is not None else [])
            expected += len(wanted)
            for tensor in wanted:
                if tensor in listed:
                    claimed.add(tensor)
                else:
                    mismatches.append(Mismatch(tensor, "missing", f"listed in {INDEX_FILE}", "absent"))
    rest = [name for name in listed if name not in claimed]
    rotary = [name for name in rest if name.endswith(ROTARY_SUFFIX)]
    mismatches += [
        Mismatch(name, "unexpected", "no such tensor in the model", f"listed in {listed[name]}")
        for name in sorted(set(rest) - set(rotary))
    ]
    roots = [root for root in (anatomy.model, anatomy.mtp, anatomy.vision) if root is not None]
    memory = memory_map(spec, *roots)
    expected_size = None if memory is None else sum(memory[id(root)].stored for root in roots)
    quantized = spec.quantization is not None and modelled(spec)
    parameters = sum(stored_elements(spec, root) if quantized else root.params for root in roots)
    declared = index.total_size
    if declared is not None and expected_size is not None and not rotary and declared != expected_size:
        mismatches.append(
            Mismatch(
                INDEX_FILE, "total_size", f"{expected_size:,} (the trees' bytes as stored)", f"{declared:,}"
            )
        )
    if index.total_parameters is not None and not rotary and index.total_parameters != parameters:
        mismatches.append(
            Mismatch(
                INDEX_FILE,
                "total_parameters",
                f"{parameters:,} (the trees' elements)",
                f"{index.total_parameters:,}",
            )
        )
    return IndexReport(
        source=source,
        model=spec.name,
        entries=index.entries,
        files=len(index.files),
        expected_names=expected,
        rotary_buffers=len(rotary),
        total_size=index.total_size,
        expected_size=expected_size,
        total_parameters=index.total_parameters,
        expected_parameters=parameters,
        mismatches=tuple(mismatches),
    )
