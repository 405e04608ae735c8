"""Phase schedules on a real server: latency that changes at a boundary, a crash with its
exit status, a restart (connection refused, then fresh counters), a sleep phase, the
schedule in /admin/config, and a bad schedule refused at start-up with one line.

Time 0 of a schedule is when the server listens; the tests learn it from GET /admin/config
(`current-phase.elapsed`), so every boundary is measured against the server's own clock.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.async_http import completion_body, post
from tests.support.server import SimServer, run_cli
from vllm_sim.config import parse_duration

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
SLEEP_HISTOGRAM = "vllm:sleep_mode_operation_duration_seconds"
SLEEP_GAUGE = "vllm:sleep_mode_operations_in_flight"


def schedule_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "phases.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def origin(sim: SimServer) -> float:
    """The client's monotonic time at which the server's schedule started."""
    sent = time.monotonic()
    shown = httpx.get(sim.url + "/admin/config", timeout=5).json()
    received = time.monotonic()
    elapsed = parse_duration(shown["current-phase"]["elapsed"]).seconds
    return (sent + received) / 2 - elapsed


def wait_until(condition: Any, timeout: float, step: float = 0.01) -> float:
    """Polls `condition()` until true; the monotonic time it first was."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(step)
    raise AssertionError(f"not within {timeout}s")


def refused(sim: SimServer) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", sim.port)) != 0


# ---------------------------------------------------------------- latency, then a crash
CRASH_SCHEDULE = """\
phases:
  - name: normal
    duration: 1s
  - name: slow
    duration: 1s
    latency-factor: 3
  - name: crash
    crash: true
    exit-code: 3
"""


@dataclass
class Timed:
    sent: float  # seconds after the schedule started
    ttft: float
    mean_itl: float


async def _timed(client: httpx.AsyncClient, sim: SimServer, start: float) -> Timed | None:
    sent = time.monotonic() - start
    body = completion_body(sim, max_tokens=3, ignore_eos=True, stream=True)
    try:
        outcome = await post(client, sim.openai_url + "/completions", body, timeout=5)
    except httpx.HTTPError:
        return None  # cut by the crash
    times = outcome.token_times
    if outcome.status != 200 or not outcome.done or len(times) != 3:
        return None
    return Timed(sent, times[0], (times[-1] - times[0]) / 2)


async def _sample(sim: SimServer, start: float, until: float) -> list[Timed]:
    """A streamed request every 40 ms from now until `until` s after the schedule began."""
    async with httpx.AsyncClient() as client:
        tasks = []
        while time.monotonic() - start < until:
            tasks.append(asyncio.create_task(_timed(client, sim, start)))
            await asyncio.sleep(0.04)
        return [t for t in await asyncio.gather(*tasks) if t is not None]


@pytest.mark.timing
def test_latency_triples_at_the_boundary_and_the_crash_exits_3(tmp_path: Path) -> None:
    args = [
        "--time-to-first-token", "100ms", "--inter-token-latency", "20ms",
        "--phases", schedule_file(tmp_path, CRASH_SCHEDULE),
    ]  # fmt: skip
    with SimServer(args) as sim:
        process = sim.process
        assert process is not None
        start = origin(sim)
        samples = asyncio.run(_sample(sim, start, 1.55))
        refused_at = wait_until(lambda: refused(sim), 3, step=0.002) - start
        exited_at = wait_until(lambda: process.poll() is not None, 5, step=0.002) - start
        assert process.returncode == 3
        assert 'phases[2] "crash" begins: the process exits with status 3' in sim.stderr()
    fast = [s for s in samples if s.ttft < 0.2]
    slow = [s for s in samples if s.ttft >= 0.2]
    assert fast and slow
    for s in fast:
        assert 0.095 <= s.ttft <= 0.2 and 0.015 <= s.mean_itl <= 0.1, s
    for s in slow:
        assert 0.295 <= s.ttft <= 0.5 and 0.055 <= s.mean_itl <= 0.2, s
    last_fast, first_slow = max(s.sent for s in fast), min(s.sent for s in slow)
    print(f"\nboundary at 1s: last fast request sent at {last_fast:.3f}s, first slow at "
          f"{first_slow:.3f}s; crash at 2s: connection refused at {refused_at:.3f}s, "
          f"exit at {exited_at:.3f}s")  # fmt: skip
    assert last_fast < first_slow  # one switch, at the boundary
    assert 0.9 <= last_fast <= 1.1 and 0.9 <= first_slow <= 1.1
    assert 1.95 <= refused_at <= 2.1
    assert 1.95 <= exited_at <= 3.0


# ---------------------------------------------------------------- restart
RESTART_SCHEDULE = """\
- name: before
  duration: 1500ms
- name: restart
  duration: 1500ms
  restart: true
- name: after
  duration: 1m
"""


