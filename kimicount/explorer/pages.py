"""The explorer's pages, as data: one page per node of the component tree (the model, block groups,
components; a component that both dense and MoE blocks have is one page with both counts), per
activation the forward pass names, per operation and per checkpoint tensor.

`show` prints one page, `show --json` and `explore` the same data; nothing here draws or computes a
count of its own: counts come from the anatomy, shapes and FLOPs from kimicount.flow, bytes from
kimicount.storage, cache sizes from kimicount.kvcache.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from kimicount.anatomy import Anatomy, Node, Role, TensorRef, index_set, layer_span
from kimicount.component_ids import tree_ids
from kimicount.explorer import words as w
from kimicount.explorer.formula import as_text
from kimicount.flow import Activation, Dim, component_flow, flops_map
from kimicount.kvcache import DEFAULT_LAYOUTS, FORMULAS, default_dtype, element_bytes
from kimicount.spec import Fp8Quantization, ModelSpec, PackedQuantization
from kimicount.storage import (
    block_scale_dtype,
    config_packed,
    fp4_e2m1_layout,
    fp4_quantized,
    fp8_quantized,
    fp8_scale_shape,
    memory_map,
    modelled,
    packable,
    packed_layout,
    plain_dtypes,
    scale_suffix,
)

KINDS = {
    "model": "model",
    "group": "group",
    "block": "block group",
    "component": "learned component",
    "activation": "activation",
    "operation": "operation",
    "tensor": "checkpoint tensor",
}

#: Where the page of a block group is said to sit: "60 MoE blocks (layers 1–60)" reads "60 MoE blocks".
_SPAN = re.compile(r" \((?:layers?) [^)]*\)$")


def short(name: str) -> str:
    """A block group's name without its layer span, as paths show it.

    >>> short("60 MoE blocks (layers 1–60)")
    '60 MoE blocks'
    """
    return _SPAN.sub("", name)


@dataclass(frozen=True)
class Shape:
    """An activation with named dimensions: c_KV [B batch, T positions, 512 key–value latent]."""

    name: str
    dims: tuple[Dim, ...]

    @property
    def text(self) -> str:
        return f"{self.name} [{', '.join(_dim_text(d) for d in self.dims)}]"

    def json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dims": [{"size": d.size, "label": d.label} for d in self.dims],
            "text": self.text,
        }


def _dim_text(dim: Dim) -> str:
    """'B batch', '512 key–value latent', '8,192 = 64 heads × 128'."""
    if dim.shown:
        return f"{dim.size:,} = {dim.label}" if isinstance(dim.size, int) else f"{dim.shown} {dim.label}"
    return f"{dim.text} {dim.label}"


@dataclass(frozen=True)
class Mode:
    """What a page's node does with the KV cache in one mode."""

    mode: str  # prefill | decode
    state: str  # the cache before the step
    cache: str


@dataclass(frozen=True)
class TensorRow:
    """One row of a calculation table: a checkpoint tensor (or the rows of it) a component owns."""

    tensor: str  # the tensor page's id
    name: str  # its name with index sets, as in tensors.json
    part: str  # '' or "features 0–127 of each head's 256"
    shape: tuple[int, ...]
    layout: str  # [out, in]
    calculation: str
    elements: int  # per instance (the owned rows)
    bias: str
    dtype: str
    storage: str  # FP8 scale or INT4 packing, in words
    owner: str = ""  # the component page that owns these rows (tensor pages)


@dataclass(frozen=True)
class Where:
    """The instances of a page's node in one part of the model: '60 MoE blocks', 60, 251,658,240."""

    where: str
    instances: int
    params: int


@dataclass(frozen=True)
class Parameters:
    per_instance: int
    calculation: str
    formula: str
    rows: tuple[TensorRow, ...]
    where: tuple[Where, ...]
    activated: int | None
    stored_bytes: int | None
    bf16_bytes: int | None
    flops_per_token: int | None

    @property
    def instances(self) -> int:
        return sum(place.instances for place in self.where)

    @property
    def total(self) -> int:
        return sum(place.params for place in self.where)


@dataclass(frozen=True)
class Part:
    """A row of a group's table of parts."""

    id: str
    name: str
    per_instance: int
    count: int  # copies in one instance of the group
    params: int  # per_instance × count


