"""DeepEP's all-to-all buffers for expert parallelism: an estimate of the low-latency RDMA buffer.

When the MoE's all-to-all runs on DeepEP (SGLang --moe-a2a-backend deepep, vLLM --all2all-backend
deepep_low_latency), every GPU registers a buffer that DeepEP sizes with
`Buffer.get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks,
num_experts)`, its `LowLatencyLayout` (csrc/config.hpp): two (odd/even) send buffers of
max(T × dispatch message, E × T × combine message) and two receive buffers of
max(E × T × dispatch message, E × T × combine message), with T the tokens one rank dispatches at most
(SGLang's SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK, 128 by default), E the experts (physical:
redundant slots included), a dispatch message 16 + max(2 × H, H + H ÷ 128 × 4) bytes (a header, then
bf16 or fp8 with its scales) and a combine message H ÷ 128 × 4 + 2 × H bytes. The signalling counters
(a few KiB) and the normal-mode NVLink buffer are left out. It is an estimate: kimicount does not
subtract it from the pool (plan has no all-to-all backend option); it says what to keep free for it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: SGLang's default tokens per rank for DeepEP's low-latency dispatch.
DISPATCH_TOKENS_PER_RANK = 128


@dataclass(frozen=True)
class DeepEPBuffer:
    """The low-latency RDMA buffer on one GPU, with its calculation."""

    bytes: int
    calculation: str
    source: str = "DeepEP csrc/config.hpp LowLatencyLayout; T = 128, SGLang's default"


def low_latency_buffer(hidden: int, experts: int, tokens: int = DISPATCH_TOKENS_PER_RANK) -> DeepEPBuffer:
    """DeepEP's low-latency RDMA buffer on one GPU: 2 × max(T × d, E × T × c) + 2 × E × T × max(d, c),
    d and c the dispatch and combine message sizes. [bytes]

    >>> low_latency_buffer(7168, 384).bytes  # Kimi K2: d = 14,352, c = 14,560
    2862612480
    """
    scales = hidden // 128
    dispatch = 16 + max(2 * hidden, hidden + scales * 4)
    combine = scales * 4 + 2 * hidden
    send = max(tokens * dispatch, experts * tokens * combine)
    receive = experts * tokens * max(dispatch, combine)
    calculation = (
        f"2 × max({tokens} × {dispatch:,}, {experts} × {tokens} × {combine:,}) + 2 × {experts} × {tokens} × "
        f"{max(dispatch, combine):,} B"
    )
    return DeepEPBuffer(2 * send + 2 * receive, calculation)
