"""The GPU the roofline model times: --gpu, with what --gpu-spec-file changes or defines."""

from __future__ import annotations

from pathlib import Path

from vllm_sim.perf import GpuSpec, gpu_spec, load_gpu_overrides

# vLLM's larger batch defaults (8192 batched tokens, 1024 sequences for the API server)
# apply from this much device memory, on any GPU but an A100 (slower with them).
LARGE_GPU_GIB = 70


def resolve_gpu(name: str, spec_file: str = "") -> GpuSpec:
    """`name` from the GPU table, changed by `spec_file`; or the GPU `spec_file` defines
    (then `name` need not be known). ValueError with a one-line reason otherwise."""
    try:
        base: GpuSpec | None = gpu_spec(name)
    except ValueError:
        if not spec_file:
            raise
        base = None
    if not spec_file:
        assert base is not None
        return base
    try:
        return load_gpu_overrides(Path(spec_file), base)
    except ValueError as error:
        if base is None:  # the file had to define the unknown GPU, and does not
            raise ValueError(f"unknown GPU {name!r}, and gpu-spec-file {error}") from None
        raise ValueError(f"gpu-spec-file {error}") from None


def is_large_gpu(gpu: GpuSpec) -> bool:
    """Whether vLLM gives this GPU its larger default batch (see LARGE_GPU_GIB)."""
    return gpu.memory_gb >= LARGE_GPU_GIB and "a100" not in gpu.name.lower()
