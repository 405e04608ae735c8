"""The one request path of every generation endpoint, whatever carried the request.

decode -> failure injection -> request id -> model -> common knobs -> the protocol's plan
-> admission -> stream or wait -> answer. Each step runs in this order whatever the
protocol and the transport, so the same mistake is reported the same way on every API,
and a feature shared by several endpoints is applied here once, as the capability table
says. Refusals are RequestErrors; each transport says them its own way.
"""

from __future__ import annotations

import time
from typing import Any

from vllm_sim.engine.errors import EngineError
from vllm_sim.engine.request import Delivery, GenerationRequest
from vllm_sim.engine.sequence import RequestStream
from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import decode_body
from vllm_sim.frontend.caller import Caller
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.driver import ChunkEncoder, wait_for_result
from vllm_sim.frontend.endpoint import B, Call, Endpoint, Options, Plan
from vllm_sim.frontend.envelope import encode_json
from vllm_sim.frontend.errors import refusal_error
from vllm_sim.frontend.transfer import cache_threshold_forced, prefill_answer


async def serve(
    ctx: ApiContext, endpoint: Endpoint[B], caller: Caller, raw: bytes
) -> tuple[Call[B], bytes | ChunkEncoder[Any]]:
    """Runs a request given as its body's bytes: the admitted call, and its whole answer
    once done, or, for a stream, the encoder its transport drives."""
    body = decode_body(raw, endpoint.decoder)
    call, generation = await admit(ctx, endpoint, caller, body, len(raw))
    if call.options.stream:
        return call, endpoint.chunks(call)
    await wait_for_result(call.stream, caller)
    return call, await whole_answer(call, endpoint, generation)


async def admit(
    ctx: ApiContext, endpoint: Endpoint[B], caller: Caller, body: B, size: int
) -> tuple[Call[B], GenerationRequest]:
    """Every step up to the engine's admission, whatever the transport: the call, its
    stream running, and what was submitted. A refusal raises RequestError. `size` is the
    body's size on the wire: a large one is planned off the event loop."""
    ctx.failures.check(caller)
    request_id = ctx.request_id(caller)
    model = ctx.resolve_model(body.model)
    options = endpoint.options(body)
    check_options(options)
    options.include_usage = options.include_usage and endpoint.capabilities.include_usage
    try:
        if size <= ctx.worker_body_bytes:
            plan = _plan(ctx, endpoint, body)
        else:
            plan = await ctx.off_loop(_plan, ctx, endpoint, body)
    except RecursionError:
        # The decoder accepts deeper nesting than a protocol's own walk of the body can
        # follow (a tool call's arguments, a schema): a client mistake, not a crash.
        raise RequestError(400, "The request is nested too deeply") from None
    if plan.render is not None and ctx.render_service is not None:
        await ctx.render_service.resolve(plan.prompts, plan.render)
    generation = _generation_request(ctx, endpoint, caller, request_id, model, options, plan)
    try:
        stream = ctx.engine.submit(generation)
    except EngineError as error:
        raise refusal_error(error) from None
    return Call(ctx, request_id, model, body, options, stream), generation


# Output tokens (each logprob alternative counted) above which an answer is not built on
# the event loop: ~1 us each, so a few milliseconds' worth at most.
INLINE_ANSWER_SIZE = 4096


async def whole_answer(
    call: Call[B], endpoint: Endpoint[B], generation: GenerationRequest
) -> bytes:
    """The encoded answer of a finished request; a large one is built off the loop."""
    if _answer_size(call.stream, call.options) <= INLINE_ANSWER_SIZE:
        return _answer_body(endpoint, call, generation)
    return await call.ctx.off_loop(_answer_body, endpoint, call, generation)


def _answer_size(stream: RequestStream, options: Options) -> int:
    tokens = 0
    for seq in stream.sequences:
        tokens += seq.emitted
    return tokens if options.logprobs is None else tokens * (1 + options.logprobs)


def _answer_body(endpoint: Endpoint[B], call: Call[B], generation: GenerationRequest) -> bytes:
    answer = endpoint.answer(call)
    if isinstance(answer, bytes):
        return answer
    if generation.do_remote_decode:
        settings = call.ctx.settings
        sequence = call.stream.sequences[0]
        answer["kv_transfer_params"] = prefill_answer(
            sequence, settings.pod_ip, settings.block_size
        )
    return encode_json(answer)


