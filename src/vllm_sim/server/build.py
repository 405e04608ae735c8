"""Assembles one simulator instance (engine, API context, routes) from a Config."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_sim.config import Config, FakeMetrics
from vllm_sim.engine.clock import LoopScheduler, ScaledScheduler, Scheduler
from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.core import Engine
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.events import KvEvent, KvEventPublisher, offset_endpoint, topic_for
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.kvcache.offload import CpuTier
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.timing.speculative import (
    Speculation,
    SpeculativeStepLoop,
    SpeculativeTokenClock,
)
from vllm_sim.engine.timing.steps import StepLoop
from vllm_sim.engine.timing.strategy import TimingStrategy
from vllm_sim.engine.tokenizer import SimulatedTokenizer, Tokenizer
from vllm_sim.engine.view import EngineView
from vllm_sim.frontend.access import Drain
from vllm_sim.frontend.context import ApiContext, RequestIds
from vllm_sim.frontend.failures import FailureInjector
from vllm_sim.frontend.omni import ImageEmission
from vllm_sim.frontend.render_service import RenderService, answer_limit
from vllm_sim.http.app import App
from vllm_sim.http.cors import Cors
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
from vllm_sim.metrics.exposition import Exposition, Families
from vllm_sim.metrics.fake import FakeMetricsDriver
from vllm_sim.metrics.instrumentator import HttpMetrics
from vllm_sim.metrics.lag import LagObserver, OutputLag, lag_gauges
from vllm_sim.metrics.offload import OffloadRecorder
from vllm_sim.metrics.recorder import MetricsRecorder
from vllm_sim.metrics.sleep_mode import SleepModeMetrics
from vllm_sim.perf import StepTimeModel
from vllm_sim.protocols.openai.response_store import ResponseStore
from vllm_sim.protocols.ops.health import Readiness
from vllm_sim.protocols.vllm.grpc_names import GENERATE_PATH
from vllm_sim.protocols.vllm.server_info import VLLM_VERSION
from vllm_sim.protocols.vllm.sleep import SleepMode
from vllm_sim.server import views
from vllm_sim.server.control import LiveConfig
from vllm_sim.server.dataset_setup import load_dataset
from vllm_sim.server.offload_setup import offload_spec
from vllm_sim.server.step_timing import engine_block_costs
from vllm_sim.server.tokenizer_setup import think_end_id
from vllm_sim.transports.http.conventions import OPENAI_DIALECT
from vllm_sim.transports.http.routes import Access, build_routes

MB = 1024 * 1024

if TYPE_CHECKING:
    from vllm_sim.server.grpc_server import GrpcServer


@dataclass(slots=True)
class Instance:
    """One served instance: what the runner starts, drains and stops."""

    config: Config
    port: int
    app: App
    engine: Engine
    drain: Drain  # set once the server stops taking new work
    readiness: Readiness
    control: LiveConfig
    sleep_mode: SleepMode  # what /sleep and /wake_up do, and a sleep phase too
    # The same instance made afresh (engine, KV cache, metrics) from a config, as a
    # restarted pod comes back: a restart phase of the schedule.
    remake: Callable[[Config], Instance]
    # Started with the server, cancelled when it stops (fake-metric generators).
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    # The gRPC side sharing the port, made on the running event loop (given the start
    # time); None where vLLM serves none (an encoder-only node).
    grpc: Callable[[float], GrpcServer] | None = None


def build_instance(
    cfg: Config,
    port: int,
    rank: int = 0,
    tokenizer: Tokenizer | None = None,
    step_model: StepTimeModel | None = None,
) -> Instance:
    """The instance serving rank `rank` on `port`; with no `tokenizer`, the simulated one.
    With a `step_model`, vLLM's step loop times the engine; else the token clock."""
    rng = rank_rng(cfg, rank)
    tokenizer = tokenizer or SimulatedTokenizer()
    content = content_source(cfg, tokenizer, rng)
    background: list[Callable[[], Coroutine[Any, Any, None]]] = []
    kv = _kv_cache(cfg, port, rank, background, step_model)
    spec = speculation(cfg, rank)
    tier = kv.cache.offload
    metrics = VllmMetrics(
        cfg.display_model_name,
        cfg.max_model_len,
        engine=str(rank),
        num_speculative_tokens=0 if spec is None else spec.num_speculative_tokens,
        offload=tier is not None,
    )
    metrics.cache_config.labels(*cache_config_labels(cache_shape(cfg, rank))).set(1)
    record = cfg.fake_metrics is None and not cfg.disable_log_stats
    clock: Scheduler = ScaledScheduler(cfg.time_scale) if cfg.time_scale != 1.0 else LoopScheduler()
    # Whatever the metrics mode, how far the writes trail the engine is measured and told.
    lag = OutputLag(clock.now, f"{cfg.display_model_name}, engine {rank}, port {port}")
    observer: EngineObserver = LagObserver(lag)
    if record:
        # vLLM's start-up state: every series at 0 (the recorder then derives some of them).
        metrics.precreate_series()
        observer = MetricsRecorder(metrics, cfg.max_loras, lag)
        if tier is not None and metrics.offload is not None:
            tier.listener = OffloadRecorder(metrics.offload)
    engine = build_engine(cfg, content, rng, clock, observer, kv, step_model, spec)
    ctx = api_context(cfg, port, rng, engine, tokenizer)
    readiness = Readiness(cfg.startup_duration.seconds)
    on_fake: Callable[[FakeMetrics], None] | None = None
    if cfg.fake_metrics is None:
        _real_metrics(metrics, engine, cfg.max_loras, record)
    else:
        driver = _fake_metrics(metrics, engine, cfg)
        background.append(driver.run)
        on_fake = driver.update
    control = LiveConfig(cfg, engine, ctx.failures, ctx.images, on_fake, spec)
    access = Access(cfg.api_key, cfg.admin_api_key, cfg.disable_admin)
    http_metrics, sleep_metrics = HttpMetrics(), SleepModeMetrics()
    sleep_mode = SleepMode(engine, sleep_metrics, cfg.enable_sleep_mode)
    routes = build_routes(
        ctx,
        Exposition(metrics.families, http_metrics, sleep_metrics, _own_families(metrics, lag)),
        readiness,
        control,
        cfg.vllm_dev_mode,
        sleep_mode,
        access,
        cfg.enable_server_load_tracking,
        ResponseStore(cfg.responses_api_store),
    )
    app = App(
        routes,
        cfg.max_request_body_size_mb * MB,
        Cors(views.cors(cfg)),
        observer=http_metrics.record,
        dialect=OPENAI_DIALECT,
    )
    grpc = None if cfg.mm_encoder_only else _grpc(cfg, rank, ctx, access)

    def remake(new: Config) -> Instance:
        return build_instance(new, port, rank, tokenizer, step_model)

    return Instance(
        cfg,
        port,
        app,
        engine,
        ctx.drain,
        readiness,
        control,
        sleep_mode,
        remake,
        background,
        grpc,
    )


