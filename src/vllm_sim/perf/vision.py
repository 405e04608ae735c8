"""A multimodal model's vision encoder, as far as a prefill's time depends on it.

vLLM runs the encoder on a request's images in the step that first schedules the prompt
tokens they stand for (its encoder cache keeps the output for the chunks after). The
encoder is a ViT: each image a sequence of patches through `layers` blocks of attention
(4 h^2 parameters) and an MLP (2 h i, or 3 h i gated), with full attention among the
image's patches. A prompt holds fewer tokens than the encoder saw patches where the
projector merges them: `patches_per_token` (Qwen2-VL's spatial_merge_size^2, Llama 4's
1 / pixel_shuffle_ratio^2, Gemma 3's patches per image over its mm_tokens_per_image).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_GATED_ACTIVATIONS = frozenset({"silu", "swiglu", "swish"})


@dataclass(frozen=True, slots=True)
class VisionTower:
    hidden: int
    layers: int
    intermediate: int
    gated: bool
    patches_per_token: float

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> VisionTower | None:
        """The vision tower a config.json describes (`vision_config`); None without one or
        where its size is not given."""
        vision = config.get("vision_config")
        if not isinstance(vision, Mapping):
            return None
        hidden = _count(vision, "hidden_size", "embed_dim", "width")
        layers = _count(vision, "num_hidden_layers", "depth", "num_layers")
        if not hidden or not layers:
            return None
        intermediate = _count(vision, "intermediate_size")
        ratio = vision.get("mlp_ratio")
        if not intermediate and isinstance(ratio, int | float) and ratio > 0:
            intermediate = int(hidden * ratio)
        gated = str(vision.get("hidden_act", "")).lower() in _GATED_ACTIVATIONS
        return cls(hidden, layers, intermediate or 4 * hidden, gated, _patches_per_token(config))

    def params_per_layer(self) -> int:
        return 4 * self.hidden * self.hidden + (3 if self.gated else 2) * self.hidden * (
            self.intermediate
        )

    def flops(self, tokens: int, pairs: float) -> float:
        """FLOPs of encoding images that stand for `tokens` prompt tokens in all, the sum of
        each image's tokens squared being `pairs`: the linear layers over every patch, and
        attention among each image's patches."""
        patches = tokens * self.patches_per_token
        linear = 2 * self.params_per_layer() * patches
        attention = 4 * self.hidden * pairs * self.patches_per_token**2
        return self.layers * (linear + attention)


def _count(config: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _patches_per_token(config: Mapping[str, Any]) -> float:
    vision = config["vision_config"]
    merge = vision.get("spatial_merge_size")
    if isinstance(merge, int) and merge > 0:
        return float(merge * merge)
    shuffle = vision.get("pixel_shuffle_ratio")
    if isinstance(shuffle, int | float) and 0 < shuffle < 1:
        return 1.0 / (shuffle * shuffle)
    image, patch = _count(vision, "image_size"), _count(vision, "patch_size")
    per_image = _count(config, "mm_tokens_per_image")
    if image and patch and per_image:
        return float((image // patch) ** 2 / per_image)
    return 1.0
