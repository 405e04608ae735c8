"""Omni models: chat answers that end with a generated image (a 1x1 PNG).

Whether a request gets an image is decided per request, before it is queued: the
`X-Send-Image` header forces one, otherwise `image-emission-rate` percent of requests do.
"""

from __future__ import annotations

import random

from vllm_sim.frontend.caller import Caller
from vllm_sim.frontend.request_rules import header_flag

IMAGE_URL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QD"
    "wADhgGAWjR9awAAAABJRU5ErkJggg=="
)
SEND_IMAGE_HEADER = b"x-send-image"


def image_block() -> dict[str, object]:
    return {"type": "image_url", "image_url": {"url": IMAGE_URL}}


class ImageEmission:
    """The omni switch and its live emission rate (admin-configurable)."""

    def __init__(self, enabled: bool, rng: random.Random) -> None:
        self.enabled = enabled
        self.rate = 0
        self._rng = rng

    def wants_image(self, caller: Caller) -> bool:
        if not self.enabled:
            return False
        if header_flag(caller, SEND_IMAGE_HEADER):
            return True
        return self.rate > 0 and self._rng.randint(1, 100) <= self.rate
