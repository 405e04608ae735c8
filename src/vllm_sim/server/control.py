"""The configuration in force, and the parts of one instance that follow it.

Start-up, POST /admin/config and the phases of a schedule configure those parts through
the same `apply`, so what a setting does is the same whether it was given on the command
line, changed later or set by a phase. An update is validated whole by the config layer,
then every part is swapped in one synchronous step on the event loop, so no request ever
sees half of it.

Two configurations are kept: the configured one (start-up, then every admin update), which
a schedule returns to after its last phase, and the one in force (the configured one with
the phase in force on top). An admin update changes both: what it names is in force at
once, over the phase's own value, until the next boundary puts the next phase's values
on the configured ones. An update that gives `phases` starts that schedule now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm_sim.config import Config, ConfigError, FakeMetrics, apply_admin_update, config_to_dict
from vllm_sim.config.phases import Phase, PhaseSchedule
from vllm_sim.config.schedule import with_phase
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
        self.configured = cfg  # what a schedule comes back to
        self.config = cfg  # in force
        # Set by the instance's phase driver: told of the schedule an update gives, and
        # asked which phase is in force.
        self.on_phases: Callable[[PhaseSchedule | None], None] | None = None
        self.current_phase: Callable[[], dict[str, object] | None] = lambda: None
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

    def enter_phase(self, phase: Phase | None) -> None:
        """A boundary of the schedule: the configured values with `phase`'s on top (None:
        the configured values alone) are in force, ending an update's override."""
        self.apply(with_phase(self.configured, phase))

    def shown(self) -> dict[str, Any]:
        """The configuration in force, and `current-phase`: the phase in force, if any."""
        shown = config_to_dict(self.config)
        shown["current-phase"] = self.current_phase()
        return dict(sorted(shown.items()))

    def update(self, payload: bytes) -> dict[str, Any]:
        try:
            configured = apply_admin_update(self.configured, payload)
            in_force = apply_admin_update(self.config, payload)
        except ConfigError as error:
            raise UpdateRejected(str(error)) from None
        # A `phases` key decodes to a new schedule object, even an equal one: it restarts.
        restart = configured.phases is not self.configured.phases
        self.configured = configured
        self.apply(in_force)
        if restart and self.on_phases is not None:
            self.on_phases(configured.phases)
        return self.shown()
