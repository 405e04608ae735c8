"""A run's files and the comparison of two runs: write_run writes result.json,
requests.csv and samples.csv into its folder and nothing else; read_result takes back a
result (or its folder) and refuses anything else; compare sets two runs' means side by
side with B's ratio to A's; the HTML report holds the summary and the skipped lines."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from vllm_sim.whatif import report
from vllm_sim.whatif.compare import compare, comparison, format_table
from vllm_sim.whatif.output import read_result, write_run
from vllm_sim.whatif.report import NO_PLOTS, write_html
from vllm_sim.whatif.results import (
    REQUEST_COLUMNS,
    SAMPLE_COLUMNS,
    RequestRecord,
    RunResult,
    Sample,
)


def make_result(ttft: float = 0.2, problems: list[str] | None = None) -> RunResult:
    """Two completed requests (the given TTFT, each answered in 0.5 s) and one refused."""
    records = [
        RequestRecord(0, 1, 0, 0.0, 100, 10, 0, 0.0, ttft, 0.01, 0.5, 0, "length"),
        RequestRecord(1, 2, 1, 0.5, 200, 10, 64, 0.0, ttft, 0.01, 0.5, 1, "length"),
        RequestRecord(2, 4, 0, 1.0, 9000, error="too long, <really>"),
    ]
    samples = [Sample(0.0, 1, 0, 0.25, 0, 0, [1, 0]), Sample(1.0, 0, 0, 0.0, 1, 2, [0, 0])]
    return RunResult("replay", {"instances": 2}, records, samples, problems or [], 0.01)


def test_write_run_writes_exactly_the_three_files_inside_the_folder(tmp_path: Path) -> None:
    """The folder (made with its parents) holds result.json, requests.csv and samples.csv
    and nothing else; nothing is written beside it."""
    folder = tmp_path / "runs" / "a"
    written = write_run(make_result(), folder)
    assert written == [folder / "result.json", folder / "requests.csv", folder / "samples.csv"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "requests.csv",
        "result.json",
        "samples.csv",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["a"]


def test_the_written_files_hold_the_run(tmp_path: Path) -> None:
    """result.json is the run's JSON; requests.csv one row per request under the request
    columns; samples.csv one row per sample with the running count of each instance."""
    result = make_result()
    write_run(result, tmp_path)
    data = json.loads((tmp_path / "result.json").read_text())
    assert data == json.loads(json.dumps(result.to_json()))
    assert data["summary"]["completed"] == 2

    with (tmp_path / "requests.csv").open(newline="") as handle:
        requests = list(csv.reader(handle))
    assert tuple(requests[0]) == REQUEST_COLUMNS
    assert len(requests) == 4
    by_name = dict(zip(REQUEST_COLUMNS, requests[3], strict=True))
    assert (by_name["line"], by_name["error"], by_name["ttft"]) == ("4", "too long, <really>", "")

    with (tmp_path / "samples.csv").open(newline="") as handle:
        samples = list(csv.reader(handle))
    assert samples[0] == [*SAMPLE_COLUMNS, "running_per_instance"]
    assert samples[1] == ["0.0", "1", "0", "0.25", "0", "0", "1 0"]
    assert len(samples) == 3


def test_read_result_takes_a_result_file_or_its_folder(tmp_path: Path) -> None:
    """The folder written by write_run and its result.json read back the same."""
    write_run(make_result(), tmp_path)
    from_folder = read_result(tmp_path)
    assert from_folder == read_result(tmp_path / "result.json")
    assert from_folder["means"]["ttft_mean"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a vllm-sim run result"),
        ('{"kind": "replay"}', "not a vllm-sim run result"),
        ('{"means": [1]}', "not a vllm-sim run result"),
    ],
)
def test_read_result_refuses_what_is_not_a_result(
    tmp_path: Path, content: str, reason: str
) -> None:
    """A file that is not JSON, or JSON without a `means` object, is a ValueError naming
    the file."""
    path = tmp_path / "other.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=reason) as raised:
        read_result(path)
    assert str(path) in str(raised.value)


def test_read_result_of_a_missing_file_or_empty_folder(tmp_path: Path) -> None:
    """A missing file, or a folder without result.json, is a ValueError, not an OSError."""
    with pytest.raises(ValueError, match=r"absent\.json"):
        read_result(tmp_path / "absent.json")
    with pytest.raises(ValueError, match=r"result\.json"):
        read_result(tmp_path)


def test_comparison_lists_both_runs_means_with_b_over_a() -> None:
    """A's metrics in A's order, then those only B has, each in its unit (latencies in ms,
    the hit rate in %); the ratio is B/A where both are numbers and A is not zero."""
    first = {"means": {"ttft_mean": 0.002, "zero": 0.0, "only_a": 1.0}}
    second = {"means": {"ttft_mean": 0.003, "zero": 5.0, "prefix_cache_hit_rate": 0.25}}
    assert comparison(first, second) == [
        ("ttft_mean", "ms", 2.0, 3.0, pytest.approx(1.5)),
        ("zero", "", 0.0, 5.0, None),
        ("only_a", "", 1.0, None, None),
        ("prefix_cache_hit_rate", "%", None, 25.0, None),
    ]


@pytest.mark.parametrize("value", ["12 ms", True, [1], {"x": 1}])
def test_a_mean_that_is_not_a_number_is_refused_naming_it(tmp_path: Path, value: object) -> None:
    write_run(make_result(), tmp_path / "a")
    data = json.loads((tmp_path / "a" / "result.json").read_text())
    data["means"]["ttft_mean"] = value
    (tmp_path / "b.json").write_text(json.dumps(data))
    with pytest.raises(ValueError) as caught:
        compare(tmp_path / "a", tmp_path / "b.json")
    assert str(caught.value) == f"{tmp_path / 'b.json'}: means.ttft_mean is {value!r}, not a number"


def test_the_comparison_table_has_unit_a_b_and_ratio_columns() -> None:
    """A header naming both runs and B/A, a row per metric with its unit, missing values
    as '-'."""
    table = format_table(
        [("ttft_mean", "ms", 500.0, 250.0, 0.5), ("itl_mean", "ms", None, 10.0, None)],
        ("A: one", "B: two"),
    )
    lines = table.splitlines()
    assert lines[0].split() == ["metric", "unit", "A:", "one", "B:", "two", "B/A"]
    assert lines[1].split() == ["ttft_mean", "ms", "500", "250", "0.5"]
    assert lines[2].split() == ["itl_mean", "ms", "-", "10", "-"]
    assert len({len(line) for line in lines}) == 1  # aligned columns


def test_compare_two_written_runs(tmp_path: Path) -> None:
    """Two runs whose TTFT doubled and nothing else changed: ttft_mean's ratio is 2 (in
    ms), the throughputs' 1; the settings are the same and so are the request counts."""
    write_run(make_result(ttft=0.2), tmp_path / "a")
    write_run(make_result(ttft=0.4), tmp_path / "b")
    shown = compare(tmp_path / "a", tmp_path / "b" / "result.json").splitlines()
    table = shown[: shown.index("")]
    rows = {line.split()[0]: line.split()[1:] for line in table[1:]}
    assert rows["ttft_mean"] == ["ms", "200", "400", "2"]
    assert rows["request_throughput"][0] == "req/s" and rows["request_throughput"][3] == "1"
    assert str(tmp_path / "a") in table[0]
    assert set(rows) == set(read_result(tmp_path / "a")["means"])
    assert shown[shown.index("") + 1 :] == ["settings: the same"]


