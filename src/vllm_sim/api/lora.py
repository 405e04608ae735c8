"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter, as vLLM answers them.

vLLM serves these only with VLLM_ALLOW_RUNTIME_LORA_UPDATING; a simulator exists to be
reconfigured by tests, so they are always on. Validation and messages are vLLM's.
"""

from __future__ import annotations

import msgspec

from vllm_sim.api.body import decode_body
from vllm_sim.api.context import ApiContext
from vllm_sim.errors import RequestError
from vllm_sim.http.messages import AnyResponse, HttpRequest, Response


class LoadRequest(msgspec.Struct):
    lora_name: str | None = None
    lora_path: str | None = None


class UnloadRequest(msgspec.Struct):
    lora_name: str | None = None
    lora_int_id: int | None = None


_load_decoder = msgspec.json.Decoder(LoadRequest)
_unload_decoder = msgspec.json.Decoder(UnloadRequest)


def _text(message: str) -> Response:
    return Response(200, message.encode(), b"text/plain; charset=utf-8")


async def load(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _load_decoder)
    name, path = body.lora_name, body.lora_path
    if not name or not path:
        raise RequestError(400, "Both 'lora_name' and 'lora_path' must be provided.", "lora_name")
    if name in ctx.engine.loras or name in ctx.settings.served_model_names:
        raise RequestError(400, f"The lora adapter '{name}' has already been loaded.", "lora_name")
    ctx.engine.loras.load(name, path)
    return _text(f"Success: LoRA adapter '{name}' added successfully.")


async def unload(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _unload_decoder)
    name = body.lora_name
    if not name:
        raise RequestError(
            400, "'lora_name' needs to be provided to unload a LoRA adapter.", "lora_name"
        )
    if name not in ctx.engine.loras:
        raise RequestError(404, f"The lora adapter '{name}' cannot be found.", "lora_name")
    ctx.engine.loras.unload(name)
    return _text(f"Success: LoRA adapter '{name}' removed successfully.")
