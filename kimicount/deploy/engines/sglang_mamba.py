"""SGLang's mamba state pool beside its KV pool, for a model with a per-sequence state (Kimi Linear,
Kimi K3), as pure functions over one GPU's cache groups (deploy/groups.py).

Read from sgl-project/sglang (read, never shipped):

- the split, python/sglang/srt/model_executor/model_runner_components/kv_cache_configurator.py
  (`ModelRunnerKVCacheMixin.handle_max_mamba_cache` in model_runner.py before it moved):
  `_handle_max_mamba_cache` takes SGLang's rest_memory (the KV budget,
  engines/sglang.py) and, unless --max-mamba-cache-size gives the slots (÷ the attention DP size) or
  --disable-radix-cache with --max-running-requests does, gives the state pool rest_memory ×
  r ÷ (1 + r), r = --mamba-full-memory-ratio (0.9 by default, server_args.py), and makes
  max_mamba_cache_size = int(that ÷ mamba_cache_per_req); the KV pool is what is left, in cells of
  the MLA latent (MLATokenToKVPool) per page;
- a slot's bytes, python/sglang/srt/configs/mamba_utils.py `KimiLinearCacheParams.mamba_cache_per_req`:
  (Σ the conv windows' elements × the conv dtype's size + the temporal state's × --mamba-ssm-dtype's,
  float32 by default) × the KDA layers, the shapes `KimiLinearStateShape.create`'s (the same as
  vLLM's kda_state_shape), the conv windows in bf16;
- the requests the states admit, `_resolve_max_num_reqs`: max_running_requests = min(its default or
  given ÷ DP, tokens ÷ 2, max_mamba_cache_size ÷ `_calculate_mamba_ratio()`), the ratio the state
  slots one request holds: 1 with --disable-radix-cache, else MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
  3 + the extra buffer's ping-pong slots (2 under the overlap scheduler, 1 lazy or without it; none for
  no_buffer), from v0.5.9 (an SGLang fork's backport names the constants "from sglang v0.5.9");
- the Kimi K3 cookbook (docs/cookbook/autoregressive/Moonshotai/Kimi-K3.mdx; its "Mamba ratio
  calculator", docs/src/snippets/_kimi_k3_mamba_ratio_calculator.jsx) says the same in its words: S
  slots per request (extra_buffer 5, extra_buffer_lazy 4, no_buffer 3, radix cache off 1), and under
  DCP each rank keeps 1 ÷ DCP of a request's latent tokens while the state is whole on every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from kimicount.deploy.groups import PoolGroup, StatePool

GIB = 2**30
#: SGLang's default --mamba-full-memory-ratio (server_args.py ServerArgs.mamba_full_memory_ratio).
DEFAULT_FULL_MEMORY_RATIO = Fraction(9, 10)
#: The slots a request holds, by strategy, with the overlap scheduler (kv_cache_configurator.py
#: MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO 3 + MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP 2, _LAZY 1).
SLOTS = {"no_buffer": 3, "extra_buffer": 5, "extra_buffer_lazy": 4}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def slots_per_request(strategy: str, radix_cache: bool = True) -> int:
    """The state slots one request holds: SGLang's _calculate_mamba_ratio. [slots]

    >>> slots_per_request("extra_buffer"), slots_per_request("no_buffer"), slots_per_request("extra_buffer", False)
    (5, 3, 1)
    """
    return SLOTS[strategy] if radix_cache else 1


def sglang_state_pool(
    pool: int,
    groups: Sequence[PoolGroup],
    page: int,
    max_model_len: int,
    *,
    ratio: Fraction = DEFAULT_FULL_MEMORY_RATIO,
    slots: int = 5,
    max_mamba_cache_size: int | None = None,
    max_running_requests: int | None = None,
    radix_cache: bool = True,
    running_cap: int | None = None,
    attention_dp: int = 1,
    dcp: int = 1,
) -> StatePool:
    """One GPU's pools as SGLang sizes them for a hybrid model: the state slots and their bytes, the KV
    tokens in what is left, and the requests of max_model_len both admit. `pool` is SGLang's
    rest_memory (bytes); `running_cap` its max_running_requests before the state's clamp.

    >>> slots_per_request("extra_buffer_lazy")
    4
    """
    mla = next(group for group in groups if group.cache is not None)
    states = [group for group in groups if group.state is not None]
    per_request = sum(group.bytes_per_sequence for group in states)
    rest = max(pool, 0)
    if max_mamba_cache_size is not None:
        size = max_mamba_cache_size // attention_dp
        how = f"--max-mamba-cache-size {max_mamba_cache_size:,}" + (
            f" ÷ attention DP {attention_dp}" if attention_dp > 1 else ""
        )
    elif not radix_cache and max_running_requests is not None:
        size = max_running_requests // attention_dp
        how = f"--max-running-requests {max_running_requests:,} (radix cache off)"
    else:
        budget = rest * ratio / (1 + ratio)
        size = int(budget // per_request) if per_request else 0
        how = (
            f"floor({rest:,} B × {float(ratio):g} ÷ {float(1 + ratio):g} ÷ {per_request:,} B a slot) "
            f"(--mamba-full-memory-ratio {float(ratio):g})"
        )
    state_bytes = size * per_request
    kv_budget = max(rest - state_bytes, 0)
    assert mla.cache is not None
    cell = mla.cache.bytes_per_token_per_gpu
    tokens = kv_budget // cell // page * page if cell else 0
    per_rank = cdiv(cdiv(max_model_len, dcp), page) * page  # one request's latent cells on a rank
    kv_requests = tokens // per_rank
    state_requests = size // slots
    cap = state_requests if running_cap is None else min(running_cap, state_requests)
    requests = min(kv_requests, cap)
    limit = "state" if state_requests <= kv_requests else "kv"
    short_state = max(0, slots * per_request - state_bytes) if size < slots else 0
    short_kv = max(0, per_rank * cell - kv_budget) if kv_requests < 1 else 0
    lines = (
        (
            f"state slot: {per_request:,} B (the KDA state of {sum(g.layers for g in states)} layers on a GPU); "
            f"max_mamba_cache_size = {how} = {size:,}"
        ),
        (
            f"state pool: {size:,} × {per_request:,} B = {state_bytes / GIB:.2f} GiB; KV pool: the "
            f"{kv_budget / GIB:.2f} GiB left, {tokens:,} tokens of {cell:,} B"
        ),
        f"requests: the state admits {size:,} ÷ {slots} slots a request = {state_requests:,}; the KV pool "
        f"{tokens:,} ÷ {per_rank:,} = {kv_requests:,} of {max_model_len:,} tokens"
        + (f" (each rank keeps 1/{dcp} of a request's tokens)" if dcp > 1 else ""),
    )
    return StatePool(
        tokens=tokens,
        block_size=page,
        requests=requests,
        concurrency=min(size / slots, tokens / per_rank) if per_rank else 0.0,
        limit=limit,
        state_bytes=state_bytes,
        kv_bytes=tokens * cell,
        slots=size,
        slots_per_request=slots,
        request_state_bytes=slots * per_request,
        short_by=max(short_state, short_kv),
        lines=lines,
        figures={
            "max_mamba_cache_size": size,
            "mamba_cache_per_req": per_request,
            "mamba_full_memory_ratio": float(ratio),
            "slots_per_request": slots,
            "state_requests": state_requests,
            "kv_requests": kv_requests,
            "state_pool_gib": round(state_bytes / GIB, 2),
            "kv_pool_gib": round(kv_budget / GIB, 2),
        },
    )
