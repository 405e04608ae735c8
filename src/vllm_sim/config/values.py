"""Value types of settings that are neither numbers nor text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# What times tokens: the reference's sampled latencies, or vLLM V1's step loop timed by a
# performance model (closed-form from config.json and the GPU, or measured tables).
TimingModel = Literal["constant", "roofline", "table"]

# vLLM's --uvicorn-log-level choices.
UvicornLogLevel = Literal["critical", "debug", "error", "info", "trace", "warning"]


@dataclass(frozen=True, slots=True)
class LoraModule:
    """One `--lora-modules` entry; an empty base model means "the served model"."""

    name: str
    path: str = ""
    base_model_name: str = ""
