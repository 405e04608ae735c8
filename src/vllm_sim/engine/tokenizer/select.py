"""Which tokenizer serves: the model's own when its files are on this machine, else the
simulated one; and the one start-up line that says which and why.

A name with no files here falls back to the simulated tokenizer with a warning, as the
reference does for a model it does not find: a simulator is often given made-up names.
A folder or cached model whose files are broken is a start-up error instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_sim.engine.tokenizer.base import TemplateError, Tokenizer
from vllm_sim.engine.tokenizer.simulated import SimulatedTokenizer

if TYPE_CHECKING:  # the HuggingFace backend is imported only when a model's files are here
    from vllm_sim.engine.tokenizer.hf import TemplateOptions


class TokenizerSetupError(Exception):
    """The model's tokenizer files are there but unusable; `str(error)` is the reason."""


@dataclass(frozen=True, slots=True)
class TokenizerChoice:
    tokenizer: Tokenizer
    level: int  # logging level of the start-up line
    message: str


def tokenizer_in(
    name: str, folder: Path | None, options: Callable[[], TemplateOptions] | None = None
) -> TokenizerChoice:
    """The tokenizer of model `name` whose files are in `folder` (None: not here), rendering
    chats with `options()` (None: the model's own template, vLLM's defaults). `options` is
    called only when the files are here: a chat template is not read for no tokenizer."""
    if folder is None or not (folder / "tokenizer.json").is_file():
        if folder is None:
            where = "no such folder, and not in the HuggingFace cache"
        else:
            where = f"{folder} holds no tokenizer.json"
        message = f"No tokenizer of {name!r} on this machine ({where}): using the simulated one"
        return TokenizerChoice(SimulatedTokenizer(), logging.WARNING, message)
    tokenizer = load_tokenizer(folder, None if options is None else options())
    return TokenizerChoice(tokenizer, logging.INFO, f"Using {tokenizer.description}")


def load_tokenizer(folder: Path, options: TemplateOptions | None = None) -> Tokenizer:
    """The model's tokenizer in `folder`; raises TokenizerSetupError for broken files."""
    from vllm_sim.engine.tokenizer.hf import HfTokenizer, TemplateOptions

    try:
        return HfTokenizer(folder, options or TemplateOptions())
    except (ValueError, TemplateError) as error:
        raise TokenizerSetupError(f"tokenizer {folder}: {error}") from None
