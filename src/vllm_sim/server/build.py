"""Assembles one simulator instance (engine, API context, routes) from a Config."""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from vllm_sim.api.admin import RuntimeControl
from vllm_sim.api.context import ApiContext, RequestIds, ServingSettings
from vllm_sim.api.failures import FailureInjector
from vllm_sim.api.grpc_engine import GrpcState
from vllm_sim.api.grpc_generate import GENERATE_PATH
from vllm_sim.api.health import Readiness
from vllm_sim.api.http_envelope import OPENAI_DIALECT
from vllm_sim.api.omni import ImageEmission
from vllm_sim.api.render_service import RenderService
from vllm_sim.api.response_store import ResponseStore
from vllm_sim.api.routes import Access, build_routes
from vllm_sim.config import Config, FakeMetrics, project
from vllm_sim.config.model import VLLM_VERSION
from vllm_sim.engine.clock import ScaledScheduler
from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.core import Engine
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.events import KvEventPublisher, offset_endpoint, topic_for
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.settings import latency_from_config, limits_from_config, synthesis_settings
from vllm_sim.engine.steps import StepEngine
from vllm_sim.engine.tokenizer import SimulatedTokenizer, Tokenizer
from vllm_sim.http.app import App
from vllm_sim.http.cors import Cors, CorsPolicy
from vllm_sim.metrics.cache_config import CacheShape, cache_config_labels
from vllm_sim.metrics.catalogue import (
    WAITING_REASONS,
    EngineState,
    SchedulerView,
    SleepState,
    VllmMetrics,
    fake_scheduler,
    live_scheduler,
)
from vllm_sim.metrics.exposition import Exposition
from vllm_sim.metrics.fake import FakeMetricsDriver
from vllm_sim.metrics.instrumentator import HttpMetrics
from vllm_sim.metrics.recorder import MetricsRecorder
from vllm_sim.perf import StepTimeModel
from vllm_sim.server.dataset_setup import load_dataset
from vllm_sim.server.grpc_server import GrpcServer

MB = 1024 * 1024


@dataclass(slots=True)
class Instance:
    """One served instance: what the runner starts, drains and stops."""

    config: Config
    port: int
    app: App
    engine: Engine
    readiness: Readiness
    control: RuntimeControl
    # Started with the server, cancelled when it stops (fake-metric generators).
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    # The gRPC side sharing the port, made on the running event loop (given the start
    # time); None where vLLM serves none (an encoder-only node).
    grpc: Callable[[float], GrpcServer] | None = None


def pod_headers(cfg: Config, port: int) -> tuple[tuple[bytes, bytes], ...]:
    """The headers llm-d uses to see which pod answered."""
    headers: list[tuple[bytes, bytes]] = []
    if cfg.pod_name:
        headers.append((b"x-inference-pod", cfg.pod_name.encode()))
        headers.append((b"x-inference-port", str(port).encode()))
    if cfg.pod_namespace:
        headers.append((b"x-inference-namespace", cfg.pod_namespace.encode()))
    return tuple(headers)


def serving_settings(cfg: Config, port: int) -> ServingSettings:
    renamed = {
        "served_model_names": "served_model_name",
        "base_model": "model",
        "prefix_caching": "enable_prefix_caching",
        "echo_request_id": "enable_request_id_headers",
        "prompt_tokens_details": "enable_prompt_tokens_details",
    }
    return project(
        ServingSettings,
        cfg,
        renamed,
        pod_headers=pod_headers(cfg, port),
        system_fingerprint=system_fingerprint(cfg),
    )


def system_fingerprint(cfg: Config) -> str:
    """vLLM's `vllm-<version>-<hash of the serving configuration>`: the same for every
    answer of a server, different when the model or its limits change."""
    served = f"{cfg.model}|{cfg.served_model_name}|{cfg.max_model_len}|{cfg.seed}"
    digest = hashlib.sha256(served.encode()).hexdigest()
    return f"vllm-{VLLM_VERSION}-{digest[:8]}"


