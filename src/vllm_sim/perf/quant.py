"""Weight quantization as vLLM infers it: bytes per weight, which parts stay 16-bit, and
the tensor peak the matmuls run at.

vLLM (config/model.py, ModelConfig._verify_quantization) takes the method from a
checkpoint's `quantization_config.quant_method` (GPTQ and AWQ checkpoints run as their
Marlin variants) and refuses a `--quantization` naming another method; without a
quantization_config, `--quantization fp8` quantizes a 16-bit checkpoint's linear layers
to FP8 at load. What each method stores per weight, scales included:

- fp8 (Fp8Config, compressed-tensors 8-bit float, modelopt FP8): 1 byte; per-tensor or
  128x128-block scales are negligible. Matmuls on FP8 tensor cores where the GPU has them
  (W8A8), else weight-only through Marlin in 16 bits (A100).
- mxfp4 (gpt-oss): 4-bit values and one 8-bit scale per 32: 4.25 bits. Experts only.
- nvfp4 (modelopt NVFP4, compressed-tensors nvfp4-pack-quantized): 4-bit values and one
  FP8 scale per 16: 4.5 bits.
- awq, gptq, compressed-tensors int4/int8 (W4A16, W8A16): `bits` per weight plus a 16-bit
  scale per group (and a packed zero point when asymmetric).
- bitsandbytes (quantized at load, like fp8): NF4 with a 32-bit absmax per 64: 4.5 bits.
The 4-bit formats run on FP4 tensor cores where the GPU has them (B200, GB200: NVFP4 and
MXFP4), else dequantized into 16-bit matmuls (Marlin, Triton). A method not listed here
is timed as 16-bit weights. The embedding and the LM
head stay 16-bit; so does whatever a config's `modules_to_not_convert` / `ignore` /
`ignored_layers` lists (gpt-oss: attention and router; many MoE checkpoints: attention).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

Compute = Literal["bf16", "fp8", "fp4"]

_FAMILIES: Final = {
    "fp8": "fp8",
    "ptpc_fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "modelopt": "modelopt",
    "modelopt_fp4": "modelopt",
    "mxfp4": "mxfp4",
    "gpt_oss_mxfp4": "mxfp4",
    "nvfp4": "nvfp4",
    "awq": "awq",
    "awq_marlin": "awq",
    "auto_awq": "awq",
    "gptq": "gptq",
    "gptq_marlin": "gptq",
    "auto_gptq": "gptq",
    "compressed-tensors": "compressed-tensors",
    "compressed_tensors": "compressed-tensors",
}
# Methods a --quantization flag alone (no quantization_config) applies at load.
_ONLINE: Final = frozenset({"fp8", "ptpc_fp8", "fbgemm_fp8", "bitsandbytes"})


@dataclass(frozen=True, slots=True)
class WeightPrecision:
    """How a model's weights are stored and multiplied: `method` (vLLM's name, "" for
    none), `quantized_bytes` per weight of the quantized linear layers, the peak their
    matmuls run at (`compute`), and which parts are quantized (attention, the dense MLP
    and shared experts, the routed experts). Unquantized parts are `base_bytes` (the
    model's --dtype), the embedding and LM head too."""

    method: str = ""
    quantized_bytes: float = 2.0
    compute: Compute = "bf16"
    attention: bool = False
    dense: bool = False
    experts: bool = False
    base_bytes: float = 2.0

    @property
    def is_quantized(self) -> bool:
        return bool(self.method)

    def attention_bytes(self) -> float:
        return self.quantized_bytes if self.attention else self.base_bytes

    def dense_bytes(self) -> float:
        return self.quantized_bytes if self.dense else self.base_bytes

    def expert_bytes(self) -> float:
        return self.quantized_bytes if self.experts else self.base_bytes

    def peak_tflops(self, quantized: bool, bf16: float, fp8: float | None, fp4: float) -> float:
        """The tensor peak a part's matmuls reach: the quantized format's own where the
        GPU has it, 16-bit otherwise (and for unquantized parts)."""
        if not quantized:
            return bf16
        if self.compute == "fp4" and fp4:
            return fp4
        if self.compute == "fp8" and fp8:
            return fp8
        return bf16

    def describe(self) -> str:
        if not self.method:
            return f"{self.base_bytes:g}-byte weights"
        parts = [
            name
            for name, on in (
                ("attention", self.attention),
                ("dense MLP", self.dense),
                ("experts", self.experts),
            )
            if on
        ]
        return f"{self.method} ({self.quantized_bytes:g} B/weight: {', '.join(parts)})"


def uniform_precision(weight_bytes: float, compute: Compute = "bf16") -> WeightPrecision:
    """Every linear layer at `weight_bytes` (the roofline model's older single figure):
    quantized when under 2 bytes, the embedding and LM head at 16 bits at least."""
    if weight_bytes >= 2.0:
        return WeightPrecision(base_bytes=weight_bytes)
    return WeightPrecision(
        method="fp8" if weight_bytes == 1.0 else "quantized",
        quantized_bytes=weight_bytes,
        compute=compute,
        attention=True,
        dense=True,
        experts=True,
        base_bytes=2.0,
    )


def quantization_config(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A config.json's quantization_config (its text_config's when nested there)."""
    for where in (config, config.get("text_config")):
        if isinstance(where, Mapping):
            value = where.get("quantization_config")
            if isinstance(value, Mapping):
                return value
    return None


def method_family(name: str) -> str:
    """vLLM's quantization method `name` with its variants folded (gptq_marlin: gptq)."""
    key = name.strip().lower()
    return _FAMILIES.get(key, key)


def weight_precision(
    quant: Mapping[str, Any] | None, flag: str | None, base_bytes: float = 2.0
) -> WeightPrecision:
    """The precision vLLM runs a checkpoint at: from its `quantization_config` (`quant`),
    else from --quantization (`flag`; only the FP8 methods quantize a 16-bit checkpoint
    at load). ValueError with vLLM's refusal when both name methods and they differ, or for
    a config whose method this model does not know."""
    if quant is None:
        if not flag:
            return WeightPrecision(base_bytes=base_bytes)
        if flag.strip().lower() in _ONLINE:
            name, size, compute = _format(method_family(flag), {})
            return WeightPrecision(name, size, compute, True, True, True, base_bytes)
        raise ValueError(
            f"--quantization {flag} needs a checkpoint quantized with it (a quantization_config "
            "in its config.json); only fp8 quantizes a 16-bit model at load"
        )
    method = str(quant.get("quant_method") or "").strip().lower()
    if flag and method and method_family(flag) != method_family(method):
        raise ValueError(
            f"Quantization method specified in the model config ({method}) does not match the "
            f"quantization method specified in the `quantization` argument ({flag})."
        )
    family = method_family(method)
    skip = _skipped_modules(quant)
    attention = not _matches(skip, "self_attn.q_proj", "self_attn")
    dense = not _matches(skip, "mlp.down_proj", "mlp.shared_expert")
    experts = not _matches(skip, "mlp.experts.0.down_proj", "mlp.experts")
    name, size, compute = _format(family, quant)
    if family == "mxfp4":
        attention = dense = False  # gpt-oss's MXFP4 is for its experts only
    return WeightPrecision(name, size, compute, attention, dense, experts, base_bytes)


def _format(family: str, quant: Mapping[str, Any]) -> tuple[str, float, Compute]:
    if family == "fp8":
        return "fp8", 1.0, "fp8"
    if family == "mxfp4":
        return "mxfp4", (4 + 8 / 32) / 8, "fp4"
    if family == "nvfp4":
        return "nvfp4", (4 + 8 / 16) / 8, "fp4"
    if family == "modelopt":
        algo = str(quant.get("quant_algo") or _nested(quant, "quantization", "quant_algo") or "")
        if "FP4" in algo.upper():
            return "modelopt_fp4", (4 + 8 / 16) / 8, "fp4"
        return "modelopt", 1.0, "fp8"
    if family in ("awq", "gptq"):
        bits = int(quant.get("bits") or quant.get("w_bit") or 4)
        group = int(quant.get("group_size") or quant.get("q_group_size") or 128)
        zero = bool(quant.get("zero_point", family == "awq")) or not quant.get("sym", True)
        size = bits / 8 + 2 / group + (bits / 8 / group if zero else 0)
        return f"{family}_marlin", size, "bf16"
    if family == "compressed-tensors":
        return _compressed_tensors(quant)
    if family == "bitsandbytes":
        # NF4 in blocks of 64 with a 32-bit absmax each: 4.5 bits; 16-bit matmuls.
        return "bitsandbytes", (4 + 32 / 64) / 8, "bf16"
    # A method this model does not know: timed as 16-bit weights.
    return f"{family} (timed as 16-bit)", 2.0, "bf16"


def _compressed_tensors(quant: Mapping[str, Any]) -> tuple[str, float, Compute]:
    """compressed-tensors: the weights of its first config group decide."""
    groups = quant.get("config_groups")
    weights: Mapping[str, Any] = {}
    if isinstance(groups, Mapping):
        for group in groups.values():
            if isinstance(group, Mapping) and isinstance(group.get("weights"), Mapping):
                weights = group["weights"]
                break
    bits = int(weights.get("num_bits") or 8)
    kind = str(weights.get("type") or "int")
    fmt = str(quant.get("format") or "")
    if bits == 4 and (kind == "float" or "nvfp4" in fmt):
        return "compressed-tensors nvfp4", (4 + 8 / 16) / 8, "fp4"
    if bits == 8 and kind == "float":
        return "compressed-tensors fp8", 1.0, "fp8"
    group = int(weights.get("group_size") or 128)
    zero = not weights.get("symmetric", True)
    size = bits / 8 + 2 / group + (bits / 8 / group if zero else 0)
    return f"compressed-tensors w{bits}a16", size, "bf16"


def _nested(quant: Mapping[str, Any], key: str, inner: str) -> object:
    value = quant.get(key)
    return value.get(inner) if isinstance(value, Mapping) else None


def _skipped_modules(quant: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for key in ("modules_to_not_convert", "ignore", "ignored_layers", "exclude_modules"):
        value = quant.get(key)
        if isinstance(value, Sequence) and not isinstance(value, str):
            names.extend(str(item) for item in value)
    return names


def _matches(patterns: Sequence[str], module: str, fragment: str) -> bool:
    """Whether a layer's `module` (model.layers.N.<module>) is in the skip list: a glob
    or `re:` pattern matching it, or a plain name containing `fragment`."""
    full = f"model.layers.0.{module}"
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], full):
                return True
        elif "*" in pattern:
            regex = re.escape(pattern).replace(r"\*", r"[^.]*")
            if re.match(regex + r"(\.|$)", full):
                return True
        elif fragment in pattern:
            return True
    return False
