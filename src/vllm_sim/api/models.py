"""GET /v1/models: the served names and the loaded LoRA adapters, as vLLM lists them."""

from __future__ import annotations

from vllm_sim.api.common import ApiContext, unix_now
from vllm_sim.server.http import AnyResponse, HttpRequest, json_response


async def handle(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    created = unix_now()
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": ctx.base_model,
            "parent": None,
            "max_model_len": ctx.max_model_len,
            "permission": [_permission(name, created)],
        }
        for name in ctx.served_model_names
    ]
    data += [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": path,
            "parent": ctx.display_model,
            "max_model_len": ctx.max_model_len,
            "permission": [_permission(name, created)],
        }
        for name, path in ctx.engine.loras.paths.items()
    ]
    return json_response({"object": "list", "data": data})


def _permission(name: str, created: int) -> dict[str, object]:
    """vLLM lists one permissive ModelPermission per model."""
    return {
        "id": f"modelperm-{name}",
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
