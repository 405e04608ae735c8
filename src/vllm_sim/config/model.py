"""The effective configuration: one immutable value the whole simulator reads.

Attribute `x_y` is the flag `--x-y` and the YAML key `x-y` (see `flags.SETTINGS`, which holds
defaults, help and rules; `load_config` fails loudly if the two ever disagree). Durations are
integer nanoseconds, lists are tuples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .fake_metrics import FakeMetrics

# What times tokens: the reference's sampled latencies, or vLLM V1's step loop timed by a
# performance model (closed-form from config.json and the GPU, or measured tables).
TimingModel = Literal["constant", "roofline", "table"]

# vLLM's --uvicorn-log-level choices.
UvicornLogLevel = Literal["critical", "debug", "error", "info", "trace", "warning"]


@dataclass(frozen=True, slots=True)
class LoraModule:
    """One `--lora-modules` entry; an empty base model means "the served model"."""

    name: str
    path: str = ""
    base_model_name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    # Server
    port: int
    max_request_body_size_mb: int
    max_request_output_tokens: int
    enable_request_id_headers: bool
    enable_prompt_tokens_details: bool
    log_http: bool
    disable_log_stats: bool
    startup_duration: int
    drain_timeout: int
    request_read_timeout: int
    enable_sleep_mode: bool
    enable_server_load_tracking: bool
    host: str
    api_key: tuple[str, ...]
    admin_api_key: str
    disable_admin: bool
    allowed_origins: tuple[str, ...]
    allowed_methods: tuple[str, ...]
    allowed_headers: tuple[str, ...]
    allow_credentials: bool
    # Model
    model: str
    served_model_name: tuple[str, ...]
    mode: str
    seed: int
    max_model_len: int
    # Engine & queue
    max_num_seqs: int
    max_waiting_queue_length: int
    max_num_batched_tokens: int
    grpc_port: int | None
    mm_encoder_only: bool
    # Latency (nanoseconds, except the factor)
    latency_calculator: str
    time_to_first_token: int
    time_to_first_token_std_dev: int
    inter_token_latency: int
    inter_token_latency_std_dev: int
    kv_cache_transfer_latency: int
    kv_cache_transfer_latency_std_dev: int
    prefill_overhead: int
    prefill_time_per_token: int
    prefill_time_std_dev: int
    kv_cache_transfer_time_per_token: int
    kv_cache_transfer_time_std_dev: int
    time_factor_under_load: float
    time_to_generate_image: int
    time_to_generate_image_std_dev: int
    # Content & tools
    image_emission_rate: int
    omni: bool
    skip_tool_validation: bool
    max_tool_call_integer_param: int
    min_tool_call_integer_param: int
    max_tool_call_number_param: float
    min_tool_call_number_param: float
    max_tool_call_array_param_length: int
    min_tool_call_array_param_length: int
    tool_call_not_required_param_probability: int
    object_tool_call_not_required_field_probability: int
    tool_call_extra_call_probability: int
    default_embedding_dimensions: int
    # KV cache & events
    enable_kvcache: bool
    kv_cache_size: int
    block_size: int
    hash_seed: str
    zmq_endpoint: str
    event_batch_size: int
    use_vllm_map_event_format: bool
    kv_events_replay_endpoint: str
    kv_events_replay_queue_size: int
    global_cache_hit_threshold: float
    enable_prefix_caching: bool
    kv_transfer_config: dict[str, Any] | None  # vLLM's JSON, read-only
    # LoRA
    max_loras: int
    max_cpu_loras: int
    lora_modules: tuple[LoraModule, ...]
    enable_lora: bool
    max_lora_rank: int
    # Failure injection & fake metrics
    failure_injection_rate: int
    failure_types: tuple[str, ...]
    fake_metrics: FakeMetrics | None
    fake_metrics_refresh_interval: int
    # Data parallel
    data_parallel_size: int
    data_parallel_rank: int
    # TLS
    ssl_certfile: str
    ssl_keyfile: str
    self_signed_certs: bool
    # Tokenizer & datasets
    dataset_path: str
    dataset_url: str
    dataset_in_memory: bool
    dataset_table_name: str
    render_url: str
    render_timeout: int
    mm_render_timeout: int
    force_dummy_tokenizer: bool
    tokenizer: str
    chat_template: str
    tokenizer_revision: str
    revision: str
    download_dir: str
    chat_template_content_format: str
    trust_request_chat_template: bool
    default_chat_template_kwargs: dict[str, Any] | None
    # Accepted vLLM flags without effect
    mm_processor_kwargs: str
    ec_transfer_config: str
    enforce_eager: bool
    # Performance model (the step engine)
    timing_model: TimingModel
    time_scale: float
    gpu: str
    gpu_spec_file: str
    timing_table: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    num_gpu_blocks_override: int | None
    dtype: str
    kv_cache_dtype: str
    quantization: str | None
    # Logging (klog -v, vLLM's request and HTTP-server logs)
    verbosity: int
    enable_log_requests: bool
    uvicorn_log_level: UvicornLogLevel
    # Environment (POD_IP may also come from the YAML key `ip`)
    pod_name: str
    pod_namespace: str
    pod_ip: str
    vllm_dev_mode: bool
    http_timeout_keep_alive: int
    responses_api_store: bool

    @property
    def display_model_name(self) -> str:
        """The model name responses and metrics carry: the first served name."""
        return self.served_model_name[0] if self.served_model_name else self.model
