"""Expert parallelism (vLLM's --enable-expert-parallel with --data-parallel-size): an MoE
model's routed experts spread whole over tensor x data parallel GPUs, each data-parallel
rank with its own batch and KV cache, its experts serving every rank's tokens, and each MoE
layer sending the tokens to their experts and back instead of all-reducing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.config import load
from vllm_sim.perf import RooflineModel, StepLoad
from vllm_sim.perf.gpus import GPUS
from vllm_sim.perf.shape import ModelShape
from vllm_sim.server.step_timing import step_timing

CONFIGS = Path(__file__).parents[2] / "data" / "model_configs"
QWEN_MOE = CONFIGS / "Qwen3-30B-A3B"
DEEPSEEK = CONFIGS / "DeepSeek-V3"


def decodes(batch: int, context: int) -> StepLoad:
    load = StepLoad()
    load.add_decodes(batch, batch * context)
    return load


def roofline(folder: Path, *flags: str) -> RooflineModel:
    timing = step_timing(load("--model", str(folder), "--timing-model", "roofline", *flags), {})
    assert timing is not None and isinstance(timing.model, RooflineModel)
    return timing.model


def test_each_gpu_holds_its_share_of_the_experts_whole() -> None:
    """Qwen3-30B-A3B in bf16 on two GPUs: under TP 2 each holds half of everything; under
    DP 2 + EP 2 each holds every non-expert weight and half of the 128 experts; without
    EP each DP rank (TP 1) holds them all."""
    shape = ModelShape.from_config(json.loads((QWEN_MOE / "config.json").read_text()))
    experts = shape.expert_params() * 2.0  # 48 x 128 x 3 x 2,048 x 768 x 2 bytes
    assert experts == 48 * 128 * 3 * 2048 * 768 * 2
    tp2 = roofline(QWEN_MOE, "-tp", "2")
    ep = roofline(QWEN_MOE, "-dp", "2", "--enable-expert-parallel")
    dp = roofline(QWEN_MOE, "-dp", "2")
    total = tp2.weight_bytes_total()
    assert tp2.weight_bytes_per_gpu() == pytest.approx(total / 2)
    assert ep.expert_parallel == 2 and ep.data_parallel == 2
    assert ep.weight_bytes_per_gpu() == pytest.approx(total - experts / 2)
    assert dp.expert_parallel == 1 and dp.weight_bytes_per_gpu() == pytest.approx(total)
    timing = step_timing(
        load("--model", str(QWEN_MOE), "--timing-model", "roofline", "-dp", "2", "-ep"), {}
    )
    assert timing is not None
    assert "experts over 2 GPUs (64 each, data-parallel ranks 2)" in timing.description


def test_a_data_parallel_rank_with_expert_parallelism_reads_half_the_experts() -> None:
    """Two DP ranks of Qwen3-30B-A3B, 32 sequences each: without EP each GPU streams the
    experts its rank's 32 tokens route to, out of all 128; with EP the half it holds,
    which both ranks' 64 tokens use: the decode step is shorter by the difference at the
    weights' bandwidth, less the all-to-alls it adds."""
    step = decodes(32, 1024)
    dp = roofline(QWEN_MOE, "-dp", "2")
    ep = roofline(QWEN_MOE, "-dp", "2", "--enable-expert-parallel")
    gpu = GPUS["H100"]
    experts = dp.shape.expert_params() * 2.0
    read = experts * (1 - (1 - 8 / 128) ** 32) - experts / 2 * (1 - (1 - 8 / 128) ** 64)
    saved = read / (gpu.bandwidth_bytes_per_s * gpu.weight_bandwidth_efficiency)
    added = 2 * 48 * gpu.allreduce_s  # a dispatch and a combine per MoE layer
    a2a_bytes = 32 * 2 * 48 * 8 * 2048 * 2.0 * (1 / 2)
    added += a2a_bytes / gpu.link_bytes_per_s(2)
    difference = dp.step_seconds(step) - ep.step_seconds(step)
    assert difference == pytest.approx(saved - added, rel=1e-6)
    assert difference > 0.25 * dp.step_seconds(step)


def test_mla_decodes_faster_under_dp_ep_than_tp_by_the_latent_reads() -> None:
    """DeepSeek-V3 on 8 x H200, 256 sequences of 4,096 tokens: under TP 8 every GPU reads
    every sequence's latent (MLA's KV is one head, replicated on each tensor-parallel
    rank); under DP 8 + EP 8 each reads its rank's 32, and holds its MLA projections
    whole. The step is faster by those bytes, and by the per-sequence and collective
    costs of the sequences and all-reduces it no longer has."""
    tp = roofline(DEEPSEEK, "--gpu", "H200", "-tp", "8")
    ep = roofline(DEEPSEEK, "--gpu", "H200", "-dp", "8", "-ep", "--max-model-len", "4096")
    kv_per_token = tp.kv_bytes_per_token()
    assert kv_per_token == ep.kv_bytes_per_token() == 61 * 576 * 2  # bf16 latent, every rank
    tp_step, ep_step = tp.step_seconds(decodes(256, 4096)), ep.step_seconds(decodes(32, 4096))
    gpu = GPUS["H200"]
    kv_bandwidth = gpu.bandwidth_bytes_per_s * gpu.kv_bandwidth_efficiency
    kv_saved = (256 - 32) * 4096 * kv_per_token / kv_bandwidth
    assert ep.weight_bytes_per_gpu() > tp.weight_bytes_per_gpu()  # projections held whole
    # What a step streams besides the experts (not the input embedding: a gather), whole
    # on each DP rank, an eighth of it on each TP rank.
    experts = tp.shape.expert_params() * tp.precision.expert_bytes()
    streamed = tp.weight_bytes_read() - experts
    weights_added = (
        streamed * (1 - 1 / 8) / (gpu.bandwidth_bytes_per_s * gpu.weight_bandwidth_efficiency)
    )
    others = (256 - 32) * gpu.per_request_overhead_s
    others += tp._communication_s(256, 256) - ep._communication_s(32, 32)
    assert ep_step < tp_step
    assert tp_step - ep_step == pytest.approx(kv_saved - weights_added + others, rel=1e-6)


def test_a_group_wider_than_a_server_sends_over_the_network() -> None:
    """An expert group of 16 GPUs spans two servers: its all-to-alls move at the
    network's 50 GB/s, not NVLink's 450."""
    gpu = GPUS["H100"]
    assert gpu.link_bytes_per_s(8) == 450e9
    assert gpu.link_bytes_per_s(16) == 50e9
    slow = replace(gpu, network_gbps=25.0)
    assert slow.link_bytes_per_s(16) == 25e9


def test_a_dense_model_ignores_expert_parallelism() -> None:
    dense = roofline(CONFIGS / "Llama-3.1-8B-Instruct", "-dp", "2", "-ep")
    assert dense.expert_parallel == 1
