"""The reference's simulated tokenizer, without its dropped characters.

Token grammar, leftmost-first, each token followed by its trailing `[ \\t\\n\\f\\r]*`:
one punctuation character from the reference set, or an ASCII word run `[A-Za-z0-9_]+`.
The reference silently drops every other character; here each such character is a token
of its own and leading whitespace is a token of its own, so the pieces always join back
to the input (echo is verbatim) while pure-ASCII text counts exactly as the reference.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from vllm_sim.engine.tokenizer import memo, vocab
from vllm_sim.engine.tokenizer.base import ChatInput, ChatTurn
from vllm_sim.engine.tokenizer.fnv import fnv1a_32
from vllm_sim.engine.tokenizer.memo import PromptMemo
from vllm_sim.engine.tokenizer.vocab import PieceVocabulary

_TRAILING_SPACE: Final = r"[ \t\n\f\r]"
_PUNCTUATION: Final = r"""[{}:,\-.?!;@#$%^&*()+_~/\\><\[\]="']"""
_WORD: Final = r"[A-Za-z0-9_]+"
# Alternation order is the reference's (punctuation first, so `_baz` -> `_`, `baz`);
# the last two alternatives only see what the reference would have dropped: whitespace
# can only be unclaimed at the start of the text, anything else is one character.
_TOKEN_RE: Final = re.compile(
    f"{_PUNCTUATION}{_TRAILING_SPACE}*"
    f"|{_WORD}{_TRAILING_SPACE}*"
    f"|{_TRAILING_SPACE}+"
    f"|.{_TRAILING_SPACE}*",
    re.DOTALL,
)

_SLICE_CHARS: Final = 16 * 1024  # characters tokenized per regex call (~1 ms)
_MEMO_MAX_CHARS: Final = 4096  # longer texts are tokenized each time

# The id of the end-of-sequence token, hashed like any other piece but never produced by
# tokenizing text (no text tokenizes to it, the brackets split it into three pieces).
EOS_TOKEN_ID: Final = fnv1a_32("</s>")

UNKNOWN_PIECE_FORMAT: Final = "<unk:{}>"
"""What `piece`/`decode` return for an id this tokenizer never produced (or forgot)."""


def render_chat_text(turns: Sequence[ChatTurn]) -> str:
    """`### role(tool_call_id): text\\n` per turn; an empty tool_call_id counts as unset."""
    return "".join(
        f"### {turn.role}({turn.tool_call_id}): {turn.text}\n"
        if turn.tool_call_id
        else f"### {turn.role}: {turn.text}\n"
        for turn in turns
    )


class SimulatedTokenizer:
    """Regex tokenizer with FNV-1a ids; implements the `Tokenizer` protocol."""

    eos_token_id: int = EOS_TOKEN_ID
    max_token_id: int = 2**32 - 1  # ids are 32-bit hashes of the pieces
    description: str = "the simulated tokenizer (words and punctuation, FNV-1a ids)"
    folder: Path | None = None  # no files: it is not a model's tokenizer
    uses_chat_template: bool = False
    inline_body_bytes: int = 64 * 1024  # a regex pass: about 4 ms for 64 KiB of text

    def __init__(
        self,
        vocabulary_bytes: int = vocab.DEFAULT_MAX_BYTES,
        memo_bytes: int = memo.DEFAULT_MAX_BYTES,
    ) -> None:
        """`vocabulary_bytes` and `memo_bytes` bound the estimated memory of the pieces
        remembered for decoding and of the remembered prompt ids."""
        self._vocab = PieceVocabulary(vocabulary_bytes)
        self._memo = PromptMemo(memo_bytes)
        self._split = _TOKEN_RE.findall

    def vocab_id(self, entry: str) -> int | None:
        """None: this tokenizer has no vocabulary entries beyond its words and punctuation
        (a marker such as `</think>` is several of them)."""
        return None

    @property
    def vocabulary_size(self) -> int:
        """Number of pieces currently remembered for decoding (bounded by vocabulary_bytes)."""
        return len(self._vocab)

    def tokenize(self, text: str, add_special_tokens: bool = False) -> tuple[list[int], list[str]]:
        """Token ids and pieces of `text`; `"".join(pieces) == text`. This tokenizer adds
        no special tokens."""
        if len(text) > _SLICE_CHARS:
            return self._tokenize_slices(text)
        pieces: list[str] = self._split(text)
        return self._ids(pieces), pieces

    def _ids(self, pieces: list[str]) -> list[int]:
        try:
            # Fast path: every piece already hashed (the common case for repeated text).
            return list(map(self._vocab.ids.__getitem__, pieces))
        except KeyError:
            id_of = self._vocab.id_of
            return [id_of(piece) for piece in pieces]

    def _tokenize_slices(self, text: str) -> tuple[list[int], list[str]]:
        """A long text, one slice at a time: each regex call, and each lookup of a slice's
        ids, holds the GIL from start to end, and a text of megabytes is tokenized on a
        worker thread while the event loop must keep running."""
        ids: list[int] = []
        pieces: list[str] = []
        start = 0
        while len(text) - start > _SLICE_CHARS:
            end = start + _SLICE_CHARS
            part: list[str] = _TOKEN_RE.findall(text, start, end)
            if len(part) > 1:
                last = part.pop()  # may be cut by `end`: read again with the next slice
                start = end - len(last)  # the pieces join back to text[start:end]
            else:  # one piece as long as the slice: read it whole
                match = _TOKEN_RE.match(text, start)
                part = [match.group() if match else text[start:]]
                start += len(part[0])
            ids += self._ids(part)
            pieces += part
        part = _TOKEN_RE.findall(text, start)
        ids += self._ids(part)
        pieces += part
        return ids, pieces

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text` (this tokenizer adds no special tokens).

        Prompts repeat (system prompts, benchmarks, retries), so recent short texts are
        remembered within a memory budget (see `memo`); each call gets a list of its own."""
        ids = self._memo.ids.get(text)
        if ids is not None:
            return list(ids)
        fresh = self.tokenize(text)[0]
        if len(text) <= _MEMO_MAX_CHARS:
            self._memo.add(text, tuple(fresh))
        return fresh

    def render_chat(self, chat: ChatInput) -> str:
        """The chat template text: one `### role: text` line per turn (see `render_chat_text`)."""
        return render_chat_text(chat.turns)

    def token_strs(self, ids: Sequence[int]) -> list[str]:
        """The pieces of `ids`."""
        return [self.piece(token_id) for token_id in ids]

    def piece(self, token_id: int) -> str:
        """Text of `token_id` ("" for the end-of-sequence token, which is special), or
        `<unk:ID>` if it was never produced (or was evicted)."""
        if token_id == EOS_TOKEN_ID:
            return ""
        piece = self._vocab.piece_of(token_id)
        return UNKNOWN_PIECE_FORMAT.format(token_id) if piece is None else piece

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Concatenation of the pieces of `ids`."""
        return "".join(map(self.piece, ids))
