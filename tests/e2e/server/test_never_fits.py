"""A request with more sequences than can ever be running or waiting is a 400, not a 429.

A 429 tells a client to retry later; a request that no wait can admit must say why instead.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import CHAT, COMPLETIONS, chat_body, post

small = server_fixture(["--max-num-seqs", "2", "--max-waiting-queue-length", "3"])
client = http_fixture("small")


@pytest.mark.parametrize("stream", [False, True])
def test_chat_n_beyond_slots_and_queue_is_a_400_naming_n(
    client: httpx.Client, stream: bool
) -> None:
    response = post(client, CHAT, chat_body("Hi", n=6, max_tokens=2, stream=stream))
    error = assert_openai_error(response, 400, param="n")
    assert "6 sequences (1 prompts x n=6)" in error["message"]
    assert "--max-num-seqs + --max-waiting-queue-length" in error["message"]
    assert post(client, CHAT, chat_body("Hi", n=5, max_tokens=2, stream=stream)).status_code == 200


def test_prompts_times_n_counts(client: httpx.Client) -> None:
    body = {"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 2}
    assert_openai_error(post(client, COMPLETIONS, body), 400, param="n")
    assert post(client, COMPLETIONS, {**body, "prompt": ["a", "b"]}).status_code == 200
