"""FakeMetricsDriver: startup values, generators and runtime updates, driven directly with a
fake clock and no server."""

from __future__ import annotations

import asyncio
import json
import math
from itertools import pairwise

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.virtual_time import run_virtual
from vllm_sim.config import Config, apply_admin_update, load_config
from vllm_sim.config.fake_metrics import FakeGenerator
from vllm_sim.metrics import catalogue as names
from vllm_sim.metrics.cache_config import CacheShape, cache_config_labels
from vllm_sim.metrics.catalogue import SchedulerView, VllmMetrics, fake_scheduler
from vllm_sim.metrics.exposition import render
from vllm_sim.metrics.fake import FakeMetricsDriver, evaluate

MODEL = "m"
WALL = 1_700_000_123.75
LAT_FAMILIES = (
    names.E2E,
    names.QUEUE_TIME,
    names.INFERENCE_TIME,
    names.PREFILL_TIME,
    names.DECODE_TIME,
)
LAT_KEYS = (
    "e2erl-buckets-values",
    "queue-time-buckets-values",
    "inf-time-buckets-values",
    "prefill-time-buckets-values",
    "decode-time-buckets-values",
)
SampleKey = tuple[str, tuple[tuple[str, str], ...]]


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Sim:
    """A fake-mode engine's metrics as the config layer and the driver leave them."""

    def __init__(self, fake: object, *argv: str) -> None:
        args = ["--model", MODEL, *argv, "--fake-metrics", json.dumps(fake)]
        self.cfg: Config = load_config(args, {})
        assert self.cfg.fake_metrics is not None
        self.metrics = VllmMetrics(self.cfg.display_model_name, self.cfg.max_model_len)
        gauges = fake_scheduler()
        self.metrics.register(SchedulerView(*gauges))
        self.clock = Clock(1000.0)
        self.wall = Clock(WALL)
        self.loads: list[int | None] = []
        self.driver = FakeMetricsDriver(
            self.metrics,
            gauges,
            self.cfg.fake_metrics,
            self.cfg.max_loras,
            0.1,
            self.loads.append,
            clock=self.clock,
            wall=self.wall,
        )

    def update(self, partial: object) -> None:
        self.cfg = apply_admin_update(self.cfg, json.dumps({"fake-metrics": partial}).encode())
        assert self.cfg.fake_metrics is not None
        self.driver.update(self.cfg.fake_metrics)

    def tick(self, seconds: float) -> None:
        self.clock.now += seconds
        self.driver.refresh()

    def text(self) -> str:
        return render(self.metrics.families)

    def samples(self) -> dict[SampleKey, float]:
        out: dict[SampleKey, float] = {}
        for family in text_string_to_metric_families(self.text()):
            for sample in family.samples:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return out

    def value(self, name: str, **labels: str) -> float | None:
        engine = {"model_name": self.metrics.model_name, "engine": self.metrics.engine}
        key = tuple(sorted({**engine, **labels}.items()))
        return self.samples().get((name, key))

    def gauge(self, name: str) -> float:
        value = self.value(name)
        assert value is not None, f"{name} is absent"
        return value

    def sample_names(self) -> set[str]:
        return {name for name, _ in self.samples()}

    def buckets(self, name: str) -> list[float]:
        """Cumulative bucket values in exposition order, +Inf last."""
        return [
            sample.value
            for family in text_string_to_metric_families(self.text())
            for sample in family.samples
            if sample.name == f"{name}_bucket"
        ]

    def lora_series(self) -> dict[tuple[str, str, str], float]:
        return {
            (dict(labels)["max_lora"], dict(labels)["running_lora_adapters"],
             dict(labels)["waiting_lora_adapters"]): value
            for (name, labels), value in self.samples().items()
            if name == names.LORA_INFO
        }  # fmt: skip


def absent(sim: Sim, family: str) -> bool:
    return family not in sim.text()


# Gauges: fixed values


def test_fixed_gauges_show_exactly_the_configured_values() -> None:
    sim = Sim({"running-requests": 10, "waiting-requests": 30, "kv-cache-usage": 0.4})
    assert sim.gauge(names.RUNNING) == 10
    assert sim.gauge(names.WAITING) == 30
    assert sim.gauge(names.KV_USAGE) == 0.4
    assert sim.loads == [None]  # fixed running values never feed the load factor


