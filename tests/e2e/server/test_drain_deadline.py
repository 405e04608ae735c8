"""A drain that runs out of time still ends every request with an answer, and says so."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from tests.support.async_http import chat_body, exit_status, post, wait_for_gauges
from tests.support.errors import assert_openai_error
from tests.support.server import started
from vllm_sim.server.runner import DRAIN_CUT_SHORT, STOPPED


@pytest.mark.timing
def test_requests_open_at_the_drain_deadline_get_errors_and_the_exit_status_is_3() -> None:
    # One slot and a 20 s first token: at SIGTERM one request runs and one waits, and
    # neither can finish within the 1 s drain.
    args = ["--max-num-seqs", "1", "--time-to-first-token", "20s", "--drain-timeout", "1s"]
    server, process = started(args)

    async def body(client: httpx.AsyncClient) -> None:
        chat = server.openai_url + "/chat/completions"
        plain = asyncio.create_task(post(client, chat, chat_body(server)))
        streamed = asyncio.create_task(post(client, chat, chat_body(server, stream=True)))
        await wait_for_gauges(client, server, running=1, waiting=1)
        process.send_signal(signal.SIGTERM)
        answered_plain, answered_stream = await asyncio.gather(plain, streamed)
        assert_openai_error(answered_plain, 503, STOPPED, param=None)
        assert answered_stream.status == 200 and answered_stream.done  # [DONE] arrived
        _, last = answered_stream.events[-1]
        assert last["error"]["code"] == 503 and last["error"]["message"] == STOPPED

    assert exit_status(server, body, timeout=15) == DRAIN_CUT_SHORT == 3