def check_options(options: Options) -> None:
    """vLLM's rules on the knobs every protocol shares."""
    if options.n is not None and options.n < 1:
        raise RequestError(400, "n must be at least 1", param="n")
    max_tokens = options.max_tokens
    if max_tokens is not None and max_tokens <= 0 and not (max_tokens == 0 and options.echo):
        raise RequestError(
            400, "Max completion tokens and max tokens should be positive", options.max_tokens_field
        )
    if options.ignore_eos and max_tokens is None:
        raise RequestError(
            400,
            "Ignore_eos is true but max_completion_tokens (or max_tokens) is not set",
            param="ignore_eos",
        )
    transfer = options.transfer
    if transfer is not None and transfer.do_remote_decode and options.stream:
        raise RequestError(400, "Prefill does not support streaming", "kv_transfer_params")


def _plan(ctx: ApiContext, endpoint: Endpoint[B], body: B) -> Plan:
    """The protocol's plan; in echo mode with the texts to echo already tokenized, so that
    no large text is tokenized on the event loop when its sequence starts."""
    plan = endpoint.plan(ctx, body)
    if ctx.engine.view.echoes:
        for prompt in plan.prompts:
            if prompt.echo_text is not None:
                prompt.echo_tokens = ctx.tokenizer.tokenize(prompt.echo_text)
    return plan


def _generation_request(
    ctx: ApiContext,
    endpoint: Endpoint[B],
    caller: Caller,
    request_id: str,
    model: str,
    options: Options,
    plan: Plan,
) -> GenerationRequest:
    features = endpoint.capabilities
    transfer = options.transfer if features.kv_transfer else None
    return GenerationRequest(
        request_id=request_id,
        model=model,
        prompts=plan.prompts,
        n=(options.n or 1) if features.choices else 1,
        max_tokens=options.max_tokens,
        ignore_eos=options.ignore_eos,
        arrival_time=int(time.time()),
        received=caller.received,
        with_image=features.omni_image and ctx.images.wants_image(caller),
        tools=plan.tools,
        json_output=plan.json_output,
        do_remote_prefill=transfer is not None and transfer.do_remote_prefill,
        do_remote_decode=transfer is not None and transfer.do_remote_decode,
        cache_hit_threshold=options.cache_hit_threshold if features.cache_hit_threshold else None,
        force_cache_threshold=features.threshold_header and cache_threshold_forced(caller),
        max_tokens_field=options.max_tokens_field,
        logprobs=options.logprobs,
        stops=options.stops,
        seed=options.seed,
        greedy=options.greedy,
        prompt_logprobs=options.prompt_logprobs,
        reasoning=_reasoning(ctx, options, features.reasoning),
        reasoning_budget=_reasoning_budget(options) if features.reasoning else None,
        # Every transport reports its writes (driver.drive, answer_written).
        delivery=Delivery.STREAM if options.stream else Delivery.WHOLE,
    )


NO_REASONING_CONFIG = (
    "thinking_token_budget is set but reasoning_config is not configured. Please set "
    "--reasoning-parser and/or --reasoning-config to use thinking_token_budget."
)
# Parsers that read chat_template_kwargs.enable_thinking themselves (vLLM 0.32's qwen3):
# false turns the reasoning part off. The others leave it to the chat template.
_READS_ENABLE_THINKING = frozenset({"qwen3"})


def _reasoning(ctx: ApiContext, options: Options, honoured: bool) -> float | None:
    """The share of the answer that is reasoning; None without a reasoning parser, or
    where the endpoint does not split it out (`honoured` false)."""
    settings = ctx.settings
    parser = settings.reasoning_parser
    if not parser:
        if options.reasoning_budget is not None:  # vLLM needs a parser to end thinking
            raise RequestError(400, NO_REASONING_CONFIG, "thinking_token_budget")
        return None
    if not honoured:
        return None
    if options.enable_thinking is False and parser in _READS_ENABLE_THINKING:
        return 0.0
    return settings.reasoning_ratio


def _reasoning_budget(options: Options) -> int | None:
    """The cap on reasoning tokens; a budget of -1 is vLLM's "unlimited"."""
    budget = options.reasoning_budget
    return None if budget is None or budget < 0 else budget
