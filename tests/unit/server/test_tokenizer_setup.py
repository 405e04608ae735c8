"""Which tokenizer serves, from the flags and what is on this machine."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from tests.support.config import load
from vllm_sim.config import ConfigError
from vllm_sim.engine.tokenizer import SimulatedTokenizer
from vllm_sim.engine.tokenizer.hf import HfTokenizer
from vllm_sim.model_files import cached_snapshot, find_model_folder, hub_cache
from vllm_sim.server.tokenizer_setup import FORCED, chat_template_text, choose_tokenizer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cache_with(model: Path, root: Path, repo: str = "org/tiny", ref: str = "main") -> Path:
    """A HuggingFace cache holding `model` as `repo` at `ref`."""
    entry = root / "hub" / ("models--" + repo.replace("/", "--"))
    shutil.copytree(model, entry / "snapshots" / COMMIT)
    (entry / "refs").mkdir()
    (entry / "refs" / ref).write_text(COMMIT)
    return root


def test_forced_dummy_tokenizer(hf_models: dict[str, Path]) -> None:
    choice = choose_tokenizer(
        load("--model", str(hf_models["qwen"]), "--force-dummy-tokenizer"), {}
    )
    assert isinstance(choice.tokenizer, SimulatedTokenizer) and choice.message == FORCED


def test_a_local_folder_loads_the_model_tokenizer(hf_models: dict[str, Path]) -> None:
    choice = choose_tokenizer(load("--model", str(hf_models["qwen"])), {})
    assert isinstance(choice.tokenizer, HfTokenizer)
    assert choice.level == logging.INFO and str(hf_models["qwen"]) in choice.message


def test_tokenizer_flag_wins_over_the_model(hf_models: dict[str, Path]) -> None:
    cfg = load("--model", "made-up", "--tokenizer", str(hf_models["llama"]))
    tokenizer = choose_tokenizer(cfg, {}).tokenizer
    assert tokenizer.encode("Hi", add_special_tokens=True)[0] == 3  # llama's BOS


def test_an_unknown_name_falls_back_with_a_warning(tmp_path: Path) -> None:
    choice = choose_tokenizer(load("--model", "org/unknown"), {"HF_HOME": str(tmp_path)})
    assert isinstance(choice.tokenizer, SimulatedTokenizer)
    assert choice.level == logging.WARNING and "'org/unknown'" in choice.message


def test_a_cached_hub_model_is_found_by_branch_and_commit(
    hf_models: dict[str, Path], tmp_path: Path
) -> None:
    home = _cache_with(hf_models["qwen"], tmp_path)
    environ = {"HF_HOME": str(home)}
    assert hub_cache(environ) == home / "hub"
    assert (
        find_model_folder("org/tiny", "", environ)
        == home / "hub/models--org--tiny/snapshots" / COMMIT
    )
    assert cached_snapshot("org/tiny", COMMIT, home / "hub") is not None
    assert cached_snapshot("org/tiny", "v2", home / "hub") is None
    assert isinstance(choose_tokenizer(load("--model", "org/tiny"), environ).tokenizer, HfTokenizer)
    assert find_model_folder("org/tiny", "", {"HF_HUB_CACHE": str(home / "hub")}) is not None


def test_max_model_len_comes_from_the_cached_config(
    hf_models: dict[str, Path], tmp_path: Path
) -> None:
    from vllm_sim.config import load_startup

    home = _cache_with(hf_models["qwen"], tmp_path)
    loaded = load_startup(["--model", "org/tiny"], {"HF_HOME": str(home)})
    assert loaded.config.max_model_len == 4096
    assert "max_position_embeddings" in loaded.startup_notes()[-1][1]


def test_broken_tokenizer_files_are_a_config_error(
    hf_models: dict[str, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "broken"
    shutil.copytree(hf_models["qwen"], folder)
    (folder / "tokenizer.json").write_text("[]")
    with pytest.raises(ConfigError, match="is not a tokenizer"):
        choose_tokenizer(load("--model", str(folder)), {})


def test_chat_template_flag_is_a_file_or_the_template(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text("{{ messages }}")
    assert chat_template_text(str(path)) == "{{ messages }}"
    assert chat_template_text("{{ messages }}") == "{{ messages }}"
    assert chat_template_text("") is None
    with pytest.raises(ConfigError, match="appears path-like, but doesn't exist"):
        chat_template_text("templates/missing.jinja")


def test_chat_template_flag_overrides_the_model_template(hf_models: dict[str, Path]) -> None:
    from vllm_sim.engine.tokenizer import ChatInput

    cfg = load("--model", str(hf_models["qwen"]), "--chat-template", "{{ messages[0].content }}!")
    tokenizer = choose_tokenizer(cfg, {}).tokenizer
    assert tokenizer.render_chat(ChatInput([], [{"role": "user", "content": "hey"}])) == "hey!"
