"""The dataset of recorded responses: the prompt hash, and the reference's choice of a row
(engine.md 6.4): a row recorded for the prompt, else a random one of a fitting length; cut
to the limit, padded under ignore_eos."""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import struct
from collections.abc import Sequence

import pytest

from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.engine.generation import SENTENCES, SentenceBank
from vllm_sim.engine.generation.dataset import DATASET_EMPTY, ResponseDataset, prompt_hash
from vllm_sim.engine.tokenizer import SimulatedTokenizer

SCHEMA = (
    "CREATE TABLE {t} (id INTEGER PRIMARY KEY, prompt_hash BLOB NOT NULL, "
    "gen_tokens JSON NOT NULL, n_gen_tokens INTEGER NOT NULL)"
)
PROMPT = [11, 22, 33]
OTHER = [44, 55]


def answer(n: int, tag: str) -> tuple[list[int], list[str]]:
    """`n` tokens whose text names the row they come from."""
    return [1000 + i for i in range(n)], [f"{tag}{i} " for i in range(n)]


def gen_tokens(ids: Sequence[int], pieces: Sequence[str]) -> str:
    return json.dumps({"Tokens": list(ids), "Strings": list(pieces)})


def database(rows: Sequence[tuple[bytes, str, int]], table: str = "llmd") -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute(SCHEMA.format(t=table))
    conn.executemany(
        f"INSERT INTO {table} (prompt_hash, gen_tokens, n_gen_tokens) VALUES (?, ?, ?)", rows
    )
    return conn


def recorded(prompt: Sequence[int], n: int, tag: str) -> tuple[bytes, str, int]:
    return prompt_hash(prompt), gen_tokens(*answer(n, tag)), n


def dataset(rows: Sequence[tuple[bytes, str, int]], tok: SimulatedTokenizer) -> ResponseDataset:
    return ResponseDataset(database(rows), "llmd", tok)


def tags(pieces: Sequence[str]) -> set[str]:
    """The rows the pieces come from (`a0 ` -> `a`), bank text excluded."""
    return {piece.rstrip(" ").rstrip("0123456789") for piece in pieces if piece[:1].islower()}


def test_prompt_hash_is_sha256_of_little_endian_uint32_ids() -> None:
    ids = [0, 1, 258, 2**32 - 1, 151_935]
    expected = hashlib.sha256(b"".join(struct.pack("<I", i) for i in ids)).digest()
    assert prompt_hash(ids) == expected
    assert prompt_hash([]) == hashlib.sha256(b"").digest()
    assert prompt_hash([2**32 + 5]) == prompt_hash([5])  # the low 32 bits, as a uint32 cast


def test_a_recorded_prompt_gets_its_row_whole_with_stop(
    tok: SimulatedTokenizer, bank: SentenceBank
) -> None:
    data = dataset([recorded(PROMPT, 5, "a"), recorded(OTHER, 3, "b")], tok)
    ids, pieces = data.respond(PROMPT, 10, False, random.Random(1), bank)
    assert (ids, pieces) == answer(5, "a")


def test_found_prefers_rows_that_fit(tok: SimulatedTokenizer, bank: SentenceBank) -> None:
    data = dataset([recorded(PROMPT, 20, "long"), recorded(PROMPT, 4, "fits")], tok)
    for seed in range(20):
        _, pieces = data.respond(PROMPT, 10, False, random.Random(seed), bank)
        assert tags(pieces) == {"fits"} and len(pieces) == 4


def test_found_longer_rows_are_cut(tok: SimulatedTokenizer, bank: SentenceBank) -> None:
    data = dataset([recorded(PROMPT, 20, "long")], tok)
    ids, pieces = data.respond(PROMPT, 6, False, random.Random(0), bank)
    assert (ids, pieces) == tuple(part[:6] for part in answer(20, "long"))


def test_found_ignore_eos_prefers_exact_then_longer_then_shorter(
    tok: SimulatedTokenizer, bank: SentenceBank
) -> None:
    rows = [
        recorded(PROMPT, 3, "short"),
        recorded(PROMPT, 12, "long"),
        recorded(PROMPT, 8, "exact"),
    ]
    for seed in range(10):
        _, pieces = dataset(rows, tok).respond(PROMPT, 8, True, random.Random(seed), bank)
        assert tags(pieces) == {"exact"} and len(pieces) == 8
        _, pieces = dataset(rows[:2], tok).respond(PROMPT, 8, True, random.Random(seed), bank)
        assert tags(pieces) == {"long"} and len(pieces) == 8
    ids, pieces = dataset(rows[:1], tok).respond(PROMPT, 8, True, random.Random(0), bank)
    assert (ids[:3], pieces[:3]) == answer(3, "short")
    assert len(ids) == len(pieces) == 8  # padded with the bank's sentences
    assert any(sentence.startswith("".join(pieces[3:])) for sentence in SENTENCES)


def test_unknown_prompt_gets_a_random_row_that_fits(
    tok: SimulatedTokenizer, bank: SentenceBank
) -> None:
    rows = [recorded(OTHER, n, f"r{chr(97 + n)}") for n in (2, 4, 9, 15)]
    seen: set[str] = set()
    for seed in range(60):
        _, pieces = dataset(rows, tok).respond(PROMPT, 5, False, random.Random(seed), bank)
        assert len(pieces) in (2, 4)
        seen |= tags(pieces)
    assert seen == {"rc", "re"}  # both fitting rows, never a longer one


def test_unknown_prompt_under_ignore_eos_wants_the_exact_length(
    tok: SimulatedTokenizer, bank: SentenceBank
) -> None:
    rows = [recorded(OTHER, n, f"r{chr(97 + n)}") for n in (2, 4, 9)]
    for seed in range(20):
        _, pieces = dataset(rows, tok).respond(PROMPT, 4, True, random.Random(seed), bank)
        assert tags(pieces) == {"re"} and len(pieces) == 4


