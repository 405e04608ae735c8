"""A model's own tokenizer: its `tokenizer.json` through the `tokenizers` library, and its
chat template.

Loaded once and never changed afterwards: the event loop and the worker thread share it,
and the library's encoders are safe to share only while nobody reconfigures them
(truncation or padding set per call is what makes them raise "Already borrowed").
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
from tokenizers import Encoding
from tokenizers import Tokenizer as Backend

from vllm_sim.engine.tokenizer import memo
from vllm_sim.engine.tokenizer.base import ChatInput, TemplateError
from vllm_sim.engine.tokenizer.memo import BoundedMemo, PromptMemo
from vllm_sim.engine.tokenizer.template import ChatTemplate
from vllm_sim.model_files import read_json

_MEMO_MAX_CHARS: Final = 4096  # longer texts are tokenized each time
# Longer texts are encoded by the library's batch call, which releases the GIL while it
# works, so the event loop keeps running while a worker thread encodes a large prompt.
_GIL_FREE_CHARS: Final = 8192
_RENDERED_BYTES: Final = 8 << 20
_REQUEST_TEMPLATE_BYTES: Final = 4 << 20
_encode_key = msgspec.json.Encoder().encode
_SPECIAL_TOKEN_KEYS: Final = (
    "bos_token",
    "eos_token",
    "unk_token",
    "pad_token",
    "sep_token",
    "cls_token",
    "mask_token",
)
# The template files of a model folder, newest layout first.
_TEMPLATE_FILES: Final = ("chat_template.jinja", "chat_template.json")


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an object."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _folder_template(folder: Path, config: Mapping[str, Any]) -> str | None:
    """The folder's default chat template: `chat_template.jinja`, the legacy
    `chat_template.json`, or the one in tokenizer_config.json (a string, or a list of
    named templates of which `default` is used)."""
    jinja_file = folder / _TEMPLATE_FILES[0]
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    legacy = read_json(folder / _TEMPLATE_FILES[1])
    template = legacy.get("chat_template") if isinstance(legacy, dict) else None
    if template is None:
        template = config.get("chat_template")
    if isinstance(template, list):
        named = {
            item.get("name"): item.get("template") for item in template if isinstance(item, dict)
        }
        template = named.get("default")
    return template if isinstance(template, str) else None


def _configured_eos(path: Path) -> int | None:
    """The first `eos_token_id` of a configuration file (an id or a list of them)."""
    found = read_json(path)
    eos = found.get("eos_token_id") if isinstance(found, dict) else None
    if isinstance(eos, list) and eos:
        eos = eos[0]
    return eos if isinstance(eos, int) and not isinstance(eos, bool) else None


@dataclass(frozen=True, slots=True)
class TemplateOptions:
    """How chats are rendered: vLLM's `--chat-template*` flags."""

    override: str | None = None  # --chat-template's text
    content_format: str = "auto"
    trust_request_template: bool = False
    default_kwargs: Mapping[str, Any] | None = None


