"""Helpers for the chat-feature end-to-end tests: schemas, tools, validation, FNV-1a, SDK."""

from __future__ import annotations

import datetime
import importlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.support.server import SimServer

# Imported by name so that mypy needs no stubs for the (untyped) jsonschema package.
jsonschema: Any = importlib.import_module("jsonschema")

CORPUS_DIR = Path(__file__).parent / "schemas_corpus"
CORPUS = sorted(CORPUS_DIR.glob("*.json"))
TOOL_ID_RE = re.compile(r"chatcmpl-tool-[0-9a-f]{16}")
TOOL_VALIDATION_PREFIX = "Tool validation failed: "
# A context long enough for the corpus' biggest documents (recursive trees, long strings).
LONG_CONTEXT = ["--max-model-len", "65536"]

Json = Any


def load_schema(path: Path) -> dict[str, Any]:
    schema = json.loads(path.read_text())
    assert isinstance(schema, dict), path
    return schema


def tool(name: str, parameters: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


WEATHER_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["location"],
}
WEATHER = tool("get_weather", WEATHER_PARAMS, "Weather for a city")
TIME = tool(
    "get_time",
    {
        "type": "object",
        "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["zone"],
    },
)
SEARCH = tool(
    "search",
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        },
        "required": ["query"],
    },
)


def user(content: Json) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


# ---- JSON Schema validation -----------------------------------------------------------------

_DATE_TIME = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")
_TIME = re.compile(r"\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s]+")
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
)
_DURATION = re.compile(r"P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+S)?)?")


def _is_date_time(text: str) -> bool:
    if not _DATE_TIME.fullmatch(text):
        return False
    datetime.datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    return True


def _is_time(text: str) -> bool:
    if not _TIME.fullmatch(text):
        return False
    datetime.datetime.fromisoformat("1970-01-01T" + text.upper().replace("Z", "+00:00"))
    return True


# jsonschema checks these formats only when optional packages are installed (they are not
# dev dependencies): strict stand-ins, so a wrong date-time or URI still fails the test.
_STAND_INS: dict[str, Callable[[str], bool]] = {
    "date-time": _is_date_time,
    "time": _is_time,
    "uri": lambda s: bool(_URI.fullmatch(s)),
    "iri": lambda s: bool(_URI.fullmatch(s)),
    "uri-reference": lambda s: not re.search(r"\s", s),
    "iri-reference": lambda s: not re.search(r"\s", s),
    "hostname": lambda s: bool(_HOSTNAME.fullmatch(s)),
    "duration": lambda s: bool(_DURATION.fullmatch(s)),
}


def _only_strings(check: Callable[[str], bool]) -> Callable[[object], bool]:
    def checker(instance: object) -> bool:
        return not isinstance(instance, str) or check(instance)

    return checker


def format_checker() -> Any:
    """Draft 2020-12's FormatChecker, completed with the stand-ins above."""
    # Not FormatChecker(): with no arguments it also carries draft 3's formats (a "time"
    # without an offset, for one).
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
    for name, check in _STAND_INS.items():
        if name not in checker.checkers:
            checker.checks(name, raises=ValueError)(_only_strings(check))
    return checker


def validator(schema: dict[str, Any]) -> Any:
    """A Draft202012Validator with format checking, for the schema's own draft.

    A schema that names an older draft with `$schema` (boolean `exclusiveMinimum`, tuple
    `items`) is read by that draft's validator: under 2020-12 rules those keywords mean
    something else, and the synthesizer honours the declared draft.
    """
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=format_checker())


def assert_validates(schema: dict[str, Any], instance: Json, what: str = "") -> None:
    errors = sorted(validator(schema).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{what}: {json.dumps(instance)[:2000]} does not validate: " + "; ".join(
        f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]
    )


# ---- FNV-1a, as render hashes and audio digests use it ---------------------------------------


def fnv1a32(text: str) -> int:
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def fnv_hex(text: str) -> str:
    return f"{fnv1a32(text):x}"


# ---- clients ----------------------------------------------------------------------------------


@contextmanager
def sdk(server: SimServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.openai_url, api_key="unused", max_retries=0) as client:
        yield client


@contextmanager
def http(server: SimServer, timeout: float = 30.0) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=timeout) as client:
        yield client


def tokenize_prompt(client: httpx.Client, text: str) -> dict[str, Any]:
    response = client.post("/tokenize", json={"prompt": text, "return_token_strs": True})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def token_count(client: httpx.Client, text: str) -> int:
    count: int = tokenize_prompt(client, text)["count"]
    return count


def tokenize_messages(client: httpx.Client, messages: list[dict[str, Any]]) -> dict[str, Any]:
    response = client.post("/tokenize", json={"messages": messages, "return_token_strs": True})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def detokenize(client: httpx.Client, tokens: list[int]) -> str:
    response = client.post("/detokenize", json={"tokens": tokens})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"prompt"}, body
    text: str = body["prompt"]
    return text