def test_unknown_prompt_with_nothing_fitting_cuts_or_pads_any_row(
    tok: SimulatedTokenizer, bank: SentenceBank
) -> None:
    rows = [recorded(OTHER, 9, "long")]
    ids, pieces = dataset(rows, tok).respond(PROMPT, 5, False, random.Random(0), bank)
    assert (ids, pieces) == tuple(part[:5] for part in answer(9, "long"))
    rows = [recorded(OTHER, 2, "short")]
    ids, pieces = dataset(rows, tok).respond(PROMPT, 5, True, random.Random(0), bank)
    assert pieces[:2] == answer(2, "short")[1] and len(ids) == 5


def test_min_tokens_pads_a_shorter_answer(tok: SimulatedTokenizer, bank: SentenceBank) -> None:
    data = dataset([recorded(PROMPT, 2, "a")], tok)
    ids, pieces = data.respond(PROMPT, 10, False, random.Random(0), bank, min_len=6)
    assert pieces[:2] == answer(2, "a")[1] and len(ids) == len(pieces) == 6


def test_empty_table_is_an_internal_error(tok: SimulatedTokenizer, bank: SentenceBank) -> None:
    with pytest.raises(EngineError) as caught:
        dataset([], tok).respond(PROMPT, 5, False, random.Random(0), bank)
    assert caught.value.refusal is Refusal.INTERNAL
    assert caught.value.message == DATASET_EMPTY


def test_keys_match_in_any_case_and_strings_may_be_absent(
    tok: SimulatedTokenizer, bank: SentenceBank
) -> None:
    ids, pieces = tok.tokenize("Hello there, friend. ")
    rows = [
        (prompt_hash(PROMPT), json.dumps({"tokens": ids, "STRINGS": pieces}), len(ids)),
        (prompt_hash(OTHER), json.dumps({"Tokens": ids}), len(ids)),
    ]
    data = dataset(rows, tok)
    assert data.respond(PROMPT, 50, False, random.Random(0), bank) == (ids, pieces)
    # Without Strings the ids are decoded by the tokenizer, one piece each.
    assert data.respond(OTHER, 50, False, random.Random(0), bank) == (ids, pieces)


def test_strings_alone_give_each_string_its_token_id(
    tok: SimulatedTokenizer, bank: SentenceBank
) -> None:
    ids, pieces = tok.tokenize("Only text here. ")
    data = dataset([(prompt_hash(PROMPT), json.dumps({"Strings": pieces}), len(pieces))], tok)
    assert data.respond(PROMPT, 50, False, random.Random(0), bank) == (ids, pieces)


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[1, 2]",
        json.dumps({"Tokens": [1, 2], "Strings": ["a"]}),
        json.dumps({"Tokens": ["x"]}),
    ],
)
def test_a_malformed_row_is_reported_once_and_its_answer_generated(
    raw: str, tok: SimulatedTokenizer, bank: SentenceBank, caplog: pytest.LogCaptureFixture
) -> None:
    """Never a 500: the row's answers are generated, as long as it says it was (or what
    ignore_eos asks for), and the row is named in one warning however often it is hit."""
    data = dataset([(prompt_hash(PROMPT), raw, 2)], tok)
    with caplog.at_level("WARNING", logger="vllm_sim"):
        for _ in range(3):
            ids, pieces = data.respond(PROMPT, 5, False, random.Random(0), bank)
            assert len(ids) == len(pieces) == 2
        ids, _ = data.respond(PROMPT, 5, True, random.Random(0), bank)
        assert len(ids) == 5
    warnings = [r.getMessage() for r in caplog.records if "dataset row 1" in r.getMessage()]
    assert len(warnings) == 1 and "invalid gen_tokens" in warnings[0]


def test_a_hash_sharing_only_its_first_bytes_does_not_match(
    tok: SimulatedTokenizer, bank: SentenceBank
) -> None:
    impostor = prompt_hash(PROMPT)[:8] + bytes(24)
    rows = [(impostor, gen_tokens(*answer(9, "fake")), 9), recorded(OTHER, 3, "other")]
    for seed in range(10):
        _, pieces = dataset(rows, tok).respond(PROMPT, 5, False, random.Random(seed), bank)
        # Unknown, so a random row that fits; the impostor's would have been cut to 5.
        assert tags(pieces) == {"other"} and len(pieces) == 3


def test_any_table_name_and_a_table_whose_id_is_not_the_key(
    tok: SimulatedTokenizer, bank: SentenceBank
) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        'CREATE TABLE "my ""odd"" table" (id INTEGER, prompt_hash BLOB, gen_tokens JSON, '
        "n_gen_tokens INTEGER)"
    )
    conn.execute(
        'INSERT INTO "my ""odd"" table" VALUES (7, ?, ?, 4), (7, ?, ?, 2)',
        (*recorded(PROMPT, 4, "a")[:2], *recorded(OTHER, 2, "b")[:2]),
    )
    data = ResponseDataset(conn, 'my "odd" table', tok)
    assert len(data) == 2
    assert tags(data.respond(PROMPT, 9, False, random.Random(0), bank)[1]) == {"a"}
    assert tags(data.respond(OTHER, 9, False, random.Random(0), bank)[1]) == {"b"}


def test_the_same_seed_chooses_the_same_row(tok: SimulatedTokenizer, bank: SentenceBank) -> None:
    rows = [recorded(OTHER, n, f"r{chr(97 + n)}") for n in range(1, 9)]
    data = dataset(rows, tok)
    first = data.respond(PROMPT, 20, False, random.Random(7), bank)
    assert data.respond(PROMPT, 20, False, random.Random(7), bank) == first
