"""Accepted differences: matching, reasons required, stale entries."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from conformance.accepted import classify, load_accepted, parse_accepted
from conformance.compare import Difference

ID = Difference("chat", "body", "id", "str~chatcmpl-{hex:16}", "str~chatcmpl-{uuid:36}")
STATUS = Difference("err-suffix", "status", "", "400", "200")


def test_entries_match_by_patterns_and_the_rest_is_unexpected() -> None:
    entries = parse_accepted(
        {
            "accepted": [
                {"case": "chat*", "aspect": "body", "path": "id", "reason": "ids are uuids"},
                {"case": "completion*", "reason": "never matches"},
            ]
        }
    )
    verdict = classify([ID, STATUS], entries)
    assert verdict.unexpected == [STATUS]
    assert [(d, e.reason) for d, e in verdict.accepted] == [(ID, "ids are uuids")]
    assert [e.case for e in verdict.stale] == ["completion*"]


def test_left_out_fields_match_anything() -> None:
    [entry] = parse_accepted({"accepted": [{"case": "err-suffix", "reason": "r"}]})
    assert entry.matches(STATUS) and not entry.matches(ID)


def test_an_entry_needs_a_reason_and_known_keys() -> None:
    with pytest.raises(ValueError, match="no reason"):
        parse_accepted({"accepted": [{"case": "x"}]})
    with pytest.raises(ValueError, match="unknown keys"):
        parse_accepted({"accepted": [{"case": "x", "reason": "r", "paht": "typo"}]})


def test_a_missing_file_accepts_nothing(tmp_path: Path) -> None:
    assert load_accepted(tmp_path / "none.toml") == []


def test_the_repository_file_parses() -> None:
    path = Path(__file__).resolve().parents[3] / "conformance" / "accepted.toml"
    entries = load_accepted(path)
    assert len(entries) == len(tomllib.loads(path.read_text()).get("accepted", []))
