"""A fleet end to end: `--num-instances 3` serves three independent instances on port,
port + 1 and port + 2 (each answering the whole API, counting only its own requests in its
own metrics and naming its own pod and port), a --fleet-config file gives one instance
settings of its own, --fleet-processes spreads the instances over child processes, one
SIGTERM drains the whole fleet and exits 0, and a bad fleet file exits 2 with one line."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.metrics import RUNNING, Metrics, scrape
from tests.support.native import consecutive_free_ports, port_open, wait_healthy
from tests.support.server import SimServer, run_cli

MODEL = "m"
INSTANCES = 3
SMALL_LEN = 64  # instance 2's --max-model-len, from the fleet file
LONG_PROMPT = " ".join(f"word{i}" for i in range(300))


def chat_body(content: str = "hi", **extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


def start_fleet(args: list[str], env: dict[str, str] | None = None) -> SimServer:
    """A started fleet of INSTANCES on consecutive ports, every one answering /health."""
    port = consecutive_free_ports(INSTANCES)
    sim = SimServer(
        ["--num-instances", str(INSTANCES), *args], env=env, model=MODEL, port=port
    ).start()
    for index in range(1, INSTANCES):
        wait_healthy(port + index)
    return sim


def client(sim: SimServer, index: int) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{sim.port + index}", timeout=30)


def successes(metrics: Metrics) -> float:
    return sum(metrics.success(MODEL).values())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    """Three instances in one process, POD_NAME=pod, instance 2 with a short max-model-len."""
    path = tmp_path_factory.mktemp("fleet") / "fleet.yaml"
    path.write_text(f"instances: [{{count: 2}}, {{max-model-len: {SMALL_LEN}}}]\n")
    sim = start_fleet(["--fleet-config", str(path)], env={"POD_NAME": "pod"})
    try:
        yield sim
    finally:
        assert sim.stop() == 0, sim.stderr()


def test_every_instance_answers_health_and_models(fleet: SimServer) -> None:
    """Each of the three ports answers /health and lists the model in /v1/models, with the
    max-model-len of that instance."""
    lengths = []
    for index in range(INSTANCES):
        with client(fleet, index) as http:
            assert http.get("/health").status_code == 200
            models = http.get("/v1/models")
            assert models.status_code == 200, models.text
            data = models.json()["data"]
            assert [m["id"] for m in data] == [MODEL]
            lengths.append(data[0]["max_model_len"])
    assert lengths[2] == SMALL_LEN
    assert lengths[0] == lengths[1] != SMALL_LEN


def test_an_instance_counts_only_its_own_requests(fleet: SimServer) -> None:
    """A chat sent to instance 1 adds one success to instance 1's /metrics and none to
    instance 0's or 2's."""
    clients = [client(fleet, index) for index in range(INSTANCES)]
    try:
        before = [successes(scrape(http)) for http in clients]
        answer = clients[1].post("/v1/chat/completions", json=chat_body())
        assert answer.status_code == 200, answer.text
        after = [successes(scrape(http)) for http in clients]
    finally:
        for http in clients:
            http.close()
    assert [b - a for a, b in zip(before, after, strict=True)] == [0, 1, 0]


def test_each_instance_names_its_own_pod_and_port(fleet: SimServer) -> None:
    """With POD_NAME=pod, instance i answers with x-inference-pod pod-i and
    x-inference-port port + i."""
    for index in range(INSTANCES):
        with client(fleet, index) as http:
            answer = http.post("/v1/chat/completions", json=chat_body())
        assert answer.status_code == 200, answer.text
        assert answer.headers.get("x-inference-pod") == f"pod-{index}"
        assert answer.headers.get("x-inference-port") == str(fleet.port + index)


def test_the_fleet_file_shortens_one_instances_context(fleet: SimServer) -> None:
    """A prompt longer than instance 2's max-model-len is refused there (400) and served by
    instances 0 and 1; a short prompt is served by instance 2."""
    statuses = []
    for index in range(INSTANCES):
        with client(fleet, index) as http:
            answer = http.post("/v1/chat/completions", json=chat_body(LONG_PROMPT, max_tokens=4))
            statuses.append(answer.status_code)
            if index == 2:
                assert str(SMALL_LEN) in answer.text, answer.text
    assert statuses == [200, 200, 400]
    with client(fleet, 2) as http:
        short = http.post("/v1/chat/completions", json=chat_body("hi", max_tokens=4))
    assert short.status_code == 200, short.text


# --- processes -------------------------------------------------------------------------------


def children_of(pid: int) -> set[int]:
    """The live processes whose parent is `pid` (read from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def listening_inodes(ports: set[int]) -> dict[int, int]:
    """Port -> socket inode of the TCP sockets listening on those ports."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if fields[3] == "0A" and port in ports:  # 0A: LISTEN
                found[port] = int(fields[9])
    return found


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def test_fleet_processes_spread_the_instances_over_children() -> None:
    """--fleet-processes 2: two child processes serve the three ports, instances 0 and 1
    in one and instance 2 in the other, the parent serving none; one SIGTERM to the parent
    stops them all and it exits 0."""
    sim = start_fleet(["--fleet-processes", "2"])
    assert sim.process is not None
    try:
        children = children_of(sim.process.pid)
        assert len(children) == 2, children
        ports = {sim.port + index for index in range(INSTANCES)}
        listening = listening_inodes(ports)
        assert set(listening) == ports
        holder = {}
        for pid in (sim.process.pid, *children):
            held = socket_inodes(pid)
            for port, inode in listening.items():
                if inode in held:
                    holder[port] = pid
        assert set(holder) == ports, holder
        assert holder[sim.port] == holder[sim.port + 1] != holder[sim.port + 2]
        assert sim.process.pid not in holder.values()
        for index in range(INSTANCES):
            with client(sim, index) as http:
                assert http.post("/v1/chat/completions", json=chat_body()).status_code == 200
    finally:
        code = sim.stop()
    assert code == 0, sim.stderr()
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    assert not any(port_open(port) for port in ports)


def test_one_sigterm_drains_every_instance_and_exits_0() -> None:
    """A request in flight on instance 2 when SIGTERM arrives is answered (200) while
    every instance refuses new chats with 503 (the whole fleet drains); then the process exits
    0 and no port is open any more."""
    sim = start_fleet(["--time-to-first-token", "1500ms"])
    assert sim.process is not None
    result: dict[str, int] = {}

    def in_flight() -> None:
        with client(sim, 2) as http:
            answer = http.post("/v1/chat/completions", json=chat_body(max_tokens=2))
            result["status"] = answer.status_code

    thread = threading.Thread(target=in_flight, daemon=True)
    with client(sim, 2) as observer:
        thread.start()
        for _ in range(500):
            if scrape(observer).value(RUNNING, model_name=MODEL) == 1:
                break
            threading.Event().wait(0.01)
        else:
            pytest.fail("the request never ran")
    sim.process.send_signal(signal.SIGTERM)
    # A malformed chat is refused at once: 400 before the drain, 503 once it started.
    malformed = {"model": MODEL, "messages": "not a list"}
    statuses: list[list[int]] = []
    for index in range(INSTANCES):
        with client(sim, index) as http:
            seen = [http.post("/v1/chat/completions", json=malformed).status_code]
            while seen[-1] == 400 and len(seen) < 200:
                threading.Event().wait(0.01)
                seen.append(http.post("/v1/chat/completions", json=malformed).status_code)
        statuses.append(seen)
    try:
        code = sim.process.wait(20)
    except subprocess.TimeoutExpired:
        sim.process.kill()
        raise
    thread.join(10)
    assert all(seen[-1] == 503 and set(seen) <= {400, 503} for seen in statuses), statuses
    assert result.get("status") == 200, sim.stderr()
    assert code == 0, sim.stderr()
    assert not any(port_open(sim.port + index) for index in range(INSTANCES))


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("instances: [{}, {no-such-setting: 1}]\n", "fleet-config instance 1: "),
        ("instances: [{count: 4}]\n", "more than --num-instances 3"),
        ("instances: [{port: 9000}]\n", "fleet-config instance 0: port is set by the fleet"),
        ("instances: [\n", "not valid YAML"),
    ],
)
def test_a_bad_fleet_file_exits_2_with_one_line(tmp_path: Path, text: str, expected: str) -> None:
    """The server does not start: status 2, one line on stderr saying what is wrong."""
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    port = consecutive_free_ports(INSTANCES)
    done = run_cli(
        ["--model", MODEL, "--port", str(port), "--num-instances", "3", "--fleet-config", str(path)]
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("vllm-sim: invalid configuration: ")
    assert expected in lines[0]
    assert not port_open(port)


def test_a_missing_fleet_file_exits_2_with_one_line(tmp_path: Path) -> None:
    """A --fleet-config file that does not exist: status 2 and one line naming it."""
    done = run_cli(
        ["--model", MODEL, "--num-instances", "3", "--fleet-config", str(tmp_path / "no.yaml")]
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"vllm-sim: invalid configuration: fleet-config file {tmp_path / 'no.yaml'} not found"
    ]
