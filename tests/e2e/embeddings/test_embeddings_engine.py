"""Embeddings run through the engine, as vLLM runs a pooling request: each input is a prompt
that queues for a running slot, is prefilled (timed by the prefill model) with nothing
generated, and is counted in the metrics like any other request."""

from __future__ import annotations

import threading
import time

import httpx

from tests.support.errors import assert_openai_error, prompt_too_long_message
from tests.support.fixtures import server_fixture
from tests.support.metrics import (
    CHAT,
    E2E,
    GENERATION_TOTAL,
    PROMPT_TOTAL,
    QUEUE,
    TTFT,
    chat,
    scrape,
    wait_until_idle,
)
from tests.support.server import SimServer

PATH = "/v1/embeddings"
one_slot = server_fixture(
    ["--max-num-seqs", "1", "--time-to-first-token", "300ms", "--max-model-len", "64"]
)


def test_an_embedding_is_prefilled_and_counted(one_slot: SimServer) -> None:
    with httpx.Client(base_url=one_slot.url, timeout=30) as client:
        before = wait_until_idle(client)
        started = time.monotonic()
        response = client.post(PATH, json={"input": ["one two three", "four five"]})
        elapsed = time.monotonic() - started
        assert response.status_code == 200, response.text
        after = wait_until_idle(client)
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] == 5 and usage["completion_tokens"] == 0
    assert elapsed >= 0.3  # each input is a prompt prefilled in the configured TTFT
    success = after.success(one_slot.model)
    assert success["stop"] - before.success(one_slot.model)["stop"] == 2
    assert after.value(PROMPT_TOTAL) - before.value(PROMPT_TOTAL) == 5
    assert after.value(GENERATION_TOTAL) == before.value(GENERATION_TOTAL)
    for name in (E2E, QUEUE, TTFT):
        assert after.hist(name).count - before.hist(name).count == 2, name


def test_an_embedding_waits_for_a_running_slot(one_slot: SimServer) -> None:
    with httpx.Client(base_url=one_slot.url, timeout=30) as client:
        wait_until_idle(client)
        holder = threading.Thread(
            target=lambda: client.post(CHAT, json=chat(max_tokens=1)).raise_for_status()
        )
        held = time.monotonic()
        holder.start()
        deadline = held + 5
        while scrape(client).value("vllm:num_requests_running") != 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with httpx.Client(base_url=one_slot.url, timeout=30) as own:
            assert own.post(PATH, json={"input": "queued"}).status_code == 200
        holder.join(30)
    # It waited for the chat's slot (0.3 s from the chat's arrival), then was prefilled
    # itself (0.3 s). Measured from before the chat was sent, however late the poll above
    # saw it running (a loaded machine once saw it 0.2 s late).
    assert time.monotonic() - held >= 0.55


def test_an_input_longer_than_the_context_is_refused_in_vllms_words(one_slot: SimServer) -> None:
    with httpx.Client(base_url=one_slot.url, timeout=30) as client:
        fits = client.post(PATH, json={"input": list(range(64))})
        assert fits.status_code == 200, fits.text  # the whole context: nothing is generated
        response = client.post(PATH, json={"input": list(range(65))})
    assert_openai_error(response, 400, prompt_too_long_message(64), param="input_tokens")