class HfTokenizer:
    """A `Tokenizer` over a model folder's `tokenizer.json`."""

    uses_chat_template = True
    # A BPE encode takes about a millisecond per 1-2 KiB of text, and holds the GIL.
    inline_body_bytes = 4 * 1024

    def __init__(self, folder: Path, options: TemplateOptions | None = None) -> None:
        """Raises ValueError when the folder holds no usable tokenizer."""
        options = options or TemplateOptions()
        self.folder: Path | None = folder
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise ValueError(f"{folder} holds no tokenizer.json")
        try:
            self._backend = Backend.from_file(str(path))
        except Exception as error:  # the library raises bare Exceptions on bad files
            raise ValueError(f"{path} is not a tokenizer: {error}") from None
        config = read_json(folder / "tokenizer_config.json") or {}
        self._special = {
            key: text for key in _SPECIAL_TOKEN_KEYS if (text := _token_text(config.get(key)))
        }
        self.eos_token_id = self._eos_id(folder, config)
        self.max_token_id = self._backend.get_vocab_size(with_added_tokens=True) - 1
        self._options = options
        source = options.override or _folder_template(folder, config)
        self._template = None if source is None else self._compile(source)
        self._memos = (
            PromptMemo(memo.DEFAULT_MAX_BYTES // 2),
            PromptMemo(memo.DEFAULT_MAX_BYTES // 2),
        )
        self._pieces: dict[int, str] = {}
        self._rendered: BoundedMemo[str, str] = BoundedMemo(_RENDERED_BYTES, _text_bytes)
        self._request_templates: BoundedMemo[str, ChatTemplate] = BoundedMemo(
            _REQUEST_TEMPLATE_BYTES, lambda source, _: 4 * sys.getsizeof(source)
        )
        self.description = f"the model's tokenizer from {folder}"

    def _compile(self, source: str) -> ChatTemplate:
        return ChatTemplate(source, self._special, self._options.content_format)

    def _eos_id(self, folder: Path, config: Mapping[str, Any]) -> int:
        """The token a model ends its answers with: generation_config.json's first
        `eos_token_id`, else the tokenizer's end-of-sequence token, else config.json's."""
        found = _configured_eos(folder / "generation_config.json")
        if found is None and (text := self._special.get("eos_token")):
            token_id = self._backend.token_to_id(text)
            found = None if token_id is None else int(token_id)
        if found is None:
            found = _configured_eos(folder / "config.json")
        if found is None:
            raise ValueError(f"{folder}: no end-of-sequence token in its configuration files")
        return found

    # Encoding

    def _encoding(self, text: str, add_special_tokens: bool) -> Encoding:
        if len(text) > _GIL_FREE_CHARS:
            return self._backend.encode_batch([text], add_special_tokens=add_special_tokens)[0]
        return self._backend.encode(text, add_special_tokens=add_special_tokens)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; recent short texts are remembered (see `memo`)."""
        remembered = self._memos[add_special_tokens]
        ids = remembered.ids.get(text)
        if ids is not None:
            return list(ids)
        fresh: list[int] = self._encoding(text, add_special_tokens).ids
        if len(text) <= _MEMO_MAX_CHARS:
            remembered.add(text, tuple(fresh))
        return fresh

    def tokenize(self, text: str, add_special_tokens: bool = False) -> tuple[list[int], list[str]]:
        """Ids of `text` and the text each adds, from the encoding's character offsets."""
        encoding = self._encoding(text, add_special_tokens)
        return encoding.ids, text_pieces(text, encoding.offsets)

    # Chat

    def render_chat(self, chat: ChatInput) -> str:
        """The chat's prompt text. Conversations repeat (a system prompt and a question
        asked by a benchmark, retries), so the text of recent ones is remembered, keyed by
        everything the rendering reads; a template that reads the clock is never cached."""
        template = self._template_for(chat)
        key = self._render_key(chat) if template.cacheable else None
        if key is not None and (text := self._rendered.get(key)) is not None:
            return text
        text = template.render(chat, self._options.default_kwargs)
        if key is not None:
            self._rendered.put(key, text)
        return text

    def _template_for(self, chat: ChatInput) -> ChatTemplate:
        if chat.template is None:
            if self._template is None:
                raise TemplateError(
                    "As of transformers v4.44, default chat template is no longer allowed, so "
                    "you must provide a chat template if the tokenizer does not define one."
                )
            return self._template
        if not self._options.trust_request_template:
            raise TemplateError(
                "Chat template is passed with request, but --trust-request-chat-template "
                "is not set. Refused request with untrusted chat template."
            )
        compiled = self._request_templates.get(chat.template)
        if compiled is None:
            compiled = self._compile(chat.template)
            self._request_templates.put(chat.template, compiled)
        return compiled

    @staticmethod
    def _render_key(chat: ChatInput) -> str | None:
        try:
            key = _encode_key(
                (
                    chat.messages,
                    chat.tools,
                    chat.documents,
                    chat.template_kwargs,
                    chat.add_generation_prompt,
                    chat.continue_final_message,
                    chat.template,
                )
            )
        except (TypeError, ValueError, OverflowError):
            return None
        return key.decode() if len(key) <= _MEMO_MAX_CHARS else None

    # Decoding

    def token_strs(self, ids: Sequence[int]) -> list[str]:
        token = self._backend.id_to_token
        return [token(token_id) or "" for token_id in ids]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return str(self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def vocab_id(self, entry: str) -> int | None:
        token_id: int | None = self._backend.token_to_id(entry)
        return token_id

    def piece(self, token_id: int) -> str:
        """The token decoded alone (a partial character decodes to U+FFFD, as in vLLM's
        logprobs); remembered, at most one entry per vocabulary id."""
        piece = self._pieces.get(token_id)
        if piece is None:
            if not 0 <= token_id <= self.max_token_id:
                return ""
            piece = self._pieces[token_id] = self.decode([token_id])
        return piece


def _text_bytes(key: str, text: str) -> int:
    return sys.getsizeof(key) + sys.getsizeof(text) + memo.ENTRY_OVERHEAD


def text_pieces(text: str, offsets: Sequence[tuple[int, int]]) -> list[str]:
    """The text each token adds when a stream is decoded token by token.

    Token i adds the text from where the text so far ends up to its own end. A token the
    tokenizer added (no span in the text) adds nothing; of tokens that share one
    character's span (its UTF-8 bytes split over tokens), the last adds the character, as
    incremental detokenization holds a partial character back. The last token takes
    whatever text remains, so the pieces always join back to `text`."""
    pieces: list[str] = []
    done = 0
    count = len(offsets)
    for index, (start, end) in enumerate(offsets):
        following = offsets[index + 1] if index + 1 < count else None
        if end <= done or (following is not None and following == (start, end) and start < end):
            pieces.append("")
            continue
        pieces.append(text[done:end])
        done = end
    if pieces:
        pieces[-1] += text[done:]
    return pieces
