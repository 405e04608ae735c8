"""Simulated tokenizer: token grammar, ids, chat template, round-trips, bounded vocabulary."""

from __future__ import annotations

import random
import re

import pytest

from vllm_sim.engine.tokenizer import (
    UNKNOWN_PIECE_FORMAT,
    ChatTurn,
    PieceVocabulary,
    SimulatedTokenizer,
    Tokenizer,
    chat_from_turns,
    fnv1a_32,
    render_chat_text,
)
from vllm_sim.engine.tokenizer.memo import PromptMemo
from vllm_sim.engine.tokenizer.memo import entry_bytes as memo_entry_bytes
from vllm_sim.engine.tokenizer.vocab import entry_bytes

# The reference grammar (which drops unmatched characters), used to check that ASCII
# text is tokenized exactly as the reference does.
REFERENCE_RE = re.compile(r"""(?:[{}:,\-.?!;@#$%^&*()+_~/\\><\[\]="']|[A-Za-z0-9_]+)[ \t\n\f\r]*""")
REFERENCE_ALPHABET = "{}:,-.?!;@#$%^&*()+_~/\\><[]=\"'" + "abcXYZ019_" + " \t\n\f\r"


@pytest.fixture
def tok() -> SimulatedTokenizer:
    return SimulatedTokenizer()


def pieces_of(tok: SimulatedTokenizer, text: str) -> list[str]:
    return tok.tokenize(text)[1]


def test_implements_protocol(tok: SimulatedTokenizer) -> None:
    as_protocol: Tokenizer = tok
    assert as_protocol.encode("a b") == tok.tokenize("a b")[0]


def test_completion_prompt_counts_five_tokens(tok: SimulatedTokenizer) -> None:
    assert pieces_of(tok, "This is a test.") == ["This ", "is ", "a ", "test", "."]


def test_chat_user_message_counts_ten_tokens(tok: SimulatedTokenizer) -> None:
    text = tok.render_chat(chat_from_turns([ChatTurn("user", "This is a test.")]))
    assert text == "### user: This is a test.\n"
    expected = ["#", "#", "# ", "user", ": ", "This ", "is ", "a ", "test", ".\n"]
    assert pieces_of(tok, text) == expected


def test_chat_hello_counts_six_tokens(tok: SimulatedTokenizer) -> None:
    assert len(tok.encode(tok.render_chat(chat_from_turns([ChatTurn("user", "Hello")])))) == 6


def test_chat_template_multiple_turns_and_tool_call_id() -> None:
    turns = [
        ChatTurn("system", "Be brief."),
        ChatTurn("tool", "42", tool_call_id="call_1"),
        ChatTurn("assistant", "ok", tool_call_id=""),
    ]
    assert render_chat_text(turns) == (
        "### system: Be brief.\n### tool(call_1): 42\n### assistant: ok\n"
    )
    assert render_chat_text([]) == ""


def test_ids_are_fnv1a_of_piece(tok: SimulatedTokenizer) -> None:
    ids, pieces = tok.tokenize("Hello, wörld! ✓ _x")
    assert ids == [fnv1a_32(piece) for piece in pieces]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0x811C9DC5), ("a", 0xE40C292C), ("foobar", 0xBF9CF968)],
)
def test_fnv1a_known_vectors(text: str, expected: int) -> None:
    assert fnv1a_32(text) == expected


def test_fnv1a_hashes_utf8_and_lone_surrogates() -> None:
    assert fnv1a_32("é") != fnv1a_32("e")
    assert 0 <= fnv1a_32("\ud800") < 2**32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("héllo", ["h", "é", "llo"]),
        ("a|b", ["a", "|", "b"]),
        ("a`b`", ["a", "`", "b", "`"]),
        ("x\vy", ["x", "\v", "y"]),
        ("hi 😀  there", ["hi ", "😀  ", "there"]),
        ("  lead", ["  ", "lead"]),
        ("\n\t x", ["\n\t ", "x"]),
        ("é |", ["é ", "|"]),
        ("_baz", ["_", "baz"]),
        ("foo_bar", ["foo_bar"]),
        ("a \t\n\f\rb", ["a \t\n\f\r", "b"]),
        ("a\u00a0b", ["a", "\u00a0", "b"]),
        ("e\u0301", ["e", "\u0301"]),
        ("ab12_cd!?", ["ab12_cd", "!", "?"]),
    ],
)
def test_pieces_keep_every_character(
    tok: SimulatedTokenizer, text: str, expected: list[str]
) -> None:
    assert pieces_of(tok, text) == expected


def test_empty_text(tok: SimulatedTokenizer) -> None:
    assert tok.tokenize("") == ([], [])
    assert tok.decode([]) == ""


def test_ascii_text_matches_reference_tokenization(tok: SimulatedTokenizer) -> None:
    rng = random.Random(7)
    for _ in range(500):
        text = "".join(rng.choice(REFERENCE_ALPHABET) for _ in range(rng.randint(0, 60)))
        text = text.lstrip(" \t\n\f\r")  # the reference drops leading whitespace
        assert pieces_of(tok, text) == REFERENCE_RE.findall(text)


