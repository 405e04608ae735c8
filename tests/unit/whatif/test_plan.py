"""Capacity planning through the Python API: SLOs are parsed into limits in seconds (a bad
part named), GPU costs come from the GPU table unless overridden, the candidates are the
product of the choices, a candidate's search finds the fewest replicas that meet the SLO
(one fewer does not) or is skipped with the reason it cannot run, and a plan's best point
is its cheapest passing one, its closest (when none passes) the one nearest the SLO."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.recorded_run import RECORDED_TRACE
from vllm_sim.config import load_config
from vllm_sim.perf import gpu_spec
from vllm_sim.whatif import plan as planning
from vllm_sim.whatif.plan import (
    MAX_REPLICAS,
    SLO_METRICS,
    Candidate,
    CandidateResult,
    Plan,
    PlanJob,
    Point,
    candidates,
    gpu_costs,
    parse_slo,
    search_candidate,
    search_replicas,
)
from vllm_sim.whatif.simulation import Replay
from vllm_sim.whatif.trace import read_trace

LLAMA_8B = ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192")
SERVER = (*LLAMA_8B, "--timing-model", "roofline")
LIMIT = 60  # the bundled trace's first requests: a search takes a fraction of a second
H100 = Candidate("H100", 1, 64, 2048)


def job(
    candidate: Candidate,
    slo: str,
    *,
    server: tuple[str, ...] = SERVER,
    max_replicas: int = 64,
    cost: float = 1.0,
) -> PlanJob:
    return PlanJob(
        candidate,
        str(RECORDED_TRACE),
        "auto",
        LIMIT,
        server,
        tuple(parse_slo(slo).items()),
        max_replicas,
        "least-requests",
        cost,
        (),
    )


def point(gpu: str, replicas: int, cost: float, ttft: float, meets: bool, failed: int = 0) -> Point:
    return Point(Candidate(gpu, 1, 64, 2048), replicas, cost, {"ttft_p99": ttft}, failed, meets)


# --- parse_slo -------------------------------------------------------------------------------


def test_limits_are_read_in_seconds() -> None:
    """Milliseconds and seconds (and a bare number: seconds) become seconds; spaces around
    the parts are ignored."""
    assert parse_slo("ttft_p99=500ms,itl_p99=0.05s") == {"ttft_p99": 0.5, "itl_p99": 0.05}
    assert parse_slo(" e2e_mean = 2 , queue_time_p90=.5ms ,") == {
        "e2e_mean": 2.0,
        "queue_time_p90": 0.0005,
    }


def test_every_latency_statistic_is_a_metric() -> None:
    """TTFT, ITL, E2E and queue time, each by mean, p50, p90 and p99, may be limited."""
    assert set(SLO_METRICS) == {
        f"{m}_{s}"
        for m in ("ttft", "itl", "e2e", "queue_time")
        for s in ("mean", "p50", "p90", "p99")
    }
    limits = parse_slo(",".join(f"{m}=1s" for m in SLO_METRICS))
    assert limits == dict.fromkeys(SLO_METRICS, 1.0)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("ttft_p95=500ms", "'ttft_p95=500ms'"),
        ("ttft_p99=500ms,tpot_p99=20ms", "'tpot_p99=20ms'"),
        ("ttft_p99", "'ttft_p99'"),
        ("ttft_p99:500ms", "'ttft_p99:500ms'"),
        ("ttft_p99=fast", "'ttft_p99=fast'"),
        ("itl_p99=50us", "'itl_p99=50us'"),
        ("itl_p99=-5ms", "'itl_p99=-5ms'"),
        ("itl_p99=", "'itl_p99='"),
    ],
)
def test_a_bad_part_is_refused_by_name(text: str, named: str) -> None:
    """An unknown metric, a part without `=` or a limit that is not a duration is a
    ValueError quoting that part."""
    with pytest.raises(ValueError, match=named):
        parse_slo(text)


@pytest.mark.parametrize("text", ["", " ", ",", " , ,"])
def test_an_empty_slo_is_refused(text: str) -> None:
    """An SLO without any limit (empty parts only) is a ValueError."""
    with pytest.raises(ValueError, match="the SLO sets no limit"):
        parse_slo(text)


def test_a_zero_limit_is_refused() -> None:
    """No latency can be 0: a zero limit is a ValueError naming the part."""
    with pytest.raises(ValueError, match="'ttft_p99=0ms'"):
        parse_slo("ttft_p99=0ms")


# --- costs and candidates -------------------------------------------------------------------


def test_costs_come_from_the_gpu_table() -> None:
    """Without overrides each GPU costs its table's (positive) cost per hour."""
    assert gpu_costs(["H100", "L4"], {}) == {
        "H100": gpu_spec("H100").cost_per_hour,
        "L4": gpu_spec("L4").cost_per_hour,
    }
    assert all(cost > 0 for cost in gpu_costs(["H100", "L4"], {}).values())