def build_instance(
    cfg: Config,
    port: int,
    rank: int = 0,
    tokenizer: Tokenizer | None = None,
    step_model: StepTimeModel | None = None,
) -> Instance:
    """The instance serving rank `rank` on `port`; with no `tokenizer`, the simulated one.
    With a `step_model`, the step engine runs, timed by it; else the token clock."""
    # Each rank draws its own stream; rank 0 keeps the seed as given.
    rng = random.Random(cfg.seed if rank == 0 else cfg.seed * 1009 + rank)
    tokenizer = tokenizer or SimulatedTokenizer()
    dataset = load_dataset(cfg, tokenizer)  # raises DatasetSetupError
    content = ContentSource(
        cfg.mode, tokenizer, rng, synthesis_settings(cfg), cfg.mm_encoder_only, dataset
    )
    background: list[Callable[[], Coroutine[Any, Any, None]]] = []
    kv = _kv_cache(cfg, port, rank, background)
    metrics = VllmMetrics(cfg.display_model_name, cfg.max_model_len, engine=str(rank))
    metrics.cache_config.labels(*cache_config_labels(cache_shape(cfg, rank))).set(1)
    record = cfg.fake_metrics is None and not cfg.disable_log_stats
    observer: MetricsRecorder | None = None
    if record:
        # vLLM's start-up state: every series at 0 (the recorder then derives some of them).
        metrics.precreate_series()
        observer = MetricsRecorder(metrics, cfg.max_loras)
    engine = _engine(cfg, content, rng, observer, kv, step_model)
    for module in cfg.lora_modules:
        engine.loras.load(module.name, module.path)
    failures = FailureInjector(cfg.model, rng, cfg.max_model_len)
    images = ImageEmission(cfg.omni, rng)
    settings = serving_settings(cfg, port)
    ids = RequestIds(cfg.seed, port)
    responses = ResponseStore(cfg.responses_api_store)
    render = None
    if cfg.render_url:
        timeouts = cfg.render_timeout / 1e9, cfg.mm_render_timeout / 1e9
        render = RenderService(cfg.render_url, cfg.model, *timeouts)
    ctx = ApiContext(
        engine,
        tokenizer,
        settings,
        ids,
        failures,
        images,
        responses=responses,
        render_service=render,
    )
    readiness = Readiness(cfg.startup_duration / 1e9)
    on_fake: Callable[[FakeMetrics], None] | None = None
    if cfg.fake_metrics is None:
        _real_metrics(metrics, engine, cfg.max_loras, record)
    else:
        driver = _fake_metrics(metrics, engine, cfg)
        background.append(driver.run)
        on_fake = driver.update
    control = RuntimeControl(cfg, engine, failures, images, on_fake)
    access = Access(cfg.api_key, cfg.admin_api_key, cfg.disable_admin)
    http_metrics = HttpMetrics()
    routes = build_routes(
        ctx,
        Exposition(metrics.families, http_metrics),
        readiness,
        control,
        cfg.vllm_dev_mode,
        cfg.enable_sleep_mode,
        access,
        cfg.enable_server_load_tracking,
    )
    app = App(
        routes,
        cfg.max_request_body_size_mb * MB,
        Cors(project(CorsPolicy, cfg)),
        observer=http_metrics.record,
        dialect=OPENAI_DIALECT,
    )
    grpc = None
    if not cfg.mm_encoder_only:
        guard = access.guard(GENERATE_PATH)

        # --grpc-port: a port of gRPC alone as well, one per rank as --port's.
        extra_port = None if cfg.grpc_port is None else (cfg.host, cfg.grpc_port + rank)

        def grpc(started: float) -> GrpcServer:
            state = GrpcState(
                guard,
                lambda: app.draining,
                lambda: bool(engine.asleep),
                started,
                rank,
                cfg.data_parallel_size,
                VLLM_VERSION,
            )
            return GrpcServer(ctx, state, extra_port)

    return Instance(cfg, port, app, engine, readiness, control, background, grpc)


