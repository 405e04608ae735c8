"""The typed settings views agree with the declarations that feed them."""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from typing import Any

import pytest

from tests.support.config import load
from vllm_sim.config import Config, Duration
from vllm_sim.config.views import VIEWS, view_fields
from vllm_sim.server import views
from vllm_sim.server.views import VIEW_CLASSES


def _compatible(given: Any, wanted: Any) -> bool:
    """A Config field of type `given` may fill a view field of type `wanted`."""
    if given == wanted:
        return True
    if isinstance(given, type) and isinstance(wanted, type):
        return issubclass(given, wanted)
    origin = typing.get_origin(given)
    if isinstance(origin, type) and isinstance(wanted, type) and wanted is not object:
        # A view compiled by mypyc keeps a generic field's runtime class alone (tuple for
        # tuple[str, ...]): its type arguments are checked by mypy instead.
        return issubclass(origin, wanted)
    if typing.get_origin(wanted) in (typing.Union, types.UnionType):
        return any(_compatible(given, arm) for arm in typing.get_args(wanted))
    return typing.get_origin(given) is typing.Literal and wanted is str


def test_every_view_has_its_class() -> None:
    assert set(VIEW_CLASSES) == {view.name for view in VIEWS}


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.name)
def test_view_fields_are_exactly_the_declared_ones_with_agreeing_types(view: Any) -> None:
    cls, given = VIEW_CLASSES[view.name]
    declared = view_fields(view)
    assert {spec.name for spec in fields(cls) if spec.init} - given == set(declared)
    wanted, have = typing.get_type_hints(cls), typing.get_type_hints(Config)
    for field, attr in declared.items():
        assert _compatible(have[attr], wanted[field]), (field, have[attr], wanted[field])


def test_views_read_the_config() -> None:
    cfg = load(
        "--model", "m", "--inter-token-latency", "20ms", "--max-num-seqs", "7",
        "--max-tool-call-integer-param", "9", "--allowed-origins", '["https://a.example"]',
        "--enable-request-id-headers",
    )  # fmt: skip
    assert views.latency(cfg).itl == 20_000_000 and views.latency(cfg).max_num_seqs == 7
    assert views.limits(cfg).max_num_seqs == 7
    assert views.synthesis(cfg).max_integer == 9
    assert views.cors(cfg).allowed_origins == ("https://a.example",)
    serving = views.serving(cfg, 8000)
    assert (serving.base_model, serving.served_model_names) == ("m", ("m",))
    assert serving.echo_request_id and serving.system_fingerprint.startswith("vllm-0.32.0-")


def test_latency_durations_reach_the_engine_as_nanoseconds() -> None:
    # Typed once, as a Duration (an int of nanoseconds), and never divided on the way.
    ttft = load("--model", "m", "--time-to-first-token", "1s").time_to_first_token
    assert isinstance(ttft, Duration)
    assert views.latency(load("--model", "m", "--time-to-first-token", "1s")).ttft == ttft
    assert ttft == 1_000_000_000
