"""Answers from a dataset of recorded responses, in the reference's SQLite schema: a row
whose prompt hash is the request's gives the answer; otherwise a random row of a fitting
length does.

Nothing here scans the table per request. At start-up two ordered scans build an index in
compact arrays: the rows sorted by `n_gen_tokens` (for the length-filtered fallback, a
bisection) and the first 8 bytes of each prompt hash, sorted (for the lookup, a bisection;
the chosen row's full hash is checked when it is read). A request then reads one row by its
key. The index costs 24 bytes per row (1 million rows: 24 MB) whatever the rows hold; the
rows stay in SQLite, on disk or in the in-memory copy `--dataset-in-memory` makes."""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import logging
import random
import sqlite3
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Final, TypeVar

import msgspec

from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.engine.generation.sentences import SentenceBank
from vllm_sim.engine.tokenizer import Tokenizer

DEFAULT_TABLE: Final = "llmd"
# The columns the reference requires, with their declared types, in the order its tools
# create them (the in-memory copy relies on that order).
COLUMNS: Final = (
    ("id", "INTEGER"),
    ("prompt_hash", "BLOB"),
    ("gen_tokens", "JSON"),
    ("n_gen_tokens", "INTEGER"),
)
DATASET_EMPTY: Final = "Dataset is empty"

_U32: Final = next(code for code in "IL" if array(code).itemsize == 4)
_PREFIX_BYTES: Final = 8
_MAX_LENGTH: Final = 2**31 - 1  # lengths are kept as 32-bit signed integers
_decode_json = msgspec.json.Decoder().decode
log = logging.getLogger("vllm_sim")


class _DamagedRow(Exception):
    """A row whose `gen_tokens` cannot be read: skipped, the answer generated instead."""


class _GenTokens(msgspec.Struct):
    """`gen_tokens` as the dataset tools write it: decoded and checked in one call."""

    tokens: list[int] = msgspec.field(name="Tokens", default_factory=list)
    strings: list[str] = msgspec.field(name="Strings", default_factory=list)


_decode_gen_tokens = msgspec.json.Decoder(_GenTokens).decode

Tokens = tuple[list[int], list[str]]
_T = TypeVar("_T")


def prompt_hash(token_ids: Sequence[int]) -> bytes:
    """The reference's key of a prompt: SHA-256 over its token ids, each written as a
    4-byte little-endian unsigned integer."""
    try:
        packed = array(_U32, token_ids)
    except OverflowError:  # ids outside 32 bits: their low 32 bits, as a uint32 cast keeps
        packed = array(_U32, [token_id & 0xFFFFFFFF for token_id in token_ids])
    if sys.byteorder != "little":
        packed.byteswap()
    return hashlib.sha256(packed).digest()


def quote_name(name: str) -> str:
    """An SQL identifier for any table name."""
    return '"' + name.replace('"', '""') + '"'


def key_column(conn: sqlite3.Connection, table: str) -> str:
    """The column that finds a row at once: `id` when it is the table's only primary key
    (an INTEGER PRIMARY KEY is the rowid itself), else the rowid."""
    info = conn.execute(f"PRAGMA table_info({quote_name(table)})").fetchall()
    primary = [row[1] for row in info if row[5]]
    return "id" if primary == ["id"] else "rowid"


