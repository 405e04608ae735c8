"""The OpenAI error envelope."""

from __future__ import annotations

import json

from vllm_sim.errors import RequestError
from vllm_sim.frontend.envelope import error_body


def test_the_envelope_names_message_type_param_and_code() -> None:
    body = json.loads(error_body(RequestError(404, "gone", "model")))
    assert body == {
        "error": {"message": "gone", "type": "NotFoundError", "param": "model", "code": 404}
    }
