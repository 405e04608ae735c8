"""The live configuration: start-up and POST /admin/config configure alike."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from tests.support.config import load
from vllm_sim.frontend.failures import FailureInjector
from vllm_sim.frontend.omni import ImageEmission
from vllm_sim.protocols.ops.admin import UpdateRejected
from vllm_sim.server.build import build_instance
from vllm_sim.server.control import LiveConfig


def _parts(*argv: str) -> tuple[LiveConfig, FailureInjector, ImageEmission]:
    cfg = load("--model", "m", *argv)
    engine = build_instance(cfg, 8000).engine
    failures = FailureInjector(cfg.model, random.Random(0), cfg.max_model_len)
    images = ImageEmission(cfg.omni, random.Random(0))
    return LiveConfig(cfg, engine, failures, images), failures, images


def test_start_up_configures_what_updates_change() -> None:
    _, failures, images = _parts("--failure-injection-rate", "10", "--image-emission-rate", "20")
    assert (failures.rate, images.rate) == (10, 20)


def test_an_update_reaches_every_part_and_is_shown() -> None:
    control, failures, images = _parts()
    body = {"inter-token-latency": "7ms", "failure-injection-rate": 5, "image-emission-rate": 6}

    async def update() -> dict[str, Any]:  # the engine reschedules on the event loop
        return control.update(json.dumps(body).encode())

    shown = asyncio.run(update())
    assert shown["inter-token-latency"] == "7ms" == control.shown()["inter-token-latency"]
    assert control.config.inter_token_latency.seconds == 0.007
    assert (failures.rate, images.rate) == (5, 6)


def test_a_bad_update_is_rejected_in_the_config_layer_words_and_changes_nothing() -> None:
    control, _, _ = _parts()
    before = control.config
    with pytest.raises(UpdateRejected, match="field 'port' is not admin-configurable"):
        control.update(b'{"port": 1}')
    assert control.config is before
