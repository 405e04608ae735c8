"""The model's tokenizer over a built model folder: ids, pieces, special tokens, decoding."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_sim.engine.tokenizer.hf import HfTokenizer, text_pieces


@pytest.fixture(scope="module")
def qwen(hf_models: dict[str, Path]) -> HfTokenizer:
    return HfTokenizer(hf_models["qwen"])


@pytest.fixture(scope="module")
def llama(hf_models: dict[str, Path]) -> HfTokenizer:
    return HfTokenizer(hf_models["llama"])


TEXTS = ["Hello there, how are you?", "Héllo wörld 你好 🙂!", "  spaced  ", "a\n\nb\tc", "🇫🇷"]


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_join_back_and_decode_token_by_token(qwen: HfTokenizer, text: str) -> None:
    ids, pieces = qwen.tokenize(text)
    assert "".join(pieces) == text
    assert len(ids) == len(pieces)
    # Each piece is what decoding adds once its token arrives (a partial character adds "").
    for end in range(1, len(ids) + 1):
        decoded = qwen.decode(ids[:end])
        if not decoded.endswith("\ufffd"):
            assert "".join(pieces[:end]) == decoded


def test_a_split_character_comes_with_its_last_token(qwen: HfTokenizer) -> None:
    ids, pieces = qwen.tokenize("🙂")
    assert len(ids) > 1
    assert pieces[:-1] == [""] * (len(ids) - 1) and pieces[-1] == "🙂"
    assert qwen.piece(ids[0]) == "\ufffd"  # decoded alone, as a logprob shows it


def test_special_tokens_are_added_only_when_asked(llama: HfTokenizer) -> None:
    plain = llama.encode("Hello")
    with_bos = llama.encode("Hello", add_special_tokens=True)
    assert with_bos[1:] == plain and with_bos[0] == 3  # <|begin_of_text|>
    ids, pieces = llama.tokenize("Hello", add_special_tokens=True)
    assert ids == with_bos and pieces[0] == "" and "".join(pieces) == "Hello"
    assert llama.token_strs(ids)[0] == "<|begin_of_text|>"
    assert llama.decode(ids) == "<|begin_of_text|>Hello"
    assert llama.decode(ids, skip_special_tokens=True) == "Hello"


def test_memoised_ids_are_fresh_lists_per_flag(llama: HfTokenizer) -> None:
    first = llama.encode("memo me", add_special_tokens=True)
    first.append(-1)
    assert llama.encode("memo me", add_special_tokens=True) == first[:-1]
    assert llama.encode("memo me") == first[1:-1]


def test_end_of_sequence_comes_from_generation_config(
    qwen: HfTokenizer, llama: HfTokenizer
) -> None:
    assert qwen.token_strs([qwen.eos_token_id]) == ["<|im_end|>"]
    assert llama.token_strs([llama.eos_token_id]) == ["<|eot_id|>"]  # the first of two
    assert qwen.max_token_id == 4095


def test_long_text_is_encoded_the_same_by_the_gil_free_path(qwen: HfTokenizer) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 400  # > 8192 characters
    ids, pieces = qwen.tokenize(text)
    assert ids == qwen.encode(text) and "".join(pieces) == text
    assert ids[:10] == qwen.encode(text[:45])[:10]


def test_unknown_ids_decode_to_nothing_as_pieces(qwen: HfTokenizer) -> None:
    assert qwen.piece(10**6) == ""


def test_a_folder_without_tokenizer_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"holds no tokenizer\.json"):
        HfTokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not a tokenizer"):
        HfTokenizer(tmp_path)


@pytest.mark.parametrize(
    ("offsets", "pieces"),
    [
        ([(0, 5), (5, 11)], ["Hello", " there"]),  # untrimmed offsets
        ([(0, 5), (6, 11)], ["Hello", " there"]),  # trimmed: the space goes with the next
        ([(0, 0), (0, 5), (5, 11)], ["", "Hello", " there"]),  # an added special token
        ([(0, 5), (5, 6), (5, 6)], ["Hello", "", " 🙂"[1:]]),  # a character over two tokens
    ],
)
def test_text_pieces(offsets: list[tuple[int, int]], pieces: list[str]) -> None:
    text = "Hello there" if pieces[-1] == " there" else "Hello🙂"
    assert text_pieces(text, offsets) == pieces
