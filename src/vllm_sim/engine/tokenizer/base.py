"""The tokenizer interface the engine and API layers program against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


# init=False: mypyc compiles a hand-written __init__; the one dataclasses writes stays
# interpreted, and costs several times more for every request that makes one.
@dataclass(slots=True, init=False)
class ChatTurn:
    """One chat message, already flattened to text by the API layer."""

    role: str
    text: str
    tool_call_id: str | None

    def __init__(self, role: str, text: str, tool_call_id: str | None = None) -> None:
        self.role = role
        self.text = text
        self.tool_call_id = tool_call_id


@dataclass(slots=True, init=False)  # as ChatTurn's
class ChatInput:
    """A conversation as a chat template sees it, and as the simulated tokenizer sees it.

    `messages` are OpenAI-shaped message objects (`role`, `content`, `tool_calls` with
    their arguments as objects, `tool_call_id`, `name`) after the API layer has read them;
    `turns` are the same messages flattened to text. A template renders `messages`, the
    simulated tokenizer `turns`."""

    turns: Sequence[ChatTurn]
    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]] | None
    add_generation_prompt: bool
    continue_final_message: bool
    # A template the request brought (only honoured when the server trusts requests).
    template: str | None
    template_kwargs: Mapping[str, Any]
    documents: Sequence[Mapping[str, Any]] | None

    def __init__(
        self,
        turns: Sequence[ChatTurn],
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        template: str | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.turns = turns
        self.messages = messages
        self.tools = tools
        self.add_generation_prompt = add_generation_prompt
        self.continue_final_message = continue_final_message
        self.template = template
        self.template_kwargs = {} if template_kwargs is None else template_kwargs
        self.documents = documents


def chat_from_turns(turns: Sequence[ChatTurn], **options: Any) -> ChatInput:
    """A chat whose messages are its flattened turns (protocols whose messages are not
    OpenAI's, and the dataset tool)."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        message: dict[str, Any] = {"role": turn.role, "content": turn.text}
        if turn.tool_call_id:
            message["tool_call_id"] = turn.tool_call_id
        messages.append(message)
    return ChatInput(turns, messages, **options)


class TemplateError(Exception):
    """A chat cannot be rendered: the template failed, or the request asked for what the
    template or the server does not allow. The message is the reason, for a 400."""


class Tokenizer(Protocol):
    """What every tokenizer (simulated or a model's real one) offers."""

    # The end-of-sequence token a model emits when it ends its answer by itself; a
    # special token, so its text is "" in answers.
    eos_token_id: int
    # The largest id this tokenizer can decode.
    max_token_id: int
    # Which tokenizer this is and where it came from, for the start-up log.
    description: str
    # The folder of the model's tokenizer files (what gRPC's GetTokenizer sends); None
    # for the simulated tokenizer, which has none.
    folder: Path | None
    # Whether chats are rendered by a template from their OpenAI-shaped messages (else
    # from the flattened turns alone).
    uses_chat_template: bool
    # The largest request body whose text this tokenizer encodes within a few
    # milliseconds: a larger body is read on a worker thread, off the event loop.
    inline_body_bytes: int

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; with `add_special_tokens`, the ones the model's tokenizer
        adds around any text (a beginning-of-sequence token, say)."""
        ...

    def tokenize(self, text: str, add_special_tokens: bool = False) -> tuple[list[int], list[str]]:
        """Token ids and the text each adds; the pieces join back to the text (a token
        that ends inside a character adds "", the one completing it the character)."""
        ...

    def render_chat(self, chat: ChatInput) -> str:
        """The prompt text a chat becomes before tokenization; raises TemplateError."""
        ...

    def token_strs(self, ids: Sequence[int]) -> list[str]:
        """Each id's entry in the vocabulary, as `/tokenize` lists it."""
        ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of a sequence of token ids."""
        ...

    def piece(self, token_id: int) -> str:
        """Text of one token id decoded alone (a logprob's token)."""
        ...

    def vocab_id(self, entry: str) -> int | None:
        """The id of a vocabulary entry (an added token too); None when `entry` is not one
        (it would take several tokens)."""
        ...
