"""The case list is well formed, and the report renders what a run found."""

from __future__ import annotations

import json

from conformance.accepted import Accepted, classify
from conformance.case import Case
from conformance.cases import CASES
from conformance.compare import Exchange, compare
from conformance.report import CaseResult, RunInfo, render_json, render_markdown


def test_case_names_are_unique_and_bodies_encode() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    for case in CASES:
        assert case.path.startswith("/")
        payload = case.payload()
        if case.body is not None and payload is not None:
            assert json.loads(payload) == case.body
        if case.body is not None:
            assert case.request_headers()["Content-Type"] == "application/json"


def test_raw_bodies_keep_their_own_content_type() -> None:
    plain = next(c for c in CASES if c.name == "err-text-plain")
    assert plain.request_headers() == {"Content-Type": "text/plain"}


def stream(*texts: str) -> Exchange:
    chunks = [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return Exchange(200, {"content-type": "text/event-stream"}, body + b"data: [DONE]\n\n")


def test_report_groups_differences_and_draws_stream_sequences() -> None:
    case = Case("s", "/v1/x", method="POST", body={})
    other = Case("t", "/v1/y", method="POST", body={})
    oracle, sim = stream("a", "b"), stream("a", "b", "c")
    results = [
        CaseResult(case, oracle, sim, compare(case, oracle, sim)),
        CaseResult(other, oracle, sim, compare(other, oracle, sim)),
    ]
    diffs = [d for r in results for d in r.differences]
    verdict = classify(diffs, [Accepted("t", "*", "*", "known")])
    info = RunInfo("0.32.0", "now", {"requests": 1.0})
    text = render_markdown(info, results, verdict)
    assert "**1 unexpected differences** in 1 cases" in text
    assert "| stream-count |" in text and "| known |" in text
    assert "- vLLM: Ax2 B" in text and "- vllm-sim: Ax3 B" in text
    document = json.loads(render_json(info, results, verdict))
    assert document["unexpected"][0]["case"] == "s"
    assert document["accepted"][0]["reason"] == "known"
