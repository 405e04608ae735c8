"""The container image's command lines, run outside a container (CI has no container engine).

The Dockerfile's ENTRYPOINT and CMD, a pod's `args:` from the shipped manifests, `vllm
serve`-style arguments and the HEALTHCHECK are each run here with this environment's
`vllm-sim` standing in for the image's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import msgspec
import pytest

from tests.deploy.kube import KUBERNETES, mounted_config, of_kind, render, simulator_containers
from tests.support.server import SimServer, free_port
from vllm_sim.tools.healthcheck import server_arguments

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"
# The image puts the environment's bin first on PATH; here it is this interpreter's.
BIN = Path(sys.executable).parent
OFFLINE = {"HF_HUB_OFFLINE": "1"}


def instruction(name: str) -> list[str]:
    """The JSON (exec) form of a Dockerfile instruction, continuation lines joined."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        keyword, _, rest = line.strip().partition(" ")
        if keyword == name:
            if name == "HEALTHCHECK":
                rest = rest[rest.index("CMD ") + len("CMD ") :]
            value: list[str] = json.loads(rest)
            return value
    raise AssertionError(f"no {name} in the Dockerfile")


def local(command: list[str]) -> list[str]:
    """The image's program names as this environment's files."""
    programs = {"vllm-sim": str(BIN / "vllm-sim"), "python": sys.executable}
    return [programs.get(command[0], command[0]), *command[1:]]


def with_port(args: list[str], port: int) -> list[str]:
    """`args` with its --port replaced (or added): tests need a free one."""
    if "--port" in args:
        index = args.index("--port")
        return [*args[: index + 1], str(port), *args[index + 2 :]]
    return [*args, "--port", str(port)]


def test_the_entrypoint_is_the_simulator() -> None:
    assert instruction("ENTRYPOINT") == ["vllm-sim"]
    assert (BIN / "vllm-sim").exists()


def test_the_default_command_serves_its_model() -> None:
    port = free_port()
    command = local(instruction("ENTRYPOINT")) + with_port(instruction("CMD"), port)
    model = instruction("CMD")[instruction("CMD").index("--model") + 1]
    with SimServer(port=port, command=command, env=OFFLINE) as sim:
        models = httpx.get(sim.url + "/v1/models").json()
        assert [m["id"] for m in models["data"]] == [model]


def test_vllm_serve_arguments_work_unchanged() -> None:
    """What a pod written for vLLM's image passes: `serve`, a positional model, vLLM flags."""
    port = free_port()
    args = ["serve", "my-org/my-model", "--port", str(port), "--max-model-len", "4096"]
    args += ["--gpu-memory-utilization", "0.9", "--tensor-parallel-size", "2"]
    command = local(instruction("ENTRYPOINT")) + args
    with SimServer(port=port, command=command, env=OFFLINE) as sim:
        models = httpx.get(sim.url + "/v1/models").json()
        assert models["data"][0]["id"] == "my-org/my-model"
        assert models["data"][0]["max_model_len"] == 4096


@pytest.mark.timing
def test_the_base_pod_becomes_ready_after_its_startup_duration(tmp_path: Path) -> None:
    """The base Deployment's args and ConfigMap, as the kubelet's probes see them."""
    objects = render(KUBERNETES / "base")
    (deployment,) = of_kind(objects, "Deployment")
    (container,) = simulator_containers(deployment)
    (tmp_path / "config.yaml").write_text(mounted_config(objects, deployment))
    config = str(tmp_path / "config.yaml")
    args = [config if a.startswith("/config/") else a for a in container["args"]]
    port = free_port()
    command = local(instruction("ENTRYPOINT")) + with_port(args, port)
    env = {**OFFLINE, "POD_IP": "127.0.0.1", "POD_NAME": "vllm-sim-0", "POD_NAMESPACE": "ns"}
    started = time.monotonic()
    with SimServer(port=port, command=command, env=env) as sim:
        assert httpx.get(sim.url + "/health").status_code == 200  # liveness
        assert httpx.get(sim.url + "/health/ready").status_code == 503  # still "loading"
        while httpx.get(sim.url + "/health/ready").status_code != 200:
            assert time.monotonic() - started < 30, "never ready"
            time.sleep(0.2)
        assert time.monotonic() - started >= 5.0  # the config's startup-duration


def run_healthcheck(pid: int) -> subprocess.CompletedProcess[str]:
    command = [*local(instruction("HEALTHCHECK")), "--pid", str(pid)]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_the_healthcheck_follows_the_servers_own_arguments(tmp_path: Path) -> None:
    """The port is only in the server's YAML config: the check finds it there."""
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f"model: probe-model\nport: {port}\n")
    command = [*local(instruction("ENTRYPOINT")), "--config", str(config)]
    with SimServer(port=port, command=command, env=OFFLINE) as sim:
        assert sim.process is not None
        result = run_healthcheck(sim.process.pid)
        assert result.returncode == 0, result.stderr
        pid = sim.process.pid
    result = run_healthcheck(pid)  # the server is gone
    assert result.returncode == 1


@pytest.mark.parametrize(
    ("cmdline", "arguments"),
    [
        (["/opt/venv/bin/python", "/opt/venv/bin/vllm-sim", "--port", "9"], ["--port", "9"]),
        (["/venv/bin/python", "/venv/bin/vllm", "serve", "m"], ["serve", "m"]),
        (["/usr/bin/python3", "/app/llm-d-inference-sim", "--model", "m"], ["--model", "m"]),
        (["python", "-m", "vllm_sim", "--port", "1"], ["--port", "1"]),
        (["sleep", "10"], []),
    ],
)
def test_the_healthcheck_finds_the_arguments_in_a_command_line(
    cmdline: list[str], arguments: list[str]
) -> None:
    assert server_arguments(cmdline) == arguments


def test_kv_events_reach_the_listener() -> None:
    """The kv-events overlay's pair: the listener binds, the simulator publishes to it."""
    zmq_port = free_port()
    listener = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm_sim.tools.kv_listener",
            "--bind",
            f"tcp://127.0.0.1:{zmq_port}",
            "--count",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        args = ["--enable-kvcache", "--zmq-endpoint", f"tcp://127.0.0.1:{zmq_port}"]
        args += ["--event-batch-size", "1", "--block-size", "16"]
        with SimServer(args, env={"POD_IP": "10.1.2.3"}) as sim:
            body = {"model": sim.model, "prompt": "word " * 40, "max_tokens": 2}
            deadline = time.monotonic() + 20
            while listener.poll() is None and time.monotonic() < deadline:
                # A PUB socket drops what it sends before the connection is up: send again.
                assert httpx.post(sim.url + "/v1/completions", json=body).status_code == 200
                time.sleep(0.2)
        out, err = listener.communicate(timeout=10)
    finally:
        listener.kill()
    assert listener.returncode == 0, err
    record = msgspec.json.decode(out.splitlines()[0])
    assert record["topic"] == f"kv@10.1.2.3:{sim.port}@{sim.model}"
    assert record["seq"] >= 1
    assert record["events"] and record["events"][0][0] == "BlockStored"