def test_fixed_gauge_is_set_as_is() -> None:
    sim = Sim({"running-requests": 2.5})
    assert sim.gauge(names.RUNNING) == 2.5
    sim.tick(1.0)
    assert sim.gauge(names.RUNNING) == 2.5


def test_empty_object_has_no_scheduler_gauges_and_only_the_default_lora_series() -> None:
    sim = Sim({})
    for name in (names.RUNNING, names.WAITING, names.KV_USAGE):
        assert absent(sim, name)
    assert sim.lora_series() == {("1", "", ""): math.trunc(WALL)}
    assert sim.sample_names() == {names.LORA_INFO}


def test_series_carry_the_served_model_name() -> None:
    sim = Sim({"running-requests": 1, "ttft-buckets-values": [1]}, "--served-model-name", "alias")
    assert sim.metrics.model_name == "alias"
    labelled = [dict(labels) for name, labels in sim.samples() if name != names.LORA_INFO]
    assert labelled
    assert all(labels["model_name"] == "alias" for labels in labelled)


# Gauges: generators


def test_generator_sets_f0_unrounded_then_truncated_values() -> None:
    sim = Sim({"running-requests": "squarewave:2.5:7.9:1s", "kv-cache-usage": "ramp:0.25:1:1s"})
    assert sim.gauge(names.RUNNING) == 2.5
    assert sim.gauge(names.KV_USAGE) == 0.25
    sim.tick(0.6)
    assert sim.gauge(names.RUNNING) == 7
    assert sim.gauge(names.KV_USAGE) == pytest.approx(0.25 + 0.6 * 0.75)
    assert sim.loads == [2, 7]


def test_oscillate_stays_within_start_and_end() -> None:
    sim = Sim({"running-requests": "oscillate:1:5:1s", "kv-cache-usage": "oscillate:0.2:0.6:1s"})
    running, usage = [], []
    for _ in range(40):
        sim.tick(0.05)
        running.append(sim.gauge(names.RUNNING))
        usage.append(sim.gauge(names.KV_USAGE))
    assert all(1 <= value <= 5 for value in running)
    assert min(running) == 1
    assert max(running) >= 4  # the crest may sit a hair below 5 and truncate
    assert all(0.2 - 1e-12 <= value <= 0.6 + 1e-12 for value in usage)
    assert usage[4] == pytest.approx(0.6)  # a quarter period in: heads toward end first


def test_squarewave_takes_only_start_and_end() -> None:
    sim = Sim({"waiting-requests": "squarewave:10:15:400ms"})
    seen = set()
    for _ in range(20):
        sim.tick(0.05)
        seen.add(sim.gauge(names.WAITING))
    assert seen == {10.0, 15.0}


def test_ramp_rises_strictly_then_holds_at_end() -> None:
    sim = Sim({"kv-cache-usage": "ramp:0:1:700ms"})
    values = [sim.gauge(names.KV_USAGE)]
    for _ in range(6):
        sim.tick(0.1)
        values.append(sim.gauge(names.KV_USAGE))
    assert all(a < b for a, b in pairwise(values))
    for _ in range(5):
        sim.tick(0.1)
        assert sim.gauge(names.KV_USAGE) == 1


def test_rampreset_falls_resets_and_falls_again() -> None:
    sim = Sim({"kv-cache-usage": "rampreset:1:0:550ms"})
    values = []
    for _ in range(5):
        sim.tick(0.2)
        values.append(sim.gauge(names.KV_USAGE))
    directions = ["up" if b > a else "down" for a, b in pairwise(values)]
    assert directions == ["down", "up", "down", "down"]
    assert all(0 <= value <= 1 for value in values)


def test_generated_running_and_waiting_are_integers_and_running_feeds_the_load() -> None:
    sim = Sim({"running-requests": "oscillate:0:10:1s", "waiting-requests": "rampreset:0:7:300ms"})
    for _ in range(30):
        sim.tick(0.037)
        running, waiting = sim.gauge(names.RUNNING), sim.gauge(names.WAITING)
        assert running == int(running)
        assert waiting == int(waiting)
        assert sim.loads[-1] == running
    assert all(isinstance(load, int) for load in sim.loads)


