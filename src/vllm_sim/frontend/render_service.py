"""Prompt token ids from an external vLLM render service (`--render-url`), on the wire the
reference uses: `POST /v1/completions/render {"model", "prompt"}` for a text prompt and
`POST /v1/chat/completions/render {"model", "messages"}` for a chat, answered by an array
whose first element (or an object) holds `token_ids` and, for a chat, `features`.

The in-process tokenizer is the default; the service is asked only when `--render-url` is
set. A service that cannot be reached, times out or answers nonsense makes the request a
503 naming the service, and the server keeps serving; an answer of 4xx is the client's
mistake and is passed on as a 400 with the service's message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from vllm_sim.engine.request import Prompt
from vllm_sim.errors import RequestError

if TYPE_CHECKING:  # imported where a service is set up: httpx costs ~15 MiB of every process
    import httpx

RenderPath = Literal["/v1/completions/render", "/v1/chat/completions/render"]
COMPLETION: Final[RenderPath] = "/v1/completions/render"
CHAT: Final[RenderPath] = "/v1/chat/completions/render"
_MAX_ANSWER_BYTES: Final = 64 << 20


@dataclass(frozen=True, slots=True)
class RenderCall:
    """What one prompt asks the service: the route, the JSON body, and whether the chat
    holds an image (a longer timeout applies, as in the reference)."""

    path: RenderPath
    body: bytes
    multimodal: bool = False


class _Rendered(msgspec.Struct):
    token_ids: list[int]
    features: dict[str, Any] | None = None


_one = msgspec.json.Decoder(_Rendered)
_many = msgspec.json.Decoder(list[_Rendered])


class RenderService:
    """One connection pool to the service, shared by every request of the instance."""

    def __init__(self, url: str, model: str, timeout: float, mm_timeout: float) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self._timeout = timeout
        self._mm_timeout = mm_timeout
        import httpx  # only with --render-url (see the import above)

        self._client = httpx.AsyncClient(base_url=self.url)
        self._http_error = httpx.HTTPError

    async def close(self) -> None:
        await self._client.aclose()

    def completion_call(self, prompt: str) -> RenderCall:
        return RenderCall(COMPLETION, msgspec.json.encode({"model": self.model, "prompt": prompt}))

    def chat_call(self, messages: list[Any], multimodal: bool) -> RenderCall:
        body = msgspec.json.encode({"model": self.model, "messages": messages})
        return RenderCall(CHAT, body, multimodal)

    async def resolve(self, prompts: list[Prompt], calls: list[RenderCall | None]) -> None:
        """Replaces each prompt's ids (and features) by the service's answer to its call."""
        if asyncio.current_task() is None:
            # The HTTP server runs a handler eagerly, outside any task, until its first
            # wait; the client's timeouts (anyio's cancel scopes) need one: this first wait
            # moves the handler into its task.
            await asyncio.sleep(0)
        for prompt, call in zip(prompts, calls, strict=True):
            if call is None:
                continue
            rendered = await self._render(call)
            prompt.token_ids = rendered.token_ids
            if rendered.features is not None:
                prompt.features = rendered.features

    async def _render(self, call: RenderCall) -> _Rendered:
        timeout = self._mm_timeout if call.multimodal else self._timeout
        headers = {"Content-Type": "application/json"}
        try:
            answer = await self._client.post(
                call.path, content=call.body, headers=headers, timeout=timeout
            )
        except self._http_error as error:
            reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            raise self._down(reason) from None
        if 400 <= answer.status_code < 500:
            raise RequestError(400, f"the render service refused the prompt: {_message(answer)}")
        if answer.status_code != 200:
            raise self._down(f"status {answer.status_code}: {_message(answer)}")
        return self._parse(answer.content)

    def _parse(self, content: bytes) -> _Rendered:
        if not content:
            raise self._down("empty response body")
        if len(content) > _MAX_ANSWER_BYTES:
            raise self._down("an answer larger than 64 MB")
        try:
            if content.lstrip()[:1] == b"[":
                answers = _many.decode(content)
                if not answers:
                    raise self._down("render returned empty array")
                return answers[0]
            return _one.decode(content)
        except msgspec.DecodeError as error:
            raise self._down(f"an answer without token ids ({error})") from None

    def _down(self, reason: str) -> RequestError:
        return RequestError(503, f"the render service at {self.url} cannot tokenize: {reason}")


def _message(answer: httpx.Response) -> str:
    """The service's error message, or the start of its body."""
    try:
        error = answer.json().get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    except (ValueError, AttributeError):
        pass
    return answer.text[:200]
