"""Valid request parts the fuzz modules build their bodies from (messages, tools, prompts).

Valid means the server should accept them: the mutation step of tests.support.fuzz breaks
them afterwards. Output stays short (max_tokens of a few tokens) so that an example costs
milliseconds; the large counts come in through the mutations.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.support.fuzz_schemas import ANY_SCHEMAS, TOOL_SCHEMAS

MODEL = "test-model"
IMAGE_URLS = ("data:image/png;base64,iVBORw0KGgo=", "https://example.invalid/a.png", "")

text = st.text(max_size=24)
short_tokens = st.integers(1, 6)
token_ids = st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 50), min_size=1, max_size=8)
models = st.sampled_from([MODEL, None])


def optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with any subset of `fields`."""
    return st.fixed_dictionaries({}, optional=fields)


def chat_parts() -> st.SearchStrategy[dict[str, Any]]:
    """OpenAI content parts: text, image, audio, video."""
    return st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": text}),
        st.fixed_dictionaries(
            {
                "type": st.just("image_url"),
                "image_url": st.fixed_dictionaries({"url": st.sampled_from(IMAGE_URLS)}),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("input_audio"),
                "input_audio": st.fixed_dictionaries(
                    {"data": st.sampled_from(["AAAA", ""]), "format": st.just("wav")}
                ),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("video_url"),
                "video_url": st.fixed_dictionaries({"url": st.sampled_from(IMAGE_URLS)}),
            }
        ),
    )


def chat_messages() -> st.SearchStrategy[list[dict[str, Any]]]:
    content = text | st.lists(chat_parts(), min_size=1, max_size=3)
    call = st.fixed_dictionaries(
        {
            "id": st.just("call_1"),
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.just("f"), "arguments": st.sampled_from(["{}", '{"a":1}', "{"])}
            ),
        }
    )
    message = st.one_of(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "system", "assistant", "developer"]),
                "content": content,
            }
        ),
        st.fixed_dictionaries(
            {
                "role": st.just("assistant"),
                "content": st.none(),
                "tool_calls": st.lists(call, max_size=2),
            }
        ),
        st.fixed_dictionaries(
            {"role": st.just("tool"), "content": text, "tool_call_id": st.just("call_1")}
        ),
    )
    user = st.fixed_dictionaries({"role": st.just("user"), "content": content})
    return st.tuples(st.lists(message, max_size=3), user).map(lambda t: [*t[0], t[1]])


def chat_tools() -> st.SearchStrategy[list[dict[str, Any]]]:
    function = st.fixed_dictionaries(
        {"name": st.sampled_from(["f", "get_weather", "g"]), "parameters": TOOL_SCHEMAS},
        optional={"description": text, "strict": st.booleans()},
    )
    tool = st.fixed_dictionaries({"type": st.just("function"), "function": function})
    return st.lists(tool, min_size=1, max_size=3)


def flat_tools() -> st.SearchStrategy[list[dict[str, Any]]]:
    """Tools of the Responses API: the function's keys on the item itself."""
    tool = st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "name": st.sampled_from(["f", "get_weather"]),
            "parameters": TOOL_SCHEMAS,
        },
        optional={"description": text, "strict": st.booleans()},
    )
    return st.lists(tool, min_size=1, max_size=3)


def openai_tool_choice() -> st.SearchStrategy[Any]:
    named = st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": st.sampled_from(["f", "missing"])}),
        }
    )
    return st.sampled_from(["auto", "none", "required"]) | named


def response_formats() -> st.SearchStrategy[dict[str, Any]]:
    schema = st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": st.fixed_dictionaries(
                {"name": st.just("out"), "schema": ANY_SCHEMAS}, optional={"strict": st.booleans()}
            ),
        }
    )
    plain = st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object"])})
    return st.one_of(schema, schema, plain)


def stream_options() -> st.SearchStrategy[dict[str, Any]]:
    return optional(include_usage=st.booleans(), continuous_usage_stats=st.booleans())


def kv_transfer() -> st.SearchStrategy[dict[str, Any]]:
    return optional(
        do_remote_decode=st.booleans(),
        do_remote_prefill=st.booleans(),
        remote_block_ids=st.lists(st.integers(0, 100), max_size=3),
        remote_engine_id=text,
        remote_host=st.just("127.0.0.1"),
        remote_port=st.integers(1, 65535),
    )


