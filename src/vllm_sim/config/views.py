"""The settings views of other layers, named here so that a setting's declaration can say
which of their fields it feeds (`to=`); the composition root builds the typed classes.

Each view is a dataclass of the layer that reads it (the engine's latency knobs and limits,
the tool-call synthesis ranges, what protocol handlers read, the CORS policy), in its own
words; `view_values` gives the keyword arguments that build one from a Config.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from .setting import View

if TYPE_CHECKING:
    from .model import Config

LATENCY = View("latency")  # vllm_sim.engine.latency.LatencySettings
LIMITS = View("limits")  # vllm_sim.engine EngineLimits
SYNTHESIS = View("synthesis")  # vllm_sim.schemagen.SynthesisSettings
SERVING = View("serving")  # vllm_sim.frontend.context.ServingSettings
CORS = View("cors")  # vllm_sim.http.cors.CorsPolicy
VIEWS = (LATENCY, LIMITS, SYNTHESIS, SERVING, CORS)


@cache
def view_fields(view: View) -> dict[str, str]:
    """The view's field name -> the Config attribute that fills it."""
    from .flags import SETTINGS  # the table imports these names, so not at module level

    return {
        feed.field: setting.attr
        for setting in SETTINGS
        if setting.attr is not None
        for feed in setting.views
        if feed.view == view
    }


def view_values(view: View, cfg: Config) -> dict[str, Any]:
    """The keyword arguments of the view's class, read from `cfg`."""
    return {field: getattr(cfg, attr) for field, attr in view_fields(view).items()}