def test_an_override_replaces_the_tables_cost() -> None:
    """An override sets its GPU's cost; the others keep the table's."""
    assert gpu_costs(["H100", "L4"], {"H100": 2.5}) == {
        "H100": 2.5,
        "L4": gpu_spec("L4").cost_per_hour,
    }


def test_a_zero_cost_is_refused() -> None:
    """A zero override is a ValueError telling how to give a cost."""
    with pytest.raises(ValueError, match="no cost per hour for GPU H100: give one with --gpu-cost"):
        gpu_costs(["H100"], {"H100": 0.0})


def test_a_gpu_without_a_cost_needs_an_override(tmp_path: Path) -> None:
    """A GPU whose cost is 0 (unknown; here a --gpu-spec-file says so) is refused unless
    --gpu-cost gives one."""
    spec = tmp_path / "l4.yaml"
    spec.write_text("cost_per_hour: 0\n")
    with pytest.raises(ValueError, match="no cost per hour for GPU L4"):
        gpu_costs(["L4"], {}, str(spec))
    assert gpu_costs(["L4"], {"L4": 0.7}, str(spec)) == {"L4": 0.7}


def test_an_unknown_gpu_is_refused() -> None:
    """A GPU the table does not know is a ValueError naming it."""
    with pytest.raises(ValueError, match="unknown GPU 'B300'"):
        gpu_costs(["B300"], {})


def test_candidates_are_the_product_of_the_choices() -> None:
    """Every GPU x TP x max-num-seqs x max-num-batched-tokens, once each, GPU outermost."""
    found = candidates(["H100", "L4"], [1, 2], [64, 128, 256], [2048, 8192])
    assert len(found) == 2 * 2 * 3 * 2 == len(set(found))
    assert found[0] == Candidate("H100", 1, 64, 2048)
    assert found[1] == Candidate("H100", 1, 64, 8192)
    assert found[-1] == Candidate("L4", 2, 256, 8192)
    assert {c.gpu for c in found[:12]} == {"H100"}
    assert Candidate("L4", 2, 128, 2048) in found


def test_a_candidates_flags_are_server_flags() -> None:
    """A candidate's flags set the server's GPU, TP, max-num-seqs and batched tokens."""
    cfg = load_config([*SERVER, *Candidate("H200", 2, 96, 4096).flags()], {})
    assert (cfg.gpu, cfg.tensor_parallel_size, cfg.max_num_seqs, cfg.max_num_batched_tokens) == (
        "H200",
        2,
        96,
        4096,
    )


# --- search_candidate ------------------------------------------------------------------------


def meets(metrics: dict[str, float], slo: dict[str, float]) -> bool:
    return all(metrics[name] <= limit for name, limit in slo.items())


def test_the_search_finds_the_fewest_replicas_that_meet_the_slo() -> None:
    """On one H100 the trace's TTFT p99 is above 125 ms; the passing point meets the limit
    with no failed request, the failing point has one replica fewer and misses it, and
    every fleet tried with fewer replicas than the passing one misses it too."""
    slo = parse_slo("ttft_p99=125ms")
    result = search_candidate(job(H100, "ttft_p99=125ms", cost=3.0))
    assert result.skipped is None
    passing, failing = result.passing, result.failing
    assert passing is not None and failing is not None
    assert passing.replicas > 1
    assert passing.meets and passing.failed == 0 and meets(passing.metrics, slo)
    assert failing.replicas == passing.replicas - 1
    assert not failing.meets and not meets(failing.metrics, slo)
    assert passing.cost_per_hour == passing.replicas * 3.0
    assert failing.cost_per_hour == failing.replicas * 3.0
    tried = {p.replicas: p for p in result.points}
    assert [p.replicas for p in result.points] == sorted(tried)
    assert tried[passing.replicas] is passing and tried[failing.replicas] is failing
    assert not any(p.meets for p in result.points if p.replicas < passing.replicas)