@dataclass(frozen=True)
class KvRow:
    """A layout's cache, per token: per layer, and over the layers this page stands for."""

    layout: str
    formula: str
    calculation: str
    per_token_per_layer: int
    layers: int
    per_token: int
    note: str


@dataclass(frozen=True)
class Page:
    id: str
    name: str
    kind: str
    path: tuple[str, ...]
    role: str = ""
    formula: str = ""
    code: str = ""
    cls: str = ""
    attributes: tuple[str, ...] = ()
    variable: str = ""
    explanation: str = ""
    inputs: tuple[Shape, ...] = ()
    outputs: tuple[Shape, ...] = ()
    middle: tuple[Shape, ...] = ()
    cache_reads: tuple[Shape, ...] = ()
    modes: tuple[Mode, ...] = ()
    parameters: Parameters | None = None
    parts: tuple[Part, ...] = ()
    kv: tuple[KvRow, ...] = ()
    kv_note: str = ""
    parent: str | None = None
    children: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    tensors: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    synonyms: tuple[str, ...] = ()  # names people use for it besides its own (words.SYNONYMS)
    #: The stable ids (kimicount.component_ids) of the tree nodes the page stands for (a part of both
    #: the dense and the MoE blocks: two), the keys on which `params --json` and `compare` join.
    component_ids: tuple[str, ...] = ()
    also_in: tuple[str, ...] = ()
    main: bool = True  # in the main model (not the MTP module or the vision side)
    layers: tuple[int, ...] = ()  # the layers a block group or a checkpoint tensor stands for
    pattern: str = ""  # a checkpoint tensor's name with {layer} and {expert} fields
    experts: int = 0  # the routed experts per layer a checkpoint tensor's {expert} counts (0: none)
    layer: int | None = None  # the layer a tensor name pointed at
    layer_note: str = ""
    evidence: tuple[Any, ...] = ()  # kimicount.explorer.evidence.Evidence
    evidence_note: str = ""
    findings: tuple[str, ...] = ()

    @property
    def kind_text(self) -> str:
        return KINDS[self.kind]


@dataclass(frozen=True)
class TreeItem:
    """A row of the explorer's tree: the page it opens, its label, its parameter count."""

    id: str
    label: str
    count: int | None = None
    children: tuple[TreeItem, ...] = ()


@dataclass(frozen=True)
class Pages:
    model: str
    model_type: str
    pages: dict[str, Page]
    tree: tuple[TreeItem, ...]  # the model (and MTP, vision) trees
    activations: tuple[str, ...]
    operations: tuple[str, ...]
    tensors: tuple[str, ...]
    storage: str = ""
    findings: tuple[str, ...] = ()
    evidence_source: str = ""
    #: Each tree page's node (the one with the most instances) and the node above it, for the
    #: evidence module, which reads the tree itself.
    nodes: dict[str, tuple[Node, Node | None]] = field(default_factory=dict, compare=False, repr=False)

    def __getitem__(self, page_id: str) -> Page:
        return self.pages[page_id]

    def __iter__(self) -> Iterator[Page]:
        return iter(self.pages.values())


# --- building -----------------------------------------------------------------------------------


def slug(text: str) -> str:
    """A page id from a name: 'Key–value compression' -> 'key-value-compression'.

    >>> slug("Key content up-projection"), slug("60 MoE blocks (layers 1–60)")
    ('key-content-up-projection', '60-moe-blocks-layers-1-60')
    """
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")


def _fill(text: str, sizes: dict[str, str]) -> str:
    try:
        return text.format(**sizes)
    except (KeyError, IndexError):
        return text


#: Marks a block group in a page key (no name from a config can hold it).
_GROUP = "\0"


@dataclass
class _Entry:
    """A page in the making: every tree node it stands for, with the block group each sits in."""

    key: tuple[str, ...]
    id: str
    nodes: list[tuple[Node | None, Node, tuple[str, ...]]] = field(default_factory=list)
    parent_keys: list[tuple[str, ...] | None] = field(default_factory=list)
    parent_nodes: list[Node | None] = field(default_factory=list)
    child_keys: list[tuple[str, ...]] = field(default_factory=list)
    main: bool = True


