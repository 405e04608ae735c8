"""Timing profiles: step-model coefficients fitted to a real vLLM run (`vllm-sim calibrate`),
loaded with --timing-profile on top of the GPU the roofline model times.

A profile is a YAML (or JSON) mapping: `coefficients`, GpuSpec field names and values,
checked as --gpu-spec-file checks them (fractions of a peak at most 1, overheads not
negative), and descriptive keys that say where the values come from (the GPU and model
measured, the measurements, what was fitted, the errors before and after, when). Only
`coefficients` changes anything; `gpu` is also compared with the GPU it is applied to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final

import yaml

from vllm_sim.perf import GPUS, GpuSpec, gpu_spec
from vllm_sim.perf.gpus import parse_mapping

# The keys a profile may hold besides `coefficients`, each descriptive only.
DESCRIPTIVE_KEYS: Final = (
    "gpu",
    "model",
    "tensor_parallel_size",
    "source",
    "fitted",
    "error_before",
    "error_after",
    "created",
)
# A profile is a few hundred bytes; anything much larger is not one.
_MAX_BYTES: Final = 1 << 20


def _settable_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(GpuSpec) if f.name != "name")


@dataclass(frozen=True, slots=True)
class TimingProfile:
    path: str
    coefficients: Mapping[str, float]
    gpu: str | None = None  # the GPU it was fitted on
    model: str | None = None
    source: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)  # every descriptive key

    def apply(self, gpu: GpuSpec) -> GpuSpec:
        """`gpu` with this profile's coefficients."""
        return replace(gpu, **self.coefficients) if self.coefficients else gpu  # type: ignore[arg-type]

    def describe(self) -> str:
        """For the start-up line: the file, where it was fitted and what it sets."""
        fitted = f", fitted on {self.gpu}" if self.gpu else ""
        values = ", ".join(f"{k} {v:.4g}" for k, v in self.coefficients.items())
        return f"timing profile {self.path}{fitted}: {values or 'no coefficient'}"

    def gpu_warning(self, gpu: GpuSpec) -> str | None:
        """A line to warn with when the profile was fitted on another GPU than `gpu`."""
        if not self.gpu or _canonical(self.gpu) == _canonical(gpu.name):
            return None
        return (
            f"timing profile {self.path} was fitted on {self.gpu}, not {gpu.name}: its "
            "coefficients are applied anyway"
        )


def _canonical(name: str) -> str:
    try:
        return gpu_spec(name).name.lower()
    except ValueError:
        return name.strip().lower()


def load_timing_profile(path: str | Path) -> TimingProfile:
    """The profile in `path`; ValueError with a one-line reason naming the file."""
    where = f"timing-profile {path}"
    data = _read(Path(path), where)
    unknown = [key for key in data if key != "coefficients" and key not in DESCRIPTIVE_KEYS]
    if unknown:
        known = ", ".join(("coefficients", *DESCRIPTIVE_KEYS))
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; known: {known}")
    if "coefficients" not in data:
        raise ValueError(f"{where}: no coefficients (a mapping of GpuSpec field names to values)")
    coefficients = data["coefficients"]
    if coefficients is None:
        coefficients = {}
    if not isinstance(coefficients, dict) or not all(isinstance(k, str) for k in coefficients):
        raise ValueError(f"{where}: coefficients must map GpuSpec field names to values")
    check_coefficients(coefficients, where)
    gpu = data.get("gpu")
    if gpu is not None and (not isinstance(gpu, str) or not gpu.strip()):
        raise ValueError(f"{where}: gpu must be a GPU's name")
    return TimingProfile(
        str(path),
        {key: float(value) for key, value in coefficients.items()},
        gpu,
        _text(data.get("model")),
        _text(data.get("source")),
        {key: data[key] for key in DESCRIPTIVE_KEYS if key in data},
    )


def check_coefficients(values: Mapping[str, object], where: str) -> None:
    """ValueError unless every key is a GpuSpec number field and every value passes the
    GPU table's own rule for that field (a fraction of a peak at most 1, an overhead not
    negative, everything else positive)."""
    known = _settable_names()
    for key, value in values.items():
        if key not in known:
            raise ValueError(f"{where}: unknown coefficient {key!r}; known: {', '.join(known)}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: {key} must be a number, not {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{where}: {key} must be a number, not {value!r}")
    try:
        # GpuSpec checks each field as it is built: the same rule as --gpu-spec-file's.
        replace(GPUS["H100"], **values)  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        # "GPU 'H100': compute_efficiency is a fraction ...": the GPU is no part of it.
        reason = str(error).split(": ", 1)[-1]
        raise ValueError(f"{where}: {reason}") from None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _read(path: Path, where: str) -> dict[str, Any]:
    try:
        if not path.is_file():
            raise ValueError(f"{where}: no such file")
        if path.stat().st_size > _MAX_BYTES:
            raise ValueError(f"{where}: larger than 1 MiB, not a timing profile")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise ValueError(f"{where}: cannot be read: {reason}") from None
    return parse_mapping(text, path, where, "a mapping with a coefficients key")


def profile_text(
    coefficients: Mapping[str, float], details: Mapping[str, Any], header: str = ""
) -> str:
    """A profile's YAML: the descriptive keys first (in DESCRIPTIVE_KEYS' order), then the
    coefficients; `header` becomes comment lines at the top."""
    body: dict[str, Any] = {key: details[key] for key in DESCRIPTIVE_KEYS if key in details}
    body["coefficients"] = {key: float(value) for key, value in coefficients.items()}
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comments + yaml.safe_dump(body, sort_keys=False, default_flow_style=False, width=1000)
