"""`kimicount plan` for GLM-5.2's indexer keys: which layers keep them under each engine, and per
pipeline stage, against the config's own `indexer_types` counted by hand and the engines' code.

- GLM-5.2's config (fixtures/glm-5.2/config.json): 78 layers; `indexer_types` "full" on layers 0, 1, 2
  and every fourth from 6 to 74 (21 layers), "shared" on the other 57, which reuse the last full layer's
  top-k and keep no indexer keys.
- vLLM (vllm/model_executor/models/deepseek_v2.py at 002d607, DeepseekV2MLAAttention's IndexCache block):
  an indexer, and its cache, on the full layers only.
- SGLang (python/sglang/srt/mem_cache/memory_pool.py NSATokenToKVPool, v0.5.8.post1):
  `index_k_with_scale_buffer` is one buffer `for _ in range(self.layer_num)`, every layer of the stage,
  of page_size × (index_head_dim + index_head_dim ÷ 128 × 4) bytes a page.
- A token's bytes on one layer: the bf16 latent (512 + 64) × 2 = 1,152 B; the indexer's fp8 key and
  its fp32 scale 128 + 4 = 132 B.
"""

from __future__ import annotations

import json

from .helpers import FIXTURES
from .test_plan import plan_json

GLM52_TYPES = json.loads((FIXTURES / "glm-5.2" / "config.json").read_text())["indexer_types"]
LATENT = (512 + 64) * 2  # 1,152 B
INDEXER = 128 + 128 // 128 * 4  # 132 B


def test_glm52_full_indexer_layers_by_hand():
    full = [layer for layer, kind in enumerate(GLM52_TYPES) if kind == "full"]
    assert full == [0, 1, 2, *range(6, 78, 4)] and len(full) == 21
    assert sum(layer < 39 for layer in full) == 12  # the first of two pipeline stages, layers 0-38


def test_sglang_keeps_indexer_keys_on_every_layer_and_vllm_on_the_full_ones():
    args = ("glm-5.2", "--gpus", "8xH200", "--kv-memory", "20GiB")
    vllm = plan_json(*args, "--engine", "vllm")["kv_cache"]["bytes_per_token_per_gpu"]
    sglang = plan_json(*args, "--engine", "sglang")["kv_cache"]["bytes_per_token_per_gpu"]
    assert vllm == 78 * LATENT + 21 * INDEXER == 92_628
    assert sglang == 78 * (LATENT + INDEXER) == 100_152


def test_under_pp_each_stage_keeps_the_indexer_keys_of_its_own_layers():
    """PP2 splits the 78 layers 39 + 39 (vLLM's get_pp_indices): 12 full layers in the first stage, 9 in
    the second under vLLM; under SGLang every layer of each stage."""
    args = ("glm-5.2", "--gpus", "16xH200", "--tp", "8", "--pp", "2", "--kv-memory", "20GiB")
    vllm = [s["kv_bytes_per_token"] for s in plan_json(*args, "--engine", "vllm")["stages"]]
    assert vllm == [39 * LATENT + 12 * INDEXER, 39 * LATENT + 9 * INDEXER] == [46_512, 46_116]
    sglang = [s["kv_bytes_per_token"] for s in plan_json(*args, "--engine", "sglang")["stages"]]
    assert sglang == [39 * (LATENT + INDEXER)] * 2 == [50_076, 50_076]
