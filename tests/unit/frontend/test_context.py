"""Request ids are vLLM's 16 hex characters: half the hex of uuid5 of "<seed>-<port>-<n>"."""

from __future__ import annotations

import uuid

from vllm_sim.frontend.context import RequestIds


def test_ids_match_uuid5_of_seed_port_counter() -> None:
    ids = RequestIds(seed=42, port=8000)
    expected = [uuid.uuid5(uuid.NAMESPACE_URL, f"42-8000-{i}").hex[:16] for i in range(5)]
    assert [ids.next() for _ in range(5)] == expected


def test_ids_differ_per_port() -> None:
    assert RequestIds(1, 8000).next() != RequestIds(1, 8001).next()
