"""The render service's client is loaded only when a service is set up: httpx and what it
brings cost every process several MiB that most never use."""

from __future__ import annotations

import subprocess
import sys


def test_the_server_imports_no_http_client_until_a_render_service_is_set_up() -> None:
    probe = (
        "import sys, vllm_sim.__main__, vllm_sim.server.runner, vllm_sim.server.build\n"
        "assert 'httpx' not in sys.modules, 'httpx imported at start-up'\n"
        "from vllm_sim.frontend.render_service import RenderService\n"
        "RenderService('http://127.0.0.1:1', 'm', 1.0, 1.0)\n"
        "assert 'httpx' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