def build_pages(anatomy: Anatomy) -> Pages:
    """Every page of the model's explorer (without evidence: kimicount.explorer.evidence adds it)."""
    spec = anatomy.spec
    roots = [r for r in (anatomy.model, anatomy.mtp, anatomy.vision) if r is not None]
    memory = memory_map(spec, *roots)
    flops = flops_map(spec, *roots)
    vocabulary = w.vocabulary(spec)
    sizes = vocabulary.sizes

    entries: dict[tuple[str, ...], _Entry] = {}
    ids: set[str] = set()
    trees = []

    def new_id(name: str, parent_key: tuple[str, ...] | None) -> str:
        base = slug(name) or "page"
        if base in ids and parent_key and parent_key in entries:
            base = f"{entries[parent_key].id}-{base}"
        candidate, n = base, 2
        while candidate in ids:
            candidate, n = f"{base}-{n}", n + 1
        ids.add(candidate)
        return candidate

    def visit(node: Node, key_parent, group_node: Node | None, path, main: bool, key_base=None, above=None):
        """key_parent: the key of the page above; key_base: what this node's key extends (a block
        group's children extend the key of the group's parent, so dense and MoE blocks share pages)."""
        is_group = bool(node.layers and node.kind)
        base = key_parent if key_base is None else key_base
        key = (*(base or ()), _GROUP + node.kind if is_group else node.name)
        if key not in entries:
            special = {"dense": "dense-blocks", "moe": "moe-blocks"}.get(node.kind) if is_group else None
            if key_parent is None and main:
                special = "model"
            elif (
                key_parent is not None
                and entries[key_parent].id == "model"
                and node.children
                and not is_group
            ):
                special = special or ("blocks" if node.children and node.children[0].layers else None)
            entry_id = special if special and special not in ids else new_id(node.name, key_parent)
            ids.add(entry_id)
            entries[key] = _Entry(key, entry_id, main=main)
        if key_parent is not None and key not in entries[key_parent].child_keys:
            entries[key_parent].child_keys.append(key)
        entry = entries[key]
        names = (*path, short(node.name)) if key_parent is not None else ()
        entry.nodes.append((group_node if not is_group else None, node, names))
        entry.parent_keys.append(key_parent)
        entry.parent_nodes.append(above)
        inner_group = node if is_group else group_node
        children = tuple(
            visit(child, key, inner_group, names, main, key_parent if is_group else None, node)
            for child in node.children
        )
        count = node.params
        return TreeItem(entry.id, node.name, count, children)

    for root in roots:
        main = root is anatomy.model
        trees.append(visit(root, None, None, (), main))

    pages: dict[str, Page] = {}
    tensor_entries = _tensor_pages(spec, roots, entries)
    stable_ids = tree_ids(anatomy.model, anatomy.mtp, anatomy.vision)
    for entry in entries.values():
        page = _node_page(spec, anatomy, entry, entries, sizes, memory, flops, tensor_entries)
        pages[entry.id] = replace(
            page, component_ids=tuple(stable_ids[id(node)] for _, node, _ in entry.nodes)
        )
    for page in tensor_entries.values():
        pages[page.id] = page
    activations: list[str] = []
    operations: list[str] = []
    for kind, specs, listed in (
        ("activation", vocabulary.activations, activations),
        ("operation", vocabulary.operations, operations),
    ):
        for thing in specs:
            found = _tensor_like_page(spec, kind, thing, pages, entries, sizes)
            if found is not None:
                if found.id in pages:
                    found = replace(found, id=f"{kind}-{found.id}")
                pages[found.id] = found
                listed.append(found.id)
    pages = _link_activations(pages, activations + operations)
    from kimicount.storage import quantization_summary

    nodes = {}
    for entry in entries.values():
        primary = max(range(len(entry.nodes)), key=lambda i: entry.nodes[i][1].instances)
        nodes[entry.id] = (entry.nodes[primary][1], entry.parent_nodes[primary])
    return Pages(
        nodes=nodes,
        model=spec.name,
        model_type=spec.model_type,
        pages=pages,
        tree=tuple(trees),
        activations=tuple(activations),
        operations=tuple(operations),
        tensors=tuple(tensor_entries[k].id for k in tensor_entries),
        storage=quantization_summary(spec),
    )


