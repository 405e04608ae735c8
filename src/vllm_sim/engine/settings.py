"""The engine's projection of the server configuration."""

from __future__ import annotations

from vllm_sim.config import Config
from vllm_sim.engine.core import EngineLimits
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.schemagen import SynthesisSettings


def limits_from_config(cfg: Config) -> EngineLimits:
    return EngineLimits(
        max_num_seqs=cfg.max_num_seqs,
        max_waiting_queue_length=cfg.max_waiting_queue_length,
        max_model_len=cfg.max_model_len,
        block_size=cfg.block_size,
        max_loras=cfg.max_loras,
        max_cpu_loras=cfg.max_cpu_loras,
    )


def latency_from_config(cfg: Config) -> LatencySettings:
    return LatencySettings(
        calculator=cfg.latency_calculator,
        ttft=cfg.time_to_first_token,
        ttft_std=cfg.time_to_first_token_std_dev,
        itl=cfg.inter_token_latency,
        itl_std=cfg.inter_token_latency_std_dev,
        kv_transfer=cfg.kv_cache_transfer_latency,
        kv_transfer_std=cfg.kv_cache_transfer_latency_std_dev,
        prefill_overhead=cfg.prefill_overhead,
        prefill_per_token=cfg.prefill_time_per_token,
        prefill_std=cfg.prefill_time_std_dev,
        kv_transfer_per_token=cfg.kv_cache_transfer_time_per_token,
        kv_transfer_per_token_std=cfg.kv_cache_transfer_time_std_dev,
        time_factor_under_load=cfg.time_factor_under_load,
        max_num_seqs=cfg.max_num_seqs,
        image=cfg.time_to_generate_image,
        image_std=cfg.time_to_generate_image_std_dev,
    )


def synthesis_settings(cfg: Config) -> SynthesisSettings:
    return SynthesisSettings(
        min_integer=cfg.min_tool_call_integer_param,
        max_integer=cfg.max_tool_call_integer_param,
        min_number=cfg.min_tool_call_number_param,
        max_number=cfg.max_tool_call_number_param,
        min_items=cfg.min_tool_call_array_param_length,
        max_items=cfg.max_tool_call_array_param_length,
        optional_param_probability=cfg.tool_call_not_required_param_probability,
        optional_field_probability=cfg.object_tool_call_not_required_field_probability,
        extra_call_probability=cfg.tool_call_extra_call_probability,
    )
