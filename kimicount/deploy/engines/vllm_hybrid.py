"""vLLM's hybrid KV-cache manager for a model with a per-sequence state beside its latent cache (Kimi
Linear, Kimi K3: KDA + MLA), as pure functions over one GPU's cache groups (deploy/groups.py).

Read from vllm-project/vllm (read, never shipped):

- the state page, a MambaSpec (vllm/v1/kv_cache_interface.py): `page_size_bytes` = Σ prod(shape) ×
  dtype size over the state's tensors, or `page_size_padded` when set; the KDA tensors are
  vllm/model_executor/layers/mamba/mamba_utils.py `MambaStateShapeCalculator.kda_state_shape` (q, k, v
  convolution windows (K − 1) × H·d / TP each, the recurrent state H / TP × d × d) in
  `kda_state_dtype`'s dtypes: the convolutions in --mamba-cache-dtype (auto: the model's), the
  recurrent state always float32 (`return (state_dtype, torch.float32)`; --mamba-ssm-cache-dtype does
  not reach KDA);
- the attention block, vllm/model_executor/models/config.py
  `HybridAttentionMambaModelConfig.verify_and_update_config` (the automatic block size of hybrid V1
  models, PR #20016 and its follow-up to #20499, in vLLM from v0.10.0; read in the file of the
  VLLM_ATTENTION_BACKEND era): an MLA token's page on one layer, `attn_page_size_1_token`
  (MLAAttentionSpec with block_size 1: 576 × 2 B in bf16); without prefix caching the least block
  `kernel_block_alignment_size × cdiv(mamba_page, kernel_block_alignment_size × attn_page_size_1_token)`,
  the alignment 64 for MLA (128 under CUTLASS MLA); a --block-size under it is raised to it; then
  `mamba_page_size_padded` = the attention page (the "Padding mamba page size by …%" line);
  MambaModelConfig turns prefix caching off for a model without mamba prefix caching ("Hybrid or
  mamba-based model detected without support for prefix caching: disabling"), so the state's
  `mamba_block_size` is max_model_len;
- the groups, vllm/v1/core/kv_cache_utils.py `_get_kv_cache_groups_uniform_page_size`: group_size =
  the fewest layers of a kind (the most when that is under 1.5 × the fewest), each kind cut into
  cdiv(its layers, group_size) groups of layers[i::groups], the last padded ("Add N padding layers");
  `get_kv_cache_config_from_groups`: group_size tensors, each shared by one layer of every group,
  num_blocks = available // page // group_size (`get_num_blocks`); under PP each worker's group_size
  is its largest group there;
- what a request takes: `FullAttentionSpec.max_memory_usage_bytes` cdiv(cdiv(max_model_len, DCP),
  block_size) pages, `MambaSpec.max_memory_usage_bytes` one page (mamba_cache_mode "none"), two under
  "align" (+ one per speculative block); `get_max_concurrency_for_kv_cache_config`: num_blocks ÷
  cdiv(group_size × Σ max_memory_usage_bytes, group_size × page); `_report_kv_cache_config`: "GPU KV
  cache size" = num_blocks // len(groups) × the least block_size of the groups (× DCP), "Maximum
  concurrency for L tokens per request: C x"; `_check_enough_kv_cache_memory`: one request's
  group_size × page × Σ pages must fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from kimicount.deploy.groups import PoolGroup, StatePool
from kimicount.errors import UsageError

#: MLA backends' block alignment for a hybrid model (config.py: 64; 128 under CUTLASS MLA).
MLA_BLOCK_ALIGNMENT = 64
#: group_size is the most layers of a kind when that is under this times the fewest (kv_cache_utils.py).
GROUP_SIZE_SLACK = Fraction(3, 2)
#: The state pages a request holds per state group, by mamba_cache_mode (MambaSpec.max_memory_usage_bytes).
STATE_PAGES = {"none": 1, "align": 2}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def attention_block(
    state_page: int, token_page: int, asked: int, alignment: int = MLA_BLOCK_ALIGNMENT
) -> int:
    """vLLM's attention block for a hybrid model: the least multiple of `alignment` tokens whose
    attention page holds one state page, or `asked` when that is larger. [tokens]

    >>> attention_block(814_080, 1_152, 64)  # Kimi K3 at TP8: 64 × cdiv(814,080, 64 × 1,152)
    768
    """
    least = alignment * cdiv(state_page, alignment * token_page)
    block = max(asked, least)
    if block * token_page < state_page:  # a state page larger still: the block grows to hold it
        block = cdiv(state_page, token_page)
    return block


def group_size(counts: Sequence[int]) -> int:
    """Layers per KV-cache group: the fewest of any kind, or the most when the most are fewer than 1.5 ×
    the fewest. [layers]

    >>> group_size([24, 69]), group_size([12, 13])
    (24, 13)
    """
    low, high = min(counts), max(counts)
    return high if high < low * GROUP_SIZE_SLACK else low


def kv_cache_groups(kinds: Sequence[tuple[str, tuple[int, ...]]]) -> list[tuple[str, tuple[int, ...]]]:
    """The model's groups, kind by kind: each kind's layers cut into cdiv(n, group_size) groups of
    layers[i::groups] (so that under PP every stage's share is even).

    >>> [(kind, len(layers)) for kind, layers in kv_cache_groups([("MLA", tuple(range(24))), ("KDA", tuple(range(69)))])]
    [('MLA', 24), ('KDA', 23), ('KDA', 23), ('KDA', 23)]
    """
    size = group_size([len(layers) for _, layers in kinds])
    groups = []
    for kind, layers in kinds:
        count = cdiv(len(layers), size)
        groups += [(kind, layers[i::count]) for i in range(count)]
    return groups


def vllm_state_pool(
    pool: int,
    groups: Sequence[PoolGroup],
    asked_block: int,
    max_model_len: int,
    dcp: int = 1,
    mode: str = "none",
) -> StatePool:
    """One GPU's pool as vLLM's hybrid manager packs a per-token MLA group and a per-sequence state:
    the block, the groups, the blocks, the tokens and concurrency it prints, and which pages a request
    of max_model_len takes. `pool` is the KV-cache memory (vLLM's available_kv_cache_memory).

    Kimi K3 at TP8 (24 MLA layers, 69 KDA): a block of 768 tokens (884,736 B a layer), 4 groups of 24
    (3 padding layers), and a request of 1,048,576 tokens takes 1,366 latent pages + 3 state pages.
    """
    mla = next(group for group in groups if group.cache is not None)
    states = [group for group in groups if group.state is not None]
    if mode not in STATE_PAGES:
        raise UsageError(
            f"--mamba-cache-mode {mode}: KDA layers take none or align (mode all needs mamba prefix caching)"
        )
    assert mla.cache is not None
    token_page = mla.cache.bytes_per_token_per_layer
    state_page = max(group.bytes_per_layer for group in states)
    block = attention_block(state_page, token_page, asked_block)
    least = attention_block(state_page, token_page, 1)  # vLLM's own, before a larger --block-size
    page = block * token_page
    kinds = [("MLA", mla.model_layers)] + [(group.name or "state", group.model_layers) for group in states]
    model_groups = kv_cache_groups(kinds)
    size = group_size([len(layers) for _, layers in kinds])
    held = set(mla.indices).union(*(group.indices for group in states))
    per_stage = [len(set(layers) & held) for _, layers in model_groups]
    worker = max(per_stage) or 1
    blocks = max(pool, 0) // page // worker
    latent_pages = cdiv(cdiv(max_model_len, dcp), block)
    state_groups = sum(1 for kind, _ in model_groups if kind != "MLA")
    latent_groups = len(model_groups) - state_groups
    slots = STATE_PAGES[mode]
    request_pages = latent_groups * latent_pages + state_groups * slots
    concurrency = blocks / request_pages
    mamba_block = max_model_len if mode == "none" else block
    tokens = blocks // len(model_groups) * min(block, mamba_block)
    need = worker * page * request_pages
    padding = sum(size - len(layers) % size for _, layers in kinds if len(layers) % size)
    padded = padding_percent(state_page, page)
    lines = (
        (
            f"attention block: {MLA_BLOCK_ALIGNMENT} × ceil({state_page:,} B state page ÷ ({MLA_BLOCK_ALIGNMENT} × "
            f"{token_page:,} B a token)) = {least:,} tokens"
            + (f"; --block-size {block:,} kept (larger)" if block > least else "")
            + f"; a page is {page:,} B a layer, the state page padded by {padded:.2f} %"
        ),
        f"groups: {len(mla.model_layers)} MLA and {sum(len(g.model_layers) for g in states)} KDA layers in "
        f"groups of {size}: {latent_groups} MLA + {state_groups} KDA = {len(model_groups)} groups"
        + (f" ({padding} padding layers)" if padding else ""),
        f"blocks: floor({max(pool, 0):,} B ÷ {page:,} B ÷ {worker} layers a group) = {blocks:,}",
        f"a request of {max_model_len:,} tokens: {latent_groups} × ceil({max_model_len:,}"
        + (f" ÷ DCP {dcp}" if dcp > 1 else "")
        + f" ÷ {block:,}) = {latent_groups * latent_pages:,} latent pages + {state_groups} × {slots} state "
        f"pages (mamba_cache_mode {mode}) = {request_pages:,} pages",
    )
    return StatePool(
        tokens=tokens,
        block_size=block,
        requests=blocks // request_pages,
        concurrency=concurrency,
        limit="state" if state_groups * slots > latent_groups * latent_pages else "kv",
        state_bytes=blocks // request_pages * state_groups * slots * worker * page,
        kv_bytes=blocks // request_pages * latent_groups * latent_pages * worker * page,
        slots=blocks,
        slots_per_request=state_groups * slots,
        request_state_bytes=state_groups * slots * worker * page,
        short_by=max(0, need - max(pool, 0)),
        lines=lines,
        figures={
            "block_size": block,
            "page_bytes": page,
            "state_page_bytes": state_page,
            "group_size": size,
            "groups": [{"kind": kind, "layers": len(layers)} for kind, layers in model_groups],
            "padding_layers": padding,
            "num_blocks": blocks,
            "pages_per_request": request_pages,
            "latent_pages_per_request": latent_groups * latent_pages,
            "state_pages_per_request": state_groups * slots,
            "mamba_cache_mode": mode,
            "needed_bytes": need,
        },
    )


def padding_percent(state_page: int, page: int) -> float:
    """How much vLLM pads the state page to the attention page, as it logs it. [%]

    >>> round(padding_percent(814_080, 884_736), 2)
    8.68
    """
    return 100 * (page - state_page) / state_page if state_page else math.nan
