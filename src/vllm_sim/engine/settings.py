"""The engine's projection of the server configuration."""

from __future__ import annotations

from vllm_sim.config import Config, project
from vllm_sim.engine.core import EngineLimits
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.schemagen import SynthesisSettings

# Latency knobs keep short names in the engine; the config keeps the flags' names.
_LATENCY_KEYS = {
    "calculator": "latency_calculator",
    "ttft": "time_to_first_token",
    "ttft_std": "time_to_first_token_std_dev",
    "itl": "inter_token_latency",
    "itl_std": "inter_token_latency_std_dev",
    "kv_transfer": "kv_cache_transfer_latency",
    "kv_transfer_std": "kv_cache_transfer_latency_std_dev",
    "prefill_per_token": "prefill_time_per_token",
    "prefill_std": "prefill_time_std_dev",
    "kv_transfer_per_token": "kv_cache_transfer_time_per_token",
    "kv_transfer_per_token_std": "kv_cache_transfer_time_std_dev",
    "image": "time_to_generate_image",
    "image_std": "time_to_generate_image_std_dev",
}
_SYNTHESIS_KEYS = {
    "min_integer": "min_tool_call_integer_param",
    "max_integer": "max_tool_call_integer_param",
    "min_number": "min_tool_call_number_param",
    "max_number": "max_tool_call_number_param",
    "min_items": "min_tool_call_array_param_length",
    "max_items": "max_tool_call_array_param_length",
    "optional_param_probability": "tool_call_not_required_param_probability",
    "optional_field_probability": "object_tool_call_not_required_field_probability",
    "extra_call_probability": "tool_call_extra_call_probability",
}


def limits_from_config(cfg: Config) -> EngineLimits:
    return project(EngineLimits, cfg)


def latency_from_config(cfg: Config) -> LatencySettings:
    return project(LatencySettings, cfg, _LATENCY_KEYS)


def synthesis_settings(cfg: Config) -> SynthesisSettings:
    return project(SynthesisSettings, cfg, _SYNTHESIS_KEYS)
