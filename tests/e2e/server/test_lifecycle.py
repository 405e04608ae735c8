"""Seeds, exact lengths, graceful shutdown, readiness and the command line."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.support.async_http import (
    PROMPT,
    chat_body,
    completion_body,
    exit_status,
    post,
    run_with_client,
    wait_for_gauges,
)
from tests.support.errors import assert_openai_error
from tests.support.server import SimServer, run_cli, started

# ----------------------------------------------------------------- content


def first_texts(seed: str, count: int = 3) -> list[str]:
    with SimServer(["--seed", seed]) as sim:
        texts = []
        for _ in range(count):
            reply = httpx.post(
                sim.openai_url + "/completions",
                json={"model": sim.model, "prompt": PROMPT, "max_tokens": 10},
                timeout=10,
            )
            assert reply.status_code == 200
            texts.append(reply.json()["choices"][0]["text"])
        return texts


def test_same_seed_same_text_across_restarts() -> None:
    first = first_texts("100")
    second = first_texts("100")
    assert first == second
    assert all(first)
    assert first_texts("101") != first  # another seed says something else


@pytest.mark.parametrize("max_tokens", [1, 7, 64])
@pytest.mark.parametrize("endpoint", ["completions", "chat/completions"])
def test_ignore_eos_gives_exactly_max_tokens(
    sim: SimServer, endpoint: str, max_tokens: int
) -> None:
    make = completion_body if endpoint == "completions" else chat_body
    url = f"{sim.openai_url}/{endpoint}"

    async def body(client: httpx.AsyncClient) -> None:
        plain, streamed = await asyncio.gather(
            post(client, url, make(sim, max_tokens=max_tokens, ignore_eos=True, n=2)),
            post(
                client,
                url,
                make(
                    sim,
                    max_tokens=max_tokens,
                    ignore_eos=True,
                    stream=True,
                    stream_options={"include_usage": True},
                ),
            ),
        )
        reply = plain.json()
        assert reply["usage"]["completion_tokens"] == 2 * max_tokens
        assert [c["finish_reason"] for c in reply["choices"]] == ["length", "length"]
        assert streamed.done
        assert len(streamed.token_times) == max_tokens  # one event per token
        finishes = [
            c["finish_reason"]
            for _, e in streamed.events
            for c in e["choices"]
            if c["finish_reason"]
        ]
        assert finishes == ["length"]
        assert streamed.events[-1][1]["usage"]["completion_tokens"] == max_tokens

    run_with_client(body)


# ----------------------------------------------------------------- graceful shutdown


@pytest.mark.timing
def test_sigterm_drains_in_flight_requests_then_exits_zero() -> None:
    # One slot: the streamed request waits in the queue behind the plain one, and the
    # drain must wait for both.
    server, process = started(["--max-num-seqs", "1", "--time-to-first-token", "1s"])

    async def body(client: httpx.AsyncClient) -> None:
        completions = server.openai_url + "/completions"
        chat = server.openai_url + "/chat/completions"
        plain = asyncio.create_task(post(client, completions, completion_body(server)))
        streamed = asyncio.create_task(post(client, chat, chat_body(server, stream=True)))
        await wait_for_gauges(client, server, running=1, waiting=1)
        process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.2)
        assert process.poll() is None  # still draining

        refused = await asyncio.gather(
            post(client, completions, completion_body(server)),
            post(client, chat, chat_body(server)),
            post(client, chat, chat_body(server, stream=True)),
        )
        for outcome in refused:
            assert outcome.elapsed < 0.5
            assert_openai_error(
                outcome,
                503,
                "server is shutting down",
                error_type=outcome.json()["error"]["type"],
                param=None,
            )
            assert isinstance(outcome.json()["error"]["type"], str)
        health = await client.get(server.url + "/health")
        assert health.status_code == 200
        for path in ("/metrics", "/v1/models", "/health/ready"):
            other = await client.get(server.url + path)
            assert other.status_code == 200, path

        finished_plain, finished_stream = await asyncio.gather(plain, streamed)
        assert finished_plain.status == 200
        assert finished_plain.json()["choices"][0]["text"]
        assert finished_stream.status == 200 and finished_stream.done
        assert finished_stream.token_times

    assert exit_status(server, body, timeout=10) == 0


@pytest.mark.timing
@pytest.mark.parametrize(
    "signals", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGTERM)]
)
def test_second_signal_exits_at_once_with_status_one(
    signals: tuple[signal.Signals, signal.Signals],
) -> None:
    server, process = started(["--max-num-seqs", "1", "--time-to-first-token", "20s"])

    async def body(client: httpx.AsyncClient) -> None:
        url = server.openai_url + "/completions"
        task = asyncio.create_task(post(client, url, completion_body(server)))
        await wait_for_gauges(client, server, running=1)
        process.send_signal(signals[0])
        await asyncio.sleep(0.3)
        assert process.poll() is None  # draining: the request holds it open
        process.send_signal(signals[1])
        start = time.monotonic()
        while process.poll() is None and time.monotonic() - start < 5:
            await asyncio.sleep(0.02)
        task.cancel()

    assert exit_status(server, body, timeout=1) == 1


@pytest.mark.timing
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_idle_server_exits_zero_quickly(sig: signal.Signals) -> None:
    server = SimServer().start()
    assert server.process is not None
    start = time.monotonic()
    server.process.send_signal(sig)
    assert server.process.wait(timeout=10) == 0
    assert time.monotonic() - start < 3


# ----------------------------------------------------------------- readiness


@pytest.mark.timing
def test_startup_duration_delays_readiness_not_health() -> None:
    with SimServer(["--startup-duration", "1s"]) as sim:
        t0 = time.monotonic()
        statuses: list[tuple[float, int, int]] = []
        while time.monotonic() - t0 < 3:
            ready = httpx.get(sim.url + "/health/ready", timeout=2).status_code
            health = httpx.get(sim.url + "/health", timeout=2).status_code
            statuses.append((time.monotonic() - t0, ready, health))
            if ready == 200:
                break
            time.sleep(0.05)
        assert statuses[0][1] == 503
        assert all(health == 200 for _, _, health in statuses)
        became_ready = statuses[-1]
        assert became_ready[1] == 200, "never became ready"
        assert 0.5 <= became_ready[0] <= 1.5
        assert {ready for _, ready, _ in statuses} == {503, 200}
        assert httpx.get(sim.url + "/health/ready").status_code == 200


def test_readiness_is_immediate_without_startup_duration(sim: SimServer) -> None:
    assert httpx.get(sim.url + "/health/ready").status_code == 200


# ----------------------------------------------------------------- command line


TTFT_100MS = ["--model", "m", "--time-to-first-token", "100ms"]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--model", "m", "--max-num-seqs", "0"], "max num seqs"),
        (["--model", "m", "--foo"], "--foo"),
        (["--model", "m", "--port", "abc"], "--port"),
        ([], "model"),
        (["--model", "m", "--max-waiting-queue-length", "-1"], "max waiting queue"),
        (["--model", "m", "--time-factor-under-load", "0.5"], "time factor under load"),
        (["--model", "m", "--latency-calculator", "fast"], "unknown latency-calculator fast"),
        (
            [*TTFT_100MS, "--time-to-first-token-std-dev", "31ms"],
            "time to first token standard deviation",
        ),
        (["--model", "m", "--inter-token-latency", "-1ms"], "inter token latency"),
    ],
)
def test_bad_config_exits_nonzero_with_one_line(args: list[str], names: str) -> None:
    result = run_cli(args)
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert names in lines[0]
    assert result.stdout == ""


def test_help_exits_zero_with_grouped_usage_on_stdout() -> None:
    """--help prints to stdout (so it pipes into a pager) and nothing to stderr."""
    result = run_cli(["--help"])
    assert result.returncode == 0
    assert result.stderr == ""
    text = result.stdout
    assert "Usage:" in text
    headings = [
        line for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")
    ]
    assert len(headings) >= 4, headings
    for flag in ("--max-num-seqs", "--max-waiting-queue-length", "--time-to-first-token"):
        assert flag in text
    assert "Traceback" not in text


@pytest.mark.timing
def test_cli_does_not_start_a_server_on_bad_config() -> None:
    start = time.monotonic()
    with pytest.raises(subprocess.CalledProcessError):
        run_cli(["--model", "m", "--max-num-seqs", "0"]).check_returncode()
    assert time.monotonic() - start < 10


def test_a_signal_relayed_twice_at_once_still_drains() -> None:
    """make, timeout or a process group can deliver one stop twice within milliseconds:
    that is one request to stop, so in-flight work still finishes and the exit is 0."""
    server, process = started(["--time-to-first-token", "600ms"])

    async def body(client: httpx.AsyncClient) -> None:
        url = server.openai_url + "/completions"
        task = asyncio.create_task(post(client, url, completion_body(server)))
        await wait_for_gauges(client, server, running=1)
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGTERM)
        response = await task
        assert response.status == 200

    assert exit_status(server, body, timeout=10) == 0


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--port", "70000"], "invalid port '70000'"),
        (["--port", "65530", "--data-parallel-size", "8"], "data parallel ports"),
        (["--time-factor-under-load", "1e308"], "time factor under load cannot be more than 100"),
        (["--time-to-first-token", "1000000h"], "time to first token cannot be more than 1h"),
        (["--enable-kvcache", "--zmq-endpoint", "bogus"], "invalid zmq-endpoint 'bogus'"),
        (["--kv-events-replay-endpoint", "tcp://*"], "invalid kv-events-replay-endpoint"),
        (["--config", "/dev/zero"], "/dev/zero is not a regular file"),
    ],
)
def test_probe_bad_config_exits_2_with_one_line(args: list[str], line: str) -> None:
    result = run_cli(["--model", "m", *args], env={"POD_IP": "127.0.0.1"})
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("vllm-sim: invalid configuration: ") and line in lines[0]


def test_an_oversized_config_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"model: m\n" + b"#" * (1 << 20))
    result = run_cli(["--config", str(path)])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"vllm-sim: invalid configuration: failed to read configuration file: {path} is larger "
        "than 1 MiB"
    ]


def test_unknown_yaml_key_warns_on_one_line_and_the_server_starts(tmp_path: Path) -> None:
    path = tmp_path / "go.yaml"
    path.write_text("max-num-seqs: 3\nsome-go-only-key: 7\n", encoding="utf-8")
    with SimServer(["--config", str(path)]) as sim:
        config = httpx.get(sim.url + "/admin/config").json()
        assert config["max-num-seqs"] == 3
        warnings = [line for line in sim.stderr().splitlines() if "some-go-only-key" in line]
    assert warnings == ["WARN unknown configuration key 'some-go-only-key' at line 2 ignored"]
