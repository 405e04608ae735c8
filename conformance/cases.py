"""The requests sent to both servers. To add one, append a `post(...)` or `get(...)` to CASES.

Generation cases use `temperature: 0`, a small `max_tokens` and `ignore_eos: true` where the
output length must match, so that chunk counts compare; where the length depends on what
the model writes (stop strings, structured output), the case sets `counts=False` and names
the keys whose values then differ (`ignore_values`).
"""

from __future__ import annotations

from conformance.case import Case, get, merged, post

MODEL = "tiny-model"
PROMPT = "Hello there, how are you?"
USER = [{"role": "user", "content": PROMPT}]

CHAT = {"model": MODEL, "messages": USER, "max_tokens": 5, "ignore_eos": True, "temperature": 0}
COMPLETION = {
    "model": MODEL,
    "prompt": PROMPT,
    "max_tokens": 5,
    "ignore_eos": True,
    "temperature": 0,
}
STREAM = {"stream": True}
USAGE = {"stream": True, "stream_options": {"include_usage": True}}

# Enum-only arguments keep structured tool output short whatever the weights; `strict`
# makes the oracle constrain the arguments to the schema.
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["unit"],
            "additionalProperties": False,
        },
    },
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# Room for the whole call: the oracle spells its tool-call envelope with short tokens.
TOOLS = {"tools": [WEATHER], "max_tokens": 100, "ignore_eos": None}
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
            "additionalProperties": False,
        },
    },
}
# A stop set that nearly any text hits within a few tokens.
STOPS = ["e", "a", " "]
CONTENT_ENDS = frozenset({"finish_reason", "stop_reason"})

# vLLM's Messages request has no ignore_eos and drops the field (its model here never ends
# free text early anyway); the simulator honours it, so both run to max_tokens.
MESSAGES = {
    "model": MODEL,
    "max_tokens": 5,
    "messages": USER,
    "temperature": 0,
    "ignore_eos": True,
}
RESPONSES = {
    "model": MODEL,
    "input": PROMPT,
    "max_output_tokens": 5,
    "temperature": 0,
    "ignore_eos": True,
}
TOO_LONG = " ".join(["hello"] * 700)
FOREIGN = {"Origin": "http://foreign.example", "Access-Control-Request-Method": "POST"}

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


def chat(name: str, body: dict[str, object], **options: object) -> Case:
    return post(name, CHAT_PATH, body, **options)


def completion(name: str, body: dict[str, object], **options: object) -> Case:
    return post(name, COMPLETIONS_PATH, body, **options)


CHAT_CASES = [
    chat("chat", CHAT),
    chat("chat-stream", merged(CHAT, **STREAM)),
    chat("chat-stream-usage", merged(CHAT, **USAGE)),
    chat(
        "chat-stream-continuous-usage",
        merged(
            CHAT,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        ),
    ),
    chat("chat-n2", merged(CHAT, n=2, temperature=0.8, seed=7)),
    chat(
        "chat-n2-stream",
        merged(CHAT, n=2, temperature=0.8, seed=7, **USAGE),
    ),
    chat("chat-logprobs", merged(CHAT, logprobs=True, top_logprobs=2)),
    chat("chat-logprobs-stream", merged(CHAT, logprobs=True, top_logprobs=2, **STREAM)),
    chat("chat-prompt-logprobs", merged(CHAT, prompt_logprobs=1)),
    chat("chat-return-token-ids", merged(CHAT, return_token_ids=True)),
    chat("chat-return-token-ids-stream", merged(CHAT, return_token_ids=True, **STREAM)),
    chat(
        "chat-stop",
        merged(CHAT, max_tokens=16, stop=STOPS),
        ignore_values=CONTENT_ENDS,
        counts=False,
    ),
    chat(
        "chat-stop-stream",
        merged(CHAT, max_tokens=16, stop=STOPS, **STREAM),
        ignore_values=CONTENT_ENDS,
        counts=False,
    ),
    chat("chat-stop-token-ids", merged(CHAT, stop_token_ids=[3, 4, 5]), ignore_values=CONTENT_ENDS),
    chat("chat-min-tokens", merged(CHAT, ignore_eos=None, min_tokens=5)),
    chat("chat-max-completion-tokens", merged(CHAT, max_tokens=None, max_completion_tokens=5)),
    chat("chat-tool-named", merged(CHAT, tool_choice=NAMED, **TOOLS), counts=False),
    chat(
        "chat-tool-named-stream", merged(CHAT, tool_choice=NAMED, **TOOLS, **STREAM), counts=False
    ),
    chat("chat-tool-required", merged(CHAT, tool_choice="required", **TOOLS), counts=False),
    chat(
        "chat-tool-required-stream",
        merged(CHAT, tool_choice="required", **TOOLS, **STREAM),
        counts=False,
    ),
    chat(
        "chat-json-schema",
        merged(CHAT, response_format=SCHEMA, max_tokens=20, ignore_eos=None),
        counts=False,
    ),
    chat(
        "chat-json-schema-stream",
        merged(CHAT, response_format=SCHEMA, max_tokens=20, ignore_eos=None, **STREAM),
        counts=False,
    ),
    chat(
        "chat-request-id",
        CHAT,
        headers={"X-Request-Id": "conformance-req-1"},
        exact_values=frozenset({"id"}),
        compare_headers=("x-request-id",),
    ),
]