def _config_keys(formula: str) -> tuple[str, ...]:
    """The config keys a formula reads: 'kv_lora_rank × num_attention_heads·qk_nope_head_dim' ->
    ('kv_lora_rank', 'num_attention_heads', 'qk_nope_head_dim')."""
    return tuple(dict.fromkeys(re.findall(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]+_size", formula)))


def _words(name: str, node: Node, entry: _Entry, vocabulary: w.Vocabulary) -> tuple[w.Words, str]:
    """The words of a node's page and its kind."""
    if entry.id == "model":
        return vocabulary.model, "model"
    if node.layers and node.kind:
        moe = node.kind == "moe"
        block = vocabulary.block
        return (
            replace(
                block,
                role=block.role.replace("{mlp}", "the mixture of experts" if moe else "a dense MLP"),
                formula=block.formula.replace("{mlp_symbol}", "MoE" if moe else "MLP"),
            ),
            "block",
        )
    if entry.id == "blocks":
        return vocabulary.blocks, "group"
    words = vocabulary.components.get(name)
    kind = "component" if node.tensors or words is not None else "group"
    if words is None:
        words = w.Words(role="", prefill="", decode="")
    return words, kind


def _node_page(spec, anatomy, entry: _Entry, entries, sizes, memory, flops, tensor_pages) -> Page:
    # the primary node: the one with the most instances (the MoE blocks' copy of an attention part)
    primary_index = max(range(len(entry.nodes)), key=lambda i: entry.nodes[i][1].instances)
    _, node, path = entry.nodes[primary_index]
    words, kind = _words(node.name, node, entry, w.vocabulary(spec))
    flow = component_flow(spec, node)
    if _vision_namesake(anatomy, node):  # K3's vision RMSNorms: a language component's name, not its words
        words, flow = w.Words(role="", prefill="", decode=""), None
    where = []
    for group, each, _ in entry.nodes:
        label = group.name if group is not None else ("the model" if entry.main else entry.key[0])
        if each.layers and each.kind:
            label = each.name
        where.append(Where(label, each.instances, each.params))
    rows = tuple(_rows(spec, node, tensor_pages)) if node.tensors else ()
    total_memory = [memory[id(n)] for _, n, _ in entry.nodes] if memory else []
    parameters = Parameters(
        per_instance=node.params_per_instance,
        calculation=node.calculation,
        formula=node.formula,
        rows=rows,
        where=tuple(where),
        activated=sum(n.activated for _, n, _ in entry.nodes),
        stored_bytes=sum(m.stored for m in total_memory) if memory else None,
        bf16_bytes=sum(m.bf16 for m in total_memory) if memory else None,
        flops_per_token=sum(flops[id(n)] for _, n, _ in entry.nodes),
    )
    parent_key = entry.parent_keys[primary_index]
    children = tuple(dict.fromkeys(entries[k].id for k in entry.child_keys))
    parts = tuple(
        Part(
            entries[_key_of(entry, child, entries)].id,
            child.name,
            child.params_per_instance,
            child.instances // node.instances,
            child.params // node.instances,
        )
        for child in node.children
    )
    modes: tuple[Mode, ...] = ()
    if words.prefill or words.decode:
        modes = (
            Mode("prefill", "T tokens, empty cache", _fill(words.prefill, sizes)),
            Mode("decode", "one token, L positions cached", _fill(words.decode, sizes)),
        )
    kv, kv_note = _kv(spec, entry, node)
    formula_keys = _config_keys(node.formula)
    for _, n, _ in entry.nodes:
        for leaf in n.walk():
            formula_keys += _config_keys(leaf.formula)
    if any(
        fp8_quantized(spec, ref.role) for _, n, _ in entry.nodes for leaf in n.walk() for ref in leaf.tensors
    ):
        formula_keys += ("quantization_config",)
    also = tuple(
        dict.fromkeys(
            (g.name if g is not None else "") for i, (g, _, _) in enumerate(entry.nodes) if i != primary_index
        )
    )
    return Page(
        id=entry.id,
        name=node.name,
        kind=kind,
        path=path if entry.id != "model" else (node.name,),
        role=_fill(words.role, sizes),
        formula=words.formula,
        code=words.code,
        cls=words.cls,
        attributes=words.attributes,
        explanation=_fill(words.explanation, sizes),
        inputs=tuple(_shape(a) for a in flow.inputs) if flow else (),
        outputs=tuple(_shape(a) for a in flow.outputs) if flow else (),
        middle=tuple(_shape(a) for a in flow.middle) if flow else (),
        cache_reads=tuple(_shape(a) for a in flow.reads) if flow else (),
        modes=modes,
        parameters=parameters,
        parts=parts,
        kv=kv,
        kv_note=kv_note,
        parent=entries[parent_key].id if parent_key is not None else None,
        children=children,
        tensors=tuple(dict.fromkeys(r.tensor for r in rows)),
        config_keys=tuple(dict.fromkeys(formula_keys)),
        aliases=(node.name, short(node.name)),
        synonyms=w.SYNONYMS.get(node.name, ()),
        also_in=tuple(a for a in also if a),
        main=entry.main,
        layers=node.layers if node.layers and node.kind else (),
    )


def _key_of(entry: _Entry, child: Node, entries) -> tuple[str, ...]:
    """The key of a child's page: a block group's children extend the key of the group's parent."""
    if child.layers and child.kind:
        return (*entry.key, _GROUP + child.kind)
    return (*(entry.key[:-1] if entry.key[-1].startswith(_GROUP) else entry.key), child.name)


def _vision_namesake(anatomy: Anatomy, node: Node) -> bool:
    """A node of the vision tree named as a language component is (Kimi K3's MoonViT "Attention
    RMSNorm"): the words and shapes keyed by that name are the language component's, not its own."""
    if anatomy.vision is None or not any(n is node for n in anatomy.vision.walk()):
        return False
    return any(n.name == node.name for n in anatomy.model.walk())


def _shape(activation: Activation) -> Shape:
    return Shape(activation.name, activation.dims)


def _kv(spec: ModelSpec, entry: _Entry, node: Node) -> tuple[tuple[KvRow, ...], str]:
    """The cache in each layout, for the pages of attention, blocks, the blocks group and the model;
    a hybrid model's MLA layers only, and its state per sequence (`_state_note`) beside them."""
    if not entry.main:
        return (), ""
    mla_layers, states = _cache_layers(spec)
    if node.name == "Latent attention" or entry.id in ("model", "blocks"):
        layers, kda = len(mla_layers), sum(len(g.layers) for g in states)
    elif node.layers and node.kind:
        layers = len(set(node.layers) & mla_layers)
        kda = sum(len(set(node.layers) & set(g.layers)) for g in states)
    elif states and node.name == "Kimi Delta Attention":
        return (), _state_note(spec, node.instances)
    else:
        return (), ""
    from kimicount.cache_groups import has_mla_group
    from kimicount.families import cache_groups

    if not has_mla_group(cache_groups(spec)):  # DeepSeek V4: a cache by layer kind, not MLA layouts
        from kimicount.families.deepseek_v4 import DeepseekV4Spec
        from kimicount.kv_groups import exact, group_cache_report

        assert isinstance(spec, DeepseekV4Spec)  # the one family whose cache has no MLA group
        report = group_cache_report(spec, tokens=spec.sliding_window)
        return (), (
            f"The cache by layer kind (kimicount kv-cache): T × {exact(report.bytes_per_token)} B of compressed "
            f"entries (fp8) + {report.bytes_per_sequence:,} B per sequence for the windows and the compressors' "
            "states, all layers."
        )
    note = ""
    if node.name != "Latent attention" and kda:
        note = _state_note(spec, kda)
    if not layers:
        return (), note
    e = element_bytes(default_dtype(spec))
    rows = []
    for layout in DEFAULT_LAYOUTS:
        formula = FORMULAS[layout]
        calculation, per_layer = formula.size(spec.mla, e)
        rows.append(
            KvRow(
                layout.value, formula.text, calculation, per_layer, layers, per_layer * layers, formula.note
            )
        )
    total = len(mla_layers)
    whole = [r.per_token_per_layer * total for r in rows]
    all_layers = "all" if total == spec.num_hidden_layers else "the"
    note = (
        f"Per token, {all_layers} {total} {'' if all_layers == 'all' else 'MLA '}layers, {default_dtype(spec)}: "
        f"naive {whole[0]:,} B; the latent {whole[2]:,} B, {round(whole[0] / whole[2])}× less; flash "
        f"padding {whole[1]:,} B." + (f" {note}" if note else "")
    )
    return tuple(rows), note


def _cache_layers(spec: ModelSpec) -> tuple[set[int], tuple[Any, ...]]:
    """The layers of the model's per-token MLA cache group, and its per-sequence (state) groups."""
    from kimicount.cache_groups import MemoryKind, state_groups
    from kimicount.families import cache_groups

    groups = cache_groups(spec)
    mla = {i for g in groups if g.kind is MemoryKind.PER_TOKEN and g.mla is not None for i in g.layers}
    return mla, state_groups(groups)


def _state_note(spec: ModelSpec, layers: int) -> str:
    """A hybrid model's state per sequence over `layers` of its state layers, in the engines' default
    dtypes (kimicount kv-cache: the windows in the model's dtype, the recurrent state in fp32)."""
    from kimicount.kvcache import kv_cache_report

    (state,) = kv_cache_report(spec, tokens=1).states
    parts = " + ".join(f"{p.tensor.name} {p.calculation}" for p in state.parts(1))
    per_layer = state.bytes_per_sequence_per_layer
    return (
        f"No cache per position in the {state.group.name} layers: a state per sequence, {parts} = "
        f"{per_layer:,} B a layer; × {layers} = {per_layer * layers:,} B per sequence, whatever its "
        "length (prefill writes it once; each decode step reads and overwrites it)."
    )


def _layout(ref: TensorRef) -> str:
    if ref.role is Role.EMBEDDING:
        return "[vocab, hidden]"
    if len(ref.shape) == 2:
        return "[out, in]"
    return "[" + ", ".join("n" for _ in ref.shape) + "]" if len(ref.shape) == 1 else ""


def _storage(spec: ModelSpec, ref: TensorRef) -> tuple[str, str]:
    """(dtype, storage in words): the FP8 block scale or INT4 packing the checkpoint stores it with."""
    if not modelled(spec):
        return "", "not modelled (quantization unknown to kimicount)"
    dtype = plain_dtypes(spec, ref.role)[0]
    if fp4_quantized(spec, ref):  # DeepSeek V4's routed experts
        layout = fp4_e2m1_layout(ref.shape)
        (wshape, wdtype), (sshape, sdtype) = layout["weight"], layout["scale"]
        text = (
            f"FP4 E2M1, two a byte: [{wshape[0]:,}, {wshape[1]:,}] {wdtype}; scale [{sshape[0]:,}, "
            f"{sshape[1]:,}] {sdtype}, one per 32 inputs"
        )
        return wdtype, text
    if fp8_quantized(spec, ref.role):
        rows, cols = fp8_scale_shape(spec, ref.shape)
        assert isinstance(spec.quantization, Fp8Quantization)  # as fp8_quantized says
        block = spec.quantization.block
        name = scale_suffix(spec).lstrip(".") if scale_suffix(spec).startswith(".") else "weight_scale_inv"
        text = (
            f"FP8 block scales: {name} [{rows:,}, {cols:,}] {block_scale_dtype(spec)}, one per "
            f"{block[0]} × {block[1]}"
        )
        return dtype, text
    if packable(spec, ref.role):
        packed_tensors = packed_layout(spec, ref.shape)
        packed = config_packed(spec, ref.names())
        assert isinstance(spec.quantization, PackedQuantization)  # as packable says
        (pshape, pdtype), (gshape, gdtype) = packed_tensors["weight_packed"], packed_tensors["weight_scale"]
        text = (
            f"INT{spec.quantization.num_bits} packed: weight_packed [{pshape[0]:,}, {pshape[1]:,}] {pdtype}, "
            f"weight_scale [{gshape[0]:,}, {gshape[1]:,}] {gdtype}, weight_shape [2] I32 "
            f"({packed:,} of {ref.copies:,} copies, as the config targets)"
        )
        return dtype, text
    return dtype, ""


def _rows(spec: ModelSpec, node: Node, tensor_pages: dict[str, Page]) -> Iterator[TensorRow]:
    patterns = {ref.pattern for ref in node.tensors}
    for ref in node.tensors:
        page = tensor_pages[ref.pattern]
        linear = len(ref.shape) == 2 and ref.role is not Role.EMBEDDING
        module = ref.pattern.rsplit(".", 1)[0]
        bias = ("bias" if f"{module}.bias" in patterns else "no bias") if linear else ""
        dtype, storage = _storage(spec, ref)
        yield TensorRow(
            tensor=page.id,
            name=page.name,
            part=ref.part,
            shape=ref.shape,
            layout=_layout(ref),
            calculation=ref.calculation,
            elements=ref.elements,
            bias=bias,
            dtype=dtype,
            storage=storage,
        )


def _module_path(spec: ModelSpec, pattern: str) -> str:
    """The module path a tensor page is named by: model.layers.{layer}.self_attn.kv_b_proj.weight ->
    self_attn.kv_b_proj; model.layers.{layer}.mlp.experts.{expert}.up_proj.weight -> mlp.experts.up_proj."""
    text = pattern.removeprefix(spec.weight_prefix)
    text = text.replace("model.layers.{layer}.", "").replace(".{expert}", "")
    return text.removesuffix(".weight")


def _tensor_pages(spec: ModelSpec, roots, entries) -> dict[str, Page]:
    """One page per checkpoint tensor pattern (every layer's copy of it together), keyed by pattern."""
    refs: dict[str, list[tuple[TensorRef, str]]] = {}
    owner_ids = {}
    for entry in entries.values():
        for _, node, _ in entry.nodes:
            owner_ids[id(node)] = entry.id
    main_patterns = set()
    #: each pattern's layers, by the tree they are in: the main model's ("" ) and the MTP module's
    #: (DeepSeek-V3's layer 61 stores the same names as its layers 3–60), shown apart
    in_tree: dict[str, dict[str, set[int]]] = {}
    for root in roots:
        tree = "" if root is roots[0] else root.name
        for node in root.walk():
            for ref in node.tensors:
                refs.setdefault(ref.pattern, []).append((ref, owner_ids[id(node)]))
                in_tree.setdefault(ref.pattern, {}).setdefault(tree, set()).update(ref.layers)
                if root is roots[0]:
                    main_patterns.add(ref.pattern)
    modules = {pattern: _module_path(spec, pattern) for pattern in refs}
    # a page id: the shortest dotted tail of the module path that no other tensor shares
    tails: dict[str, list[str]] = {}
    for pattern, module in modules.items():
        parts = module.split(".")
        for i in range(len(parts)):
            tails.setdefault(".".join(parts[i:]), []).append(pattern)
    pages = {}
    for pattern, found in refs.items():
        parts = modules[pattern].split(".")
        tensor_id = next(
            (
                ".".join(parts[i:])
                for i in range(len(parts) - 1, -1, -1)
                if len(tails[".".join(parts[i:])]) == 1
            ),
            pattern.replace("{layer}", "N").replace("{expert}", "E"),
        )
        first = found[0][0]
        layers = tuple(sorted({layer for ref, _ in found for layer in ref.layers}))
        experts = index_set(tuple(range(first.experts)))
        trees = in_tree[pattern]
        named = tuple(sorted(trees.get("", ()))) or layers  # the main model's layers, where it has them
        name = pattern.format(layer=index_set(named), expert=experts)
        copies = max(len(layers), 1) * max(first.experts, 1)
        owner_layers: dict[str, set[int]] = {}
        for ref, owner in found:
            owner_layers.setdefault(owner, set()).update(ref.layers)
        dtype, storage = _storage(spec, first)
        elements = 1
        for d in first.shape:
            elements *= d
        rows = tuple(
            TensorRow(
                tensor=tensor_id,
                name=pattern.format(layer=index_set(tuple(sorted(owner_layers[owner]))), expert=experts),
                part=ref.part,
                shape=ref.shape,
                layout=_layout(ref),
                calculation=ref.calculation,
                elements=ref.elements,
                bias="",
                dtype=dtype,
                storage=storage,
                owner=owner,
            )
            for ref, owner in dict.fromkeys(found)
        )
        # dense and MoE copies of one part are one row
        unique_rows = tuple({(r.part, r.owner): r for r in rows}.values())
        where: tuple[Where, ...] = (Where("every copy", copies, elements * copies),)
        if len(trees) > 1:  # the main model's copies and the MTP module's apart
            where = tuple(
                Where(
                    f"{tree or 'the model'} ({layer_span(tuple(sorted(held)))})",
                    len(held) * max(first.experts, 1),
                    elements * len(held) * max(first.experts, 1),
                )
                for tree, held in trees.items()
            )
        module = modules[pattern]
        attribute = module.split(".")[-1] if module.split(".")[-1] not in ("weight",) else module
        pages[pattern] = Page(
            id=tensor_id,
            name=name,
            kind="tensor",
            path=(name,),
            role=f"the stored {'rows of ' if first.rows else ''}{attribute}: "
            + ", ".join(dict.fromkeys(_owner_name(entries, r.owner) for r in unique_rows)),
            parameters=Parameters(
                per_instance=elements,
                calculation=" × ".join(f"{d:,}" for d in first.shape),
                formula="",
                rows=unique_rows,
                where=where,
                activated=None,
                stored_bytes=None,
                bf16_bytes=None,
                flops_per_token=None,
            ),
            parent=unique_rows[0].owner,
            aliases=(tensor_id, pattern, name, module, attribute),
            main=pattern in main_patterns,
            attributes=(attribute,),
            layers=layers,
            pattern=pattern,
            experts=first.experts,
        )
    return pages


def _owner_name(entries, owner_id: str) -> str:
    for entry in entries.values():
        if entry.id == owner_id:
            return entry.nodes[0][1].name
    return owner_id


def _flow_shapes(pages: dict[str, Page]) -> dict[str, Shape]:
    shapes: dict[str, Shape] = {}
    for page in pages.values():
        for shape in (*page.inputs, *page.outputs, *page.middle):
            shapes.setdefault(shape.name, shape)
    return shapes


def _by_name(pages: dict[str, Page], name: str) -> Page | None:
    return next(
        (p for p in pages.values() if p.kind in ("component", "group") and p.name == name and p.main), None
    )


def _tensor_like_page(spec, kind, thing: w.Tensor, pages, entries, sizes) -> Page | None:
    maker = _by_name(pages, thing.made_by) if thing.made_by else None
    readers = [p for name in thing.read_by if (p := _by_name(pages, name)) is not None]
    if (thing.made_by and maker is None) or (maker is None and not readers):
        return None  # the model has no such thing (c_Q without query compression)
    shapes = _flow_shapes(pages)
    shape = shapes.get(thing.flow_name)
    heads = Dim(spec.num_attention_heads, "heads")
    if thing.id == "attn_weights":
        shape = Shape("s", (Dim("B", "batch"), heads, Dim("T", "queries"), Dim("T | L + 1", "keys")))
    elif thing.id == "topk_idx":
        shape = Shape("TopK", (Dim("B·T", "tokens"), Dim(spec.num_experts_per_tok, "chosen experts")))
    words = thing.words
    modes: tuple[Mode, ...] = ()
    if kind == "activation":
        modes = (
            Mode(
                "prefill",
                "T tokens, empty cache",
                _fill(words.prefill, sizes) if words.prefill != w._NO_CACHE[0] else "not cached",
            ),
            Mode(
                "decode",
                "one token, L positions cached",
                _fill(words.decode, sizes) if words.decode != w._NO_CACHE[1] else "not cached",
            ),
        )
    path_base = maker.path if maker else readers[0].path
    return Page(
        id=thing.id,
        name=thing.name,
        kind=kind,
        path=(*path_base, thing.name),
        role=_fill(words.role, sizes),
        formula=words.formula,
        code=words.code,
        cls=words.cls,
        attributes=words.attributes,
        variable=words.variable,
        explanation=_fill(words.explanation, sizes),
        outputs=(shape,) if shape is not None and kind == "activation" else (),
        modes=modes,
        parent=maker.id if maker else readers[0].id,
        reads=tuple(p.id for p in readers),
        writes=(maker.id,) if maker else (),
        aliases=(thing.id, thing.name, as_text(thing.symbol), thing.flow_name, *thing.aliases),
    )


def _link_activations(pages: dict[str, Page], ids: list[str]) -> dict[str, Page]:
    """Components read the activations whose page names them as readers, and write those they make.
    On an activation's page `writes` lists its maker and `reads` its readers; on a component's page
    `reads` and `writes` list activations."""
    reads: dict[str, list[str]] = {}
    writes: dict[str, list[str]] = {}
    for activation_id in ids:
        activation = pages[activation_id]
        for reader in activation.reads:
            reads.setdefault(reader, []).append(activation_id)
        for maker in activation.writes:
            writes.setdefault(maker, []).append(activation_id)
    return {
        page_id: replace(page, reads=tuple(reads.get(page_id, ())), writes=tuple(writes.get(page_id, ())))
        if page.kind not in ("activation", "operation")
        else page
        for page_id, page in pages.items()
    }
