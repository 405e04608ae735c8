"""--timing-profile: a file of step-model coefficients (what `vllm-sim calibrate` writes),
checked as --gpu-spec-file is, applied under --timing-model roofline only; every bad file
is a one-line configuration error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.config import load, load_error, write_yaml
from vllm_sim.config.timing_profile import load_timing_profile, profile_text
from vllm_sim.perf import gpu_spec

ROOFLINE = ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--timing-model", "roofline")


def profile(tmp_path: Path, text: str, name: str = "profile.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_written_profile_reads_back_with_its_descriptive_keys(tmp_path: Path) -> None:
    text = profile_text(
        {"weight_bandwidth_efficiency": 0.7, "api_server_s": 0.02},
        {
            "created": "2025-01-01T00:00:00+00:00",
            "gpu": "RTX-PRO-6000",
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "fitted": ["weight_bandwidth_efficiency", "api_server_s"],
            "error_after": {"fit": {"ttft_mean": 0.01}},
        },
        "written by a test",
    )
    assert text.startswith("# written by a test\ngpu: RTX-PRO-6000\n")
    loaded = load_timing_profile(profile(tmp_path, text))
    assert loaded.coefficients == {"weight_bandwidth_efficiency": 0.7, "api_server_s": 0.02}
    assert (loaded.gpu, loaded.model) == ("RTX-PRO-6000", "meta-llama/Llama-3.1-8B-Instruct")
    assert loaded.details["fitted"] == ["weight_bandwidth_efficiency", "api_server_s"]
    changed = loaded.apply(gpu_spec("RTX-PRO-6000"))
    assert (changed.weight_bandwidth_efficiency, changed.api_server_s) == (0.7, 0.02)
    assert changed.bandwidth_tbps == gpu_spec("RTX-PRO-6000").bandwidth_tbps
    assert loaded.gpu_warning(gpu_spec("rtx-pro-6000")) is None  # the same GPU, spelt otherwise
    warning = loaded.gpu_warning(gpu_spec("H100"))
    assert warning is not None and "fitted on RTX-PRO-6000, not H100" in warning


def test_json_profiles_load_too(tmp_path: Path) -> None:
    path = profile(tmp_path, '{"coefficients": {"compute_efficiency": 0.5}}', "p.json")
    assert load(*ROOFLINE, "--timing-profile", path).timing_profile == path
    assert load_timing_profile(path).coefficients == {"compute_efficiency": 0.5}


def test_a_profile_is_a_yaml_key_too(tmp_path: Path) -> None:
    path = profile(tmp_path, "coefficients:\n  compute_efficiency: 0.5\n")
    config = write_yaml(
        tmp_path,
        "model: meta-llama/Llama-3.1-8B-Instruct\ntiming-model: roofline\n"
        f"timing-profile: {path}\n",
    )
    assert load("--config", config).timing_profile == path


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("coefficients:\n  bandwith_tbps: 3\n", "unknown coefficient 'bandwith_tbps'; known: "),
        ("coefficients:\n  name: X\n", "unknown coefficient 'name'"),
        (
            "coefficients:\n  compute_efficiency: 1.5\n",
            "compute_efficiency is a fraction of peak, at most 1, not 1.5",
        ),
        ("coefficients:\n  api_server_s: -0.1\n", "api_server_s must be positive, not -0.1"),
        ("coefficients:\n  api_server_s: .nan\n", "api_server_s must be a number, not nan"),
        ("coefficients:\n  api_server_s: fast\n", "api_server_s must be a number, not 'fast'"),
        ("coefficients:\n  step_overhead_s: true\n", "step_overhead_s must be a number"),
        ("coefficients: [1, 2]\n", "coefficients must map GpuSpec field names to values"),
        ("gpu: H100\n", "no coefficients"),
        ("coefficients: {}\nowner: me\n", "unknown key 'owner'; known: coefficients, gpu"),
        ("- just\n- a list\n", "must hold a mapping with a coefficients key"),
        ("coefficients: {a: [\n", "not valid JSON or YAML"),
    ],
)
def test_a_bad_profile_is_a_one_line_error_naming_the_file(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = profile(tmp_path, text)
    error = load_error(*ROOFLINE, "--timing-profile", path)
    assert error.startswith(f"timing-profile {path}: ")
    assert reason in error
    assert "\n" not in error


def test_a_missing_profile_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "none.yaml"
    assert load_error(*ROOFLINE, "--timing-profile", str(path)) == (
        f"timing-profile {path}: no such file"
    )


def test_a_profile_needs_the_roofline_model(tmp_path: Path) -> None:
    """The coefficients are the roofline model's: under the token clock or a measured
    table they would change nothing, which is refused rather than silently ignored."""
    path = profile(tmp_path, "coefficients:\n  compute_efficiency: 0.5\n")
    for model in ("constant", "table"):
        error = load_error("--model", "m", "--timing-model", model, "--timing-profile", path)
        assert error in (
            "--timing-profile sets the roofline model's coefficients: it needs --timing-model "
            "roofline",
            "--timing-model table needs --timing-table, a CSV or NPZ file of step times",
        )
    assert load_error("--model", "m", "--timing-profile", path).startswith("--timing-profile")