def test_the_search_agrees_with_a_replay() -> None:
    """The passing and failing points' metrics are those of replaying the trace on that
    many instances of the candidate's server."""
    result = search_candidate(job(H100, "ttft_p99=125ms"))
    assert result.passing is not None and result.failing is not None
    cfg = load_config([*SERVER, *H100.flags()], {})
    trace = read_trace(RECORDED_TRACE, limit=LIMIT)
    for found in (result.passing, result.failing):
        again = Replay(cfg, trace, found.replicas, "least-requests", environ={}).run()
        assert again.summary.means()["ttft_p99"] == pytest.approx(found.metrics["ttft_p99"])


def test_a_cost_scales_with_the_gpus_of_a_replica() -> None:
    """With TP 2 one replica already meets the SLO; it costs two GPUs, and there is no
    failing point (zero replicas are not a fleet)."""
    result = search_candidate(job(Candidate("H100", 2, 64, 2048), "ttft_p99=110ms", cost=3.0))
    assert result.passing is not None
    assert result.passing.replicas == 1 and result.passing.cost_per_hour == 6.0
    assert result.failing is None


def test_a_candidate_that_never_meets_stops_at_max_replicas() -> None:
    """When even --max-replicas misses the SLO there is no passing point, and the failing
    point is the one at the maximum."""
    result = search_candidate(job(H100, "ttft_p99=1ms", max_replicas=4))
    assert result.passing is None
    assert result.failing is not None and result.failing.replicas == 4
    assert not any(p.meets for p in result.points)
    assert max(p.replicas for p in result.points) == 4