@pytest.mark.parametrize(
    ("text", "t", "expected"),
    [
        ("oscillate:1:5:1s", 0.0, 3.0),
        ("oscillate:1:5:1s", 0.25, 5.0),
        ("oscillate:1:5:1s", 0.75, 1.0),
        ("oscillate:5:1:1s", 0.25, 1.0),
        ("ramp:0:10:2s", 0.5, 2.5),
        ("ramp:0:10:2s", 2.0, 10.0),
        ("ramp:10:0:2s", 1.0, 5.0),
        ("rampreset:0:10:2s", 2.5, 2.5),
        ("rampreset:10:0:2s", 3.0, 5.0),
        ("squarewave:1:2:1s", 0.49, 1.0),
        ("squarewave:1:2:1s", 0.5, 2.0),
        ("squarewave:1:2:1s", 1.2, 1.0),
    ],
)
def test_generator_formulas(text: str, t: float, expected: float) -> None:
    name, start, end, period = text.split(":")
    nanos = int(float(period.rstrip("s")) * 1e9)
    generator = FakeGenerator(name, float(start), float(end), nanos)
    assert evaluate(generator, t) == pytest.approx(expected)


def test_later_generators_share_the_running_clock() -> None:
    sim = Sim({"running-requests": "ramp:0:10:10s"})
    sim.tick(5.0)
    sim.update({"waiting-requests": "ramp:0:10:10s"})
    assert sim.gauge(names.WAITING) == 0  # f(0) at once
    sim.tick(0.0)
    assert sim.gauge(names.WAITING) == 5  # then the shared clock's time, not a fresh one
    assert sim.gauge(names.RUNNING) == 5


def test_clock_stops_without_generators_and_the_next_one_starts_fresh() -> None:
    sim = Sim({"running-requests": "ramp:0:10:10s"})
    sim.tick(5.0)
    sim.update({"running-requests": 3})
    sim.tick(3.0)
    assert sim.gauge(names.RUNNING) == 3
    sim.update({"kv-cache-usage": "ramp:0:1:10s"})
    sim.tick(1.0)
    assert sim.gauge(names.KV_USAGE) == pytest.approx(0.1)


def test_swapping_generators_in_one_update_keeps_the_clock() -> None:
    sim = Sim({"running-requests": "ramp:0:10:10s"})
    sim.tick(4.0)
    sim.update({"running-requests": 1, "waiting-requests": "ramp:0:10:10s"})
    sim.tick(0.0)
    assert sim.gauge(names.WAITING) == 4


# Bucket arrays


def test_ttft_array_is_per_bucket_counts() -> None:
    sim = Sim({"ttft-buckets-values": [1, 2, 3]})
    assert sim.buckets(names.TTFT) == [1, 3] + [6] * 21
    assert sim.value(f"{names.TTFT}_count") == 6
    assert sim.value(f"{names.TTFT}_sum") == pytest.approx(1 * 0.001 + 2 * 0.005 + 3 * 0.01)


def test_ttft_last_entry_is_the_inf_bucket_observed_past_the_last_bound() -> None:
    sim = Sim({"ttft-buckets-values": [0] * 22 + [1]})
    assert sim.buckets(names.TTFT) == [0] * 22 + [1]
    assert sim.value(f"{names.TTFT}_sum") == 2561


def test_tpot_array_drives_tpot_and_itl_identically() -> None:
    sim = Sim({"tpot-buckets-values": [0, 0, 1, 2, 3]})
    expected = [0, 0, 1, 3] + [6] * 16
    assert sim.buckets(names.TPOT) == expected
    assert sim.buckets(names.ITL) == expected
    for suffix in ("_count", "_sum"):
        assert sim.value(names.TPOT + suffix) == sim.value(names.ITL + suffix)
    assert absent(sim, names.REQUEST_TPOT)


def test_latency_arrays_drive_their_own_histograms() -> None:
    sim = Sim({key: [0, 1, 2] for key in LAT_KEYS})
    for family in LAT_FAMILIES:
        assert sim.buckets(family) == [0, 1] + [3] * 20
        assert sim.value(f"{family}_sum") == pytest.approx(1 * 0.5 + 2 * 0.8)


def test_request_tpot_array() -> None:
    sim = Sim({"request-tpot-buckets-values": [2, 0, 1]})
    assert sim.buckets(names.REQUEST_TPOT) == [2, 2] + [3] * 18
    assert absent(sim, names.TPOT)


def test_extra_entries_land_in_inf() -> None:
    sim = Sim({"e2erl-buckets-values": [0] * 21 + [1, 2]})
    assert sim.buckets(names.E2E) == [0] * 21 + [3]
    assert sim.value(f"{names.E2E}_sum") == 3 * 7681


