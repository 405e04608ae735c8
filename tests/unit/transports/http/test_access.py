"""Who may call a control route: the cross-origin test and the JSON-only bodies."""

from __future__ import annotations

from vllm_sim.transports.http.access import control_guard, cross_origin


def test_a_browser_request_from_another_site_or_by_a_rebindable_name_is_cross_origin() -> None:
    same = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]
    assert not cross_origin(same) and not cross_origin([(b"host", b"x")])
    assert cross_origin([(b"origin", b"http://evil.example"), (b"host", b"127.0.0.1:8000")])
    assert cross_origin([(b"origin", b"http://sim.example"), (b"host", b"sim.example")])
    refusal = control_guard(None)("POST", [(b"origin", b"http://evil.example"), (b"host", b"h")])
    assert refusal is not None and refusal.status == 403
