"""The explorer's pages for the model the CLI names, each with its code evidence: the lines of the
modeling file (kimicount.explorer.modeling finds it: --modeling, beside config.json, or the Hub) and of
config.json that define and use what the page describes (kimicount.explorer.evidence locates them).
Without a modeling file the pages say how to get one; config.json's lines are cited either way."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kimicount.anatomy import build_anatomy
from kimicount.errors import UsageError
from kimicount.explorer.evidence import Evidence, ModelingIndex, config_evidence
from kimicount.explorer.evidence_kda import has_deepseek_passages, language_config, state_writes
from kimicount.explorer.modeling import ModelingFile, NoAutoMap, absent_message, find_modeling
from kimicount.explorer.pages import Page, Pages, build_pages
from kimicount.explorer.pinned import PinnedModel, git_blob, known_file, pinned_model
from kimicount.source import HubOptions, hub_module
from kimicount.spec import BUNDLED_MODEL, ModelSpec

_BUNDLED_CONFIG = Path(__file__).resolve().parent.parent / "data" / "kimi-k2-instruct.json"


@dataclass(frozen=True)
class ConfigSource:
    """The config.json a spec was read from: its text and path, the commit it is at (None: not
    known, as for a local file outside the Hub cache or a bundled copy), the name its lines are cited
    by, and the repo whose config a bundled copy is (None: not a bundled copy)."""

    text: str
    path: Path | None
    revision: str | None
    file: str = "config.json"
    bundled: str | None = None


def load_model_and_config(
    config: Path | None, repo: str | None, revision: str | None, hub_options: HubOptions | None
) -> tuple[ModelSpec, ConfigSource]:
    """The spec, as kimicount.source.load_spec reads it, and the config.json it came from: a bundled
    model's (by name or repo id, or a name given to --config) from kimicount/data, as every command
    reads it."""
    from kimicount.models import bundled_note, known_model
    from kimicount.source import load_spec

    if config is not None and repo is not None:
        raise UsageError("name the model once: --config or --repo, not both")
    known = None
    if repo is not None and revision is None:
        known = known_model(repo)
        if known is not None and "/" in repo:
            (hub_options or HubOptions()).note(bundled_note(known))
    elif config is not None and not os.path.lexists(config):
        known = known_model(str(config))
    if known is not None:
        file = (
            "config.json" if known.kind == "raw" and not known.overrides else "config.json (bundled values)"
        )
        return known.spec(), ConfigSource(known.config_text(), None, None, file, known.repo)
    if repo is not None:
        hub = hub_module()
        path = hub.download_config(repo, revision, hub_options)
        spec = hub.spec_from_hub_config(path, repo, revision)
        return spec, ConfigSource(path.read_text(encoding="utf-8"), path, _commit(path.parent))
    spec = load_spec(config, repo, revision, hub_options)
    if config is None:
        return spec, ConfigSource(
            _BUNDLED_CONFIG.read_text(encoding="utf-8"), None, None, bundled=BUNDLED_MODEL
        )
    path = config / "config.json" if config.is_dir() else config
    return spec, ConfigSource(path.read_text(encoding="utf-8"), path, _commit(path.parent))


def _commit(folder: Path) -> str | None:
    """The commit of a Hub cache snapshot folder (…/snapshots/<40 hex digits>/)."""
    name = folder.name
    return name if len(name) == 40 and all(c in "0123456789abcdef" for c in name) else None


def explorer_pages(
    spec: ModelSpec,
    source: ConfigSource,
    *,
    repo: str | None = None,
    revision: str | None = None,
    modeling: Path | None = None,
    hub_options: HubOptions | None = None,
) -> Pages:
    """Every page of the model, each with its evidence (or the note saying how to get it)."""
    pages = build_pages(build_anatomy(spec))
    # Kimi K3: the language model's code and values, under text_config (kimicount.explorer.evidence_kda)
    whole = json.loads(source.text)
    config: dict[str, Any] = dict(language_config(whole))
    language_only = config != whole  # its pages of the vision side have no code in that file
    pages = _with_routing(pages, config)
    if modeling is not None:
        found = find_modeling(config, modeling=modeling)
    else:
        try:
            hub_repo = repo if source.bundled is None else None  # a bundled config fetches nothing
            where = str(source.path) if source.path is not None else "config.json"
            found = find_modeling(
                config,
                config_path=source.path,
                repo=hub_repo,
                revision=revision,
                hub_options=hub_options,
                where=where,
            )
        except NoAutoMap:  # evidence was not asked for, so the pages say why there is none
            found = None
    note = ""
    index = None
    pinned = pinned_model(source.bundled) if found is None else None
    if found is None:
        named = source.bundled or repo
        note = absent_message(config, named)
        if pinned is not None:  # the lines are known: only the excerpts need the file
            note = _pinned_note(pinned)
        note = note[:1].upper() + note[1:] + "."
    else:
        index = found.index()
    passages = index.attention_passages() if index is not None and has_deepseek_passages(spec) else {}
    with_evidence = {}
    for page in pages:
        evidence: list[Evidence] = []
        before = len(index.findings()) if index is not None else 0
        if index is not None and (page.main or not language_only):
            evidence += _modeling_evidence(index, page, pages, spec)
            evidence += _passages(page, passages)
        elif pinned is not None:
            evidence += pinned.evidence(page.id)
        if page.config_keys:
            evidence += config_evidence(
                source.text, page.config_keys, revision=source.revision, file=source.file
            )
        findings = tuple(index.findings()[before:]) if index is not None else ()
        with_evidence[page.id] = replace(
            page, evidence=tuple(_unique(evidence)), evidence_note=note, findings=findings
        )
    if index is not None:
        index.check_tree(build_anatomy(spec).model, spec.weight_prefix)  # anything the pages did not ask
        everything = tuple(index.findings())
        for page_id, page in with_evidence.items():
            # a component's page shows its tensors' findings; the model's page every one
            owned = [f for t in page.tensors for f in with_evidence[t].findings if t in with_evidence]
            shown = everything if page_id == "model" else (*page.findings, *owned)
            with_evidence[page_id] = replace(page, findings=tuple(dict.fromkeys(shown)))
    origin = ""
    if found is not None:
        origin = f"{found.name} ({found.origin}, {_revision_text(found)})"
    elif pinned is not None:
        origin = f"{pinned.file} at {pinned.revision or 'its first release'}, from kimicount's index (no file here)"
    return replace(
        pages,
        pages=with_evidence,
        findings=tuple(index.findings()) if index is not None else (),
        evidence_source=origin,
    )


#: The config keys of the router's choice that no count reads: MoEGate's (modeling_deepseek.py).
ROUTING_KEYS = (
    "scoring_func",
    "topk_method",
    "n_group",
    "topk_group",
    "norm_topk_prob",
    "routed_scaling_factor",
)


def routing_text(config: dict[str, Any]) -> str:
    """What the router's config keys say of its choice, in a sentence: group routing (n_group groups,
    the best topk_group of them first) or none, the weights' normalisation and their scale.

    >>> print(routing_text({"n_group": 8, "topk_group": 4, "norm_topk_prob": True, "routed_scaling_factor": 2.5}))
    Group routing: the experts in 8 groups (n_group), a token's experts chosen from its best 4 groups (topk_group); the chosen weights normalised (norm_topk_prob), then × 2.5 (routed_scaling_factor).
    """
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    groups, top = text.get("n_group"), text.get("topk_group")
    if isinstance(groups, int) and groups > 1 and isinstance(top, int):
        grouped = f"the experts in {groups} groups (n_group), a token's experts chosen from its best {top}"
        parts = [f"Group routing: {grouped} groups (topk_group)"]
    else:
        parts = ["No group routing (n_group 1): a token's experts chosen from all of them"]
    normalise = "normalised (norm_topk_prob)" if text.get("norm_topk_prob") else "not normalised"
    scale = text.get("routed_scaling_factor")
    scaled = f", then × {scale} (routed_scaling_factor)" if isinstance(scale, int | float) else ""
    parts.append(f"the chosen weights {normalise}{scaled}")
    return "; ".join(parts) + "."


def _with_routing(pages: Pages, config: dict[str, Any]) -> Pages:
    """The router's pages with what the config says of its choice, and those keys' lines."""
    routers = {
        page.id: replace(
            page,
            explanation=f"{page.explanation} {routing_text(config)}".strip(),
            config_keys=tuple(dict.fromkeys((*page.config_keys, *ROUTING_KEYS))),
        )
        for page in pages
        if page.kind == "component" and page.name == "Router"
    }
    return replace(pages, pages={**pages.pages, **routers})


def _pinned_note(pinned: PinnedModel) -> str:
    """What a page without the modeling file says of the lines it cites from the pinned index."""
    if pinned.revision is None:
        return (
            f"the lines are kimicount's index of {pinned.repo}'s {pinned.file} as first released; "
            f"for their excerpts give that file with --modeling FILE"
        )
    return (
        f"lines from kimicount's index at {pinned.revision[:12]}; for excerpts: `hf download {pinned.repo} "
        f"{pinned.file} --revision {pinned.revision} --local-dir DIR`, --modeling DIR/{pinned.file}"
    )


def _revision_text(found: ModelingFile) -> str:
    """Which revision a modeling file is: the commit its Hub cache folder names, else the file kimicount
    has indexed that its git blob hash matches, else unknown."""
    if found.revision:
        return f"revision {found.revision[:12]}"
    known = known_file(found.text.encode("utf-8"))
    if known is not None:
        return f"{known.description}: git blob {known.blob[:12]}"
    blob = git_blob(found.text.encode("utf-8"))
    return f"revision unknown: git blob {blob[:12]} is no file kimicount has indexed"


#: The passages of the attention's code each page cites besides its own lines (ModelingIndex.
#: attention_passages: the projections' definitions, the query, the latent, the prefill attention, the
#: output), by page id; a component's passages of the forward pass are uses.
PASSAGES = {
    "latent-attention": ("projections", "query", "latent", "prefill attention", "output"),
    "query-compression": ("projections", "query"),
    "query-heads": ("projections", "query"),
    "key-value-compression": ("projections", "latent"),
    "key-heads": ("projections", "latent", "prefill attention"),
    "key-content-up-projection": ("projections", "latent", "prefill attention"),
    "shared-rotary-key": ("projections", "latent", "prefill attention"),
    "value-heads": ("projections", "latent", "prefill attention"),
    "causal-attention": ("projections", "prefill attention", "output"),
    "c_Q": ("query",),
    "q": ("query",),
    "compressed_kv": ("latent",),
    "k_pe": ("latent", "prefill attention"),
    "k_nope": ("latent",),
    "value_states": ("latent",),
    "key_states": ("prefill attention",),
    "attn_weights": ("prefill attention",),
    "attn_output": ("prefill attention", "output"),
    "rotary": ("prefill attention",),
    "softmax": ("prefill attention",),
}

#: Where an operation happens: the function the forward pass calls, by its last name.
CALLS = {
    "softmax": "softmax",
    "rotary": "apply_rotary_pos_emb",
    "act_fn": "act_fn",
    # KDA's two kernels (kimicount.explorer.words_kimi_linear's operations): the prefill's, the decode's
    "chunk_kda": "chunk_kda",
    "fused_recurrent_kda": "fused_recurrent_kda",
}


def _passages(page: Page, passages: dict[str, Evidence]) -> list[Evidence]:
    found = []
    for name in PASSAGES.get(page.id, ()) if page.main else ():
        if name in passages:
            passage = passages[name]
            role = passage.role if page.kind == "activation" or name == "projections" else "use"
            found.append(replace(passage, role=role))
    return found


def _unique(found: list[Evidence]) -> list[Evidence]:
    return list({(e.file, e.start, e.end): e for e in found}.values())


def _modeling_evidence(index: ModelingIndex, page: Page, pages: Pages, spec: ModelSpec) -> list[Evidence]:
    if page.id in pages.nodes:
        node, parent = pages.nodes[page.id]
        return index.component_evidence(node, parent, spec.weight_prefix)
    if page.kind == "tensor":
        return _tensor_evidence(index, page, spec)
    if page.kind == "operation" and page.id in CALLS:
        return index.calls(page.cls, CALLS[page.id])
    if page.variable:
        found = index.activation(page.cls, page.variable)
        if not has_deepseek_passages(spec):  # a KDA state's write into the cache (evidence_kda)
            found += state_writes(index, page.cls, page.variable)
        return found
    found = []
    for attribute in page.attributes:
        found += index.attribute(page.cls, attribute)
    return found


def _tensor_evidence(index: ModelingIndex, page: Page, spec: ModelSpec) -> list[Evidence]:
    """The module's definition and uses; a Linear's [out, in] checked against the file's expression
    (another size, or an attribute not where the name says, is a finding)."""
    layer = page.layer if page.layer is not None else (page.layers[0] if page.layers else 0)
    name = page.pattern.format(layer=layer, expert=0).removeprefix(spec.weight_prefix)
    if not name:
        return []
    found = index.path_evidence(name.rsplit(".", 1)[0], within=name)
    if page.parameters is not None and page.parameters.rows:
        index.check_tensor(name, page.parameters.rows[0].shape)
    return found


def load_explorer(
    config: Path | None,
    repo: str | None,
    revision: str | None,
    modeling: Path | None,
    hub_options: HubOptions | None,
    command: str = "show",
) -> Pages:
    """The pages of the model the CLI's options name, with their evidence (`command`, show or explore,
    refuses a model whose family it does not serve yet)."""
    from kimicount.families import require_command

    spec, source = load_model_and_config(config, repo, revision, hub_options)
    require_command(spec, command)
    return explorer_pages(
        spec, source, repo=repo, revision=revision, modeling=modeling, hub_options=hub_options
    )
