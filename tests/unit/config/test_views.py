"""Which Config attribute fills which field of each settings view."""

from __future__ import annotations

from tests.support.config import load
from vllm_sim.config.flags import SETTINGS
from vllm_sim.config.views import LATENCY, LIMITS, SERVING, VIEWS, view_fields, view_values


def test_renamed_fields_come_from_their_declarations() -> None:
    assert view_fields(LATENCY)["itl"] == "inter_token_latency"
    assert view_fields(LATENCY)["calculator"] == "latency_calculator"
    assert view_fields(SERVING)["base_model"] == "model"


def test_one_setting_may_feed_several_views() -> None:
    assert view_fields(LATENCY)["max_num_seqs"] == view_fields(LIMITS)["max_num_seqs"]


def test_no_two_declarations_fill_one_view_field() -> None:
    feeds = [feed for setting in SETTINGS for feed in setting.views]
    assert len(feeds) == len(set(feeds))
    assert {feed.view for feed in feeds} == set(VIEWS)


def test_values_are_read_from_the_config() -> None:
    cfg = load("--model", "m", "--inter-token-latency", "5ms")
    assert view_values(LATENCY, cfg)["itl"] == 5_000_000
