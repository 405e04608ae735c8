"""The admission gate every generation request passes on any transport, and API keys."""

from __future__ import annotations

from vllm_sim.frontend.access import (
    SHUTTING_DOWN,
    UNAUTHORIZED,
    AdmissionGate,
    Drain,
    KeyRing,
    key_guard,
)

BEARER = [(b"authorization", b"Bearer k")]


def test_without_keys_only_the_drain_refuses() -> None:
    drain = Drain()
    gate = AdmissionGate(drain)
    assert gate("POST", []) is None
    drain.active = True
    refusal = gate("POST", [])
    assert refusal is not None and (refusal.status, refusal.message) == (503, SHUTTING_DOWN)


def test_the_key_is_checked_before_the_drain() -> None:
    drain = Drain()
    gate = AdmissionGate(drain, key_guard(KeyRing(["k"])))
    refusal = gate("POST", [])
    assert refusal is not None and (refusal.status, refusal.message) == (401, UNAUTHORIZED)
    assert gate("POST", BEARER) is None
    drain.active = True
    for headers in ([], BEARER):  # a caller without a key learns nothing of the drain
        refusal = gate("POST", headers)
        assert refusal is not None and refusal.status == (401 if not headers else 503)


def test_a_key_is_accepted_by_bearer_or_if_asked_by_x_api_key() -> None:
    keys = KeyRing(["k1", "k2"])
    assert key_guard(keys)("GET", [(b"authorization", b"Bearer k2")]) is None
    assert key_guard(keys)("GET", [(b"x-api-key", b"k1")]) is not None
    assert key_guard(keys, x_api_key=True)("GET", [(b"x-api-key", b"k1")]) is None
    refusal = key_guard(keys)("GET", [(b"authorization", b"Bearer nope")])
    assert refusal is not None and refusal.status == 401


def test_x_api_key_counts_only_where_allowed() -> None:
    header = [(b"x-api-key", b"k")]
    assert key_guard(KeyRing(["k"]), x_api_key=True)("POST", header) is None
    refusal = key_guard(KeyRing(["k"]))("POST", header)
    assert refusal is not None and refusal.status == 401
