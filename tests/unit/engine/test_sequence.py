"""A request's stream drops its sequences once it is finished and written (each points
back at the stream: a cycle only the collector would free), never while it runs."""

from __future__ import annotations

import random

from vllm_sim.engine.latency import LatencyModel, LatencySettings
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence


def test_a_finished_request_releases_its_sequences_and_a_running_one_keeps_them() -> None:
    request = GenerationRequest("r", "m", [Prompt([1, 2, 3])], max_tokens=3)
    stream = RequestStream(request)
    latency = LatencyModel(LatencySettings(), random.Random(0))
    seq = Sequence(1, request, stream, 0, 0, 0.0, latency)
    stream.sequences.append(seq)
    stream.remaining = 1
    stream.release()
    assert stream.sequences == [seq]  # still running: the engine needs them
    stream.sequence_finished()
    assert stream.done
    stream.release()
    assert stream.sequences == []
