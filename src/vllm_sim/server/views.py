"""The typed settings views of the other layers, built from the Config.

Which Config field fills which view field is said by each setting's declaration (`to=`,
see `vllm_sim.config.model`); a test checks that every view class's fields are exactly
those its declarations name, with agreeing types.
"""

from __future__ import annotations

import hashlib

from vllm_sim.config import Config
from vllm_sim.config.views import CORS, LATENCY, LIMITS, SERVING, SYNTHESIS, view_values
from vllm_sim.engine.core import EngineLimits
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.frontend.context import ServingSettings
from vllm_sim.http.cors import CorsPolicy
from vllm_sim.protocols.vllm.server_info import VLLM_VERSION
from vllm_sim.schemagen import SynthesisSettings


def limits(cfg: Config) -> EngineLimits:
    return EngineLimits(**view_values(LIMITS, cfg))


def latency(cfg: Config) -> LatencySettings:
    return LatencySettings(**view_values(LATENCY, cfg))


def synthesis(cfg: Config) -> SynthesisSettings:
    return SynthesisSettings(**view_values(SYNTHESIS, cfg))


def cors(cfg: Config) -> CorsPolicy:
    return CorsPolicy(**view_values(CORS, cfg))


def serving(cfg: Config, port: int) -> ServingSettings:
    return ServingSettings(
        **view_values(SERVING, cfg),
        pod_headers=pod_headers(cfg, port),
        system_fingerprint=system_fingerprint(cfg),
    )


def pod_headers(cfg: Config, port: int) -> tuple[tuple[bytes, bytes], ...]:
    """The headers llm-d uses to see which pod answered."""
    headers: list[tuple[bytes, bytes]] = []
    if cfg.pod_name:
        headers.append((b"x-inference-pod", cfg.pod_name.encode()))
        headers.append((b"x-inference-port", str(port).encode()))
    if cfg.pod_namespace:
        headers.append((b"x-inference-namespace", cfg.pod_namespace.encode()))
    return tuple(headers)


def system_fingerprint(cfg: Config) -> str:
    """vLLM's `vllm-<version>-<hash of the serving configuration>`: the same for every
    answer of a server, different when the model or its limits change."""
    served = f"{cfg.model}|{cfg.served_model_name}|{cfg.max_model_len}|{cfg.seed}"
    digest = hashlib.sha256(served.encode()).hexdigest()
    return f"vllm-{VLLM_VERSION}-{digest[:8]}"


# Each view class, and the fields it gets from elsewhere than the Config.
VIEW_CLASSES: dict[str, tuple[type, frozenset[str]]] = {
    LATENCY.name: (LatencySettings, frozenset()),
    LIMITS.name: (EngineLimits, frozenset()),
    SYNTHESIS.name: (SynthesisSettings, frozenset()),
    SERVING.name: (ServingSettings, frozenset({"pod_headers", "system_fingerprint"})),
    CORS.name: (CorsPolicy, frozenset()),
}