@pytest.mark.parametrize("counts", [[], [0, 0, 0]])
def test_empty_or_all_zero_arrays_leave_families_absent(counts: list[int]) -> None:
    keys = ["ttft-buckets-values", "tpot-buckets-values", "request-tpot-buckets-values"]
    keys += [*LAT_KEYS, "request-params-max-tokens", "request-max-generation-tokens"]
    sim = Sim(dict.fromkeys(keys, counts))
    assert sim.sample_names() == {names.LORA_INFO}


# Token histograms and totals


def test_token_array_and_derived_total() -> None:
    sim = Sim(
        {"request-prompt-tokens": [10, 20, 30], "request-generation-tokens": [1, 2, 3]},
        "--max-model-len",
        "1024",
    )
    prompt = sim.buckets(names.PROMPT_TOKENS_HIST)
    assert prompt[:2] == [10, 30]
    assert prompt[2:] == [60] * 9  # le=5 … le=1000 and +Inf with max-model-len 1024
    assert sim.value(f"{names.PROMPT_TOKENS}_total") == 200
    assert sim.value(f"{names.GENERATION_TOKENS}_total") == 20


def test_explicit_total_overrides_the_derived_one() -> None:
    sim = Sim({"request-prompt-tokens": [10, 20, 30], "total-prompt-tokens": 12345})
    assert sim.value(f"{names.PROMPT_TOKENS}_total") == 12345
    assert sim.buckets(names.PROMPT_TOKENS_HIST)[:2] == [10, 30]
    assert "12345" in sim.text()


def test_token_buckets_follow_max_model_len_and_inf_counts_last_plus_one() -> None:
    # max-model-len 99 → bounds 1, 2, 5, 10, 20, 50: entry 6 is +Inf and entry 7 an extra.
    sim = Sim({"request-generation-tokens": [0, 0, 0, 0, 0, 0, 1, 1]}, "--max-model-len", "99")
    assert sim.buckets(names.GENERATION_TOKENS_HIST) == [0] * 6 + [2]
    assert sim.value(f"{names.GENERATION_TOKENS_HIST}_sum") == 102
    assert sim.value(f"{names.GENERATION_TOKENS}_total") == 102


def test_all_zero_token_array_gives_a_zero_counter_and_no_histogram() -> None:
    sim = Sim({"request-prompt-tokens": [0, 0]})
    assert absent(sim, names.PROMPT_TOKENS_HIST)
    assert sim.value(f"{names.PROMPT_TOKENS}_total") == 0


def test_empty_token_array_without_total_leaves_both_absent() -> None:
    sim = Sim({"request-prompt-tokens": []})
    assert sim.sample_names() == {names.LORA_INFO}


def test_total_without_array_sets_only_the_counter() -> None:
    sim = Sim({"total-generation-tokens": 77})
    assert sim.value(f"{names.GENERATION_TOKENS}_total") == 77
    assert absent(sim, names.GENERATION_TOKENS_HIST)


def test_max_tokens_and_max_generation_arrays() -> None:
    fake = {"request-params-max-tokens": [0, 4], "request-max-generation-tokens": [3]}
    sim = Sim(fake, "--max-model-len", "1024")  # 1-2-5 buckets up to 1000, and +Inf
    assert sim.buckets(names.PARAMS_MAX_TOKENS) == [0] + [4] * 10
    assert sim.buckets(names.MAX_GENERATION_TOKENS) == [3] * 11
    assert absent(sim, names.PROMPT_TOKENS)


# Other counters and LoRA


def test_success_at_startup_has_all_five_reasons() -> None:
    sim = Sim({"request-success-total": {"stop": 20}})
    series = {
        dict(labels)["finished_reason"]: value
        for (name, labels), value in sim.samples().items()
        if name == f"{names.REQUEST_SUCCESS}_total"
    }
    assert series == {
        "stop": 20,
        "length": 0,
        "tool_calls": 0,
        "remote_decode": 0,
        "cache_threshold": 0,
    }


def test_prefix_counters() -> None:
    sim = Sim({"prefix-cache-hits": 750, "prefix-cache-queries": 2000})
    assert sim.value(f"{names.PREFIX_HITS}_total") == 750
    assert sim.value(f"{names.PREFIX_QUERIES}_total") == 2000


