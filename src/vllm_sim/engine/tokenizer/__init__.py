"""Tokenizers: the interface and the simulated implementation."""

from vllm_sim.engine.tokenizer.base import (
    ChatInput,
    ChatTurn,
    TemplateError,
    Tokenizer,
    chat_from_turns,
)
from vllm_sim.engine.tokenizer.fnv import fnv1a_32
from vllm_sim.engine.tokenizer.simulated import (
    UNKNOWN_PIECE_FORMAT,
    SimulatedTokenizer,
    render_chat_text,
)
from vllm_sim.engine.tokenizer.vocab import PieceVocabulary

__all__ = [
    "UNKNOWN_PIECE_FORMAT",
    "ChatInput",
    "ChatTurn",
    "PieceVocabulary",
    "SimulatedTokenizer",
    "TemplateError",
    "Tokenizer",
    "chat_from_turns",
    "fnv1a_32",
    "render_chat_text",
]