COMPLETION_CASES = [
    completion("completion", COMPLETION),
    completion("completion-stream", merged(COMPLETION, **STREAM)),
    completion("completion-stream-usage", merged(COMPLETION, **USAGE)),
    completion("completion-default-max-tokens", merged(COMPLETION, max_tokens=None)),
    completion("completion-n2", merged(COMPLETION, n=2, temperature=0.8, seed=7)),
    completion(
        "completion-n2-stream",
        merged(COMPLETION, n=2, temperature=0.8, seed=7, **USAGE),
    ),
    completion("completion-logprobs", merged(COMPLETION, logprobs=2)),
    completion("completion-logprobs-stream", merged(COMPLETION, logprobs=2, **STREAM)),
    completion("completion-echo", merged(COMPLETION, echo=True)),
    completion("completion-echo-logprobs", merged(COMPLETION, echo=True, logprobs=1)),
    completion("completion-echo-max0", merged(COMPLETION, echo=True, max_tokens=0)),
    completion(
        "completion-echo-max0-logprobs", merged(COMPLETION, echo=True, max_tokens=0, logprobs=1)
    ),
    completion("completion-prompt-logprobs", merged(COMPLETION, prompt_logprobs=1)),
    completion("completion-return-token-ids", merged(COMPLETION, return_token_ids=True)),
    completion(
        "completion-stop-include",
        merged(COMPLETION, max_tokens=16, stop=STOPS, include_stop_str_in_output=True),
        ignore_values=CONTENT_ENDS,
    ),
    completion("completion-token-prompt", merged(COMPLETION, prompt=[1, 2, 3])),
    completion("completion-prompt-list", merged(COMPLETION, prompt=[PROMPT, "Goodbye"])),
]

OTHER_GENERATION_CASES = [
    post("responses", "/v1/responses", RESPONSES),
    post("responses-stream", "/v1/responses", merged(RESPONSES, stream=True)),
    post("messages", "/v1/messages", MESSAGES),
    post("messages-stream", "/v1/messages", merged(MESSAGES, stream=True)),
    post("messages-count-tokens", "/v1/messages/count_tokens", {"model": MODEL, "messages": USER}),
]

# The ids and their strings: both servers use the same model's tokenizer.
TOKENS = frozenset({"tokens", "count", "token_strs"})

UTILITY_CASES = [
    post("tokenize", "/tokenize", {"model": MODEL, "prompt": PROMPT}, exact_values=TOKENS),
    post("tokenize-chat", "/tokenize", {"model": MODEL, "messages": USER}, exact_values=TOKENS),
    post(
        "tokenize-token-strs",
        "/tokenize",
        {"model": MODEL, "prompt": PROMPT, "return_token_strs": True},
        exact_values=TOKENS,
    ),
    post(
        "detokenize",
        "/detokenize",
        {"model": MODEL, "tokens": [10, 20, 30]},
        exact_values=frozenset({"prompt"}),
    ),
    get("models", "/v1/models"),
    get("version", "/version"),
    get("ping", "/ping"),
    get("load", "/load"),
    get("health", "/health"),
]

ERROR_CASES = [
    chat("err-unknown-model", merged(CHAT, model="no-such-model")),
    completion("err-completion-unknown-model", merged(COMPLETION, model="no-such-model")),
    post("err-messages-unknown-model", "/v1/messages", merged(MESSAGES, model="no-such-model")),
    chat("err-max-tokens-too-large", merged(CHAT, max_tokens=5000)),
    completion("err-prompt-too-long", merged(COMPLETION, prompt=TOO_LONG), message="masked"),
    chat(
        "err-chat-prompt-too-long",
        merged(CHAT, messages=[{"role": "user", "content": TOO_LONG}]),
        message="masked",
    ),
    chat("err-n-string", merged(CHAT, n="x")),
    chat("err-temperature-string", merged(CHAT, temperature="hot")),
    chat("err-messages-missing", merged(CHAT, messages=None)),
    post(
        "err-malformed-json",
        CHAT_PATH,
        None,
        raw=b'{"model": "tiny-model", "messages": [',
        headers={"Content-Type": "application/json"},
    ),
    post(
        "err-text-plain",
        CHAT_PATH,
        None,
        raw=b'{"model": "tiny-model"}',
        headers={"Content-Type": "text/plain"},
    ),
    chat("err-stream-options-without-stream", merged(CHAT, stream_options={"include_usage": True})),
    completion("err-suffix", merged(COMPLETION, suffix="!")),
    chat("err-top-logprobs-too-many", merged(CHAT, logprobs=True, top_logprobs=30)),
    get("err-unknown-route", "/v1/no-such-route"),
    get("err-wrong-method", CHAT_PATH, compare_headers=("allow",)),
    Case(
        "cors-preflight-foreign-origin",
        CHAT_PATH,
        method="OPTIONS",
        headers=FOREIGN,
        compare_headers=(
            "access-control-allow-origin",
            "access-control-allow-methods",
            "vary",
        ),
    ),
    get(
        "cors-get-foreign-origin",
        "/v1/models",
        headers={"Origin": "http://foreign.example"},
        compare_headers=("access-control-allow-origin",),
    ),
]

