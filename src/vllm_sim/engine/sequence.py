"""A sequence is one choice of one prompt: the unit the engine queues, runs and times."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import TYPE_CHECKING

from vllm_sim.engine.finish import FinishReason
from vllm_sim.engine.generation.toolcalls import ToolCallOutput

if TYPE_CHECKING:
    from vllm_sim.engine.latency import LatencyModel
    from vllm_sim.engine.request import GenerationRequest, Prompt


NO_KV_LIMIT = 1 << 62


class SeqState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


class Sequence:
    """Mutable state of one sequence, read by the protocol encoders as tokens appear."""

    __slots__ = (
        "cached_tokens",
        "call_starts",
        "computed",
        "deadline",
        "emitted",
        "encode_pending",
        "eos",
        "finish_reason",
        "gaps_unwritten",
        "index",
        "itl_delays",
        "kv_blocks",
        "kv_limit",
        "kv_load",
        "latency",
        "loaded_tokens",
        "lora_slot",
        "output_ids",
        "output_pieces",
        "preemptions",
        "prompt",
        "prompt_index",
        "reasoning_tokens",
        "request",
        "sent",
        "spec_accepted_tokens",
        "spec_draft_tokens",
        "state",
        "stop_reason",
        "stream",
        "t_enqueued",
        "t_finished",
        "t_first_token",
        "t_last_token",
        "t_started",
        "t_submitted",
        "t_written",
        "tool_calls",
        "ttft",
        "uid",
    )

    def __init__(
        self,
        uid: int,
        request: GenerationRequest,
        stream: RequestStream,
        prompt_index: int,
        index: int,
        now: float,
        latency: LatencyModel,
    ) -> None:
        self.uid = uid
        self.request = request
        self.stream = stream
        self.prompt_index = prompt_index
        self.prompt: Prompt = request.prompts[prompt_index]
        self.index = index  # choice index in the response
        self.state = SeqState.WAITING
        self.output_ids: list[int] = []
        self.output_pieces: list[str] = []
        self.emitted = 0  # tokens released to the client so far
        self.sent = 0  # tokens the protocol encoder has already written
        self.finish_reason: FinishReason | None = None
        self.stop_reason: str | int | None = None  # the stop string or token that ended it
        self.eos = False  # the last output token is the end-of-sequence token (no text)
        self.cached_tokens = 0
        # Of its cached tokens, those loaded back from the CPU offloading tier at its latest
        # start, and the seconds that load takes before its prefill may go on.
        self.loaded_tokens = 0
        self.kv_load = 0.0
        self.tool_calls: list[ToolCallOutput] | None = None
        # The answer's first tokens that are reasoning: 0 without a reasoning parser, with
        # thinking off, and for tool calls (which have no reasoning part).
        self.reasoning_tokens = 0
        # Token indices that open a later tool call: they follow without a decode step.
        self.call_starts: frozenset[int] = frozenset()
        self.deadline = 0.0
        self.ttft = 0.0  # sampled time to first token, seconds
        self.itl_delays = 0.0  # sum of sampled inter-token delays, seconds
        self.latency = latency  # replaced at start by the model current then
        self.t_submitted = now  # when the request arrived (its HTTP receipt, if known)
        self.t_enqueued: float | None = None
        self.t_started: float | None = None
        self.t_first_token: float | None = None
        self.t_last_token = 0.0  # when the latest token was released
        self.t_finished: float | None = None
        # A streamed sequence's inter-token gaps are observed as its tokens are written
        # (Delivery.STREAM): the gaps the engine released and the client has not got yet,
        # and when the front end last wrote a piece of it (the engine's clock).
        self.gaps_unwritten = 0
        self.t_written = 0.0
        self.lora_slot = 0  # the adapter's 1-based slot while a LoRA sequence runs
        # Tokens are released without asking the KV cache while `emitted` is below this:
        # the blocks held have room for their KV (see Engine.grow).
        self.kv_limit = NO_KV_LIMIT
        self.kv_blocks = 0  # KV blocks held while running
        self.preemptions = 0  # times its KV was freed to be recomputed
        # Tokens (prompt, then output) whose KV is computed: what the step loop's
        # prefill chunks advance; the token clock does not use it.
        self.computed = 0
        # Speculative decoding: draft tokens its steps verified, and how many were accepted.
        self.spec_draft_tokens = 0
        self.spec_accepted_tokens = 0
        # Its images are still to go through the vision encoder (in the step that first
        # schedules its prompt, and again after a preemption).
        self.encode_pending = False

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt.token_ids)

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.state is SeqState.FINISHED

    def keep_released(self) -> None:
        """Cuts the output to the tokens already released. A tool call not released whole
        is dropped, since its arguments would not parse; its released argument tokens stay
        sent (as they would be by vLLM) but are no longer part of the answer."""
        cut = self.emitted
        calls = self.tool_calls
        if calls is not None:
            whole = [call for call in calls if call.end <= cut]
            if len(whole) < len(calls):
                cut = whole[-1].end if whole else min(cut, calls[0].start)
            self.tool_calls = whole or None
            self.emitted = min(self.emitted, cut)
        self.output_ids = self.output_ids[:cut]  # new lists: the generated ones may be shared
        self.output_pieces = self.output_pieces[:cut]


# The front end wrote tokens [start, end) of a sequence to its client just now, and its
# end if the flag is set (a whole answer: start == end, its end alone). Its engine takes
# the time and tells its observer, which is how the latencies in /metrics come to be what
# the client got rather than when the engine released each token.
WrittenReport = Callable[[Sequence, int, int, bool], None]


class RequestStream:
    """The output of one request: its sequences, and a way to wait for new tokens.

    The engine pushes, the protocol encoder pulls: after each `wait()` the encoder reads
    `seq.output_pieces[seq.sent:seq.emitted]` of every sequence and the finish reasons.
    """

    __slots__ = (
        "_abort_cb",
        "_done",
        "_waiter",
        "error",
        "listener",
        "output_units",
        "remaining",
        "report_written",
        "request",
        "sequences",
    )

    def __init__(
        self,
        request: GenerationRequest,
        abort: Callable[[RequestStream], None] | None = None,
        report_written: WrittenReport | None = None,
    ) -> None:
        self.request = request
        self.sequences: list[Sequence] = []
        self.remaining = 0
        self.output_units = 0  # tokens made so far, logprob alternatives included
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._abort_cb = abort  # frees what the stream holds in its engine
        # Called at notify() instead of waking a waiter: lets a writer put each token on
        # the wire inside the engine's tick, with no task switch per token.
        self.listener: Callable[[], None] | None = None
        # Told by the front end as it writes the answer to the client (see WrittenReport).
        self.report_written = report_written

    @property
    def done(self) -> bool:
        """All sequences finished, or the request failed or was aborted."""
        return self._done

    def has_news(self) -> bool:
        if self._done:
            return True
        for seq in self.sequences:  # noqa: SIM110 -- once per token; any() + genexpr costs more
            if seq.emitted > seq.sent:
                return True
        return False

    def notify(self) -> None:
        listener = self.listener
        if listener is not None:
            listener()
            return
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def sequence_finished(self) -> None:
        self.remaining -= 1
        if self.remaining == 0:
            self._done = True
        self.notify()

    def fail(self, error: BaseException) -> None:
        if self._done:
            return
        self.error = error
        self._done = True
        self.notify()

    def notification(self) -> asyncio.Future[None]:
        """A future done at the next notify() (new tokens, an end, a failure)."""
        waiter = self._waiter
        if waiter is None:
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
        return waiter

    async def wait(self) -> None:
        """Returns once there is something new to encode (or the stream is over)."""
        if not self.has_news():
            await self.notification()

    async def wait_done(self) -> None:
        """Returns once every sequence finished or the request failed."""
        while not self._done:
            await self.notification()

    def abort(self) -> None:
        """The client left: free every slot and queue place this request holds."""
        if not self._done and self._abort_cb is not None:
            self._abort_cb(self)

    def release(self) -> None:
        """Drops the sequences of a finished request once its answer is written. Each
        points back at its stream: a cycle only the garbage collector would free, which
        runs seldom under load (see the server's runner); a request still running keeps
        them."""
        if self._done:
            self.sequences = []
