"""GET/POST /admin/config and the deprecated POST /fake_metrics: the live configuration.

An update is validated whole by the config layer, then every part derived from the config
is swapped in one synchronous step on the event loop, so no request ever sees half of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from vllm_sim.api.failures import FailureInjector
from vllm_sim.api.http_envelope import json_response
from vllm_sim.api.omni import ImageEmission
from vllm_sim.config import Config, ConfigError, FakeMetrics, apply_admin_update, config_to_dict
from vllm_sim.engine.core import Engine
from vllm_sim.engine.settings import latency_from_config, limits_from_config
from vllm_sim.errors import RequestError
from vllm_sim.http.messages import AnyResponse, Handler, HttpRequest, Response

FAKE_METRICS_PREFIX = "Failed to update fake metrics: "


class RuntimeControl:
    """The configuration in force, and the parts of the simulator that follow it."""

    def __init__(
        self,
        cfg: Config,
        engine: Engine,
        failures: FailureInjector,
        images: ImageEmission,
        on_fake_metrics: Callable[[FakeMetrics], None] | None = None,
    ) -> None:
        self.config = cfg
        self._engine = engine
        self._failures = failures
        self._images = images
        images.rate = cfg.image_emission_rate
        self._on_fake_metrics = on_fake_metrics
        failures.configure(cfg.failure_injection_rate, cfg.failure_types)

    def update(self, payload: bytes) -> Config:
        """Applies a POST /admin/config body; raises ConfigError and changes nothing if bad."""
        old = self.config
        new = apply_admin_update(old, payload)
        # No await from here on: the swap is atomic on the event loop.
        self._engine.reconfigure(limits_from_config(new), latency_from_config(new))
        self._failures.configure(new.failure_injection_rate, new.failure_types)
        self._images.rate = new.image_emission_rate
        fake = new.fake_metrics
        if self._on_fake_metrics is not None and fake is not None and fake != old.fake_metrics:
            self._on_fake_metrics(fake)
        self.config = new
        return new


def admin_handlers(control: RuntimeControl) -> tuple[Handler, Handler, Handler]:
    """(GET /admin/config, POST /admin/config, POST /fake_metrics)."""

    async def show(request: HttpRequest) -> AnyResponse:
        return json_response(config_to_dict(control.config))

    async def update(request: HttpRequest) -> AnyResponse:
        try:
            cfg = control.update(request.body)
        except ConfigError as error:
            raise RequestError(400, str(error)) from None
        return json_response(config_to_dict(cfg))

    async def update_fake_metrics(request: HttpRequest) -> AnyResponse:
        try:
            value = json.loads(request.body)
        except (ValueError, RecursionError) as error:
            message = f"{FAKE_METRICS_PREFIX}failed to unmarshal payload: {error}"
            raise RequestError(500, message) from None
        try:
            control.update(json.dumps({"fake-metrics": value}).encode())
        except ConfigError as error:
            raise RequestError(500, FAKE_METRICS_PREFIX + str(error)) from None
        return Response(204, b"", b"")

    return show, update, update_fake_metrics
