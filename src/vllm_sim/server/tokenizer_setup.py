"""The serving tokenizer from the configuration: `--tokenizer` (default: `--model`) names
a folder or a hub id, a hub id is looked up in the HuggingFace cache (the server downloads
it there first when the hub can be reached), and the `--chat-template*` flags say how
chats are rendered."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from vllm_sim.config import Config, ConfigError
from vllm_sim.engine.content import THINK_END, THINK_START
from vllm_sim.engine.tokenizer.base import Tokenizer
from vllm_sim.engine.tokenizer.hf import TemplateOptions
from vllm_sim.engine.tokenizer.select import (
    TokenizerChoice,
    TokenizerSetupError,
    tokenizer_in,
)
from vllm_sim.engine.tokenizer.simulated import SimulatedTokenizer
from vllm_sim.model_files import find_model_folder

FORCED: Final = "Force dummy tokenizer flag is set, using simulated tokenizer"
_TEMPLATE_MARKS: Final = ("{", "}", "\n")  # a --chat-template holding these is a template
_MAX_TEMPLATE_BYTES: Final = 1 << 20


def tokenizer_name(cfg: Config) -> str:
    return cfg.tokenizer or cfg.model


def tokenizer_revision(cfg: Config) -> str:
    return cfg.tokenizer_revision or cfg.revision


def chat_template_text(value: str) -> str | None:
    """`--chat-template`: a file's text, or the template itself; None when unset.

    Raises ConfigError for a value that looks like a path but names no file, as vLLM does."""
    if not value:
        return None
    path = Path(value).expanduser()
    try:
        if path.is_file():
            if path.stat().st_size > _MAX_TEMPLATE_BYTES:
                raise ConfigError(f"--chat-template {value}: larger than 1 MB")
            return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"--chat-template {value}: cannot be read ({error})") from None
    if any(mark in value for mark in _TEMPLATE_MARKS):
        return value
    raise ConfigError(
        f"The supplied chat template string ({value}) appears path-like, but doesn't exist!"
    )


def template_options(cfg: Config) -> TemplateOptions:
    return TemplateOptions(
        override=chat_template_text(cfg.chat_template),
        content_format=cfg.chat_template_content_format,
        trust_request_template=cfg.trust_request_chat_template,
        default_kwargs=cfg.default_chat_template_kwargs,
    )


def choose_tokenizer(cfg: Config, environ: Mapping[str, str]) -> TokenizerChoice:
    """The serving tokenizer; raises ConfigError when the model's files are unusable."""
    if cfg.force_dummy_tokenizer:
        return TokenizerChoice(SimulatedTokenizer(), logging.INFO, FORCED)
    name = tokenizer_name(cfg)
    folder = find_model_folder(name, tokenizer_revision(cfg), environ, cfg.download_dir)
    try:
        return tokenizer_in(name, folder, lambda: template_options(cfg))
    except TokenizerSetupError as error:
        raise ConfigError(str(error)) from None


# vLLM's reasoning parsers that split an answer at `</think>`, and those of them that refuse
# to start unless both markers are vocabulary entries (named as vLLM's error names them).
_THINK_PARSERS = frozenset({"deepseek_r1", "qwen3"})
_NEEDS_THINK_TOKENS = {"deepseek_r1": "DeepSeekR1ReasoningParser"}


def think_end_id(cfg: Config, tokenizer: Tokenizer) -> int | None:
    """The token a reasoning part ends with, for this parser and vocabulary (None: none)."""
    if cfg.reasoning_parser not in _THINK_PARSERS:
        return None
    return tokenizer.vocab_id(THINK_END)


def check_reasoning_tokenizer(cfg: Config, tokenizer: Tokenizer) -> None:
    """Raises ConfigError where vLLM's parser would not start with this model's tokenizer
    (the simulated tokenizer has no vocabulary to check)."""
    parser = _NEEDS_THINK_TOKENS.get(cfg.reasoning_parser)
    if parser is None or tokenizer.folder is None:
        return
    if tokenizer.vocab_id(THINK_START) is None or tokenizer.vocab_id(THINK_END) is None:
        raise ConfigError(
            f"{parser} reasoning parser could not locate think start/end tokens in the tokenizer!"
        )