# With a reasoning parser (the `reasoning` profile: qwen3 on the think model). The random
# model never writes `</think>` by itself, so its answers are all reasoning, unless a
# thinking budget forces the end of thinking; the simulator runs at a reasoning ratio of 1.
REASONING = {"profile": "reasoning"}
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
# A budget splits the answer, at a point that depends on how each counts the prompt's own
# thinking: the lengths of the two parts differ.
BUDGET = {"thinking_token_budget": 3, "max_tokens": 8}
SPLIT = {"counts": False, "ignore_values": frozenset({"completion_tokens", "total_tokens"})}
REASONING_CASES = [
    chat("reasoning-chat", CHAT, **REASONING),
    chat("reasoning-chat-stream", merged(CHAT, **USAGE), **REASONING),
    chat("reasoning-chat-budget", merged(CHAT, **BUDGET), **REASONING),
    chat("reasoning-chat-budget-stream", merged(CHAT, **BUDGET, **STREAM), **REASONING, **SPLIT),
    chat("reasoning-chat-no-thinking", merged(CHAT, **NO_THINKING), **REASONING),
    chat("reasoning-chat-no-thinking-stream", merged(CHAT, **NO_THINKING, **STREAM), **REASONING),
    chat("reasoning-chat-hidden", merged(CHAT, include_reasoning=False), **REASONING),
    chat(
        "reasoning-chat-hidden-stream",
        merged(CHAT, include_reasoning=False, **STREAM),
        **REASONING,
    ),
    completion("reasoning-completion", COMPLETION, **REASONING),
    post("reasoning-responses", "/v1/responses", RESPONSES, **REASONING),
    post("reasoning-responses-stream", "/v1/responses", merged(RESPONSES, **STREAM), **REASONING),
    post(
        "reasoning-responses-effort-none",
        "/v1/responses",
        merged(RESPONSES, reasoning={"effort": "none"}),
        **REASONING,
    ),
    # Named messages-* so that the Messages API's accepted differences cover them too.
    post("messages-reasoning", "/v1/messages", MESSAGES, **REASONING),
    post("messages-reasoning-stream", "/v1/messages", merged(MESSAGES, **STREAM), **REASONING),
    post(
        "messages-reasoning-disabled",
        "/v1/messages",
        merged(MESSAGES, thinking={"type": "disabled"}),
        **REASONING,
    ),
]

# Prefix-cache hits (the `prefix` profile: prefix caching on, blocks of 32 tokens, cached
# tokens reported), in this order on servers that saw only the warm-up chat. The completions'
# prompts are token ids, so both count the same tokens. vLLM never counts the last prompt
# token as a hit: it is computed to sample the first output token, so a prompt found whole
# recomputes its last block (96 tokens repeated: 64 cached), and a one-block prompt never
# hits.
PREFIX = {"profile": "prefix", "exact_values": frozenset({"cached_tokens"})}
IDS_96 = list(range(100, 196))  # three full blocks
PREFIX_COMPLETION = merged(COMPLETION, max_tokens=2, prompt=IDS_96)
LONGER = " ".join([PROMPT] * 12)  # several blocks once rendered
PREFIX_CHAT = merged(CHAT, max_tokens=2, messages=[{"role": "user", "content": LONGER}])
PREFIX_RESPONSES = merged(RESPONSES, max_output_tokens=2, input=LONGER)
PREFIX_CASES = [
    completion("prefix-cache-miss", PREFIX_COMPLETION, **PREFIX),
    completion("prefix-cache-whole-blocks-again", PREFIX_COMPLETION, **PREFIX),
    completion(
        "prefix-cache-two-more-tokens",
        merged(PREFIX_COMPLETION, prompt=[*IDS_96, 200, 201]),
        **PREFIX,
    ),
    completion(
        "prefix-cache-shared-prefix",
        merged(PREFIX_COMPLETION, prompt=IDS_96[:64] + list(range(300, 340))),
        **PREFIX,
    ),
    completion("prefix-cache-one-block", merged(PREFIX_COMPLETION, prompt=IDS_96[:32]), **PREFIX),
    # Blocks of a rendered chat, then the same input through Responses (which may render it
    # to the same tokens).
    chat("prefix-cache-chat", PREFIX_CHAT, **PREFIX),
    chat("prefix-cache-chat-again", PREFIX_CHAT, **PREFIX),
    post("prefix-cache-responses", "/v1/responses", PREFIX_RESPONSES, **PREFIX),
    post("prefix-cache-responses-again", "/v1/responses", PREFIX_RESPONSES, **PREFIX),
]

CASES: list[Case] = [
    *CHAT_CASES,
    *COMPLETION_CASES,
    *OTHER_GENERATION_CASES,
    *UTILITY_CASES,
    *ERROR_CASES,
    *REASONING_CASES,
    *PREFIX_CASES,
]
