"""Prompt token ids from an external vLLM render service (`--render-url`), on the wire the
reference uses: `POST /v1/completions/render {"model", "prompt"}` for a text prompt and
`POST /v1/chat/completions/render {"model", "messages"}` for a chat, answered by an array
whose first element (or an object) holds `token_ids` and, for a chat, `features`.

The in-process tokenizer is the default; the service is asked only when `--render-url` is
set. A service that cannot be reached, times out or answers nonsense makes the request a
503 naming the service, and the server keeps serving; an answer of 4xx is the client's
mistake and is passed on as a 400 with the service's message. An answer is read as it
arrives and never past its limit (`max_answer_bytes`: one announced larger is refused
before its body is read), so a service answering megabytes cannot make every request
in flight hold them.
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
# Token ids as JSON take at most ~8 bytes each (7 digits and a comma) plus a chat's
# features; the limit for a context of `max_model_len` tokens leaves room for twice that.
_BYTES_PER_TOKEN: Final = 16
_ANSWER_ROOM: Final = 1 << 20
_ERROR_BYTES: Final = 64 << 10  # of a 4xx/5xx answer: enough for its message


def answer_limit(max_model_len: int, max_mb: float) -> int:
    """The most bytes a render answer may take: `max_mb` MiB where set (> 0), else what
    the ids of `max_model_len` tokens need, with room for features."""
    if max_mb > 0:
        return int(max_mb * (1 << 20))
    return _ANSWER_ROOM + max_model_len * _BYTES_PER_TOKEN


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

    def __init__(
        self,
        url: str,
        model: str,
        timeout: float,
        mm_timeout: float,
        max_answer_bytes: int = _ANSWER_ROOM + 32768 * _BYTES_PER_TOKEN,
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self._timeout = timeout
        self._mm_timeout = mm_timeout
        self._max_answer = max_answer_bytes
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
            async with self._client.stream(
                "POST", call.path, content=call.body, headers=headers, timeout=timeout
            ) as answer:
                status = answer.status_code
                limit = self._max_answer if status == 200 else _ERROR_BYTES
                content = await self._read(answer, limit, status == 200)
        except self._http_error as error:
            reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            raise self._down(reason) from None
        if 400 <= status < 500:
            raise RequestError(400, f"the render service refused the prompt: {_message(content)}")
        if status != 200:
            raise self._down(f"status {status}: {_message(content)}")
        return self._parse(content)

    async def _read(self, answer: httpx.Response, limit: int, whole: bool) -> bytes:
        """The answer's body up to `limit` bytes, read as it arrives. Past the limit a
        success is refused (`whole`: it cannot be parsed cut), an error's start kept."""
        announced = answer.headers.get("content-length", "")
        if whole and announced.isdigit() and int(announced) > limit:
            raise self._too_large(int(announced))
        chunks: list[bytes] = []
        size = 0
        async for chunk in answer.aiter_raw():
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                if whole:
                    raise self._too_large(size)
                break
        return b"".join(chunks)[:limit]

    def _too_large(self, size: int) -> RequestError:
        mib = self._max_answer / (1 << 20)
        return self._down(
            f"an answer of {size} bytes or more, over the limit of {mib:.1f} MiB "
            "(--render-max-response-mb)"
        )

    def _parse(self, content: bytes) -> _Rendered:
        if not content:
            raise self._down("empty response body")
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


def _message(content: bytes) -> str:
    """The service's error message, or the start of its body."""
    try:
        error = msgspec.json.decode(content).get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    except (msgspec.DecodeError, AttributeError):
        pass
    return content[:200].decode("utf-8", "replace")