def test_a_model_that_does_not_fit_is_skipped_with_the_reason() -> None:
    """Llama 3.1 70B's weights do not fit one L4: the candidate is skipped, nothing replayed."""
    server = ("--model", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192")
    result = search_candidate(
        job(
            Candidate("L4", 1, 64, 2048),
            "ttft_p99=1s",
            server=(*server, "--timing-model", "roofline"),
        )
    )
    assert result.passing is None and result.failing is None and result.points == []
    assert result.skipped is not None
    assert "KV cache" in result.skipped and "L4" in result.skipped


def test_a_candidate_the_server_refuses_is_skipped() -> None:
    """A candidate whose flags break a server rule (TP above 64) is skipped with the rule's
    message."""
    result = search_candidate(job(Candidate("H100", 128, 64, 2048), "ttft_p99=1s"))
    assert result.passing is None and result.points == []
    assert result.skipped == "tensor parallel size must be between 1 and 64"


def test_a_tp_that_does_not_divide_the_model_is_skipped() -> None:
    """TP 3 cannot split Llama 3.1 8B's 32 attention heads: the candidate is skipped."""
    result = search_candidate(job(Candidate("H100", 3, 64, 2048), "ttft_p99=100ms"))
    assert result.skipped is not None
    assert result.passing is None and result.points == []


# --- Plan ------------------------------------------------------------------------------------


def test_the_best_point_is_the_cheapest_that_meets() -> None:
    """The frontier holds each candidate's passing and failing points by cost (a passing
    point before a failing one of the same cost); the best is the first passing one, even
    when a cheaper point fails."""
    h100 = CandidateResult(
        Candidate("H100", 1, 64, 2048),
        point("H100", 3, 9.0, 0.08, True),
        point("H100", 2, 6.0, 0.105, False),
    )
    h200 = CandidateResult(
        Candidate("H200", 1, 64, 2048),
        point("H200", 3, 11.4, 0.08, True),
        point("H200", 2, 7.6, 0.103, False),
    )
    tp2 = CandidateResult(Candidate("H100", 2, 64, 2048), point("H100", 2, 12.0, 0.04, True), None)
    skipped = CandidateResult(Candidate("L4", 1, 64, 2048), None, None, skipped="too big")
    plan = Plan({"ttft_p99": 0.1}, [h200, skipped, tp2, h100])
    assert [p.cost_per_hour for p in plan.frontier] == [6.0, 7.6, 9.0, 11.4, 12.0]
    assert plan.best is h100.passing
    report = plan.to_json()
    assert report["best"]["replicas"] == 3 and report["closest"] is None
    assert report["skipped"] == [
        {
            "candidate": {
                "gpu": "L4",
                "tensor_parallel": 1,
                "max_num_seqs": 64,
                "max_num_batched_tokens": 2048,
                "kv_offloading_gib": 0.0,
            },
            "reason": "too big",
        }
    ]


def test_a_passing_point_comes_before_a_failing_one_of_the_same_cost() -> None:
    """Of two frontier points of the same cost the passing one sorts first and is the best."""
    cheap_fail = point("H100", 2, 6.0, 0.2, False)
    same_cost_pass = replace(
        point("H100", 1, 6.0, 0.05, True), candidate=Candidate("H100", 2, 64, 2048)
    )
    plan = Plan(
        {"ttft_p99": 0.1},
        [
            CandidateResult(cheap_fail.candidate, None, cheap_fail),
            CandidateResult(same_cost_pass.candidate, same_cost_pass, None),
        ],
    )
    assert plan.frontier == [same_cost_pass, cheap_fail]
    assert plan.best is same_cost_pass


def test_when_nothing_meets_the_closest_point_is_nearest_the_slo() -> None:
    """With no passing point the best is None and the closest is the point with the
    smallest worst metric-to-limit ratio over every point tried, not only the frontier's."""
    slo = {"ttft_p99": 0.1}
    far = point("L4", 64, 51.2, 0.6, False)
    tried_near = point("H100", 8, 24.0, 0.12, False)
    frontier_h100 = point("H100", 16, 48.0, 0.13, False)
    plan = Plan(
        slo,
        [
            CandidateResult(far.candidate, None, far, points=[far]),
            CandidateResult(
                frontier_h100.candidate, None, frontier_h100, points=[tried_near, frontier_h100]
            ),
        ],
    )
    assert plan.best is None
    assert plan.closest is tried_near
    assert tried_near.worst_ratio(slo) == pytest.approx(1.2)
    report = plan.to_json()
    assert report["best"] is None
    assert report["closest"]["replicas"] == 8


def test_the_worst_ratio_is_the_largest_over_the_limits() -> None:
    """Each limit's metric-to-limit ratio, the largest of them; a metric the replay did not
    report counts as infinitely far."""
    p = Point(H100, 1, 3.0, {"ttft_p99": 0.05, "itl_p99": 0.03}, 0, False)
    assert p.worst_ratio({"ttft_p99": 0.1, "itl_p99": 0.02}) == pytest.approx(1.5)
    assert p.worst_ratio({"ttft_p99": 0.1}) == pytest.approx(0.5)
    assert math.isinf(p.worst_ratio({"e2e_p99": 1.0}))


def test_a_plan_over_two_gpus_picks_the_cheaper_fleet() -> None:
    """plan() over H100 and H200 (table costs) with one local worker: the best point is the
    H100 fleet, the cheapest passing point of the frontier, and no cheaper frontier point
    meets the SLO."""
    slo = parse_slo("ttft_p99=125ms")  # its longest prompts' own prefill is ~115 ms
    jobs = [
        job(c, "ttft_p99=125ms", cost=gpu_spec(c.gpu).cost_per_hour)
        for c in candidates(["H100", "H200"], [1], [64], [2048])
    ]
    plan = planning.plan(jobs, slo, planning.local_executor(1))
    best = plan.best
    assert best is not None and best.candidate.gpu == "H100"
    assert all(p.cost_per_hour >= best.cost_per_hour for p in plan.frontier if p.meets)
    cheaper = [p for p in plan.frontier if p.cost_per_hour < best.cost_per_hour]
    assert cheaper and not any(p.meets for p in cheaper)


# --- search_replicas: more replicas can do worse ---------------------------------------------


def _scripted(ttft: dict[int, float], limit: float) -> tuple[Callable[[int], Point], list[int]]:
    tried: list[int] = []
    points: dict[int, Point] = {}

    def run(replicas: int) -> Point:
        if replicas not in points:
            tried.append(replicas)
            value = ttft.get(replicas, max(ttft.values()))
            points[replicas] = point("H100", replicas, replicas, value, value <= limit)
        return points[replicas]

    return run, tried


def test_three_passing_and_four_failing_finds_three() -> None:
    """3 replicas meet the SLO, 4 (and more) do worse: the doubling skips 3, and the sizes
    between 2 and 4 are tried when 4 does worse than 2."""
    run, _ = _scripted({1: 3.0, 2: 1.5, 3: 0.9, 4: 2.0, 8: 2.5, 16: 2.6}, 1.0)
    passing, failing = search_replicas(run, {"ttft_p99": 1.0}, 64)
    assert passing is not None and passing.replicas == 3
    assert failing is not None and failing.replicas == 2


def test_a_search_more_replicas_do_not_help_stops_early() -> None:
    """When doublings stop improving, the search stops long before --max-replicas."""
    run, tried = _scripted({1: 5.0}, 1.0)
    passing, failing = search_replicas(run, {"ttft_p99": 1.0}, MAX_REPLICAS)
    assert passing is None and failing is not None
    assert max(tried) <= 4 and len(tried) <= 4


def test_a_monotonic_search_still_bisects_to_the_fewest() -> None:
    ttft = {n: 10.0 / n for n in range(1, 65)}
    run, tried = _scripted(ttft, 1.0)  # meets from 10 replicas
    passing, failing = search_replicas(run, {"ttft_p99": 1.0}, 64)
    assert passing is not None and passing.replicas == 10
    assert failing is not None and failing.replicas == 9
    assert len(tried) <= 9


def test_an_interrupted_search_keeps_the_candidates_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt during the second candidate (one worker, in this process): the
    plan is partial, with the first candidate's result and the others unsearched."""
    jobs = [job(Candidate("H100", tp, 64, 2048), "ttft_p99=1s") for tp in (1, 2, 4)]
    done = CandidateResult(jobs[0].candidate, None, None, skipped="stub")
    calls = iter([done])

    def fake(one: PlanJob) -> CandidateResult:
        result = next(calls, None)
        if result is None:
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(planning, "search_candidate", fake)
    result = planning.plan(jobs, parse_slo("ttft_p99=1s"), planning.local_executor(1))
    assert result.partial
    assert result.results == [done]
    assert result.unsearched == [j.candidate for j in jobs[1:]]
    assert result.to_json()["partial"] is True


def test_candidates_weigh_cpu_kv_offload_sizes() -> None:
    """--kv-offloading-size-choices: each size (GiB; 0 for none) is one more dimension, and
    a candidate's flags give the server its CPU tier."""
    found = candidates(["H100"], [1], [64], [2048], [0.0, 100.0])
    assert found == [Candidate("H100", 1, 64, 2048), Candidate("H100", 1, 64, 2048, 100.0)]
    cfg = load_config([*SERVER, *found[1].flags()], {})
    assert cfg.kv_offloading_size == 100.0
    assert found[1].describe() == (
        "H100 TP1 (max-num-seqs 64, max-num-batched-tokens 2048, 100 GiB CPU KV offload)"
    )


def test_a_plan_may_buy_a_cpu_tier_instead_of_more_gpus(tmp_path: Path) -> None:
    """Eight conversations of four turns whose histories outgrow a small GPU KV cache (256
    blocks): one replica with a 4 GiB CPU tier meets a mean-TTFT limit that one replica
    without it misses, so the search over both picks the tier."""
    lines, at = [], 0
    for turn in range(4):
        for conversation in range(8):
            at += 500
            history = [conversation * 100 + block for block in range(turn + 2)]
            record = {"timestamp": at, "input_length": 512 * len(history), "output_length": 8}
            lines.append(json.dumps({**record, "hash_ids": history}))
    trace = tmp_path / "turns.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    server = (*SERVER, "--num-gpu-blocks-override", "256", "--max-model-len", "4096")

    def search(offload: float) -> CandidateResult:
        candidate = Candidate("H100", 1, 64, 2048, offload)
        slo = tuple(parse_slo("ttft_mean=50ms").items())
        plan_job = PlanJob(
            candidate, str(trace), "auto", None, server, slo, 1, "least-requests", 1.0, ()
        )
        return search_candidate(plan_job)

    without, with_tier = search(0.0), search(4.0)
    assert without.passing is None and without.failing is not None
    assert with_tier.passing is not None and with_tier.passing.replicas == 1
    assert with_tier.passing.metrics["ttft_mean"] < 0.05 < without.failing.metrics["ttft_mean"]
