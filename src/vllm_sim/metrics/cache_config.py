"""vLLM's `vllm:cache_config_info`: its labels are every field of vLLM's CacheConfig.

vLLM prints each field with str() (an unset one as "None") and adds the engine; the gauge is
always 1. The fields are those of vLLM's CacheConfig (vllm/config/cache.py) of the 0.32
series; the 0.32 listing in the spec shows the family, not its labels. The simulator fills
in what it knows of its cache; every other field shows vLLM's default.
"""

from __future__ import annotations

from dataclasses import dataclass

CACHE_CONFIG_DEFAULTS: dict[str, str] = {
    "block_size": "16",
    "user_specified_block_size": "False",
    "user_specified_mamba_block_size": "False",
    "kv_cache_layout": "None",
    "prefix_match_unit": "None",
    "gpu_memory_utilization": "0.92",
    "cache_dtype": "auto",
    "is_attention_free": "False",
    "num_gpu_blocks_override": "None",
    "sliding_window": "None",
    "enable_prefix_caching": "True",
    "prefix_caching_hash_algo": "sha256",
    "attn_group_size": "None",
    "prefix_cache_retention_interval": "0",
    "kv_cache_dtype_skip_layers": "[]",
    "mamba_page_size_padded": "None",
    "skip_page_size_padded": "None",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_ssm_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "enable_mamba_fine_grained_prefix_cache": "False",
    "replayssm_buffer_len": "16",
    "use_replayssm": "False",
    "use_kda_recoverssm": "False",
    "num_gpu_blocks": "None",
    "num_cpu_blocks": "0",
    "effective_attention_block_size": "None",
    "kv_cache_size_tokens": "None",
    "kv_cache_max_concurrency": "None",
    "kv_sharing_fast_prefill": "False",
    "kv_cache_memory_bytes": "None",
    "kv_offloading_size": "None",
    "kv_offloading_backend": "native",
    "_block_size_resolved": "True",
    "engine": "0",
}
CACHE_CONFIG_LABELS = tuple(CACHE_CONFIG_DEFAULTS)


@dataclass(frozen=True, slots=True)
class CacheShape:
    """What the simulator knows of its KV cache, for cache_config_info."""

    block_size: int
    num_gpu_blocks: int
    max_model_len: int
    prefix_caching: bool
    engine: str
    gpu_memory_utilization: float = 0.92
    cache_dtype: str = "auto"
    kv_offloading_size: float | None = None
    kv_offloading_backend: str = "native"


def cache_config_labels(shape: CacheShape) -> tuple[str, ...]:
    """cache_config_info's label values: vLLM's defaults, with what the simulator knows."""
    tokens = shape.block_size * shape.num_gpu_blocks
    known = {
        "block_size": str(shape.block_size),
        "gpu_memory_utilization": str(shape.gpu_memory_utilization),
        "cache_dtype": shape.cache_dtype,
        "enable_prefix_caching": str(shape.prefix_caching),
        "num_gpu_blocks": str(shape.num_gpu_blocks),
        "effective_attention_block_size": str(shape.block_size),
        "kv_cache_size_tokens": str(tokens),
        "kv_cache_max_concurrency": str(tokens / shape.max_model_len),
        "kv_offloading_size": str(shape.kv_offloading_size),
        "kv_offloading_backend": shape.kv_offloading_backend,
        "engine": shape.engine,
    }
    return tuple(known.get(name, default) for name, default in CACHE_CONFIG_DEFAULTS.items())