def _created(client: httpx.Client) -> float:
    """When the instance's prompt-token counter was created: its start."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("vllm:prompt_tokens_created{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:prompt_tokens_created")


def _success(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def _long_stream(sim: SimServer) -> str:
    """A stream that outlives the instance: how it ended."""
    body = completion_body(sim, max_tokens=1000, ignore_eos=True, stream=True)
    try:
        async with httpx.AsyncClient() as client:
            outcome = await post(client, sim.openai_url + "/completions", body, timeout=10)
    except httpx.HTTPError as error:
        return type(error).__name__
    return "done" if outcome.done else "cut"


@pytest.mark.timing
def test_a_restart_refuses_connections_then_serves_with_fresh_counters(tmp_path: Path) -> None:
    args = ["--inter-token-latency", "10ms", "--phases", schedule_file(tmp_path, RESTART_SCHEDULE)]
    with SimServer(args) as sim, httpx.Client(base_url=sim.url, timeout=5) as client:
        start = origin(sim)
        body = completion_body(sim, max_tokens=2)
        assert client.post("/v1/completions", json=body).status_code == 200
        assert _success(client) == 1
        created = _created(client)
        stream = asyncio.run(_long_stream(sim))  # runs until the restart cuts it
        down_at = wait_until(lambda: refused(sim), 5) - start
        with pytest.raises(httpx.ConnectError):
            client.get("/health")
        up_at = wait_until(lambda: not refused(sim), 5) - start
        assert 1.4 <= down_at <= 2.0 and 2.9 <= up_at <= 3.6, (down_at, up_at)
        assert stream != "done"
        assert _success(client) == 0  # a fresh instance: its counters start again
        assert _created(client) >= created + 1.0
        assert client.post("/v1/completions", json=body).status_code == 200
        assert _success(client) == 1
        current = client.get("/admin/config").json()["current-phase"]
        assert (current["index"], current["name"]) == (2, "after")
        assert sim.stderr().count("vllm-sim serving test-model on") == 2
        assert sim.stop() == 0


# ---------------------------------------------------------------- sleep
SLEEP_SCHEDULE = """\
- name: awake
  duration: 1s
- name: nap
  duration: 1500ms
  sleep: 2
- name: after
  duration: 1m
"""


def _sleep_families(client: httpx.Client) -> dict[str, float]:
    values = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith((SLEEP_HISTOGRAM, SLEEP_GAUGE)):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_a_sleep_phase_sleeps_as_post_sleep_and_wakes(tmp_path: Path) -> None:
    args = ["--phases", schedule_file(tmp_path, SLEEP_SCHEDULE)]
    with SimServer(args, env=DEV) as sim, httpx.Client(base_url=sim.url, timeout=5) as client:
        body = completion_body(sim, max_tokens=2)
        assert _sleep_families(client) == {}  # registered at the first operation
        wait_until(lambda: client.get("/is_sleeping").json()["is_sleeping"], 5)
        refusal = client.post("/v1/completions", json=body)
        assert refusal.status_code == 503 and "/wake_up" in refusal.json()["error"]["message"]
        state = client.get("/metrics").text
        labels = 'engine="0",model_name="test-model",sleep_state="discard_all"'
        assert f"vllm:engine_sleep_state{{{labels}}} 1.0" in state
        wait_until(lambda: not client.get("/is_sleeping").json()["is_sleeping"], 5)
        assert client.post("/v1/completions", json=body).status_code == 200
        families = _sleep_families(client)
    for operation in ("sleep", "wake"):
        assert families[f'{SLEEP_HISTOGRAM}_count{{operation="{operation}"}}'] == 1
        assert families[f'{SLEEP_HISTOGRAM}_bucket{{le="600.0",operation="{operation}"}}'] == 1
        assert families[f'{SLEEP_GAUGE}{{operation="{operation}"}}'] == 0


# ---------------------------------------------------------------- /admin/config
def test_admin_config_shows_and_replaces_the_schedule() -> None:
    with SimServer() as sim, httpx.Client(base_url=sim.url, timeout=5) as client:
        shown = client.get("/admin/config").json()
        assert shown["phases"] is None and shown["current-phase"] is None
        assert shown["latency-factor"] == 1.0
        phases: dict[str, Any] = {
            "repeat": True,
            "phases": [{"name": "slow", "duration": "1m", "latency-factor": 2}],
        }
        answer = client.post("/admin/config", json={"phases": phases})
        assert answer.status_code == 200, answer.text
        shown = answer.json()
        assert shown["latency-factor"] == 2.0
        assert shown["phases"] == {
            "repeat": True,
            "phases": [{"name": "slow", "duration": "1m0s", "latency-factor": 2.0}],
        }
        current = shown["current-phase"]
        assert (current["index"], current["name"], current["kind"], current["ends"]) == (
            0, "slow", "run", "1m0s",
        )  # fmt: skip
        # An update during the phase wins until its next boundary.
        assert (
            client.post("/admin/config", json={"latency-factor": 4}).json()["latency-factor"] == 4
        )
        stopped = client.post("/admin/config", json={"phases": None}).json()
        assert stopped["current-phase"] is None and stopped["latency-factor"] == 4.0
        bad = client.post("/admin/config", json={"phases": [{"duration": "1s", "crash": True}]})
        assert bad.status_code == 400
        assert "phases[0].duration: a crash phase takes only" in bad.json()["error"]["message"]


# ---------------------------------------------------------------- start-up refusals
@pytest.mark.parametrize(
    ("schedule", "reason"),
    [
        ("- duration: -1s\n", "phases[0].duration: duration must be at least 10ms, got -1s"),
        (
            "- duration: 1s\n- duration: 1s\n  latency-factor: 0\n",
            "phases[1].latency-factor: latency factor must be greater than 0 and at most 100",
        ),
        ("- crash: true\n  exit-code: 256\n", "phases[0].exit-code: exit code must be between"),
        ("- duration: 1s\n  speed: 2\n", "phases[0]: unknown key 'speed'"),
    ],
)
def test_a_bad_schedule_exits_2_with_one_line(tmp_path: Path, schedule: str, reason: str) -> None:
    result = run_cli(["--model", "m", "--phases", schedule_file(tmp_path, schedule)])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vllm-sim: invalid configuration: ")
    assert reason in lines[0]


@pytest.fixture
def config_file(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "config.yaml"


def test_a_bad_schedule_in_the_config_file_exits_2(config_file: Path) -> None:
    config_file.write_text("model: m\nphases:\n  - duration: 1s\n    sleep: 3\n")
    result = run_cli(["--config", str(config_file)])
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "vllm-sim: invalid configuration: phases[0].sleep: sleep level must be 1 or 2 "
        "(or true: 1), got 3"
    )