def _engine(
    cfg: Config,
    content: ContentSource,
    rng: random.Random,
    observer: MetricsRecorder | None,
    kv: KvCacheManager,
    step_model: StepTimeModel | None,
) -> Engine:
    limits, latency = limits_from_config(cfg), latency_from_config(cfg)
    clock = ScaledScheduler(cfg.time_scale) if cfg.time_scale != 1.0 else None
    if step_model is None:
        return Engine(limits, latency, content, rng, clock, observer, kv)
    return StepEngine(
        limits, latency, content, rng, step_model, cfg.max_num_batched_tokens, clock, observer, kv
    )


def cache_shape(cfg: Config, rank: int) -> CacheShape:
    """The KV cache as vLLM's cache_config_info describes it. Under the roofline model the
    GPU memory share and the cache dtype set the blocks; otherwise they are shown as given."""
    return CacheShape(
        block_size=cfg.block_size,
        num_gpu_blocks=cfg.kv_cache_size,
        max_model_len=cfg.max_model_len,
        prefix_caching=cfg.enable_prefix_caching,
        engine=str(rank),
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        cache_dtype=cfg.kv_cache_dtype,
    )


def _sleep_state(engine: Engine) -> SleepState:
    if not engine.asleep:
        return "awake"
    return "discard_all" if engine.sleep_level == 2 else "weights_offloaded"


def _real_metrics(metrics: VllmMetrics, engine: Engine, max_loras: int, record: bool) -> None:
    kv = engine.kv
    state = EngineState(
        running=lambda: engine.num_running,
        waiting=lambda: engine.num_waiting,
        kv_usage=lambda: 0.0 if kv is None else kv.cache.usage,
        waiting_by_reason=lambda: dict(
            zip(WAITING_REASONS, engine.waiting_by_reason(), strict=True)
        ),
        sleep_state=lambda: _sleep_state(engine),
    )
    metrics.register(live_scheduler(metrics.labels, state), request_families=record)
    metrics.lora_info.labels(str(max_loras), "", "").set(int(time.time()))


def _fake_metrics(metrics: VllmMetrics, engine: Engine, cfg: Config) -> FakeMetricsDriver:
    assert cfg.fake_metrics is not None
    gauges = fake_scheduler()
    metrics.register(SchedulerView(*gauges))

    return FakeMetricsDriver(
        metrics,
        gauges,
        cfg.fake_metrics,
        cfg.max_loras,
        cfg.fake_metrics_refresh_interval / 1e9,
        engine.set_fake_load,
    )


def _kv_cache(
    cfg: Config, port: int, rank: int, background: list[Callable[[], Coroutine[Any, Any, None]]]
) -> KvCacheManager:
    """The KV cache, always accounted as in vLLM; with --enable-kvcache (the reference's
    switch) its cache-hit threshold and, given an endpoint, its KV event publisher."""
    publish = None
    if cfg.enable_kvcache and cfg.zmq_endpoint:
        publisher = KvEventPublisher(
            offset_endpoint(cfg.zmq_endpoint, rank),
            topic_for(cfg.pod_ip, port, cfg.model),
            cfg.event_batch_size,
            cfg.use_vllm_map_event_format,
            rank,
            replay_endpoint=offset_endpoint(cfg.kv_events_replay_endpoint, rank)
            if cfg.kv_events_replay_endpoint
            else "",
            replay_queue_size=cfg.kv_events_replay_queue_size,
        )
        publish = publisher.publish

        async def run_publisher() -> None:
            await publisher.start()
            try:
                await asyncio.Event().wait()  # until the server stops and cancels this
            finally:
                await publisher.close()

        background.append(run_publisher)
    cache = BlockCache(cfg.kv_cache_size, cfg.block_size, publish)
    cache.loaded_models.update([cfg.model, *cfg.served_model_name])
    return KvCacheManager(
        cache,
        cfg.hash_seed,
        cfg.global_cache_hit_threshold,
        prefix_caching=cfg.enable_prefix_caching,
        thresholds=cfg.enable_kvcache,
    )