class ResponseDataset:
    """Recorded responses, chosen per request by the reference's rules (engine.md 6.4)."""

    def __init__(self, conn: sqlite3.Connection, table: str, tokenizer: Tokenizer) -> None:
        """Indexes the table; raises sqlite3.Error if it cannot be read. `conn` must allow
        use from the thread that serves requests."""
        self._conn = conn
        self._tokenizer = tokenizer
        name = quote_name(table)
        key = key_column(conn, table)
        self._select = f"SELECT prompt_hash, gen_tokens FROM {name} WHERE {key} = ?"
        self._lengths = array("i")  # n_gen_tokens, ascending
        self._keys = array("q")  # the row keys, in the same order
        self._prefixes = array("Q")  # prompt hash prefixes, ascending
        self._positions = array(_U32)  # where each prefix's row is in _lengths / _keys
        self._damaged: set[int] = set()  # keys of rows found damaged (logged once each)
        self._build_index(name, key)

    def __len__(self) -> int:
        return len(self._keys)

    def _build_index(self, name: str, key: str) -> None:
        """Two ordered scans, SQLite doing the sorting, so that building the index holds no
        more memory than the index itself."""
        # A length that is no non-negative integer counts as 0: such a row is still served,
        # cut or padded like any other.
        length = (
            f"CASE WHEN typeof(n_gen_tokens) = 'integer' AND n_gen_tokens > 0 "
            f"THEN min(n_gen_tokens, {_MAX_LENGTH}) ELSE 0 END"
        )
        by_length = f"ORDER BY {length}, {key}"
        for row_key, n in self._conn.execute(f"SELECT {key}, {length} FROM {name} {by_length}"):
            self._keys.append(row_key)
            self._lengths.append(n)
        # Each prompt hash's first 8 bytes (a blob sorts as the big-endian number it spells),
        # and where its row is in the length order. A hash that is no blob of at least 8
        # bytes can never equal a prompt's.
        hashes = self._conn.execute(
            f"SELECT prefix, position FROM (SELECT substr(prompt_hash, 1, {_PREFIX_BYTES}) "
            f"AS prefix, typeof(prompt_hash) AS kind, length(prompt_hash) AS size, "
            f"row_number() OVER ({by_length}) - 1 AS position FROM {name}) "
            f"WHERE kind = 'blob' AND size >= {_PREFIX_BYTES} ORDER BY prefix"
        )
        for prefix, position in hashes:
            self._prefixes.append(int.from_bytes(prefix, "big"))
            self._positions.append(position)

    def respond(
        self,
        prompt_ids: Sequence[int],
        max_len: int,
        ignore_eos: bool,
        rng: random.Random,
        bank: SentenceBank,
        min_len: int = 0,
    ) -> Tokens:
        """The output of a request whose answer may hold `max_len` tokens: the recorded
        answer to this prompt if there is one, else a random one; cut to `max_len`, and
        padded with random sentences to `max_len` under `ignore_eos` (to `min_len` when
        `min_tokens` asks for more). A damaged row is reported once and skipped: the answer
        is generated, as long as the row says it was. Raises EngineError for an empty table
        or a file that changed under the server."""
        target = max_len if ignore_eos else min(min_len, max_len)
        try:
            ids, pieces = self._matching(prompt_hash(prompt_ids), max_len, ignore_eos, rng)
        except _DamagedRow as damaged:
            length = min(max(damaged.args[1], target, 1), max_len)
            return bank.generate(rng, length)
        ids, pieces = ids[:max_len], pieces[:max_len]
        if len(ids) < target:
            more_ids, more_pieces = bank.generate(rng, target - len(ids))
            ids += more_ids
            pieces += more_pieces
        return ids, pieces

    def _matching(
        self, digest: bytes, max_len: int, ignore_eos: bool, rng: random.Random
    ) -> Tokens:
        candidates = self._candidates(digest)
        while candidates:
            position = _choose(candidates, self._lengths, max_len, ignore_eos, rng)
            stored, raw = self._read(self._keys[position])
            if stored == digest:
                return self._parse(position, raw)
            candidates.remove(position)  # only its first 8 bytes were the prompt's
        position = self._random_position(max_len, ignore_eos, rng)
        return self._parse(position, self._read(self._keys[position])[1])

    def _candidates(self, digest: bytes) -> list[int]:
        prefix = int.from_bytes(digest[:_PREFIX_BYTES], "big")
        start = bisect.bisect_left(self._prefixes, prefix)
        end = bisect.bisect_right(self._prefixes, prefix, start)
        return [self._positions[i] for i in range(start, end)]

    def _random_position(self, max_len: int, ignore_eos: bool, rng: random.Random) -> int:
        """A row of `n_gen_tokens` <= max_len (== under ignore_eos), else any row."""
        if not self._lengths:
            raise EngineError(Refusal.INTERNAL, DATASET_EMPTY)
        end = bisect.bisect_right(self._lengths, max_len)
        start = bisect.bisect_left(self._lengths, max_len, 0, end) if ignore_eos else 0
        if end > start:
            return rng.randrange(start, end)
        return rng.randrange(len(self._lengths))

    def _read(self, key: int) -> tuple[object, object]:
        """The row's prompt hash and raw `gen_tokens`."""
        try:
            row = self._conn.execute(self._select, (key,)).fetchone()
        except sqlite3.Error as error:
            raise EngineError(Refusal.INTERNAL, f"failed to query dataset: {error}") from None
        if row is None:  # the file changed under the server
            raise EngineError(Refusal.INTERNAL, f"failed to query dataset: row {key} is gone")
        return row[0], row[1]

    def _parse(self, position: int, raw: object) -> Tokens:
        """The tokens of the row at `position`; _DamagedRow (with its recorded length) if
        they cannot be read, logged the first time."""
        try:
            return self._tokens(raw)
        except (msgspec.DecodeError, ValueError, TypeError) as error:
            key = self._keys[position]
            if key not in self._damaged:
                self._damaged.add(key)
                log.warning(
                    "dataset row %d has invalid gen_tokens (%s): skipped, its answers are "
                    "generated",
                    key,
                    error,
                )
            raise _DamagedRow(key, self._lengths[position]) from None

    def _tokens(self, raw: object) -> Tokens:
        if not isinstance(raw, str | bytes):
            raise TypeError("not a JSON text")
        ids: list[int] = []
        pieces: list[str] = []
        with contextlib.suppress(msgspec.ValidationError):
            usual = _decode_gen_tokens(raw)
            ids, pieces = usual.tokens, usual.strings
        if not ids and not pieces:  # keys in another letter case, or a malformed row
            value = _decode_json(raw)
            if not isinstance(value, dict):
                raise TypeError("not a JSON object")
            ids = _list_of(value, "tokens", int)
            pieces = _list_of(value, "strings", str)
        if ids and pieces and len(ids) != len(pieces):
            raise ValueError(f"{len(ids)} Tokens but {len(pieces)} Strings")
        if not pieces:
            pieces = [self._tokenizer.piece(token_id) for token_id in ids]
        elif not ids:  # text only: each string's own first token id stands for it
            ids = [next(iter(self._tokenizer.encode(piece)), 0) for piece in pieces]
        return ids, pieces


def _list_of(value: Mapping[str, object], key: str, kind: type[_T]) -> list[_T]:
    """The list under `key`, whatever the key's letter case (the reference's JSON reader
    matches keys so); an exact match wins."""
    found = value.get(key.capitalize())
    if found is None:
        found = next((v for k, v in value.items() if k.lower() == key), None)
    if found is None:
        return []
    if not isinstance(found, list) or not all(
        isinstance(item, kind) and not isinstance(item, bool) for item in found
    ):
        raise TypeError(f"{key.capitalize()} must be a list of {kind.__name__}")
    return found


def _choose(
    candidates: list[int], lengths: array[int], max_len: int, ignore_eos: bool, rng: random.Random
) -> int:
    """Among the rows recorded for the prompt: under ignore_eos one of exactly max_len,
    else a longer one (to be cut), else a shorter one (to be padded); otherwise one that
    fits, else a longer one."""
    groups: tuple[list[int], ...]
    if ignore_eos:
        groups = (
            [p for p in candidates if lengths[p] == max_len],
            [p for p in candidates if lengths[p] > max_len],
            candidates,
        )
    else:
        groups = ([p for p in candidates if lengths[p] <= max_len], candidates)
    return rng.choice(next(group for group in groups if group))
