"""Which page a NAME on the command line means: a page id, a component's name (any case; a unique
prefix will do), a module attribute (`kv_b_proj`), a checkpoint tensor name
(`model.layers.5.self_attn.kv_b_proj.weight`: that tensor's page, at layer 5), an activation
(`compressed_kv`, `c_KV`) or a path (`Latent attention › Key heads`)."""

from __future__ import annotations

import difflib
import re
from dataclasses import replace

from kimicount.errors import UsageError
from kimicount.explorer.pages import Page, Pages, short
from kimicount.reading import shorten

#: Quantization metadata names that point at the weight they belong to.
_METADATA = re.compile(r"\.weight(?:_scale_inv|_packed|_scale|_shape)$")
_LAYER = re.compile(r"(^|\.)layers\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_PATH = re.compile(r"\s*(?:›|>|/)\s*")


def resolve(pages: Pages, name: str) -> Page:
    """The page NAME means; a UsageError (exit 2) naming the candidates when it means several, or the
    closest names when it means none. Its own names come first, then the names people use for it
    (`Output projection` for the causal attention's o_proj, `MoE gate` for the router)."""
    text = " ".join(name.split())
    if not text:
        raise UsageError("NAME is empty: give a component, module attribute, tensor or activation name")
    if text in pages.pages:
        return pages[text]
    tensor = _tensor(pages, text)
    if tensor is not None:
        return tensor
    folded = text.casefold()
    for names in (_own, _synonyms):
        exact = [p for p in pages if any(a.casefold() == folded for a in names(p))]
        if exact:
            return _one(text, exact)
    if _PATH.search(text) and not text.startswith("model."):
        found = _by_path(pages, [s.casefold() for s in _PATH.split(text) if s])
        if found:
            return _one(text, found)
    for names in (_own, _synonyms):
        prefixed = [p for p in pages if any(a.casefold().startswith(folded) for a in names(p))]
        if prefixed:
            return _one(text, prefixed)
    suggestions = closest(pages, text)
    hint = f" (closest: {', '.join(suggestions)})" if suggestions else " (kimicount explore lists every page)"
    raise UsageError(f"'{shorten(name, 80)}': no page of {pages.model} has that name{hint}")


def _own(page: Page) -> list[str]:
    return [a for a in page.aliases if a]


def _synonyms(page: Page) -> list[str]:
    return list(page.synonyms)


_WORDS = re.compile(r"[^\W_]+")


def closest(pages: Pages, text: str, n: int = 4) -> list[str]:
    """The names closest to `text`, closest first, one per page: a name people use shows the page it
    leads to ('Output projection (Causal attention)'). A name scores the better of its likeness as a
    string (difflib's ratio) and the share of words it has in common with `text`; a page's tensor
    patterns are left out (their {…} index sets are no name anyone types)."""
    folded = text.casefold()
    words = set(_WORDS.findall(folded))
    best: dict[str, tuple[float, str]] = {}
    for page in pages:
        for alias, label in [(a, a) for a in _own(page)] + [
            (a, f"{a} ({page.name})") for a in _synonyms(page)
        ]:
            if "{" in alias:
                continue
            candidate = alias.casefold()
            shared = set(_WORDS.findall(candidate))
            overlap = len(words & shared) / len(words | shared) if words | shared else 0.0
            score = max(difflib.SequenceMatcher(None, folded, candidate).ratio(), overlap)
            if score > best.get(page.id, (0.0, ""))[0]:
                best[page.id] = (score, label)
    ranked = sorted(best.values(), key=lambda item: -item[0])
    return list(dict.fromkeys(label for score, label in ranked if score >= 0.5))[:n]


def _one(text: str, found: list[Page]) -> Page:
    unique = list({p.id: p for p in found}.values())
    if len(unique) > 1:  # the main model's page wins over the MTP module's copy of the same name
        main = [p for p in unique if p.main]
        unique = main or unique
    if len(unique) == 1:
        return unique[0]
    listed = ", ".join(f"{p.name} ({p.kind_text}, {p.id})" for p in unique[:12])
    more = f" and {len(unique) - 12} more" if len(unique) > 12 else ""
    raise UsageError(f"'{shorten(text, 80)}' names {len(unique)} pages: {listed}{more}; name one of them")


def _by_path(pages: Pages, segments: list[str]) -> list[Page]:
    def matches(page: Page) -> bool:
        path = [short(s).casefold() for s in page.path]
        full = [s.casefold() for s in page.path]
        if len(segments) > len(path):
            return False
        tail, tail_full = path[-len(segments) :], full[-len(segments) :]
        return all(s in (a, b) for s, a, b in zip(segments, tail, tail_full))

    return [p for p in pages if p.kind != "tensor" and matches(p)]


def _tensor(pages: Pages, text: str) -> Page | None:
    """A checkpoint tensor's page, with the layer its name gives."""
    if "." not in text or " " in text:
        return None
    name = _METADATA.sub(".weight", text)
    layer_match = _LAYER.search(name)
    expert_match = _EXPERT.search(name)
    pattern = _LAYER.sub(lambda m: f"{m.group(1)}layers.{{layer}}.", name, count=1)
    pattern = _EXPERT.sub(".experts.{expert}.", pattern, count=1)
    found = [p for p in pages if p.kind == "tensor" and pattern in p.aliases]
    if not found:
        return None
    page = found[0]
    if expert_match and page.experts:
        expert = _index(expert_match.group(1))
        if expert is None or expert >= page.experts:
            raise UsageError(
                f"'{shorten(text, 80)}': {pages.model} has experts 0–{page.experts - 1} in each MoE layer, "
                f"not expert {shorten(expert_match.group(1), 20)}"
            )
    if layer_match is None:
        return page
    layer = _index(layer_match.group(2))
    if page.layers and (layer is None or layer not in page.layers):
        raise UsageError(
            f"'{shorten(text, 80)}': {pages.model} has this tensor in {_span(page.layers)}, not in layer "
            f"{shorten(layer_match.group(2), 20)}"
        )
    if layer is None:  # a tensor without layers named with one: no model has that many
        raise UsageError(f"'{shorten(text, 80)}': {pages.model} has this tensor in no layer")
    groups = [p for p in pages if p.kind == "block" and layer in p.layers and p.main == page.main]
    note = f"layer {layer}"
    if groups:
        group = groups[0]
        count, _, kind = short(group.name).partition(" ")  # "60", "MoE blocks"
        note += f": one of the {count} {kind}" if len(group.layers) > 1 else f": the {kind}"
        note += f" ({_span(group.layers)})"
    return replace(page, layer=layer, layer_note=note, name=text)


def _index(digits: str) -> int | None:
    """A layer or expert number as the name writes it; None past 9 digits, more than any model has
    (and than Python turns into an int at all past 4,300).

    >>> _index("383"), _index("0005"), _index("1" * 5000)
    (383, 5, None)
    """
    return int(digits) if len(digits) <= 9 else None


def _span(layers: tuple[int, ...]) -> str:
    from kimicount.anatomy import layer_span

    return layer_span(layers)
