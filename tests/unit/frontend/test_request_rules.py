"""vLLM's request rules: FastAPI's validation wording and Go's reading of a boolean header."""

from __future__ import annotations

import pytest

from vllm_sim.frontend.request_rules import header_flag, validation_error
from vllm_sim.http.messages import HttpRequest


def test_a_validation_error_is_a_400_counting_one_entry() -> None:
    error = validation_error("Field required", "body.model")
    assert error.status == 400 and error.error_type == "Bad Request"
    assert error.message == "1 validation error:\n  Field required" and error.param == "body.model"


@pytest.mark.parametrize(
    ("value", "flag"),
    [(b"1", True), (b"t", True), (b" True ", True), (b"yes", False), (b"0", False), (None, False)],
)
def test_a_flag_header_is_true_as_go_parses_it(value: bytes | None, flag: bool) -> None:
    headers = [] if value is None else [(b"x-flag", value)]
    request = HttpRequest("GET", "/", b"", headers, b"", lambda _: lambda: None, 8000)
    assert header_flag(request, b"x-flag") is flag
