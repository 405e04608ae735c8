"""A model's chat template, rendered in the environment HuggingFace templates are written for.

Templates are Jinja in a sandbox, with `trim_blocks`/`lstrip_blocks`, the `loopcontrols`
extension, a `tojson` that keeps non-ASCII text and accepts `indent`, `separators` and
`sort_keys`, `raise_exception` and `strftime_now`, and a `{% generation %}` block that
only marks what the assistant said (it renders its body unchanged). The tokenizer's
special tokens (`bos_token`, `eos_token`, ...) are variables, as are `messages`, `tools`,
`documents`, `add_generation_prompt` and the request's template variables.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal, NoReturn

import jinja2
from jinja2 import meta, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from vllm_sim.engine.tokenizer.base import ChatInput, TemplateError

ContentFormat = Literal["string", "openai"]
# Keys a request's template variables may not set: they are the renderer's own.
RESERVED_KWARGS: Final = frozenset({"chat_template", "tokenize", "messages", "tools"})


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}`: renders its body as it is."""

    tags: Final = {"generation"}  # type: ignore[misc]

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENVIRONMENT: Final = _environment()


def _reads_content_parts(template: nodes.Template) -> bool:
    """Whether the template loops over a message's `content` (it expects a list of parts,
    OpenAI's format) rather than printing it (a string)."""
    for loop in template.find_all(nodes.For):
        target = loop.iter
        if isinstance(target, nodes.Filter) and target.node is not None:
            target = target.node  # `message.content | selectattr(...)` and the like
        if isinstance(target, nodes.Getattr) and target.attr == "content":
            return True
        if isinstance(target, nodes.Getitem) and getattr(target.arg, "value", None) == "content":
            return True
    return False


def _text_parts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [part.get("text", "") for part in content or () if part.get("type") == "text"]


class ChatTemplate:
    """One compiled template; immutable, so every thread may render with it at once."""

    def __init__(
        self, source: str, special_tokens: Mapping[str, str], content_format: str = "auto"
    ) -> None:
        """Raises TemplateError when the template does not compile."""
        try:
            parsed = _ENVIRONMENT.parse(source)
            self._compiled = _ENVIRONMENT.from_string(source)
        except jinja2.exceptions.TemplateError as error:
            raise TemplateError(f"the chat template does not compile: {error}") from None
        # A template that reads the clock renders differently from day to day: never cached.
        self.cacheable = "strftime_now" not in source
        if content_format in ("string", "openai"):
            self.content_format: ContentFormat = content_format  # type: ignore[assignment]
        else:
            self.content_format = "openai" if _reads_content_parts(parsed) else "string"
        self._special = dict(special_tokens)
        self.variables: frozenset[str] = frozenset(_declared_variables(parsed))

    def render(self, chat: ChatInput, defaults: Mapping[str, Any] | None = None) -> str:
        """The prompt text of `chat`; raises TemplateError naming what went wrong."""
        if chat.add_generation_prompt and chat.continue_final_message:
            raise TemplateError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        variables: dict[str, Any] = dict(self._special)
        variables.update(self._kwargs(defaults or {}))
        variables.update(self._kwargs(chat.template_kwargs))
        variables.update(
            messages=[self._message(message) for message in chat.messages],
            tools=list(chat.tools) if chat.tools is not None else None,
            documents=list(chat.documents) if chat.documents is not None else None,
            add_generation_prompt=chat.add_generation_prompt,
        )
        try:
            text = self._compiled.render(variables)
        except jinja2.exceptions.TemplateError as error:
            raise TemplateError(f"the chat template failed: {error}") from None
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as error:
            raise TemplateError(f"the chat template failed: {error!r}") from None
        if chat.continue_final_message and chat.messages:
            text = _continued(text, chat.messages[-1])
        return text

    def _kwargs(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """A request's template variables, less those the template never reads (as vLLM
        filters them) and the renderer's own."""
        for key in given:
            if key in RESERVED_KWARGS:
                raise TemplateError(f"chat_template_kwargs may not set {key!r}")
        return {key: value for key, value in given.items() if key in self.variables}

    def _message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """A message in the content format this template reads."""
        shaped = dict(message)
        content = message.get("content")
        if self.content_format == "string":
            shaped["content"] = "\n".join(_text_parts(content))
        elif isinstance(content, str):
            shaped["content"] = [{"type": "text", "text": content}]
        elif content is None:
            shaped["content"] = []
        return shaped


def _continued(text: str, final: Mapping[str, Any]) -> str:
    """The rendering cut right after the final message's text, so that the model goes on
    with that message instead of starting a new one."""
    parts = _text_parts(final.get("content"))
    if not parts:
        raise TemplateError("continue_final_message is set but the final message has no text")
    last = parts[-1].strip()
    if not last:
        return text
    if last not in text:
        raise TemplateError(
            "continue_final_message is set but the final message does not appear in the chat "
            "after applying the chat template"
        )
    return text[: text.rindex(last) + len(last)]


def _declared_variables(template: nodes.Template) -> set[str]:
    return set(meta.find_undeclared_variables(template))
