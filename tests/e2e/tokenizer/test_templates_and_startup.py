"""Chat templates through the HTTP API, and what start-up says and derives from the model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import SimServer

USER = [{"role": "user", "content": "Hello there"}]


def _chat(sim: SimServer, **extra: Any) -> httpx.Response:
    body = {"model": sim.model, "messages": USER, "max_tokens": 1, **extra}
    return httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=30)


def test_startup_line_names_the_tokenizer_and_the_context_comes_from_config(
    hf_models: dict[str, Path],
) -> None:
    with SimServer(model=str(hf_models["qwen"])) as sim:
        log = sim.stderr()
        assert f"Using the model's tokenizer from {hf_models['qwen']}" in log
        models = httpx.get(sim.url + "/v1/models").json()
        assert models["data"][0]["max_model_len"] == 4096


def test_startup_line_says_when_it_falls_back() -> None:
    with SimServer(model="org/not-here") as sim:
        assert "No tokenizer of 'org/not-here' on this machine" in sim.stderr()
        assert "using the simulated one" in sim.stderr()


def test_a_broken_model_folder_stops_start_up(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "vllm_sim", "--model", str(tmp_path), "--port", "8999"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("vllm-sim: invalid configuration: tokenizer ")
    )


@pytest.fixture(scope="module")
def strict(hf_models: dict[str, Path]) -> Any:
    with SimServer(model=str(hf_models["qwen"])) as sim:
        yield sim


@pytest.fixture(scope="module")
def trusting(hf_models: dict[str, Path]) -> Any:
    args = ["--trust-request-chat-template", "--default-chat-template-kwargs", '{"greeting": "yo"}']
    with SimServer(args, model=str(hf_models["qwen"])) as sim:
        yield sim


def test_a_request_template_is_refused_unless_trusted(
    strict: SimServer, trusting: SimServer
) -> None:
    refused = _chat(strict, chat_template="{{ messages[0].content }}")
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert "--trust-request-chat-template" in error["message"] and error["param"] == "messages"
    taken = _chat(trusting, chat_template="{{ messages[0].content }}")
    assert taken.status_code == 200
    tokens = httpx.post(trusting.url + "/tokenize", json={"prompt": "Hello there"}).json()
    assert taken.json()["usage"]["prompt_tokens"] == tokens["count"]


def test_a_failing_template_is_a_400_naming_the_reason(trusting: SimServer) -> None:
    failing = _chat(trusting, chat_template="{{ raise_exception('only user turns, please') }}")
    assert failing.status_code == 400
    assert "only user turns, please" in failing.json()["error"]["message"]


def test_template_kwargs_from_the_request_and_the_server(trusting: SimServer) -> None:
    template = "{{ greeting }} {{ messages[0].content }}"
    default = _chat(trusting, chat_template=template)
    given = _chat(trusting, chat_template=template, chat_template_kwargs={"greeting": "a b c d"})
    assert given.json()["usage"]["prompt_tokens"] > default.json()["usage"]["prompt_tokens"]


def test_generation_prompt_and_continuation(strict: SimServer) -> None:
    url = strict.url + "/tokenize"
    with_prompt = httpx.post(url, json={"messages": USER}).json()["count"]
    without = httpx.post(url, json={"messages": USER, "add_generation_prompt": False}).json()
    assert without["count"] < with_prompt
    partial = [*USER, {"role": "assistant", "content": "Once upon a"}]
    body = {"messages": partial, "add_generation_prompt": False, "continue_final_message": True}
    continued = httpx.post(url, json=body).json()
    text = httpx.post(strict.url + "/detokenize", json={"tokens": continued["tokens"]}).json()
    assert text["prompt"].endswith("<|im_start|>assistant\nOnce upon a")
    both = _chat(strict, continue_final_message=True)
    assert both.status_code == 400