def test_loras_show_only_the_given_series() -> None:
    loras = [
        {"running": "lora1,lora2", "waiting": "lora3", "timestamp": 1257894567},
        {"running": "lora3", "waiting": "", "timestamp": 1257894569},
    ]
    sim = Sim({"loras": loras})
    assert sim.lora_series() == {
        ("1", "lora1,lora2", "lora3"): 1257894567,
        ("1", "lora3", ""): 1257894569,
    }
    assert (
        'vllm:lora_requests_info{max_lora="1",running_lora_adapters="lora1,lora2",'
        'waiting_lora_adapters="lora3"} 1.257894567e+09'
    ) in sim.text()


def test_loras_use_max_loras() -> None:
    sim = Sim({"loras": [{"running": "a", "waiting": "", "timestamp": 5}]}, "--max-loras", "3")
    assert sim.lora_series() == {("3", "a", ""): 5}


def test_cache_config_info_is_left_alone() -> None:
    sim = Sim({})
    shape = CacheShape(block_size=16, num_gpu_blocks=1024, max_model_len=1024,
                       prefix_caching=False, engine="0")  # fmt: skip
    sim.metrics.cache_config.labels(*cache_config_labels(shape)).set(1)
    sim.update({"loras": []})
    [(labels, value)] = [
        (dict(lbl), v) for (name, lbl), v in sim.samples().items() if name == names.CACHE_CONFIG
    ]
    assert value == 1
    assert (labels["block_size"], labels["num_gpu_blocks"], labels["engine"]) == ("16", "1024", "0")


# Runtime updates: partial objects applied to a running driver


def test_histogram_update_replaces_and_empty_array_removes() -> None:
    sim = Sim({"ttft-buckets-values": [5], "tpot-buckets-values": [1]})
    sim.update({"ttft-buckets-values": [1, 2, 3], "tpot-buckets-values": []})
    assert sim.buckets(names.TTFT) == [1, 3] + [6] * 21
    assert absent(sim, names.TPOT)
    assert absent(sim, names.ITL)


def test_latency_update_replaces_rather_than_accumulates() -> None:
    sim = Sim({key: [0, 1, 2] for key in LAT_KEYS})
    sim.update({key: [1, 0, 0, 1] for key in LAT_KEYS})
    for family in LAT_FAMILIES:
        assert sim.buckets(family) == [1, 1, 1] + [2] * 19


def test_histogram_update_adds_when_old_lacked_it() -> None:
    sim = Sim({})
    sim.update({"ttft-buckets-values": [1, 2, 3]})
    assert sim.buckets(names.TTFT) == [1, 3] + [6] * 21


def test_token_array_only_update_derives_the_total() -> None:
    sim = Sim({"request-prompt-tokens": [1, 2, 3], "total-prompt-tokens": 12345})
    sim.update({"request-prompt-tokens": [10, 20]})
    assert sim.value(f"{names.PROMPT_TOKENS}_total") == 50
    assert sim.buckets(names.PROMPT_TOKENS_HIST)[:3] == [10, 30, 30]


def test_same_token_array_without_its_total_drops_the_explicit_total() -> None:
    sim = Sim({"request-prompt-tokens": [1, 2, 3], "total-prompt-tokens": 12345})
    sim.update({"request-prompt-tokens": [1, 2, 3]})
    assert sim.value(f"{names.PROMPT_TOKENS}_total") == 20


def test_totals_only_update_keeps_the_histogram() -> None:
    sim = Sim({"request-prompt-tokens": [10, 20, 30]})
    before = sim.buckets(names.PROMPT_TOKENS_HIST)
    sim.update({"total-prompt-tokens": 58})
    assert sim.value(f"{names.PROMPT_TOKENS}_total") == 58
    assert sim.buckets(names.PROMPT_TOKENS_HIST) == before


def test_empty_token_array_update_removes_histogram_and_total() -> None:
    sim = Sim({"request-prompt-tokens": [10, 20, 30], "total-prompt-tokens": 7})
    sim.update({"request-prompt-tokens": []})
    assert absent(sim, names.PROMPT_TOKENS_HIST)
    assert absent(sim, f"{names.PROMPT_TOKENS}_total")


