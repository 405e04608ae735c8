"""GET /v1/models: the served names and the loaded LoRA adapters, as vLLM lists them."""

from __future__ import annotations

import hashlib
import time

from vllm_sim.frontend.context import ApiContext
from vllm_sim.http.messages import AnyResponse, HttpRequest
from vllm_sim.protocols.common.answers import json_response


async def handle(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    created = int(time.time())
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": ctx.settings.base_model,
            "parent": None,
            "max_model_len": ctx.settings.max_model_len,
            "permission": [_permission(name, created)],
        }
        for name in ctx.settings.served_model_names
    ]
    data += [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": path,
            "parent": ctx.settings.display_model,
            "max_model_len": ctx.settings.max_model_len,
            "permission": [_permission(name, created)],
        }
        for name, path in ctx.engine.view.loras.items()
    ]
    return json_response({"object": "list", "data": data})


def _permission(name: str, created: int) -> dict[str, object]:
    """vLLM lists one permissive ModelPermission per model (its id: 16 hex characters)."""
    return {
        "id": "modelperm-" + hashlib.sha1(name.encode()).hexdigest()[:16],
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
