"""Wire compatibility with upstream's own contract (smg-grpc-proto): the same RPCs and
structurally equal messages, and messages that cross between the two unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import FileDescriptor

from tests.support.upstream_proto import (
    upstream_class,
    upstream_file,
    upstream_files,
    upstream_service,
)
from tests.unit.proto.shapes import enum_differences, message_differences
from tests.unit.proto.test_contract import RPCS
from vllm_sim.proto import engine_pb2

OURS = engine_pb2.DESCRIPTOR


def test_upstream_is_the_engine_service_we_mirror() -> None:
    assert upstream_file().package == OURS.package
    assert upstream_service().full_name == "vllm.grpc.engine.VllmEngine"


def test_upstream_declares_exactly_our_rpcs() -> None:
    """So the per-RPC comparison below, over our list, covers every RPC of upstream's."""
    ours = [method.name for method in OURS.services_by_name["VllmEngine"].methods]
    assert sorted(method.name for method in upstream_service().methods) == sorted(ours)


@pytest.mark.parametrize("rpc", [name for name, *_ in RPCS])
def test_rpc_matches_upstream(rpc: str) -> None:
    theirs = upstream_service().methods_by_name[rpc]
    ours = OURS.services_by_name["VllmEngine"].methods_by_name.get(rpc)
    assert ours is not None, f"we lack upstream's RPC {rpc}"
    assert (ours.client_streaming, ours.server_streaming) == (
        theirs.client_streaming,
        theirs.server_streaming,
    )
    differences = message_differences(
        ours.input_type, theirs.input_type, f"{rpc} request {theirs.input_type.name}"
    ) + message_differences(
        ours.output_type, theirs.output_type, f"{rpc} response {theirs.output_type.name}"
    )
    assert differences == []


def _top_level_names(file: FileDescriptor) -> list[str]:
    return [*file.message_types_by_name, *file.enum_types_by_name]


def test_every_upstream_message_and_enum_has_an_equal_namesake() -> None:
    """Also the types that only nested fields reach, and under the same names, whether
    upstream keeps them in its engine file or in its shared common.proto."""
    differences: list[str] = []
    upstream_names: set[str] = set()
    for file in upstream_files():
        for name, theirs in file.message_types_by_name.items():
            upstream_names.add(name)
            ours = OURS.message_types_by_name.get(name)
            if ours is None:
                differences.append(f"{file.name}: message {name} missing from ours")
            else:
                differences += message_differences(ours, theirs, name)
        for name, their_enum in file.enum_types_by_name.items():
            upstream_names.add(name)
            our_enum = OURS.enum_types_by_name.get(name)
            if our_enum is None:
                differences.append(f"{file.name}: enum {name} missing from ours")
            else:
                differences += enum_differences(our_enum, their_enum, name)
    assert differences == []
    assert set(_top_level_names(OURS)) == upstream_names


def _generate_request() -> engine_pb2.GenerateRequest:
    return engine_pb2.GenerateRequest(
        request_id="req-7",
        tokenized=engine_pb2.TokenizedInput(original_text="Hi there", input_ids=[32, 45, 78, 13]),
        sampling_params=engine_pb2.SamplingParams(
            temperature=0.0,
            max_tokens=128,
            stop=["\n\n", "END"],
            stop_token_ids=[2, 151645],
            logit_bias={13: -100.0, 45: 2.5},
            seed=-1,
        ),
        stream=True,
        kv_transfer_params=engine_pb2.KvTransferParams(remote_host="10.0.0.7", remote_port=5557),
        kv_transfer_params_json='{"do_remote_prefill": true, "remote_block_ids": [1, 2]}',
    )


def _as_dict(message: Any) -> dict[str, Any]:
    as_dict: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return as_dict


def test_generate_request_of_ours_parses_as_upstreams() -> None:
    ours = _generate_request()
    theirs: Any = upstream_class("vllm.grpc.engine.GenerateRequest").FromString(
        ours.SerializeToString()
    )
    assert _as_dict(theirs) == _as_dict(ours)
    assert theirs.WhichOneof("input") == "tokenized"
    assert list(theirs.tokenized.input_ids) == [32, 45, 78, 13]
    params = theirs.sampling_params
    # Explicit presence survives: temperature 0 is set, not absent.
    assert params.HasField("temperature") and params.temperature == 0.0
    assert params.HasField("max_tokens") and params.max_tokens == 128
    assert not params.HasField("logprobs")
    assert list(params.stop) == ["\n\n", "END"]
    assert dict(params.logit_bias) == {13: -100.0, 45: 2.5}
    assert params.seed == -1
    assert (theirs.kv_transfer_params.remote_host, theirs.kv_transfer_params.remote_port) == (
        "10.0.0.7",
        5557,
    )
    assert theirs.HasField("kv_transfer_params_json")
    assert theirs.kv_transfer_params_json == ours.kv_transfer_params_json
    assert theirs.SerializeToString(deterministic=True) == ours.SerializeToString(
        deterministic=True
    )


def test_generate_request_of_upstreams_parses_as_ours() -> None:
    theirs: Any = upstream_class("vllm.grpc.engine.GenerateRequest")()
    json_format.ParseDict(_as_dict(_generate_request()), theirs)
    ours = engine_pb2.GenerateRequest.FromString(theirs.SerializeToString())
    assert ours == _generate_request()
    assert ours.sampling_params.HasField("temperature")
    assert dict(ours.sampling_params.logit_bias) == {13: -100.0, 45: 2.5}


def test_generate_responses_of_ours_parse_as_upstreams() -> None:
    """What the server sends: a chunk, then the final complete of a streamed request."""
    cls = upstream_class("vllm.grpc.engine.GenerateResponse")
    chunk = engine_pb2.GenerateResponse(
        chunk=engine_pb2.GenerateStreamChunk(
            token_ids=[32], prompt_tokens=4, completion_tokens=1, cached_tokens=0
        )
    )
    complete = engine_pb2.GenerateResponse(
        complete=engine_pb2.GenerateComplete(
            finish_reason="stop", prompt_tokens=4, completion_tokens=0, cached_tokens=16
        )
    )
    for ours in (chunk, complete):
        theirs: Any = cls.FromString(ours.SerializeToString())
        assert theirs.WhichOneof("response") == ours.WhichOneof("response")
        assert _as_dict(theirs) == _as_dict(ours)