def test_empty_update_changes_nothing() -> None:
    sim = Sim({
        "running-requests": "ramp:0:10:10s", "ttft-buckets-values": [1],
        "request-prompt-tokens": [1, 2], "total-prompt-tokens": 9,
        "request-success-total": {"stop": 2}, "prefix-cache-hits": 1, "prefix-cache-queries": 2,
    })  # fmt: skip
    sim.tick(5.0)
    before = sim.text()
    sim.wall.now += 100
    sim.update({})
    assert sim.text() == before


def test_success_update_replaces_the_series() -> None:
    sim = Sim({"request-success-total": {"stop": 20}})
    sim.update({"request-success-total": {"stop": 100, "length": 50}})
    success = f"{names.REQUEST_SUCCESS}_total"
    series = {
        dict(labels)["finished_reason"]: value
        for (name, labels), value in sim.samples().items()
        if name == success
    }
    assert series == {"stop": 100, "length": 50}
    sim.update({"request-success-total": {}})
    assert absent(sim, success)


def test_success_update_adds_when_old_lacked_it() -> None:
    sim = Sim({})
    sim.update({"request-success-total": {"tool_calls": 4}})
    assert sim.value(f"{names.REQUEST_SUCCESS}_total", finished_reason="tool_calls") == 4
    assert sim.value(f"{names.REQUEST_SUCCESS}_total", finished_reason="stop") is None


def test_prefix_update_replaces_the_values() -> None:
    sim = Sim({"prefix-cache-hits": 1, "prefix-cache-queries": 5})
    sim.update({"prefix-cache-hits": 750, "prefix-cache-queries": 2000})
    assert sim.value(f"{names.PREFIX_HITS}_total") == 750
    assert sim.value(f"{names.PREFIX_QUERIES}_total") == 2000


def test_loras_update_replaces_and_empty_list_gives_the_default_series() -> None:
    sim = Sim({"loras": [{"running": "a", "waiting": "b", "timestamp": 10}]})
    sim.update({"loras": [{"running": "c", "waiting": "", "timestamp": 20}]})
    assert sim.lora_series() == {("1", "c", ""): 20}
    sim.wall.now = 1_800_000_000.5
    sim.update({"loras": []})
    assert sim.lora_series() == {("1", "", ""): 1_800_000_000}


def test_unrelated_update_keeps_the_default_lora_timestamp() -> None:
    sim = Sim({})
    sim.wall.now += 60
    sim.update({"ttft-buckets-values": [1]})
    assert sim.lora_series() == {("1", "", ""): math.trunc(WALL)}


def test_gauge_fixed_then_generator_then_fixed() -> None:
    sim = Sim({"running-requests": 4})
    sim.update({"running-requests": "ramp:2:12:10s"})
    assert sim.gauge(names.RUNNING) == 2
    sim.tick(5.0)
    assert sim.gauge(names.RUNNING) == 7
    sim.update({"running-requests": 9})
    assert sim.gauge(names.RUNNING) == 9
    sim.tick(1.0)
    assert sim.gauge(names.RUNNING) == 9
    assert sim.loads == [None, 2, 7, None]


def test_unrelated_update_leaves_a_generator_running() -> None:
    sim = Sim({"waiting-requests": "ramp:0:10:10s"})
    sim.tick(3.0)
    sim.update({"running-requests": 1})
    assert sim.gauge(names.WAITING) == 3
    sim.tick(1.0)
    assert sim.gauge(names.WAITING) == 4


# The refresh loop


def test_run_refreshes_on_its_interval() -> None:
    cfg = load_config(["--model", MODEL, "--fake-metrics", '{"kv-cache-usage":"ramp:0:1:1s"}'], {})
    assert cfg.fake_metrics is not None
    metrics = VllmMetrics(MODEL, 1024)
    gauges = fake_scheduler()
    metrics.register(SchedulerView(*gauges))
    fake = cfg.fake_metrics
    usage = gauges[2].labels(*metrics.labels)
    assert usage.value == 0

    async def scenario() -> None:
        # On the virtual loop's clock: the ramp advances with virtual time, in no real time.
        clock = asyncio.get_running_loop().time
        driver = FakeMetricsDriver(metrics, gauges, fake, 1, 0.005, lambda _: None, clock=clock)
        task = asyncio.create_task(driver.run())
        try:
            for _ in range(200):
                await asyncio.sleep(0.005)
                if usage.value > 0:
                    break
        finally:
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_virtual(scenario())
    assert 0 < usage.value < 1