def rank_rng(cfg: Config, rank: int) -> random.Random:
    """Each rank draws its own stream; rank 0 keeps the seed as given."""
    return random.Random(cfg.seed if rank == 0 else cfg.seed * 1009 + rank)


def speculation(cfg: Config, rank: int) -> Speculation | None:
    """The speculative decoding of `cfg` on rank `rank`, None without. Its acceptance draws
    come from a stream of their own, seeded from --seed, so that turning speculation on
    changes no answer's content or length, only its timing."""
    spec = cfg.speculative
    if spec is None:
        return None
    rng = random.Random(f"speculation-{cfg.seed}-{rank}")
    return Speculation(spec.num_speculative_tokens, cfg.spec_acceptance_rate, rng)


def content_source(cfg: Config, tokenizer: Tokenizer, rng: random.Random) -> ContentSource:
    """What the engine answers with; raises DatasetSetupError for a bad dataset."""
    dataset = load_dataset(cfg, tokenizer)
    return ContentSource(
        cfg.mode,
        tokenizer,
        rng,
        views.synthesis(cfg),
        cfg.mm_encoder_only,
        dataset,
        think_end_id(cfg, tokenizer),
    )


def api_context(
    cfg: Config, port: int, rng: random.Random, engine: Engine, tokenizer: Tokenizer
) -> ApiContext:
    """The protocols' view of one instance: its engine, tokenizer and serving settings."""
    render = None
    if cfg.render_url:
        timeouts = cfg.render_timeout.seconds, cfg.mm_render_timeout.seconds
        limit = answer_limit(cfg.max_model_len, cfg.render_max_response_mb)
        render = RenderService(cfg.render_url, cfg.model, *timeouts, limit)
    return ApiContext(
        engine,
        tokenizer,
        views.serving(cfg, port),
        RequestIds(cfg.seed, port),
        FailureInjector(cfg.model, rng, cfg.max_model_len),
        ImageEmission(cfg.omni, rng),
        render_service=render,
    )


