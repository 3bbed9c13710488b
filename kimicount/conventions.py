"""Headline figures: the counting conventions behind the sizes people quote, and which published figure
each one explains.

One model has many "sizes": DeepSeek-V3 is 671B, 685B and 684.5B, and 37B, 36.7B or 36.6B activated.
Each is some convention applied to the same tensors. A convention here is a sum read off the component
tree (and, for stored elements, the storage model); a published figure is a string as quoted ("671B")
with what it counts and where it is quoted. A convention explains a figure when both count the same
thing (a total, per-token activated, the MTP module, or what the MTP module activates) and the
convention's exact number gives the figure when rounded half up to the figure's last digit, or, said as
such, when truncated there (publishers do both). A figure no convention gives is listed as explained
by none, never fitted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kimicount.anatomy import Anatomy, Role
from kimicount.spec import ModelSpec, PackedQuantization
from kimicount.storage import METADATA_PARTS, modelled, stored_elements

#: What a count is of. Only a convention and a figure of the same kind are compared.
TOTAL = "total"
ACTIVATED = "activated"
MTP = "mtp"
MTP_ACTIVATED = "mtp_activated"


@dataclass(frozen=True)
class Convention:
    """One way to count the model: a stable name, what it counts in words, and the exact number."""

    name: str
    description: str
    counts: str  # TOTAL | ACTIVATED | MTP | MTP_ACTIVATED
    value: int


@dataclass(frozen=True)
class Figure:
    """A published figure as quoted ("684.5B"), what it claims to count, and where it is quoted."""

    text: str
    counts: str
    source: str


@dataclass(frozen=True)
class Explanation:
    figure: Figure
    reading: str  # "rounded" | "truncated"


@dataclass(frozen=True)
class Reconciliation:
    """Every convention with the figures it explains, and the figures none explains."""

    family: str | None  # the released models the published figures speak of; None: none known
    conventions: tuple[tuple[Convention, tuple[Explanation, ...]], ...]
    unexplained: tuple[Figure, ...]


# --- published figures --------------------------------------------------------------------------

#: Released models told apart by config facts: (model_type, num_hidden_layers, hidden_size,
#: n_routed_experts). A fine-tune of the same architecture has the same counts.
FAMILIES = {
    ("kimi_k2", 61, 7168, 384): "Kimi K2",
    ("kimi_k25", 61, 7168, 384): "Kimi K2.5",
    ("deepseek_v3", 61, 7168, 256): "DeepSeek-V3",
    ("deepseek_v2", 27, 2048, 64): "DeepSeek-V2-Lite",
    ("kimi_linear", 27, 2304, 256): "Kimi Linear",
    ("kimi_k3", 93, 7168, 896): "Kimi K3",
    ("glm_moe_dsa", 78, 6144, 256): "GLM-5",
    ("deepseek_v4", 43, 4096, 256): "DeepSeek-V4-Flash",
    ("deepseek_v4", 61, 7168, 384): "DeepSeek-V4-Pro",
}

#: The figures quoted for each family, as quoted, with their sources.
PUBLISHED = {
    "Kimi K2": (
        Figure("1T", TOTAL, "Kimi K2 model card"),
        Figure("1.04T", TOTAL, "Kimi K2 technical report"),
        Figure("32B", ACTIVATED, "Kimi K2 model card"),
    ),
    "Kimi K2.5": (
        Figure("1T", TOTAL, "Kimi K2.5 model card"),
        Figure("170B", TOTAL, "tools that count stored elements (huggingface.js, hf-mem)"),
        Figure("1.06T", TOTAL, "tools that count INT4 weights and their group scales"),
        Figure("32B", ACTIVATED, "Kimi K2.5 model card"),
    ),
    "DeepSeek-V3": (
        Figure("671B", TOTAL, "DeepSeek-V3 paper and model card"),
        Figure("685B", TOTAL, "DeepSeek-V3 README: 671B main model + 14B MTP"),
        Figure("684.5B", TOTAL, "Hugging Face Hub"),
        Figure("37B", ACTIVATED, "DeepSeek-V3 paper and model card"),
        Figure("36.7B", ACTIVATED, "README_WEIGHTS: incl. 0.9B embedding + 0.9B head"),
        Figure("36.6B", ACTIVATED, "quoted later"),
        Figure("11.5B", MTP, "README_WEIGHTS: MTP unique, without embedding and head"),
        Figure("2.4B", MTP_ACTIVATED, "README_WEIGHTS: MTP, incl. embedding and head"),
    ),
    "Kimi Linear": (
        Figure("48B", TOTAL, "Kimi Linear model card: 48B total parameters"),
        Figure("3B", ACTIVATED, "Kimi Linear model card: 3B activated parameters"),
    ),
    "Kimi K3": (
        Figure("2.8T", TOTAL, "vLLM recipes and the Hub's listing of moonshotai/Kimi-K3"),
        Figure("104B", ACTIVATED, "secondary copies of the Kimi K3 model card"),
    ),
    "GLM-5": (
        Figure("744B", TOTAL, "GLM-5 model card and technical report"),
        Figure("40B", ACTIVATED, "GLM-5 model card and technical report"),
    ),
    "DeepSeek-V4-Flash": (
        Figure("284B", TOTAL, "DeepSeek-V4 model cards: DeepSeek-V4-Flash with 284B parameters"),
        Figure("13B", ACTIVATED, "DeepSeek-V4 model cards: (13B activated)"),
        Figure("158B", TOTAL, "the Hub's safetensors count of deepseek-ai/DeepSeek-V4-Flash (its listing)"),
    ),
    "DeepSeek-V4-Pro": (
        Figure("1.6T", TOTAL, "DeepSeek-V4 model cards: DeepSeek-V4-Pro with 1.6T parameters"),
        Figure("49B", ACTIVATED, "DeepSeek-V4 model cards: (49B activated)"),
        Figure("862B", TOTAL, "the Hub's safetensors count of deepseek-ai/DeepSeek-V4-Pro (its listing)"),
    ),
    "DeepSeek-V2-Lite": (
        Figure("15.7B", TOTAL, "DeepSeek-V2-Lite model card"),
        Figure("16B", TOTAL, "DeepSeek-V2-Lite model card"),
        Figure("2.4B", ACTIVATED, "DeepSeek-V2-Lite model card"),
        Figure("2.6B", ACTIVATED, "users' own count"),
    ),
}


def family(spec: ModelSpec) -> str | None:
    """The released models whose published figures apply to this config, if any.

    >>> family(k2)
    'Kimi K2'
    """
    return FAMILIES.get((spec.model_type, spec.num_hidden_layers, spec.hidden_size, spec.n_routed_experts))


_UNITS = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_FIGURE = re.compile(r"(\d+)(?:\.(\d+))?([KMBT])")


def reading(value: int, figure: str) -> str | None:
    """How an exact count gives a figure as quoted: 'rounded' when rounding it half up to the figure's
    last digit does, 'truncated' when only cutting the digits after it does, None when neither.
    "684.5B" has its last digit in steps of 10^8: 684,489,845,504 rounds to 6,845 of them.

    >>> reading(1_026_408_232_448, "1T"), reading(32_861_500_928, "32B"), reading(31_687_095_808, "32B")
    ('rounded', 'truncated', 'rounded')
    >>> reading(684_489_845_504, "684.5B"), reading(684_489_845_504, "685B"), reading(11_610_068_224, "11.5B")
    ('rounded', None, None)
    """
    match = _FIGURE.fullmatch(figure)
    if match is None:
        raise ValueError(f"figure '{figure}': expected digits and one of K, M, B, T (e.g. 684.5B)")
    whole, decimals, unit = match.group(1), match.group(2) or "", match.group(3)
    step = _UNITS[unit] // 10 ** len(decimals)
    quoted = int(whole + decimals)  # the figure in steps of its last digit
    if (2 * value + step) // (2 * step) == quoted:
        return "rounded"
    if value // step == quoted:
        return "truncated"
    return None


# --- conventions ---------------------------------------------------------------------------------


def conventions(anatomy: Anatomy) -> tuple[Convention, ...]:
    """The conventions that apply to this model, each an exact sum over the component tree: the MTP
    ones only with an MTP layer, vision only with a vision tower, stored elements only for a quantized
    checkpoint kimicount models (unquantized, they are the parameters), weights-and-scales only for a
    packed one (in FP8 they are the stored elements). [params]

    >>> from kimicount.anatomy import build_anatomy
    >>> [(c.name, c.value) for c in conventions(build_anatomy(k2))]  # doctest: +NORMALIZE_WHITESPACE
    [('parameters', 1026408232448), ('parameters_without_embeddings', 1024059422208),
     ('stored_elements', 1026470727640), ('activated', 32861500928),
     ('activated_without_embedding', 31687095808)]
    """
    spec, model, mtp, vision = anatomy.spec, anatomy.model, anatomy.mtp, anatomy.vision
    found = [Convention("parameters", "every learned tensor of the language model", TOTAL, model.params)]
    lookups = [
        node.params for node in model.children if node.tensors and node.tensors[0].role is Role.EMBEDDING
    ]
    heads = [node.params for node in model.children if node.tensors and node.tensors[0].role is Role.HEAD]
    found.append(
        Convention(
            "parameters_without_embeddings",
            "less the token embedding and the output head: the non-embedding count of scaling-law papers",
            TOTAL,
            model.params - sum(lookups) - sum(heads),
        )
    )
    tables = sum(
        node.params
        for node in model.walk()
        if node.tensors and all(r.role is Role.INDEX for r in node.tensors)
    )
    if tables:
        found.append(
            Convention(
                "parameters_without_hash_tables",
                "less the int64 token→expert hash tables (tid2eid), looked up, not learned: the "
                "learned parameters alone",
                TOTAL,
                model.params - tables,
            )
        )
    if vision is not None:
        found.append(
            Convention(
                "parameters_with_vision",
                "+ the vision tower and projector",
                TOTAL,
                model.params + vision.params,
            )
        )
    copies = mtp is not None and any(child.copy for child in mtp.children)
    if mtp is not None:
        found.append(
            Convention(
                "parameters_with_mtp",
                "+ the multi-token-prediction layer's own parameters",
                TOTAL,
                model.params + anatomy.mtp_unique,
            )
        )
    if mtp is not None and copies:
        found.append(
            Convention(
                "parameters_with_mtp_copies",
                "+ the MTP layer with its stored copies of the embedding and head: every learned "
                "tensor of the checkpoint",
                TOTAL,
                model.params + mtp.params,
            )
        )
    roots = [root for root in (model, mtp, vision) if root is not None]
    if spec.quantization is not None and modelled(spec):
        found.append(
            Convention(
                "stored_elements",
                "every element of the checkpoint's headers that the config determines, as tools that "
                "read them count: FP8 values, INT4 values packed eight to an I32, scales and packed "
                "shapes; MTP and vision included, rotary buffers not",
                TOTAL,
                sum(stored_elements(spec, root) for root in roots),
            )
        )
    if isinstance(spec.quantization, PackedQuantization):
        found.append(
            Convention(
                "weights_and_scales",
                "every weight once (INT4 unpacked) plus the quantization scales and packed shapes; MTP "
                "and vision included",
                TOTAL,
                sum(root.params + stored_elements(spec, root, METADATA_PARTS) for root in roots),
            )
        )
    embedding = model.find("Token embedding").params
    found += [
        Convention(
            "activated",
            "per token: all but the routed experts the token is not sent to; embedding and head included",
            ACTIVATED,
            model.activated,
        ),
        Convention(
            "activated_without_embedding",
            "activated, less the input embedding (a lookup, not a matmul), as DeepSeek counts",
            ACTIVATED,
            model.activated - embedding,
        ),
    ]
    if mtp is not None:
        found += [
            Convention(
                "mtp_parameters",
                "the MTP layer's own parameters, without its copies of the embedding and head",
                MTP,
                anatomy.mtp_unique,
            ),
            Convention(
                "mtp_activated_with_copies",
                "what the MTP layer runs per token, its embedding and head copies included",
                MTP_ACTIVATED,
                mtp.activated,
            )
            if copies
            else Convention(
                "mtp_activated",
                "what the MTP layer runs per token (it reads the main model's embedding and head, "
                "storing no copies)",
                MTP_ACTIVATED,
                mtp.activated,
            ),
        ]
    return tuple(found)


def reconcile(anatomy: Anatomy) -> Reconciliation:
    """Each convention with the published figures it explains, and the figures none explains.

    >>> from kimicount.anatomy import build_anatomy
    >>> r = reconcile(build_anatomy(k2))
    >>> for convention, found in r.conventions:
    ...     print(convention.name, [(e.figure.text, e.reading) for e in found])
    parameters [('1T', 'rounded')]
    parameters_without_embeddings [('1T', 'rounded')]
    stored_elements [('1T', 'rounded')]
    activated [('32B', 'truncated')]
    activated_without_embedding [('32B', 'rounded')]
    >>> [f.text for f in r.unexplained]  # none of them gives more than 1.027T
    ['1.04T']
    """
    name = family(anatomy.spec)
    figures = PUBLISHED.get(name, ()) if name else ()
    rows = []
    explained = set()
    for convention in conventions(anatomy):
        found = []
        for figure in figures:
            how = reading(convention.value, figure.text) if figure.counts == convention.counts else None
            if how:
                found.append(Explanation(figure, how))
                explained.add(figure)
        rows.append((convention, tuple(found)))
    return Reconciliation(name, tuple(rows), tuple(f for f in figures if f not in explained))
