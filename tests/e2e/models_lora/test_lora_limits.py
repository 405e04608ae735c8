"""Clients cannot grow the adapter registry (and so /v1/models) without bound."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.server import SimServer
from vllm_sim.protocols.vllm.lora import MAX_ADAPTERS, MAX_NAME_LENGTH, MAX_PATH_LENGTH

LOAD, UNLOAD = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with SimServer([]) as sim, httpx.Client(base_url=sim.url, timeout=60) as http:
        yield http


def test_overlong_names_and_paths_are_refused(client: httpx.Client) -> None:
    body = {"lora_name": "n" * (MAX_NAME_LENGTH + 1), "lora_path": "/p"}
    assert_openai_error(client.post(LOAD, json=body), 400, param="lora_name")
    body = {"lora_name": "n", "lora_path": "/" * (MAX_PATH_LENGTH + 1)}
    assert_openai_error(client.post(LOAD, json=body), 400, param="lora_path")
    models = client.get("/v1/models").json()["data"]
    assert [m["id"] for m in models if m["parent"]] == []


def test_the_registry_holds_at_most_max_adapters(client: httpx.Client) -> None:
    for i in range(MAX_ADAPTERS):
        loaded = client.post(LOAD, json={"lora_name": f"a{i}", "lora_path": f"/p/{i}"})
        assert loaded.status_code == 200, loaded.text
    full = client.post(LOAD, json={"lora_name": "one-more", "lora_path": "/p"})
    error = assert_openai_error(full, 400, param="lora_name")
    assert error["message"] == f"{MAX_ADAPTERS} LoRA adapters are loaded already: unload one first"
    assert client.post(UNLOAD, json={"lora_name": "a0"}).status_code == 200
    again = client.post(LOAD, json={"lora_name": "one-more", "lora_path": "/p"})
    assert again.status_code == 200
