"""Assembles one simulator instance (engine, API context, routes) from a Config."""

from __future__ import annotations

import random
from dataclasses import dataclass

from vllm_sim.api.common import ApiContext, RequestIds
from vllm_sim.api.health import Readiness
from vllm_sim.config import Config
from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.core import Engine
from vllm_sim.engine.settings import latency_from_config, limits_from_config
from vllm_sim.engine.tokenizer import SimulatedTokenizer
from vllm_sim.metrics.engine_metrics import engine_registry
from vllm_sim.server.app import App
from vllm_sim.server.http import Headers
from vllm_sim.server.routes import build_routes

MB = 1024 * 1024


@dataclass(slots=True)
class Instance:
    """One served instance: what the runner starts, drains and stops."""

    config: Config
    port: int
    app: App
    engine: Engine
    readiness: Readiness


def pod_headers(cfg: Config, port: int) -> Headers:
    """The headers llm-d uses to see which pod answered."""
    headers: Headers = []
    if cfg.pod_name:
        headers.append((b"x-inference-pod", cfg.pod_name.encode()))
        headers.append((b"x-inference-port", str(port).encode()))
    if cfg.pod_namespace:
        headers.append((b"x-inference-namespace", cfg.pod_namespace.encode()))
    return headers


def build_instance(cfg: Config, port: int) -> Instance:
    rng = random.Random(cfg.seed)
    tokenizer = SimulatedTokenizer()
    content = ContentSource(cfg.mode, tokenizer, rng)
    engine = Engine(limits_from_config(cfg), latency_from_config(cfg), content, rng)
    ctx = ApiContext(
        engine=engine,
        tokenizer=tokenizer,
        served_model_names=cfg.served_model_name,
        base_model=cfg.model,
        max_model_len=cfg.max_model_len,
        request_ids=RequestIds(cfg.seed, port),
        pod_headers=pod_headers(cfg, port),
        echo_request_id=cfg.enable_request_id_headers,
        mode=cfg.mode,
    )
    readiness = Readiness(cfg.startup_duration / 1e9)
    registry = engine_registry(engine, cfg.display_model_name)
    app = App(build_routes(ctx, registry, readiness), cfg.max_request_body_size_mb * MB)
    return Instance(cfg, port, app, engine, readiness)
