"""The engine's lifecycle events, for whoever records them (metrics, logs).

The engine calls exactly one observer at each transition of a sequence, with the
sequence's own timestamps already set, so recorders never measure time themselves. This
base class records nothing: it is the engine's observer when none is attached, and a
recorder overrides the events it cares about.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from vllm_sim.engine.request import GenerationRequest
    from vllm_sim.engine.sequence import Sequence


# Compiled by mypyc (setup.py): subclassed by tests and benchmarks, which are not.
@mypyc_attr(allow_interpreted_subclasses=True)
class EngineObserver:
    def sequence_queued(self, seq: Sequence) -> None:
        """The sequence entered the waiting queue (t_enqueued set)."""

    def sequence_started(self, seq: Sequence) -> None:
        """The sequence took a running slot (t_started, output and ttft set)."""

    def first_token(self, seq: Sequence) -> None:
        """The first output token was released (t_first_token set)."""

    def inter_tokens(self, seq: Sequence, delay: float, count: int) -> None:
        """`count` later tokens were each scheduled `delay` seconds after the one before.

        Zero-delay decoding releases a whole tail at once: one call stands for every gap.
        """

    def output_written(
        self, seq: Sequence, start: int, end: int, finished: bool, now: float
    ) -> None:
        """Not the engine's own event: the front end wrote tokens [start, end) of `seq` to
        its client at `now` (on the engine's clock), and its end if `finished`. A streamed
        answer is reported write by write; a whole answer once, each sequence's end alone
        (start == end). A client that leaves is not told of the rest."""

    def drafts_verified(self, seq: Sequence, drafts: int, accepted: int) -> None:
        """Speculative decoding: a step of `seq` verified `drafts` draft tokens and accepted
        the first `accepted` of them (each only if the ones before it were)."""

    def sequence_finished(self, seq: Sequence) -> None:
        """The sequence released its last token (t_finished, finish_reason set)."""

    def sequence_aborted(self, seq: Sequence) -> None:
        """The client left: the sequence was dropped (t_finished set)."""

    def sequence_failed(self, seq: Sequence) -> None:
        """The request failed after admission (e.g. its context overflowed): dropped."""

    def prefix_lookup(self, queried_tokens: int, hit_tokens: int) -> None:
        """A started sequence looked its prompt up in the prefix cache."""

    def external_prefix_lookup(self, seq: Sequence, queried_tokens: int, hit_tokens: int) -> None:
        """A started sequence asked for the prompt tokens the local cache lacked from outside
        this engine: the KV a prefill node sent the decode leg of a P/D pair."""

    def offloaded_prefix_lookup(self, seq: Sequence, queried_tokens: int, hit_tokens: int) -> None:
        """A started sequence asked the CPU offloading tier for the prompt tokens the GPU's
        prefix cache lacked; `hit_tokens` of them are loaded back from host memory."""

    def engine_step(self, tokens: int) -> None:
        """The engine released `tokens` at once (prompt tokens of the sequences whose prefill
        ended, and generated tokens): one engine step."""

    def admission_rejected(self, request: GenerationRequest) -> None:
        """A request was refused because the waiting queue is full."""

    def sequence_preempted(self, seq: Sequence) -> None:
        """A running sequence was preempted: its KV was freed, to be recomputed later."""
