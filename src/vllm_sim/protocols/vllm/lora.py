"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter, as vLLM answers them.

vLLM serves these only with VLLM_ALLOW_RUNTIME_LORA_UPDATING; a simulator exists to be
reconfigured by tests, so they are always on. Validation and messages are vLLM's.
"""

from __future__ import annotations

import msgspec

from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import decode_body
from vllm_sim.frontend.context import ApiContext
from vllm_sim.http.messages import AnyResponse, HttpRequest, Response


class LoadRequest(msgspec.Struct):
    lora_name: str | None = None
    lora_path: str | None = None


class UnloadRequest(msgspec.Struct):
    lora_name: str | None = None
    lora_int_id: int | None = None


_load_decoder = msgspec.json.Decoder(LoadRequest)
_unload_decoder = msgspec.json.Decoder(UnloadRequest)


# Bounds on what clients may register, so that the registry and /v1/models stay small:
# vLLM has none, but a shared simulator must not grow without limit.
MAX_ADAPTERS = 1024
MAX_NAME_LENGTH = 256
MAX_PATH_LENGTH = 4096  # Linux's PATH_MAX


def _text(message: str) -> Response:
    return Response(200, message.encode(), b"text/plain; charset=utf-8")


async def load(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _load_decoder)
    name, path = body.lora_name, body.lora_path
    if not name or not path:
        raise RequestError(400, "Both 'lora_name' and 'lora_path' must be provided.", "lora_name")
    _check_bounds(ctx, name, path)
    if name in ctx.engine.view.loras or name in ctx.settings.served_model_names:
        raise RequestError(400, f"The lora adapter '{name}' has already been loaded.", "lora_name")
    ctx.engine.load_lora(name, path)
    return _text(f"Success: LoRA adapter '{name}' added successfully.")


def _check_bounds(ctx: ApiContext, name: str, path: str) -> None:
    if len(name) > MAX_NAME_LENGTH:
        message = f"lora_name is longer than {MAX_NAME_LENGTH} characters"
        raise RequestError(400, message, "lora_name")
    if len(path) > MAX_PATH_LENGTH:
        message = f"lora_path is longer than {MAX_PATH_LENGTH} characters"
        raise RequestError(400, message, "lora_path")
    if len(ctx.engine.view.loras) >= MAX_ADAPTERS:
        message = f"{MAX_ADAPTERS} LoRA adapters are loaded already: unload one first"
        raise RequestError(400, message, "lora_name")


async def unload(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _unload_decoder)
    name = body.lora_name
    if not name:
        raise RequestError(
            400, "'lora_name' needs to be provided to unload a LoRA adapter.", "lora_name"
        )
    if name not in ctx.engine.view.loras:
        raise RequestError(404, f"The lora adapter '{name}' cannot be found.", "lora_name")
    ctx.engine.unload_lora(name)
    return _text(f"Success: LoRA adapter '{name}' removed successfully.")