def completion_prompts() -> st.SearchStrategy[Any]:
    words = st.text(min_size=1, max_size=30)
    return st.one_of(
        words,
        st.lists(words, min_size=1, max_size=3),
        token_ids,
        st.lists(token_ids, min_size=1, max_size=3),
    )


def _id_strings() -> st.SearchStrategy[str]:
    return st.integers(0, 2**32 - 1).map(str)


def sampling_fields() -> dict[str, st.SearchStrategy[Any]]:
    """vLLM's sampling parameters, in range: the fields chat, completions and generate's
    `sampling_params` share."""
    words = st.text(min_size=1, max_size=8)
    return {
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0.01, 1),
        "top_k": st.integers(-1, 100),
        "min_p": st.floats(0, 1),
        "presence_penalty": st.floats(-2, 2),
        "frequency_penalty": st.floats(-2, 2),
        "repetition_penalty": st.floats(0.01, 5),
        "seed": st.integers(-(2**63), 2**63 - 1),
        "stop": words | st.lists(words, max_size=4),
        "stop_token_ids": st.lists(st.integers(0, 2**32 - 1), max_size=4),
        "bad_words": st.lists(words, max_size=3),
        "include_stop_str_in_output": st.booleans(),
        "min_tokens": st.integers(0, 2),
        "skip_special_tokens": st.booleans(),
        "spaces_between_special_tokens": st.booleans(),
        "prompt_logprobs": st.integers(0, 5),
        "logit_bias": st.dictionaries(_id_strings(), st.floats(-100, 100), max_size=3),
        "allowed_token_ids": st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=4),
        "structured_outputs": st.sampled_from(
            [{"regex": "[a-z]+"}, {"choice": ["a", "b"]}, {"json": {"type": "object"}}]
        ),
        "repetition_detection": optional(
            max_pattern_size=st.integers(0, 4), min_count=st.integers(2, 4)
        ),
        "thinking_token_budget": st.integers(-1, 100),
    }


def request_sampling_fields() -> dict[str, st.SearchStrategy[Any]]:
    """The sampling fields and vLLM extras of chat and completions bodies."""
    return {
        **sampling_fields(),
        "truncate_prompt_tokens": st.integers(-1, 100),
        "use_beam_search": st.booleans(),
        "length_penalty": st.floats(-2, 2),
        "priority": st.integers(-5, 5),
        "request_id": text,
        "cache_salt": st.text(min_size=1, max_size=16),
        "return_token_ids": st.booleans(),
        "vllm_xargs": st.dictionaries(text, st.integers() | text, max_size=2),
    }


def chat_sampling_fields() -> dict[str, st.SearchStrategy[Any]]:
    return {
        **request_sampling_fields(),
        "echo": st.booleans(),
        "add_generation_prompt": st.booleans(),
        "continue_final_message": st.booleans(),
        "chat_template_kwargs": optional(enable_thinking=st.booleans()),
        "documents": st.lists(optional(title=text, text=text), max_size=2),
        "parallel_tool_calls": st.booleans(),
        "reasoning_effort": st.sampled_from(["none", "low", "high", "max"]),
    }


def sampling_mutations(
    junk: st.SearchStrategy[Any], counts: st.SearchStrategy[Any]
) -> dict[str, st.SearchStrategy[Any]]:
    """What breaks the sampling fields: junk, edges just out of range, over-long lists."""
    edge = st.sampled_from([-3.0, -2.01, -0.0, 1e-9, 1.01, 2.01, 1e308]) | junk
    long_list = st.integers(0, 2**40) | text
    return {
        "top_p": edge,
        "top_k": counts,
        "min_p": edge,
        "presence_penalty": edge,
        "repetition_penalty": edge,
        "min_tokens": counts,
        "seed": counts,
        "stop": junk | st.lists(text, max_size=6),
        "stop_token_ids": junk | st.lists(long_list, max_size=6),
        "bad_words": junk | st.lists(text, max_size=4),
        "prompt_logprobs": counts,
        "logit_bias": junk | st.dictionaries(text, junk, max_size=3),
        "allowed_token_ids": junk | st.lists(long_list, max_size=3),
        "structured_outputs": junk | optional(json=junk, regex=junk, choice=junk),
        "repetition_detection": junk
        | optional(max_pattern_size=counts, min_pattern_size=counts, min_count=counts),
        "thinking_token_budget": counts,
    }
