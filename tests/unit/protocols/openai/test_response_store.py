"""The Responses store is bounded by count and bytes, evicts the oldest first, and keeps
nothing when it is off."""

from __future__ import annotations

from vllm_sim.protocols.common.chat_messages import ChatMessage
from vllm_sim.protocols.openai.response_store import ResponseStore

HI = [ChatMessage("user", "hi")]


def test_off_keeps_nothing() -> None:
    store = ResponseStore()
    store.put("resp_1", b"{}", HI)
    assert store.get("resp_1") is None and len(store) == 0


def test_evicts_the_oldest_beyond_the_count() -> None:
    store = ResponseStore(True, max_count=2)
    for n in range(3):
        store.put(f"resp_{n}", b"{}", HI)
    assert store.get("resp_0") is None
    assert store.get("resp_1") is not None and store.get("resp_2") is not None


def test_evicts_the_oldest_beyond_the_bytes() -> None:
    body = b"x" * 300
    probe = ResponseStore(True)
    probe.put("resp", body, HI)
    one = probe.stored_bytes  # the body and its conversation
    assert one > len(body)
    store = ResponseStore(True, max_bytes=3 * one)
    for n in range(4):
        store.put(f"resp_{n}", body, HI)
    assert len(store) == 3 and store.get("resp_0") is None
    assert store.stored_bytes == 3 * one
    entry = store.get("resp_3")
    assert entry is not None and entry.body == body and entry.conversation == HI


def test_a_response_larger_than_the_store_is_not_kept() -> None:
    store = ResponseStore(True, max_bytes=100)
    store.put("resp_small", b"{}", HI)
    store.put("resp_big", b"x" * 200, HI)
    assert store.get("resp_big") is None and store.get("resp_small") is not None


def test_storing_an_id_again_replaces_it() -> None:
    store = ResponseStore(True)
    store.put("resp_1", b"{}", HI)
    store.put("resp_1", b'{"a":1}', HI)
    entry = store.get("resp_1")
    assert len(store) == 1 and entry is not None and entry.body == b'{"a":1}'
    assert store.stored_bytes == entry.size
