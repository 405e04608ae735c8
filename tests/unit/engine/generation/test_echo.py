"""Echo-mode content: the last message (chat) or the prompt (completions), repeated."""

from __future__ import annotations

from vllm_sim.engine.generation import echo_token_ids, echo_tokens
from vllm_sim.engine.tokenizer import SimulatedTokenizer


def test_token_id_prompt_echo() -> None:
    assert echo_token_ids([1, 2, 3]) == ([1, 2, 3], ["1,", "2,", "3"])
    assert echo_token_ids([7]) == ([7], ["7"])
    assert echo_token_ids([]) == ([], [])


def test_several_id_prompts() -> None:
    prompts = [[1, 2, 3], [10, 20], [7]]
    echoes = [echo_token_ids(prompt) for prompt in prompts]
    assert ["".join(pieces) for _, pieces in echoes] == ["1,2,3", "10,20", "7"]
    assert sum(len(ids) for ids, _ in echoes) == 6


def test_id_echo_copies_input() -> None:
    prompt = (4294967295, 0)
    ids, pieces = echo_token_ids(prompt)
    assert ids == [4294967295, 0]
    assert "".join(pieces) == "4294967295,0"


def test_text_echo_is_verbatim() -> None:
    tok = SimulatedTokenizer()
    text = "  Describe this\nimage: https://example.com/img.png | héllo 😀"
    ids, pieces = echo_tokens(tok, text)
    assert "".join(pieces) == text
    assert (ids, pieces) == tok.tokenize(text)


def test_text_echo_token_count() -> None:
    assert len(echo_tokens(SimulatedTokenizer(), "This is a test.")[0]) == 5
