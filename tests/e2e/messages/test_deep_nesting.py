"""A body nested deeper than a protocol's own walk can follow is a 400, never a 500."""

from __future__ import annotations

import httpx

from tests.support.errors import assert_anthropic_error

TOOL_USE = '{"type": "tool_use", "id": "toolu_1", "name": "f", "input": %s}'
BODY = '{"max_tokens": 5, "messages": [%s{"role": "user", "content": "hi"}]}'
HEADERS = {"content-type": "application/json"}


def _body(depth: int) -> str:
    nested = '{"a": ' * depth + "{}" + "}" * depth  # by hand: json.dumps cannot go this deep
    return BODY % ('{"role": "assistant", "content": [%s]}, ' % (TOOL_USE % nested))


def test_tool_use_inputs_nested_near_the_decoders_limit_are_400s(http: httpx.Client) -> None:
    # Around Python's recursion limit either the decoder or the conversion of the tool
    # call's arguments gives up first; each must be a 400 in the endpoint's envelope.
    for depth in range(930, 1000):
        response = http.post("/v1/messages", content=_body(depth), headers=HEADERS)
        if response.status_code != 200:
            assert_anthropic_error(response, 400)
    assert http.post("/v1/messages", content=BODY % "", headers=HEADERS).status_code == 200
