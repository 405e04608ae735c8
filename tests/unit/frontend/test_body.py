"""Body decoding refuses a body in vLLM 0.32's words: FastAPI's validation error, one entry
as pydantic prints it, type "Bad Request", `param` the dotted location (`body.n`)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pytest

from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import PARSE_ERROR_PREFIX, decode_body


class Item(msgspec.Struct):
    x: int


class Body(msgspec.Struct):
    n: int | None = None
    temperature: float | None = None
    stream: bool = False
    model: str | None = None
    messages: list[Item] | None = None
    token: int | None = None
    required: str = ""


class Strict(msgspec.Struct):
    required: str


class Bounded(msgspec.Struct):
    id: Annotated[int, msgspec.Meta(ge=0)] = 0


DECODER = msgspec.json.Decoder(Body)


def refusal(body: bytes, decoder: msgspec.json.Decoder[Any] = DECODER) -> RequestError:
    with pytest.raises(RequestError) as info:
        decode_body(body, decoder)
    error = info.value
    assert error.status == 400
    return error


def entry(body: bytes) -> tuple[str, str | None]:
    """The entry of a one-error message, and the param."""
    error = refusal(body)
    assert error.error_type == "Bad Request", error.message
    head, _, text = error.message.partition("\n  ")
    assert head == "1 validation error:"
    return text, error.param


def test_a_wrong_type_as_vllm_words_it() -> None:
    assert entry(b'{"n": "x"}') == (
        "{'type': 'int_parsing', 'loc': 'body.n', 'msg': 'Input should be a valid integer, "
        "unable to parse string as an integer', 'input': 'x'}",
        "body.n",
    )


@pytest.mark.parametrize(
    ("body", "kind", "text", "shown"),
    [
        (b'{"n": 1.5}', "int_from_float", "Input should be a valid integer, got a number "
         "with a fractional part", "'1.5'"),
        (b'{"n": [1]}', "int_type", "Input should be a valid integer", "'<list of 1 items>'"),
        (b'{"temperature": "hot"}', "float_parsing", "Input should be a valid number, unable "
         "to parse string as a number", "'hot'"),
        (b'{"temperature": {}}', "float_type", "Input should be a valid number",
         "'<dict of 0 items>'"),
        (b'{"stream": "yes"}', "bool_parsing", "Input should be a valid boolean, unable to "
         "interpret input", "'yes'"),
        (b'{"stream": null}', "bool_type", "Input should be a valid boolean", "'None'"),
        (b'{"model": 5}', "string_type", "Input should be a valid string", "'5'"),
        (b'{"messages": "x"}', "list_type", "Input should be a valid list", "'x'"),
        (b'{"messages": [1]}', "dict_type", "Input should be a valid dictionary", "'1'"),
    ],
)  # fmt: skip
def test_each_wrong_type(body: bytes, kind: str, text: str, shown: str) -> None:
    got, param = entry(body)
    assert got.startswith(f"{{'type': '{kind}', 'loc': '{param}', 'msg': '{text}', ")
    assert got.endswith(f"'input': {shown}}}")


def test_the_location_of_a_nested_field() -> None:
    got, param = entry(b'{"messages": [{"x": 1}, {"x": "a"}]}')
    assert param == "body.messages.1.x" and "'loc': 'body.messages.1.x'" in got


def test_a_missing_field_shows_its_object() -> None:
    assert entry(b'{"messages": [{"y": 1}]}') == (
        "{'type': 'missing', 'loc': 'body.messages.0.x', 'msg': 'Field required', "
        "'input': '<dict of 1 items>'}",
        "body.messages.0.x",
    )
    error = refusal(b"{}", msgspec.json.Decoder(Strict))
    assert error.param == "body.required"


def test_a_body_that_is_no_object() -> None:
    assert entry(b"[1, 2]") == (
        "{'type': 'model_attributes_type', 'loc': 'body', 'msg': 'Input should be a valid "
        "dictionary or object to extract fields from', 'input': '<list of 2 items>'}",
        "body",
    )
    missing = "{'type': 'missing', 'loc': 'body', 'msg': 'Field required', 'input': 'None'}"
    assert entry(b"") == (missing, "body")  # FastAPI: no body
    assert entry(b"null") == (missing, "body")


def test_malformed_json_reports_pythons_reading() -> None:
    assert entry(b'{"n": 1,}') == (
        "{'type': 'json_invalid', 'loc': 'body.8', 'msg': 'JSON decode error', "
        "'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting property name enclosed "
        "in double quotes'}}",
        "body.8",
    )
    assert entry(b" ")[1] == "body.1"
    assert "'ctx': {'error': 'Extra data'}" in entry(b"{}x")[0]


def test_bytes_that_are_no_text() -> None:
    error = refusal(b'{"model": "\xff"}')
    assert error.message == "There was an error parsing the body"
    assert (error.error_type, error.param) == ("Bad Request", None)


def test_bounds_are_pydantic_constraints() -> None:
    with pytest.raises(RequestError) as info:
        decode_body(b'{"id": -1}', msgspec.json.Decoder(Bounded))
    assert info.value.param == "body.id"
    assert info.value.message.endswith(
        "{'type': 'greater_than_equal', 'loc': 'body.id', 'msg': 'Input should be greater "
        "than or equal to 0', 'input': '-1', 'ctx': {'ge': 0}}"
    )


def test_long_values_are_cut_as_vllm_cuts_them() -> None:
    got, _ = entry(b'{"model": ["' + b"a" * 5000 + b'"]}')
    assert "'input': '<list of 1 items>'" in got
    got, _ = entry(b'{"n": "' + b"b" * 5000 + b'"}')
    assert "'input': '" + "b" * 200 + "...[truncated]'" in got


def test_duplicate_keys_take_the_last_value() -> None:
    assert decode_body(b'{"n": "x", "n": 2}', DECODER).n == 2
    got, _ = entry(b'{"n": 2, "n": "y"}')
    assert "'input': 'y'" in got


def test_what_only_pythons_reader_accepts_keeps_this_servers_words() -> None:
    for body in (b'{"temperature": NaN}', b'{"n": 2, "n": NaN}', b"\xef\xbb\xbf{}"):
        error = refusal(body)
        assert error.message.startswith(PARSE_ERROR_PREFIX), body
        assert error.error_type == "BadRequestError"
    error = refusal(b'{"n": 1e400}')  # msgspec's own bound on numbers
    assert error.message.startswith(PARSE_ERROR_PREFIX) and error.param == "n"
