"""Who may call a route: keys compared in constant time, bearer and x-api-key headers, and
the cross-origin test of the control routes."""

from __future__ import annotations

from vllm_sim.frontend.access import KeyRing, key_guard
from vllm_sim.transports.http.access import control_guard, cross_origin


def test_a_key_is_accepted_by_bearer_or_if_asked_by_x_api_key() -> None:
    keys = KeyRing(["k1", "k2"])
    assert key_guard(keys)("GET", [(b"authorization", b"Bearer k2")]) is None
    assert key_guard(keys)("GET", [(b"x-api-key", b"k1")]) is not None
    assert key_guard(keys, x_api_key=True)("GET", [(b"x-api-key", b"k1")]) is None
    refusal = key_guard(keys)("GET", [(b"authorization", b"Bearer nope")])
    assert refusal is not None and refusal.status == 401


def test_a_browser_request_from_another_site_or_by_a_rebindable_name_is_cross_origin() -> None:
    same = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]
    assert not cross_origin(same) and not cross_origin([(b"host", b"x")])
    assert cross_origin([(b"origin", b"http://evil.example"), (b"host", b"127.0.0.1:8000")])
    assert cross_origin([(b"origin", b"http://sim.example"), (b"host", b"sim.example")])
    refusal = control_guard(None)("POST", [(b"origin", b"http://evil.example"), (b"host", b"h")])
    assert refusal is not None and refusal.status == 403
