"""Start-up downloads of a hub model's tokenizer files: when, what, and what a failure does."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
from huggingface_hub.errors import LocalEntryNotFoundError

from tests.support.config import load
from vllm_sim.server import hub

Calls = list[tuple[str, dict[str, Any]]]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    made: Calls = []

    def fake_download(repo_id: str, **options: Any) -> str:
        made.append((repo_id, options))
        return ""

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    return made


@pytest.mark.parametrize(
    ("name", "hub_id"),
    [("Qwen/Qwen2.5-0.5B-Instruct", True), ("gpt2", True), ("meta-llama/Llama-3.1-8B", True),
     ("/models/qwen", False), ("./local", False), ("~/m", False), ("a/b/c", False),
     ("name with spaces", False), ("", False)],
)  # fmt: skip
def test_hub_ids(name: str, hub_id: bool) -> None:
    assert hub._looks_like_hub_id(name) is hub_id


def test_tokenizer_files_only_are_fetched(calls: Calls, tmp_path: Path) -> None:
    cfg = load("--model", "org/m", "--tokenizer-revision", "v2", "--download-dir", str(tmp_path))
    hub.fetch_tokenizer_files(cfg, {"HF_HOME": str(tmp_path)})
    assert len(calls) == 1
    name, options = calls[0]
    assert name == "org/m" and options["revision"] == "v2"
    assert options["cache_dir"] == str(tmp_path)
    assert "tokenizer.json" in options["allow_patterns"]
    assert not any("safetensors" in p or "*.bin" in p for p in options["allow_patterns"])


def test_the_models_own_files_are_fetched_for_another_tokenizer(
    calls: Calls, tmp_path: Path
) -> None:
    cfg = load("--model", "org/m", "--tokenizer", "org/t")
    hub.fetch_tokenizer_files(cfg, {"HF_HOME": str(tmp_path)})
    assert [name for name, _ in calls] == ["org/t", "org/m"]


@pytest.mark.parametrize("value", ["1", "true", "ON"])
def test_offline_hub_is_never_asked(calls: Calls, tmp_path: Path, value: str) -> None:
    hub.fetch_tokenizer_files(
        load("--model", "org/m"), {"HF_HUB_OFFLINE": value, "HF_HOME": str(tmp_path)}
    )
    assert calls == []


def test_forced_dummy_tokenizer_and_local_folders_are_never_fetched(
    calls: Calls, tmp_path: Path
) -> None:
    hub.fetch_tokenizer_files(load("--model", "org/m", "--force-dummy-tokenizer"), {})
    hub.fetch_tokenizer_files(load("--model", str(tmp_path)), {"HF_HOME": str(tmp_path)})
    assert calls == []


def test_a_failed_download_is_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    def unreachable(repo_id: str, **options: Any) -> str:
        raise LocalEntryNotFoundError("Name or service not known\nmore detail")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        hub.fetch_tokenizer_files(load("--model", "org/m"), {"HF_HOME": str(tmp_path)})
    assert (
        "Cannot download org/m from the HuggingFace hub: Name or service not known" in caplog.text
    )


def test_the_download_given_is_the_one_used(tmp_path: Path) -> None:
    asked: list[tuple[str, str, str]] = []

    def download(name: str, revision: str, download_dir: str) -> None:
        asked.append((name, revision, download_dir))

    cfg = load("--model", "org/m", "--download-dir", str(tmp_path))
    hub.fetch_tokenizer_files(cfg, {"HF_HOME": str(tmp_path)}, download)
    assert asked == [("org/m", "", str(tmp_path))]


def test_the_child_process_entry_downloads_and_never_fails(calls: Calls, tmp_path: Path) -> None:
    assert hub.main(["20", "org/m", "v2", str(tmp_path)]) == 0
    [(name, options)] = calls
    assert name == "org/m" and options["revision"] == "v2"
    assert options["cache_dir"] == str(tmp_path)


def test_a_download_in_a_child_reports_on_this_stderr(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A hub that refuses at once: the child says so and the server goes on.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub.download_in_child("org/m", "", "")
    assert "Cannot download org/m from the HuggingFace hub" in capfd.readouterr().err