def random_unicode(rng: random.Random, length: int) -> str:
    """Text mixing ASCII, whitespace, Latin-1, CJK, emoji, controls and lone surrogates."""
    ranges = [(0x20, 0x7E), (0x00, 0x20), (0x80, 0x2FF), (0x4E00, 0x4E80)]
    ranges += [(0x1F600, 0x1F64F), (0xD800, 0xDFFF), (0xE000, 0x10FFFF)]
    chars = []
    for _ in range(length):
        low, high = rng.choice(ranges)
        chars.append(chr(rng.randint(low, high)))
    return "".join(chars)


def test_pieces_join_to_text_for_arbitrary_unicode(tok: SimulatedTokenizer) -> None:
    rng = random.Random(1234)
    for _ in range(2000):
        text = random_unicode(rng, rng.randint(0, 40))
        ids, pieces = tok.tokenize(text)
        assert "".join(pieces) == text
        assert len(ids) == len(pieces)
        assert all(pieces)
        assert tok.decode(ids) == text


def test_piece_and_decode_round_trip(tok: SimulatedTokenizer) -> None:
    ids, pieces = tok.tokenize("Round trip, s'il vous plaît: 3 × 4 = 12.")
    assert [tok.piece(token_id) for token_id in ids] == pieces
    assert tok.decode(ids) == "Round trip, s'il vous plaît: 3 × 4 = 12."


def test_unknown_id_decodes_to_placeholder(tok: SimulatedTokenizer) -> None:
    assert tok.piece(12345) == UNKNOWN_PIECE_FORMAT.format(12345) == "<unk:12345>"
    ids = tok.encode("known")
    assert tok.decode([*ids, 7]) == "known<unk:7>"


def test_tokenize_is_deterministic_across_instances() -> None:
    text = "Same text, same ids — always."
    assert SimulatedTokenizer().tokenize(text) == SimulatedTokenizer().tokenize(text)


def test_vocabulary_is_bounded_and_keeps_recent_pieces() -> None:
    tok = SimulatedTokenizer(vocabulary_bytes=100 * entry_bytes("w999"))
    all_ids = [tok.encode(f"w{i}")[0] for i in range(1000)]
    assert 0 < tok.vocabulary_size <= 100
    assert tok.piece(all_ids[-1]) == "w999"
    assert tok.piece(all_ids[0]) == f"<unk:{all_ids[0]}>"
    # Forgotten pieces still tokenize to the same id.
    assert tok.encode("w0")[0] == all_ids[0]


def test_vocabulary_promotes_old_entries_on_use() -> None:
    vocab = PieceVocabulary(max_bytes=4 * entry_bytes("a"))  # two pieces per generation
    first = vocab.id_of("a")
    vocab.id_of("b")
    vocab.id_of("c")  # rotates: a, b become the old generation
    assert vocab.piece_of(first) == "a"  # promoted into the current generation
    vocab.id_of("d")  # rotates again: c, a old; b dropped
    assert vocab.piece_of(first) == "a"
    assert vocab.piece_of(fnv1a_32("b")) is None


def test_vocabulary_byte_budget() -> None:
    budget = 10 * entry_bytes("000000000")
    vocab = PieceVocabulary(max_bytes=budget)
    huge = "x" * budget  # its entry is larger than half the budget: id but not remembered
    assert vocab.id_of(huge) == fnv1a_32(huge)
    assert vocab.piece_of(fnv1a_32(huge)) is None
    for i in range(50):
        vocab.id_of(f"{i:09d}")
        assert vocab.estimated_bytes <= budget
    assert len(vocab) <= 10


def test_wide_characters_cost_more_than_ascii() -> None:
    # A piece of astral characters takes four bytes per character: the budget counts bytes.
    assert entry_bytes("\U0001f600" * 100) > entry_bytes("é" * 100) > entry_bytes("e" * 100)
    budget = 2 * entry_bytes("\U0001f600" + " " * 1000)
    vocab = PieceVocabulary(max_bytes=budget)
    vocab.id_of("\U0001f600" + " " * 1000)
    assert vocab.piece_of(fnv1a_32("\U0001f600" + " " * 1000)) is not None
    vocab.id_of("\U0001f601" + " " * 1000)  # does not fit beside it: rotates
    assert len(vocab) == 2
    assert vocab.estimated_bytes <= budget


def test_memo_returns_fresh_lists() -> None:
    tok = SimulatedTokenizer()
    first = tok.encode("a b c")
    first.append(99)
    assert tok.encode("a b c") == tok.tokenize("a b c")[0]
    assert tok.encode("a b c") is not tok.encode("a b c")


def test_memo_evicts_oldest_first_within_its_budget() -> None:
    ids = (1, 2, 3)
    memo = PromptMemo(max_bytes=3 * memo_entry_bytes("t0", ids))
    for name in ("t0", "t1", "t2", "t3"):
        memo.add(name, ids)
        assert memo.estimated_bytes <= 3 * memo_entry_bytes("t0", ids)
    assert list(memo.ids) == ["t1", "t2", "t3"]
    memo.add("x" * 1000, ids)  # larger than the whole budget: not remembered
    assert "x" * 1000 not in memo.ids and len(memo) == 3
    memo.add("t3", (4,))  # already there: kept as is
    assert memo.ids["t3"] == ids
