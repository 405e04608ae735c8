"""The default --max-model-len: the model's own context length, as vLLM derives it.

vLLM reads it from the model's config.json (the smallest of `max_position_embeddings` and
the other names models use for it, in the text part of a multimodal config). The simulator
does that for a local model folder or a model in the HuggingFace cache; for any other name
it uses 32768, a common context length of current models, and says so at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_sim.model_files import read_json

FALLBACK_MAX_MODEL_LEN = 32768
# The names of the context length in Hugging Face configs, as vLLM looks for them.
CONTEXT_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KB; never read a huge file


@dataclass(frozen=True, slots=True)
class ContextLength:
    value: int
    source: str  # for the start-up log: where the value comes from


def _lengths(config: dict[str, Any]) -> dict[str, int]:
    text_config = config.get("text_config")
    section = text_config if isinstance(text_config, dict) else config
    return {
        key: value
        for key in CONTEXT_LENGTH_KEYS
        if isinstance(value := section.get(key), int) and not isinstance(value, bool) and value > 0
    }


def _fallback(reason: str) -> ContextLength:
    return ContextLength(FALLBACK_MAX_MODEL_LEN, f"{FALLBACK_MAX_MODEL_LEN}, since {reason}")


def model_context_length(model: str, folder: Path | None) -> ContextLength:
    """The context length of `model` from the config.json in `folder`, its files."""
    path = None if folder is None else folder / "config.json"
    try:
        config = None if path is None else read_json(path, _MAX_CONFIG_BYTES)
    except ValueError as error:
        return _fallback(f"{error}")
    if path is None or config is None:
        return _fallback(f"no config.json of the model {model!r} is on this machine")
    lengths = _lengths(config) if isinstance(config, dict) else {}
    if not lengths:
        return _fallback(f"{path} names no context length (max_position_embeddings, ...)")
    key = min(lengths, key=lambda name: lengths[name])
    return ContextLength(lengths[key], f"{lengths[key]}, the {key} of {path}")
