"""Session fixtures: the shared simulators and raw HTTP clients bound to them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anthropic
import httpx
import openai
import pytest
from tokenizers import Tokenizer

from tests.support.hf_models import train_tokenizer, write_model_folder
from tests.support.server import SimServer

Scope = Literal["session", "package", "module", "class", "function"]


@pytest.fixture(scope="session")
def sim() -> Iterator[SimServer]:
    """One simulator for tests that only read its defaults (random mode, no latency); its
    context is the reference's 1024 tokens, which many tests' numbers assume."""
    with SimServer(["--max-num-seqs", "64", "--max-model-len", "1024"]) as server:
        yield server


@pytest.fixture(scope="session")
def echo_sim() -> Iterator[SimServer]:
    """One simulator in echo mode, for tests that check content."""
    with SimServer(["--mode", "echo", "--max-num-seqs", "64", "--max-model-len", "1024"]) as server:
        yield server


@pytest.fixture(scope="session")
def http(sim: SimServer) -> Iterator[httpx.Client]:
    """Raw client for the random-mode simulator."""
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def echo_http(echo_sim: SimServer) -> Iterator[httpx.Client]:
    """Raw client for the echo-mode simulator."""
    with httpx.Client(base_url=echo_sim.url, timeout=30) as client:
        yield client


# ---- factories: `name = server_fixture([...])` in a test module is a module-scoped fixture ----


def server_fixture(
    args: Sequence[str] = (), *, env: Mapping[str, str] | None = None, https: bool = False
) -> Any:
    """A module-scoped fixture: one simulator started with `args` for the module's tests."""

    @pytest.fixture(scope="module")
    def fixture() -> Iterator[SimServer]:
        with SimServer(args, env=env, https=https) as server:
            yield server

    return fixture


def _client_fixture(server: str, make: Callable[[SimServer], Any], scope: Scope) -> Any:
    """A fixture yielding `make(sim)` (a context manager) for the simulator fixture `server`."""

    @pytest.fixture(scope=scope)
    def fixture(request: pytest.FixtureRequest) -> Iterator[Any]:
        with make(request.getfixturevalue(server)) as client:
            yield client

    return fixture


def http_fixture(server: str, *, scope: Scope = "module") -> Any:
    """A raw httpx client bound to the simulator fixture named `server`."""
    return _client_fixture(server, lambda sim: httpx.Client(base_url=sim.url, timeout=30), scope)


def openai_fixture(server: str) -> Any:
    """A module-scoped OpenAI SDK client (no retries) for the simulator fixture `server`."""
    return _client_fixture(
        server,
        lambda sim: openai.OpenAI(base_url=sim.openai_url, api_key="none", max_retries=0),
        "module",
    )


def anthropic_fixture(server: str) -> Any:
    """A module-scoped Anthropic SDK client (no retries) for the simulator fixture `server`."""
    return _client_fixture(
        server,
        lambda sim: anthropic.Anthropic(base_url=sim.url, api_key="none", max_retries=0),
        "module",
    )


# ---- real model folders (a trained byte-level BPE; see tests.support.hf_models) -------------
@pytest.fixture(scope="session")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Model folders by family ("qwen", "llama"), built once per session."""
    root = tmp_path_factory.mktemp("hf-models")
    trained = train_tokenizer().to_str()
    return {
        family: write_model_folder(Tokenizer.from_str(trained), root / family, family)
        for family in ("qwen", "llama")
    }
