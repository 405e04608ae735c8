"""Which tokenizer serves: the model's own when its files are on this machine, else the
simulated one; and the one start-up line that says which and why.

`--tokenizer` (default: `--model`) names a folder or a hub id; a hub id is looked up in
the HuggingFace cache (the server downloads it there first when the hub can be reached).
A name with no files here falls back to the simulated tokenizer with a warning, as the
reference does for a model it does not find: a simulator is often given made-up names.
A folder or cached model whose files are broken is a start-up error instead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from vllm_sim.config import Config, ConfigError
from vllm_sim.config.model_files import find_model_folder
from vllm_sim.engine.tokenizer.base import TemplateError, Tokenizer
from vllm_sim.engine.tokenizer.simulated import SimulatedTokenizer

FORCED: Final = "Force dummy tokenizer flag is set, using simulated tokenizer"
_TEMPLATE_MARKS: Final = ("{", "}", "\n")  # a --chat-template holding these is a template
_MAX_TEMPLATE_BYTES: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class TokenizerChoice:
    tokenizer: Tokenizer
    level: int  # logging level of the start-up line
    message: str


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


def choose_tokenizer(cfg: Config, environ: Mapping[str, str]) -> TokenizerChoice:
    """The serving tokenizer; raises ConfigError when the model's files are unusable."""
    if cfg.force_dummy_tokenizer:
        return TokenizerChoice(SimulatedTokenizer(), logging.INFO, FORCED)
    name = tokenizer_name(cfg)
    folder = find_model_folder(name, tokenizer_revision(cfg), environ, cfg.download_dir)
    return tokenizer_in(name, folder, cfg)


def tokenizer_in(name: str, folder: Path | None, cfg: Config | None = None) -> TokenizerChoice:
    """The tokenizer of model `name` whose files are in `folder` (None: not here), rendering
    chats as `cfg` says (None: the model's own template, vLLM's defaults)."""
    if folder is None or not (folder / "tokenizer.json").is_file():
        if folder is None:
            where = "no such folder, and not in the HuggingFace cache"
        else:
            where = f"{folder} holds no tokenizer.json"
        message = f"No tokenizer of {name!r} on this machine ({where}): using the simulated one"
        return TokenizerChoice(SimulatedTokenizer(), logging.WARNING, message)
    tokenizer = load_tokenizer(folder, cfg)
    return TokenizerChoice(tokenizer, logging.INFO, f"Using {tokenizer.description}")


def load_tokenizer(folder: Path, cfg: Config | None) -> Tokenizer:
    """The model's tokenizer in `folder`, rendering chats as `cfg` says."""
    from vllm_sim.engine.tokenizer.hf import HfTokenizer, TemplateOptions

    options = TemplateOptions()
    if cfg is not None:
        options = TemplateOptions(
            override=chat_template_text(cfg.chat_template),
            content_format=cfg.chat_template_content_format,
            trust_request_template=cfg.trust_request_chat_template,
            default_kwargs=cfg.default_chat_template_kwargs,
        )
    try:
        return HfTokenizer(folder, options)
    except (ValueError, TemplateError) as error:
        raise ConfigError(f"tokenizer {folder}: {error}") from None
