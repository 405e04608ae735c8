"""The step engine's settings: the timing model, the GPU, vLLM's memory and dtype flags,
and the batch defaults `vllm serve` picks by GPU class."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.config import load, load_error, write_yaml


def test_the_constant_model_is_the_default_and_keeps_the_usual_batch_limits() -> None:
    cfg = load("--model", "m")
    assert cfg.timing_model == "constant"
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (256, 2048)
    assert cfg.gpu == "H100" and cfg.tensor_parallel_size == 1
    assert cfg.gpu_memory_utilization == pytest.approx(0.92)  # vLLM 0.32's default


@pytest.mark.parametrize(
    ("gpu", "seqs", "tokens"),
    [("H100", 1024, 8192), ("H200", 1024, 8192), ("L40S", 256, 2048), ("A100-80GB", 256, 2048)],
)
def test_a_step_engine_takes_vllms_batch_defaults_for_the_gpu(
    gpu: str, seqs: int, tokens: int
) -> None:
    cfg = load("--model", "m", "--timing-model", "roofline", "--gpu", gpu)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (seqs, tokens)


def test_batch_limits_given_on_the_command_line_or_in_yaml_win(tmp_path: Path) -> None:
    cfg = load("--model", "m", "--timing-model", "roofline", "--max-num-seqs", "64")
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (64, 8192)
    path = write_yaml(tmp_path, "model: m\ntiming-model: roofline\nmax-num-batched-tokens: 4096\n")
    cfg = load("--config", path)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (1024, 4096)


def test_vllm_flags_of_the_model_and_memory_take_effect() -> None:
    cfg = load(
        "--model", "m", "-tp", "4", "--gpu-memory-utilization", "0.8", "--dtype", "float16",
        "--kv-cache-dtype", "fp8", "--quantization", "fp8", "--num-gpu-blocks-override", "5000",
    )  # fmt: skip
    assert cfg.tensor_parallel_size == 4
    assert cfg.gpu_memory_utilization == pytest.approx(0.8)
    assert (cfg.dtype, cfg.kv_cache_dtype, cfg.quantization) == ("float16", "fp8", "fp8")
    assert cfg.num_gpu_blocks_override == 5000


def test_gpu_names_are_matched_loosely() -> None:
    assert load("--model", "m", "--gpu", "h100-sxm").gpu == "h100-sxm"


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--timing-model", "exact"],
            "unknown timing-model exact, supported models are: constant, roofline and table",
        ),
        (
            ["--gpu", "Z100"],
            "unknown GPU 'Z100'; known: H100, H100-PCIe, H100-NVL, H200, H20, B200, GB200, "
            "A100-80GB, A100-40GB, A100-80GB-PCIe, A100-40GB-PCIe, L4, L40S, RTX-4090, "
            "RTX-PRO-6000, MI300X",
        ),
        (
            ["--timing-model", "table"],
            "--timing-model table needs --timing-table, a CSV or NPZ file of step times",
        ),
        (["--timing-table", "/no/such/table.csv"], "timing-table /no/such/table.csv is not a file"),
        (["--tensor-parallel-size", "0"], "tensor parallel size must be between 1 and 64"),
        (["--time-scale", "0"], "time scale must be between 0.01 and 1000"),
        (["--gpu-memory-utilization", "1.5"], "gpu-memory-utilization must be between 0.01 and 1"),
        (
            ["--num-gpu-blocks-override", "0"],
            "num-gpu-blocks-override must be between 1 and 100000000",
        ),
    ],
)
def test_bad_settings_are_one_line_errors(argv: list[str], error: str) -> None:
    assert load_error("--model", "m", *argv) == error


def test_a_gpu_spec_file_changes_or_defines_a_gpu(tmp_path: Path) -> None:
    changed = tmp_path / "h100.yaml"
    changed.write_text("bandwidth_tbps: 3.0\ncompute_efficiency: 0.5\n")
    assert load("--model", "m", "--gpu-spec-file", str(changed)).gpu_spec_file == str(changed)
    new = tmp_path / "b200.json"
    new.write_text('{"name": "B200", "bf16_tflops": 2250, "memory_gb": 180, "bandwidth_tbps": 8}')
    cfg = load("--model", "m", "--timing-model", "roofline", "--gpu", "B200",
               "--gpu-spec-file", str(new))  # fmt: skip
    assert cfg.max_num_seqs == 1024  # a large GPU, from the file's figures


def test_a_bad_gpu_spec_file_names_the_file_and_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "gpu.yaml"
    bad.write_text("bandwith_tbps: 3.0\n")
    error = load_error("--model", "m", "--gpu-spec-file", str(bad))
    assert error.startswith(f"gpu-spec-file {bad}: unknown key 'bandwith_tbps'")
    assert "\n" not in error
