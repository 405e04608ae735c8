"""The configuration in force, and the parts of one instance that follow it.

Start-up and POST /admin/config configure those parts through the same `apply`, so what a
setting does is the same whether it was given on the command line or changed later. An
update is validated whole by the config layer, then every part is swapped in one
synchronous step on the event loop, so no request ever sees half of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm_sim.config import Config, ConfigError, FakeMetrics, apply_admin_update, config_to_dict
from vllm_sim.engine.core import Engine
from vllm_sim.engine.timing.speculative import Speculation
from vllm_sim.frontend.failures import FailureInjector
from vllm_sim.frontend.omni import ImageEmission
from vllm_sim.protocols.ops.admin import UpdateRejected
from vllm_sim.server import views


class LiveConfig:
    """The api layer's RuntimeControl: shows and updates the configuration."""

    def __init__(
        self,
        cfg: Config,
        engine: Engine,
        failures: FailureInjector,
        images: ImageEmission,
        on_fake_metrics: Callable[[FakeMetrics], None] | None = None,
        speculation: Speculation | None = None,
    ) -> None:
        self.config = cfg
        self._engine = engine
        self._failures = failures
        self._images = images
        self._on_fake_metrics = on_fake_metrics
        self._speculation = speculation
        self._apply_runtime(cfg)

    def _apply_runtime(self, cfg: Config) -> None:
        """What start-up and every update set alike (the engine gets its settings when
        it is made; fake metrics start from the config)."""
        self._failures.configure(cfg.failure_injection_rate, cfg.failure_types)
        self._images.rate = cfg.image_emission_rate
        if self._speculation is not None:  # the steps from now on draw with the new rate
            self._speculation.acceptance_rate = cfg.spec_acceptance_rate

    def apply(self, new: Config) -> None:
        """Makes `new` (already validated) the configuration in force."""
        old = self.config
        # No await from here on: the swap is atomic on the event loop.
        self._engine.reconfigure(views.limits(new), views.latency(new))
        self._apply_runtime(new)
        fake = new.fake_metrics
        if self._on_fake_metrics is not None and fake is not None and fake != old.fake_metrics:
            self._on_fake_metrics(fake)
        self.config = new

    def shown(self) -> dict[str, Any]:
        return config_to_dict(self.config)

    def update(self, payload: bytes) -> dict[str, Any]:
        try:
            new = apply_admin_update(self.config, payload)
        except ConfigError as error:
            raise UpdateRejected(str(error)) from None
        self.apply(new)
        return config_to_dict(new)
