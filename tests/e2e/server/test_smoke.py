"""The simulator starts, answers the OpenAI SDK, and stops cleanly."""

from __future__ import annotations

import openai

from tests.support.server import SimServer


def test_openai_sdk_chat_round_trip(sim: SimServer) -> None:
    client = openai.OpenAI(base_url=sim.openai_url, api_key="none")
    reply = client.chat.completions.create(
        model=sim.model, messages=[{"role": "user", "content": "Hello"}], max_tokens=5
    )
    assert reply.object == "chat.completion"
    assert reply.usage is not None and reply.usage.prompt_tokens == 6


def test_sigterm_exits_zero() -> None:
    server = SimServer().start()
    assert server.stop() == 0