def _grpc(cfg: Config, rank: int, ctx: ApiContext, access: Access) -> Callable[[float], GrpcServer]:
    """The gRPC side, made on the running event loop given the start time."""
    gate = access.gate(ctx.drain, GENERATE_PATH)
    engine = ctx.engine
    # --grpc-port: a port of gRPC alone as well, one per rank as --port's.
    extra_port = None if cfg.grpc_port is None else (cfg.host, cfg.grpc_port + rank)

    def grpc(started: float) -> GrpcServer:
        # Imported here: gRPC's library is loaded only by a server that serves a call.
        from vllm_sim.server.grpc_server import GrpcServer
        from vllm_sim.transports.grpc.service import GrpcState

        state = GrpcState(
            gate,
            ctx.drain,
            lambda: bool(engine.view.asleep),
            started,
            rank,
            cfg.data_parallel_size,
            VLLM_VERSION,
        )
        return GrpcServer(ctx, state, extra_port)

    return grpc


def build_engine(
    cfg: Config,
    content: ContentSource,
    rng: random.Random,
    clock: Scheduler | None,
    observer: EngineObserver | None,
    kv: KvCacheManager,
    step_model: StepTimeModel | None,
    spec: Speculation | None = None,
) -> Engine:
    """The engine of `cfg` on `clock` (the event loop's when None), timed by vLLM's step
    loop given a `step_model`, decoding speculatively given `spec`, with the start-up LoRA
    adapters registered."""
    limits, latency = views.limits(cfg), views.latency(cfg)
    timing = _timing(cfg, step_model, spec)
    engine = Engine(limits, latency, content, rng, clock, observer, kv, timing)
    for module in cfg.lora_modules:
        engine.load_lora(module.name, module.path)
    return engine


def _timing(
    cfg: Config, step_model: StepTimeModel | None, spec: Speculation | None
) -> TimingStrategy | None:
    """The step loop given a step model, else the token clock (None: the engine's default),
    each in its speculative form given `spec`."""
    budget = cfg.max_num_batched_tokens
    if step_model is None:
        return None if spec is None else SpeculativeTokenClock(spec)
    if spec is None:
        return StepLoop(step_model, budget)
    return SpeculativeStepLoop(step_model, budget, spec)


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
        kv_offloading_size=cfg.kv_offloading_size,
        kv_offloading_backend=cfg.kv_offloading_backend,
    )


def _own_families(metrics: VllmMetrics, lag: OutputLag) -> Families:
    """The simulator's own families, after vLLM's and outside its `vllm:` namespace."""
    families = Families()
    for family in lag_gauges(metrics.labels, lag):
        families.register(family)
    return families


def _sleep_state(view: EngineView) -> SleepState:
    if not view.asleep:
        return "awake"
    return "discard_all" if view.sleep_level == 2 else "weights_offloaded"


def _real_metrics(metrics: VllmMetrics, engine: Engine, max_loras: int, record: bool) -> None:
    view = engine.view
    state = EngineState(
        running=lambda: view.num_running,
        waiting=lambda: view.num_waiting,
        kv_usage=lambda: view.kv_usage,
        waiting_by_reason=lambda: dict(zip(WAITING_REASONS, view.waiting_by_reason(), strict=True)),
        sleep_state=lambda: _sleep_state(view),
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
        cfg.fake_metrics_refresh_interval.seconds,
        engine.set_fake_load,
    )


def _kv_cache(
    cfg: Config,
    port: int,
    rank: int,
    background: list[Callable[[], Coroutine[Any, Any, None]]],
    step_model: StepTimeModel | None,
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
    return kv_cache_manager(cfg, publish, step_model)


def kv_cache_manager(
    cfg: Config,
    publish: Callable[[KvEvent], None] | None,
    step_model: StepTimeModel | None = None,
) -> KvCacheManager:
    """The KV cache of `cfg`, its events going to `publish` (none when None), with its CPU
    offloading tier if `cfg` has one (a block's bytes from `step_model`)."""
    cache = BlockCache(cfg.kv_cache_size, cfg.block_size, publish)
    cache.costs = engine_block_costs(cfg, step_model)
    spec = offload_spec(cfg, step_model)
    if spec is not None:
        cache.offload = CpuTier(spec, cfg.block_size)
    cache.loaded_models.update([cfg.model, *cfg.served_model_name])
    return KvCacheManager(
        cache,
        cfg.hash_seed,
        cfg.global_cache_hit_threshold,
        prefix_caching=cfg.enable_prefix_caching,
        thresholds=cfg.enable_kvcache,
    )
