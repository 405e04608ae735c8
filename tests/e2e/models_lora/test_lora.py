"""LoRA adapters over HTTP: loading and unloading (vLLM's answers), /v1/models, requests
naming an adapter, start-up adapters, and the `--max-loras` slot limit measured in time and
in `vllm:lora_requests_info`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_openai_error, unknown_model_message
from tests.support.fixtures import server_fixture
from tests.support.metrics import LORA_INFO, RUNNING, WAITING, Metrics, scrape
from tests.support.native import (
    CHAT,
    COMPLETIONS,
    GENERATE,
    LOAD,
    MODEL,
    UNLOAD,
    csv_set,
    gen_body,
    lora_states,
    newest_states,
)
from tests.support.server import SimServer

BOOT = '{"name":"boot","path":"/models/boot"}'
TTFT = 0.3


# Two served names (the first is every adapter's parent) and one start-up adapter.
_LORA_SIM_ARGS = [
    "--served-model-name",
    "alias1",
    "alias2",
    "--lora-modules",
    BOOT,
    "--max-loras",
    "2",
    "--max-model-len",
    "1024",
]
lora_sim = server_fixture(_LORA_SIM_ARGS)


@pytest.fixture(scope="module")
def client(lora_sim: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=lora_sim.url, timeout=30) as http:
        yield http


def models(client: httpx.Client) -> dict[str, dict[str, Any]]:
    answer = client.get("/v1/models")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "list"
    return {entry["id"]: entry for entry in body["data"]}


def load(client: httpx.Client, name: str, path: str) -> httpx.Response:
    return client.post(LOAD, json={"lora_name": name, "lora_path": path})


def complete(client: httpx.Client, model: str) -> httpx.Response:
    return client.post(COMPLETIONS, json={"model": model, "prompt": "Hello", "max_tokens": 2})


def assert_text(response: httpx.Response, text: str) -> None:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain"), response.headers
    assert response.text == text


# --- load / unload -------------------------------------------------------------------------------


def test_load_answers_vllms_success_sentence_and_lists_the_adapter(client: httpx.Client) -> None:
    assert "fresh" not in models(client)
    assert_text(
        load(client, "fresh", "/adapters/fresh"),
        "Success: LoRA adapter 'fresh' added successfully.",
    )
    entry = models(client)["fresh"]
    assert entry["object"] == "model"
    assert entry["owned_by"] == "vllm"
    assert entry["root"] == "/adapters/fresh"
    assert entry["parent"] == "alias1"  # the first served name, not --model
    assert entry["max_model_len"] == 1024


def test_base_entries_come_first_and_have_no_parent(client: httpx.Client) -> None:
    listed = models(client)
    ids = list(listed)
    assert ids[:2] == ["alias1", "alias2"]
    for name in ("alias1", "alias2"):
        assert listed[name]["root"] == MODEL
        assert listed[name]["parent"] is None
    assert MODEL not in listed


def test_startup_adapter_is_listed_and_usable(client: httpx.Client) -> None:
    entry = models(client)["boot"]
    assert (entry["root"], entry["parent"]) == ("/models/boot", "alias1")
    answer = complete(client, "boot")
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "boot"


def test_startup_adapter_can_be_unloaded_and_loaded_again() -> None:
    with (
        SimServer(["--lora-modules", '{"name":"once","path":"/p/once"}']) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as http,
    ):
        assert_text(
            http.post(UNLOAD, json={"lora_name": "once"}),
            "Success: LoRA adapter 'once' removed successfully.",
        )
        assert "once" not in models(http)
        assert complete(http, "once").status_code == 404
        assert load(http, "once", "/p/again").status_code == 200
        assert models(http)["once"]["root"] == "/p/again"
        assert models(http)["once"]["parent"] == MODEL  # no served names: --model


def test_loading_an_existing_name_is_refused_and_keeps_the_first_path(
    client: httpx.Client,
) -> None:
    assert load(client, "twice", "/first").status_code == 200
    error = assert_openai_error(load(client, "twice", "/second"), 400)
    assert error["message"] == "The lora adapter 'twice' has already been loaded."
    assert error["type"] == "BadRequestError"
    assert models(client)["twice"]["root"] == "/first"
    # A start-up adapter is loaded too.
    error = assert_openai_error(load(client, "boot", "/elsewhere"), 400)
    assert error["message"] == "The lora adapter 'boot' has already been loaded."


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"lora_name": "only-name"},
        {"lora_path": "/only/path"},
        {"lora_name": "", "lora_path": "/p"},
        {"lora_name": "n", "lora_path": ""},
        {"lora_name": None, "lora_path": "/p"},
    ],
    ids=["empty", "no-path", "no-name", "empty-name", "empty-path", "null-name"],
)
def test_load_needs_both_name_and_path(client: httpx.Client, body: dict[str, Any]) -> None:
    before = models(client)
    error = assert_openai_error(client.post(LOAD, json=body), 400)
    assert error["message"] == "Both 'lora_name' and 'lora_path' must be provided."
    assert models(client).keys() == before.keys()


def test_unload_answers_success_then_the_adapter_is_gone(client: httpx.Client) -> None:
    assert load(client, "gone", "/p/gone").status_code == 200
    assert complete(client, "gone").status_code == 200
    assert_text(
        client.post(UNLOAD, json={"lora_name": "gone"}),
        "Success: LoRA adapter 'gone' removed successfully.",
    )
    assert "gone" not in models(client)
    # The refusal lists the served names only: adapters, loaded or not, are not aliases.
    message = unknown_model_message("gone", "alias1", "alias2")
    assert assert_openai_error(complete(client, "gone"), 404)["message"] == message
    chat = {"model": "gone", "messages": [{"role": "user", "content": "hi"}]}
    assert assert_openai_error(client.post(CHAT, json=chat), 404)["message"] == message
    generate = gen_body([1, 2, 3], 2, model="gone")
    assert assert_openai_error(client.post(GENERATE, json=generate), 404)["message"] == message
    # Unloading it again: it cannot be found any more.
    error = assert_openai_error(client.post(UNLOAD, json={"lora_name": "gone"}), 404)
    assert error["message"] == "The lora adapter 'gone' cannot be found."


def test_unload_of_an_unknown_adapter_is_404(client: httpx.Client) -> None:
    error = assert_openai_error(client.post(UNLOAD, json={"lora_name": "never-loaded"}), 404)
    assert error["message"] == "The lora adapter 'never-loaded' cannot be found."
    assert error["type"] == "NotFoundError"


@pytest.mark.parametrize("body", [{}, {"lora_name": ""}, {"lora_name": None}])
def test_unload_needs_a_name(client: httpx.Client, body: dict[str, Any]) -> None:
    before = models(client)
    error = assert_openai_error(client.post(UNLOAD, json=body), 400)
    assert "lora_name" in error["message"]
    assert models(client).keys() == before.keys()


def test_extra_fields_are_ignored(client: httpx.Client) -> None:
    body = {"lora_name": "extra", "lora_path": "/p/extra", "load_inplace": False, "x": [1]}
    assert client.post(LOAD, json=body).status_code == 200
    assert client.post(UNLOAD, json={"lora_name": "extra", "lora_int_id": 7}).status_code == 200
    assert "extra" not in models(client)


# --- requests naming an adapter --------------------------------------------------------------


def test_every_generation_endpoint_answers_with_the_adapters_name(client: httpx.Client) -> None:
    assert load(client, "named", "/p/named").status_code == 200
    answer = complete(client, "named")
    assert answer.status_code == 200 and answer.json()["model"] == "named"
    chat = {"model": "named", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    answer = client.post(CHAT, json=chat)
    assert answer.status_code == 200 and answer.json()["model"] == "named"
    answer = client.post(GENERATE, json=gen_body([5, 6, 7], 2, model="named"))
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["choices"][0]["token_ids"]) <= 2
    # A base alias is shown as the first served name.
    answer = complete(client, "alias2")
    assert answer.status_code == 200 and answer.json()["model"] == "alias1"


def test_generate_for_an_adapter_runs_as_that_adapter(client: httpx.Client) -> None:
    assert load(client, "gen-lora", "/p/gen").status_code == 200
    answer = client.post(GENERATE, json=gen_body([1, 2, 3], 1, model="gen-lora"))
    assert answer.status_code == 200, answer.text
    states = lora_states(scrape(client))
    assert any("gen-lora" in csv_set(running) for running, _ in states), states


# --- --max-loras: slots -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[SimServer]:
    """One LoRA slot, a 300 ms TTFT; `a` from the command line, `b` loaded through the API."""
    args = [
        "--max-loras",
        "1",
        "--max-num-seqs",
        "8",
        "--time-to-first-token",
        f"{int(TTFT * 1000)}ms",
        "--lora-modules",
        '{"name":"a","path":"/p/a"}',
    ]
    with SimServer(args) as server:
        answer = httpx.post(server.url + LOAD, json={"lora_name": "b", "lora_path": "/p/b"})
        assert answer.status_code == 200, answer.text
        yield server


class Timed(threading.Thread):
    """One completion request; `finished` is seconds after the shared start."""

    def __init__(self, url: str, model: str, start: float) -> None:
        super().__init__(daemon=True)
        self.url, self.model, self.start_time = url, model, start
        self.finished = -1.0
        self.status = 0
        self.answer: dict[str, Any] = {}

    def run(self) -> None:
        body = {"model": self.model, "prompt": "Hi", "max_tokens": 1}
        response = httpx.post(self.url + COMPLETIONS, json=body, timeout=30)
        self.finished = time.monotonic() - self.start_time
        self.status = response.status_code
        self.answer = response.json()


def launch(url: str, models_in_order: list[str], gap: float = 0.03) -> list[Timed]:
    start = time.monotonic()
    threads = []
    for model in models_in_order:
        thread = Timed(url, model, start)
        thread.start()
        threads.append(thread)
        time.sleep(gap)
    return threads


def join(threads: list[Timed]) -> None:
    for thread in threads:
        thread.join(30)
        assert thread.status == 200, (thread.model, thread.answer)
        assert thread.answer["model"] == thread.model


def poll(client: httpx.Client, until: Any, timeout: float = 5.0) -> Metrics:
    deadline = time.monotonic() + timeout
    while True:
        metrics = scrape(client)
        if until(metrics):
            return metrics
        assert time.monotonic() < deadline, metrics.text
        time.sleep(0.01)


@pytest.mark.timing
def test_two_adapters_never_run_together_with_one_slot(slow_sim: SimServer) -> None:
    a, base, b = launch(slow_sim.url, ["a", MODEL, "b"])
    with httpx.Client(base_url=slow_sim.url, timeout=30) as client:
        # While a runs, b waits: the base-model request runs beside a.
        waiting = poll(client, lambda m: m.value(WAITING) == 1)
        assert waiting.value(RUNNING) == 2
        assert (frozenset({"a"}), frozenset({"b"})) in newest_states(waiting)
        # Then b runs alone: a has given its slot up.
        running_b = poll(client, lambda m: m.value(WAITING) == 0 and m.value(RUNNING) >= 1)
        assert (frozenset({"b"}), frozenset()) in newest_states(running_b)
        join([a, base, b])
        idle = poll(client, lambda m: m.value(RUNNING) == 0)
    assert 0.25 <= a.finished < 0.55, a.finished
    assert base.finished < 0.55, base.finished  # never waits on a LoRA slot
    assert b.finished >= 2 * TTFT - 0.05, b.finished  # waited for a, then ran its own TTFT
    assert b.finished < 1.5, b.finished
    assert (frozenset(), frozenset()) in newest_states(idle)
    states = lora_states(idle)
    assert all(len(csv_set(running)) <= 1 for running, _ in states), states
    assert ("a", "b") in states and ("b", "") in states, states
    assert {labels["max_lora"] for labels, _ in idle.series(LORA_INFO)} == {"1"}
    assert all(abs(value - time.time()) < 120 for value in states.values()), states


@pytest.mark.timing
def test_requests_for_the_same_adapter_share_its_slot(slow_sim: SimServer) -> None:
    threads = launch(slow_sim.url, ["a", "a", "a"], gap=0.02)
    join(threads)
    assert all(t.finished < 0.6 for t in threads), [t.finished for t in threads]


@pytest.mark.timing
def test_base_model_requests_pass_a_queue_of_waiting_adapters(slow_sim: SimServer) -> None:
    threads = launch(slow_sim.url, ["a", "b", "b", MODEL, MODEL], gap=0.02)
    join(threads)
    a, b1, b2, m1, m2 = (t.finished for t in threads)
    assert a < 0.55 and m1 < 0.6 and m2 < 0.6, (a, m1, m2)
    assert b1 >= 2 * TTFT - 0.05 and b2 >= 2 * TTFT - 0.05, (b1, b2)
    assert max(b1, b2) < 1.2, (b1, b2)  # both b requests run together once b holds the slot


@pytest.mark.timing
def test_two_slots_let_two_adapters_run_together() -> None:
    args = [
        "--max-loras",
        "2",
        "--time-to-first-token",
        f"{int(TTFT * 1000)}ms",
        "--lora-modules",
        '{"name":"a","path":"/p/a"}',
        '{"name":"b","path":"/p/b"}',
    ]
    with SimServer(args) as sim:
        threads = launch(sim.url, ["a", "b"])
        join(threads)
        with httpx.Client(base_url=sim.url) as client:
            states = lora_states(scrape(client))
    assert all(t.finished < 0.55 for t in threads), [t.finished for t in threads]
    assert any(csv_set(running) == {"a", "b"} for running, _ in states), states


@pytest.mark.timing
def test_a_loaded_adapter_overtakes_one_waiting_for_the_slot(slow_sim: SimServer) -> None:
    a, b, a2 = launch(slow_sim.url, ["a", "b", "a"])
    join([a, b, a2])
    # a2 arrives while b waits; a holds the slot, so a2 runs at once and b waits for both.
    assert a2.finished < 0.55, a2.finished
    assert b.finished >= a2.finished + TTFT - 0.05, (a2.finished, b.finished)


def abandon(url: str, model: str, after: float) -> None:
    body = {"model": model, "prompt": "Hi", "max_tokens": 1}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(url + COMPLETIONS, json=body, timeout=after)


@pytest.mark.timing
def test_abandoned_adapter_requests_give_their_slot_and_queue_place_back(
    slow_sim: SimServer,
) -> None:
    with httpx.Client(base_url=slow_sim.url, timeout=30) as client:
        # b abandoned while running: its slot is idle at once, a runs without waiting.
        abandon(slow_sim.url, "b", 0.1)
        poll(client, lambda m: m.value(RUNNING) == 0)
        (a,) = launch(slow_sim.url, ["a"])
        join([a])
        assert a.finished < 0.55, a.finished
        # b abandoned while waiting behind a: nothing of it stays in the queue.
        (a,) = launch(slow_sim.url, ["a"], gap=0.05)
        abandon(slow_sim.url, "b", 0.1)
        join([a])
        idle = poll(client, lambda m: m.value(RUNNING) == 0 and m.value(WAITING) == 0)
        assert (frozenset(), frozenset()) in newest_states(idle)
        assert idle.success(MODEL)["abort"] >= 2
        (b,) = launch(slow_sim.url, ["b"])
        join([b])
        assert b.finished < 0.55, b.finished
