"""Real `vllm serve` command lines start the real server: the flags that mean something act,
and the rest are named once, in one log line, as having no effect."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.native import consecutive_free_ports, wait_healthy
from tests.support.server import SimServer, free_port, run_cli
from tests.support.vllm_lines import ServeLine, accepted_lines

CHAT = "/v1/chat/completions"
NO_EFFECT = "Accepted without effect in a simulator: "


def line_starting(prefix: str) -> ServeLine:
    (line,) = [line for line in accepted_lines() if line.text.startswith(prefix)]
    return line


def on_port(argv: list[str], port: int) -> list[str]:
    """The line with its --port value replaced (or one added), so tests can run in parallel."""
    out, replace_next = [], False
    for item in argv:
        out.append(str(port) if replace_next else item)
        replace_next = item == "--port"
    return out if "--port" in argv else [*out, "--port", str(port)]


def serve(argv: list[str], model: str) -> SimServer:
    sim = SimServer(port=free_port(), model=model)
    sim.args = on_port(argv, sim.port)  # the line as written: no extra flag of the test's
    return sim


def chat(sim: SimServer, model: str, **headers: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    return httpx.post(sim.url + CHAT, json=body, headers=headers, timeout=10)


# A Kubernetes container's args: host 0.0.0.0, port, quieter uvicorn, request logging.
K8S = "vllm serve /mnt/models/gpt-oss-20b --host"


@pytest.fixture(scope="module")
def k8s() -> Iterator[SimServer]:
    with serve(line_starting(K8S).argv, "gpt-oss") as sim:
        yield sim


def test_kubernetes_line_serves(k8s: SimServer) -> None:
    assert httpx.get(k8s.url + "/health", timeout=5).status_code == 200
    answer = chat(k8s, "gpt-oss")
    assert answer.status_code == 200 and answer.json()["model"] == "gpt-oss"


def test_kubernetes_line_settings_act(k8s: SimServer) -> None:
    config = httpx.get(k8s.url + "/admin/config", timeout=5).json()
    assert config["model"] == "/mnt/models/gpt-oss-20b" and config["host"] == "0.0.0.0"
    assert config["max-model-len"] == 8192 and config["max-num-seqs"] == 256
    assert config["enable-prefix-caching"] is True and config["uvicorn-log-level"] == "warning"


def test_no_effect_flags_are_logged_once_in_one_line(k8s: SimServer) -> None:
    chat(k8s, "gpt-oss")
    lines = [line for line in k8s.stderr().splitlines() if NO_EFFECT in line]
    assert len(lines) == 1, lines
    assert lines[0].endswith(NO_EFFECT + "--trust-remote-code, --async-scheduling")


def test_enable_log_requests_logs_each_request_and_uvicorn_level_applies(k8s: SimServer) -> None:
    chat(k8s, "gpt-oss")
    log = k8s.stderr()
    assert f'"POST {CHAT} HTTP/1.1" 200' in log  # requests logged, the server at warning
    assert "HTTP server listening on" not in log  # an info line of the HTTP server


def test_no_effect_line_is_said_once_by_data_parallel_ranks() -> None:
    port = consecutive_free_ports(2)
    with SimServer(["-dp", "2", "--dtype", "auto", "-O3"], port=port) as sim:
        wait_healthy(port + 1)
        lines = [line for line in sim.stderr().splitlines() if NO_EFFECT in line]
    assert [line.split(": ", 1)[1] for line in lines] == [NO_EFFECT + "--optimization-level"]


def test_lora_line_on_loopback_only() -> None:
    argv = [*line_starting("vllm serve meta-llama/Llama-3.2-3B-Instruct --enable-lora").argv]
    with serve([*argv, "--host", "127.0.0.1"], "meta-llama/Llama-3.2-3B-Instruct") as sim:
        assert chat(sim, "sql-lora").status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.2:{sim.port}/health", timeout=2)
        assert "HTTP server listening on" in sim.stderr()  # its info lines by default


def test_api_key_line() -> None:
    line = line_starting("vllm serve NousResearch/Meta-Llama-3-8B-Instruct --dtype")
    with serve(line.argv, "NousResearch/Meta-Llama-3-8B-Instruct") as sim:
        model = sim.model
        assert chat(sim, model).status_code == 401
        assert chat(sim, model, Authorization="Bearer token-abc123").status_code == 200
        assert NO_EFFECT not in sim.stderr()  # --dtype is the step engine's weight dtype


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--disable-log-requests"], "unrecognized arguments: --disable-log-requests"),
        (["--dtype", "bf16"], "argument --dtype: invalid choice: 'bf16' (choose from 'auto', "
         "'bfloat16', 'float', 'float16', 'float32', 'half')"),
        (["--foo"], "unknown flag: --foo"),
    ],
)  # fmt: skip
def test_bad_lines_exit_non_zero_with_one_line(argv: list[str], reason: str) -> None:
    result = run_cli(["serve", "org/m", *argv])
    assert result.returncode == 2
    assert result.stderr == f"vllm-sim: invalid configuration: {reason}\n"