def test_compare_names_the_settings_that_differ_and_warns_on_request_counts(
    tmp_path: Path,
) -> None:
    write_run(make_result(), tmp_path / "a")
    base = make_result()
    settings = {"instances": 4, "router": "round-robin"}
    other = RunResult("replay", settings, base.records[:2], base.samples, [], 0.01)
    write_run(other, tmp_path / "b")
    shown = compare(tmp_path / "a", tmp_path / "b").splitlines()
    tail = shown[shown.index("") + 1 :]
    assert tail == [
        "settings that differ (A -> B):",
        "  instances: 2 -> 4",
        "  router: (not set) -> round-robin",
        "warning: A served 3 requests and B 2: their means describe different workloads",
    ]


def test_compare_refuses_a_missing_run(tmp_path: Path) -> None:
    """A missing second run is a ValueError naming it."""
    write_run(make_result(), tmp_path / "a")
    with pytest.raises(ValueError, match="missing"):
        compare(tmp_path / "a", tmp_path / "missing")


def test_the_html_report_without_pictures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """report.html holds the settings, the request counts, each latency, the skipped trace
    lines (escaped) and, without matplotlib, how to get the pictures."""
    monkeypatch.setattr(report, "plotting_available", lambda: False)
    result = make_result(problems=["line 3: not JSON (<bad>)"])
    path = write_html(result, tmp_path, [])
    assert path == tmp_path / "report.html"
    page = path.read_text()
    assert "3 (2 completed, 1 failed)" in page
    assert "<td>instances</td><td>2</td>" in page
    assert all(f"<td>{name}</td>" in page for name in ("ttft", "itl", "e2e", "queue_time"))
    assert "line 3: not JSON (&lt;bad&gt;)" in page
    assert "<bad>" not in page
    assert "No pictures" in page and "vllm-sim[plots]" in NO_PLOTS
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
