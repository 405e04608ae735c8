"""Setting up the step engine's timing: the model's shape, the GPU, the KV blocks, and the
one-line refusals when they cannot be had."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.config import load
from tests.unit.perf.test_table import CSV_ROWS
from vllm_sim.config import ConfigError
from vllm_sim.perf import (
    PRESETS,
    DraftingStepModel,
    RooflineModel,
    StepLoad,
    TableModel,
    head_share,
)
from vllm_sim.perf.speculative import DEFAULT_DRAFT_MODEL_SHARE, DEFAULT_HEAD_SHARE
from vllm_sim.server.step_timing import roofline_gpu, step_timing

# Llama-3.1-8B's shape, as its config.json gives it.
LLAMA_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
}


def model_folder(tmp_path: Path, config: dict[str, object]) -> str:
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_the_constant_model_needs_no_step_timing() -> None:
    assert step_timing(load("--model", "m"), {}) is None


def test_roofline_reads_the_models_config_json(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, LLAMA_8B)
    cfg = load("--model", folder, "--timing-model", "roofline", "--max-model-len", "8192")
    timing = step_timing(cfg, {})
    assert timing is not None and isinstance(timing.model, RooflineModel)
    assert "config.json" in timing.description
    # (80 GiB x 0.92 - 15 GiB of weights - the reserve) / (128 KiB x 16 tokens per block)
    assert 27_000 < timing.num_gpu_blocks < 31_000


def test_memory_flags_change_the_kv_blocks(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, LLAMA_8B)
    base = ["--model", folder, "--timing-model", "roofline", "--max-model-len", "8192"]
    blocks = step_timing(load(*base), {})
    fp8 = step_timing(load(*base, "--kv-cache-dtype", "fp8"), {})
    less = step_timing(load(*base, "--gpu-memory-utilization", "0.5"), {})
    tp2 = step_timing(load(*base, "-tp", "2"), {})
    override = step_timing(load(*base, "--num-gpu-blocks-override", "1234"), {})
    assert blocks and fp8 and less and tp2 and override
    assert fp8.num_gpu_blocks == pytest.approx(2 * blocks.num_gpu_blocks, rel=0.01)
    assert less.num_gpu_blocks < blocks.num_gpu_blocks
    assert tp2.num_gpu_blocks > blocks.num_gpu_blocks  # half the weights and KV per GPU
    assert override.num_gpu_blocks == 1234


def test_a_known_model_without_its_files_uses_its_bundled_shape() -> None:
    cfg = load("--model", "meta-llama/Llama-3.1-8B-Instruct", "--timing-model", "roofline")
    timing = step_timing(cfg, {})
    assert timing is not None and "bundled shape" in timing.description


def test_an_unknown_model_without_its_files_is_refused() -> None:
    cfg = load("--model", "acme/secret-model", "--timing-model", "roofline")
    with pytest.raises(ConfigError) as info:
        step_timing(cfg, {})
    assert str(info.value).startswith(
        "--timing-model roofline needs the model's config.json: no config.json of "
        "'acme/secret-model' is on this machine"
    )


def test_a_model_too_big_for_the_gpu_is_refused() -> None:
    cfg = load(
        "--model", "meta-llama/Llama-3.1-70B-Instruct", "--timing-model", "roofline",
        "--gpu", "L4",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="no memory is left for the KV cache"):
        step_timing(cfg, {})


def test_a_kv_cache_shorter_than_the_context_is_refused(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, LLAMA_8B)
    cfg = load("--model", folder, "--timing-model", "roofline", "--num-gpu-blocks-override",
               "100", "--max-model-len", "8192")  # fmt: skip
    with pytest.raises(ConfigError) as info:
        step_timing(cfg, {})
    assert str(info.value) == (
        "the KV cache holds 1600 tokens (100 blocks), fewer than one sequence of "
        "--max-model-len 8192; lower --max-model-len to 1600 or give the cache more memory"
    )


def test_an_incomplete_config_json_names_the_missing_key(tmp_path: Path) -> None:
    broken = {k: v for k, v in LLAMA_8B.items() if k != "num_hidden_layers"}
    cfg = load("--model", model_folder(tmp_path, broken), "--timing-model", "roofline",
               "--max-model-len", "4096")  # fmt: skip
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        step_timing(cfg, {})


def test_table_mode_loads_the_table(tmp_path: Path) -> None:
    table = tmp_path / "steps.csv"
    table.write_text(
        "prefill_tokens,decode_batch,context,ms\n"
        "512,0,0,20\n2048,0,0,60\n0,1,1024,8\n0,64,1024,14\n0,1,4096,9\n0,64,4096,30\n"
    )
    cfg = load("--model", "m", "--timing-model", "table", "--timing-table", str(table))
    timing = step_timing(cfg, {})
    assert timing is not None and isinstance(timing.model, TableModel)
    assert timing.num_gpu_blocks == cfg.kv_cache_size


def test_a_malformed_table_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "steps.csv"
    table.write_text("tokens,ms\n1,2\n")
    cfg = load("--model", "m", "--timing-model", "table", "--timing-table", str(table))
    with pytest.raises(ConfigError, match=r"^timing-table: "):
        step_timing(cfg, {})


LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
ROOFLINE = ["--model", LLAMA, "--timing-model", "roofline", "--max-model-len", "8192"]


def speculating(method: str, **extra: object) -> list[str]:
    return ["--speculative-config", json.dumps({"method": method, **extra})]


def test_a_lookup_drafter_leaves_the_step_model_as_it_is() -> None:
    timing = step_timing(load(*ROOFLINE, *speculating("ngram", num_speculative_tokens=3)), {})
    assert timing is not None and isinstance(timing.model, RooflineModel)
    assert timing.description.endswith(
        "; speculative decoding: ngram, 3 drafts a step, drafted for free"
    )


def test_a_draft_head_costs_its_share_of_the_target() -> None:
    args = speculating(
        "eagle", model="yuhuili/EAGLE-LLaMA3.1-Instruct-8B", num_speculative_tokens=4
    )
    timing = step_timing(load(*ROOFLINE, *args), {})
    assert timing is not None and isinstance(timing.model, DraftingStepModel)
    assert timing.model.passes == 4
    assert timing.model.share == pytest.approx(head_share(PRESETS[LLAMA]))
    assert "each drafted at 9.3% of a decode step" in timing.description


def test_a_draft_model_of_known_shape_costs_its_share() -> None:
    small = "meta-llama/Llama-3.2-3B-Instruct"
    args = speculating("draft_model", model=small, num_speculative_tokens=5)
    timing = step_timing(load(*ROOFLINE, *args), {})
    assert timing is not None and isinstance(timing.model, DraftingStepModel)
    assert timing.model.share == pytest.approx(PRESETS[small].params() / PRESETS[LLAMA].params())
    unknown = speculating("draft_model", model="acme/tiny-draft", num_speculative_tokens=5)
    default = step_timing(load(*ROOFLINE, *unknown), {})
    assert default is not None and isinstance(default.model, DraftingStepModel)
    assert default.model.share == DEFAULT_DRAFT_MODEL_SHARE
    assert "the default share" in default.description


def test_a_table_pays_for_a_drafter_at_the_default_share(tmp_path: Path) -> None:
    path = tmp_path / "steps.csv"
    path.write_text(CSV_ROWS)
    args = ["--model", "m", "--timing-model", "table", "--timing-table", str(path)]
    timing = step_timing(load(*args, *speculating("mtp", num_speculative_tokens=2)), {})
    assert timing is not None and isinstance(timing.model, DraftingStepModel)
    assert isinstance(timing.model.target, TableModel)
    assert (timing.model.passes, timing.model.share) == (2, DEFAULT_HEAD_SHARE)


def _decode_step(model: object) -> float:
    assert isinstance(model, RooflineModel)
    load = StepLoad()
    load.add_decodes(64, 64 * 2048)
    return model.step_seconds(load)


def test_a_timing_profile_changes_the_step_times_and_is_named(tmp_path: Path) -> None:
    """The profile's coefficients apply on top of --gpu: a lower weight bandwidth
    efficiency makes a decode step slower, the API server's time is its own; the start-up
    line names the profile, and a profile fitted on another GPU is applied with a warning."""
    profile = tmp_path / "fitted.yaml"
    profile.write_text(
        "gpu: RTX-PRO-6000\ncoefficients:\n  weight_bandwidth_efficiency: 0.3\n"
        "  api_server_s: 0.02\n"
    )
    base = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--timing-model", "roofline"]
    plain = step_timing(load(*base), {})
    fitted = step_timing(load(*base, "--timing-profile", str(profile)), {})
    assert plain is not None and fitted is not None
    assert _decode_step(fitted.model) > 1.3 * _decode_step(plain.model)
    assert fitted.model.admission_delay(0) == pytest.approx(0.02)
    assert f"coefficients from timing profile {profile}, fitted on RTX-PRO-6000" in (
        fitted.description
    )
    assert fitted.warnings == (
        f"timing profile {profile} was fitted on RTX-PRO-6000, not H100: its coefficients "
        "are applied anyway",
    )
    same_gpu = step_timing(
        load(*base, "--gpu", "rtx-pro-6000", "--timing-profile", str(profile)), {}
    )
    assert same_gpu is not None and same_gpu.warnings == ()


def test_a_profile_applies_after_the_gpu_spec_file(tmp_path: Path) -> None:
    spec = tmp_path / "gpu.yaml"
    spec.write_text("weight_bandwidth_efficiency: 0.9\nbandwidth_tbps: 2.0\n")
    profile = tmp_path / "fitted.yaml"
    profile.write_text("coefficients:\n  weight_bandwidth_efficiency: 0.45\n")
    cfg = load(
        "--model", "meta-llama/Llama-3.1-8B-Instruct", "--timing-model", "roofline",
        "--gpu-spec-file", str(spec), "--timing-profile", str(profile),
    )  # fmt: skip
    gpu, _, _ = roofline_gpu(cfg)
    assert (gpu.bandwidth_tbps, gpu.weight_bandwidth_efficiency) == (2.0, 0.45)
    gpu, _, _ = roofline_gpu(cfg, {"weight_bandwidth_efficiency": 0.3})  # calibration's last
    assert gpu.weight_bandwidth_efficiency == 0.3


def test_coefficients_passed_in_are_checked() -> None:
    cfg = load("--model", "meta-llama/Llama-3.1-8B-Instruct", "--timing-model", "roofline")
    with pytest.raises(ConfigError, match="compute_efficiency is a fraction of peak"):
        step_timing(cfg, {}, {"compute_efficiency": 2.0})
