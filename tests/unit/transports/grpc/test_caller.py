"""A gRPC call as the pipeline's caller: metadata as header fields, the message's request
id as X-Request-Id."""

from __future__ import annotations

from typing import Any, cast

from vllm_sim.transports.grpc.caller import Context, GrpcCaller


class Metadata:
    def __init__(self, *entries: tuple[str, str | bytes]) -> None:
        self._entries = entries

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._entries


def caller(*entries: tuple[str, Any], request_id: str = "") -> GrpcCaller:
    return GrpcCaller(cast(Context, Metadata(*entries)), request_id)


def test_metadata_reads_as_headers_and_binary_entries_are_left_out() -> None:
    call = caller(("authorization", "Bearer k"), ("trace-bin", b"\x00"), ("x-send-image", "1"))
    assert call.header(b"authorization") == "Bearer k"
    assert call.header(b"x-send-image") == "1"
    assert call.header(b"trace-bin") is None
    assert (b"authorization", b"Bearer k") in call.headers


def test_the_message_request_id_is_its_x_request_id_unless_metadata_names_one() -> None:
    assert caller(request_id="abc").header(b"x-request-id") == "abc"
    assert caller(("x-request-id", "meta"), request_id="abc").header(b"x-request-id") == "meta"
    assert caller().header(b"x-request-id") is None and caller().request_id is None


def test_nothing_watches_for_a_disconnect() -> None:
    stop = caller().on_disconnect(lambda: None)
    assert stop() is None
