"""The recorded vLLM run bundled in bench/data, and the flags of the server that ran it."""

from __future__ import annotations

from pathlib import Path

# Llama 3.1 8B on one RTX PRO 6000: 300 requests, each with its measured times.
RECORDED_TRACE = (
    Path(__file__).resolve().parents[2] / "bench" / "data" / "llmservingsim_rtxpro6000_llama8b.csv"
)
RECORDED_RUN_FLAGS = [
    "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX-PRO-6000",
    "--timing-model", "roofline", "--max-num-seqs", "128", "--max-num-batched-tokens", "2048",
    "--num-gpu-blocks-override", "35913", "--max-model-len", "8192",
]  # fmt: skip
