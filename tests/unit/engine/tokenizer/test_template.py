"""Chat templates rendered as HuggingFace renders them, and their errors."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_sim.engine.tokenizer import ChatInput, TemplateError
from vllm_sim.engine.tokenizer.template import ChatTemplate

SIMPLE = (
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
PARTS = (
    "{% for m in messages %}{% for part in m['content'] %}{{ part.type }}:{{ part.text }};"
    "{% endfor %}{% endfor %}"
)


def chat(messages: list[dict[str, Any]], **options: Any) -> ChatInput:
    return ChatInput([], messages, **options)


def test_variables_special_tokens_and_generation_prompt() -> None:
    template = ChatTemplate(SIMPLE, {"bos_token": "<s>"})
    rendered = template.render(chat([{"role": "user", "content": "hi"}]))
    assert rendered == "<s><user>hi</user><assistant>"
    no_prompt = chat([{"role": "user", "content": "hi"}], add_generation_prompt=False)
    assert template.render(no_prompt) == "<s><user>hi</user>"


def test_content_format_is_detected_from_the_template() -> None:
    assert ChatTemplate(SIMPLE, {}).content_format == "string"
    parts = ChatTemplate(PARTS, {})
    assert parts.content_format == "openai"
    assert parts.render(chat([{"role": "user", "content": "hi"}])) == "text:hi;"
    listed = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]
    assert (
        ChatTemplate(SIMPLE, {}).render(chat(listed, add_generation_prompt=False))
        == "<user>a\nb</user>"
    )
    assert ChatTemplate(SIMPLE, {}, "openai").content_format == "openai"


def test_tojson_keeps_unicode_and_takes_indent() -> None:
    template = ChatTemplate("{{ tools | tojson }}|{{ tools | tojson(indent=2) }}", {})
    rendered = template.render(chat([], tools=[{"name": "météo"}]))
    assert rendered == '[{"name": "météo"}]|[\n  {\n    "name": "météo"\n  }\n]'


def test_generation_block_and_loop_controls() -> None:
    source = (
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
        "{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    )
    rendered = ChatTemplate(source, {}).render(
        chat([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    )
    assert rendered == "[a]"


def test_raise_exception_is_a_template_error() -> None:
    template = ChatTemplate("{{ raise_exception('roles must alternate') }}", {})
    with pytest.raises(TemplateError, match="roles must alternate"):
        template.render(chat([]))


def test_a_template_that_does_not_compile() -> None:
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% for %}", {})


def test_sandbox_refuses_unsafe_attribute_access() -> None:
    with pytest.raises(TemplateError):
        ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}", {}).render(chat([]))


def test_kwargs_reach_only_variables_the_template_reads() -> None:
    template = ChatTemplate("{{ enable_thinking }}{{ messages | length }}", {})
    given = {"enable_thinking": False, "other": 1}
    assert template.render(chat([], template_kwargs=given)) == "False0"
    assert template.render(chat([]), {"enable_thinking": True}) == "True0"
    with pytest.raises(TemplateError, match="may not set 'messages'"):
        template.render(chat([], template_kwargs={"messages": []}))


def test_continue_final_message_cuts_after_its_text() -> None:
    template = ChatTemplate(SIMPLE, {})
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once upon"}]
    rendered = template.render(
        chat(messages, add_generation_prompt=False, continue_final_message=True)
    )
    assert rendered == "<user>hi</user><assistant>Once upon"
    with pytest.raises(TemplateError, match="Cannot set both"):
        template.render(chat(messages, continue_final_message=True))
