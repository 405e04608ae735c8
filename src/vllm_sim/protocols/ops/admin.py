"""GET/POST /admin/config and the deprecated POST /fake_metrics: the live configuration.

What the configuration is, how an update is validated and which parts of the simulator
follow it is the composition root's business (`vllm_sim.server.control`); these handlers
only speak HTTP for it.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from vllm_sim.errors import RequestError
from vllm_sim.http.messages import AnyResponse, Handler, HttpRequest, Response
from vllm_sim.protocols.common.answers import json_response

FAKE_METRICS_PREFIX = "Failed to update fake metrics: "


class UpdateRejected(Exception):
    """An update that changed nothing; `str(error)` is the one-line reason."""


class RuntimeControl(Protocol):
    """The configuration in force, as the admin routes see it."""

    def shown(self) -> dict[str, Any]:
        """The configuration as GET /admin/config shows it."""
        ...

    def update(self, payload: bytes) -> dict[str, Any]:
        """Applies a POST /admin/config body and returns the configuration as shown;
        raises UpdateRejected, changing nothing, if the body is bad."""
        ...


def admin_handlers(control: RuntimeControl) -> tuple[Handler, Handler, Handler]:
    """(GET /admin/config, POST /admin/config, POST /fake_metrics)."""

    async def show(request: HttpRequest) -> AnyResponse:
        return json_response(control.shown())

    async def update(request: HttpRequest) -> AnyResponse:
        try:
            shown = control.update(request.body)
        except UpdateRejected as error:
            raise RequestError(400, str(error)) from None
        return json_response(shown)

    async def update_fake_metrics(request: HttpRequest) -> AnyResponse:
        try:
            value = json.loads(request.body)
        except (ValueError, RecursionError) as error:
            message = f"{FAKE_METRICS_PREFIX}failed to unmarshal payload: {error}"
            raise RequestError(500, message) from None
        try:
            control.update(json.dumps({"fake-metrics": value}).encode())
        except UpdateRejected as error:
            raise RequestError(500, FAKE_METRICS_PREFIX + str(error)) from None
        return Response(204, b"", b"")

    return show, update, update_fake_metrics
