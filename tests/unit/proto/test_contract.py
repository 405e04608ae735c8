"""The gRPC contract's identity and the reference's message subset, field by field."""

from __future__ import annotations

import pytest

from tests.unit.proto.shapes import label, type_name
from vllm_sim.proto import engine_pb2, engine_pb2_grpc

PACKAGE = "vllm.grpc.engine"

# (RPC, request, response, response streamed): the reference's six first, in its order,
# then the ones upstream added. No RPC streams its request.
RPCS: list[tuple[str, str, str, bool]] = [
    ("Generate", "GenerateRequest", "GenerateResponse", True),
    ("Embed", "EmbedRequest", "EmbedResponse", False),
    ("HealthCheck", "HealthCheckRequest", "HealthCheckResponse", False),
    ("Abort", "AbortRequest", "AbortResponse", False),
    ("GetModelInfo", "GetModelInfoRequest", "GetModelInfoResponse", False),
    ("GetServerInfo", "GetServerInfoRequest", "GetServerInfoResponse", False),
    ("FlushCache", "FlushCacheRequest", "FlushCacheResponse", False),
    ("StartProfile", "StartProfileRequest", "ProfileResponse", False),
    ("StopProfile", "StopProfileRequest", "ProfileResponse", False),
    ("GetLoads", "GetLoadsRequest", "GetLoadsResponse", False),
    ("GetTokenizer", "GetTokenizerRequest", "GetTokenizerChunk", True),
    ("SubscribeKvEvents", "SubscribeKvEventsRequest", "KvEventBatch", True),
]

# The reference's subset: (message, number, name, type, label), label as in shapes.label.
REFERENCE_FIELDS: list[tuple[str, int, str, str, str]] = [
    ("SamplingParams", 1, "temperature", "float", "opt"),
    ("SamplingParams", 2, "top_p", "float", ""),
    ("SamplingParams", 3, "top_k", "uint32", ""),
    ("SamplingParams", 4, "min_p", "float", ""),
    ("SamplingParams", 5, "frequency_penalty", "float", ""),
    ("SamplingParams", 6, "presence_penalty", "float", ""),
    ("SamplingParams", 7, "repetition_penalty", "float", ""),
    ("SamplingParams", 8, "max_tokens", "uint32", "opt"),
    ("SamplingParams", 9, "min_tokens", "uint32", ""),
    ("SamplingParams", 10, "stop", "string", "rep"),
    ("SamplingParams", 11, "stop_token_ids", "uint32", "rep"),
    ("SamplingParams", 12, "skip_special_tokens", "bool", ""),
    ("SamplingParams", 13, "spaces_between_special_tokens", "bool", ""),
    ("SamplingParams", 14, "ignore_eos", "bool", ""),
    ("SamplingParams", 15, "n", "uint32", ""),
    ("SamplingParams", 16, "json_schema", "string", "oneof:constraint"),
    ("SamplingParams", 17, "regex", "string", "oneof:constraint"),
    ("SamplingParams", 18, "grammar", "string", "oneof:constraint"),
    ("SamplingParams", 19, "structural_tag", "string", "oneof:constraint"),
    ("SamplingParams", 20, "json_object", "bool", "oneof:constraint"),
    ("SamplingParams", 21, "choice", "ChoiceConstraint", "oneof:constraint"),
    ("SamplingParams", 22, "logprobs", "int32", "opt"),
    ("SamplingParams", 23, "prompt_logprobs", "int32", "opt"),
    ("SamplingParams", 24, "seed", "int32", "opt"),
    ("SamplingParams", 25, "include_stop_str_in_output", "bool", ""),
    ("SamplingParams", 26, "logit_bias", "map<int32,float>", "map"),
    ("SamplingParams", 27, "truncate_prompt_tokens", "int32", "opt"),
    ("GenerateRequest", 1, "request_id", "string", ""),
    ("GenerateRequest", 2, "tokenized", "TokenizedInput", "oneof:input"),
    ("GenerateRequest", 3, "text", "string", "oneof:input"),
    ("GenerateRequest", 4, "sampling_params", "SamplingParams", ""),
    ("GenerateRequest", 5, "stream", "bool", ""),
    ("GenerateResponse", 1, "chunk", "GenerateStreamChunk", "oneof:response"),
    ("GenerateResponse", 2, "complete", "GenerateComplete", "oneof:response"),
    ("GenerateStreamChunk", 1, "token_ids", "uint32", "rep"),
    ("GenerateStreamChunk", 2, "prompt_tokens", "uint32", ""),
    ("GenerateStreamChunk", 3, "completion_tokens", "uint32", ""),
    ("GenerateStreamChunk", 4, "cached_tokens", "uint32", ""),
    ("GenerateComplete", 1, "output_ids", "uint32", "rep"),
    ("GenerateComplete", 2, "finish_reason", "string", ""),
    ("GenerateComplete", 3, "prompt_tokens", "uint32", ""),
    ("GenerateComplete", 4, "completion_tokens", "uint32", ""),
    ("GenerateComplete", 5, "cached_tokens", "uint32", ""),
    ("ChoiceConstraint", 1, "choices", "string", "rep"),
    ("TokenizedInput", 1, "original_text", "string", ""),
    ("TokenizedInput", 2, "input_ids", "uint32", "rep"),
    ("EmbedRequest", 1, "request_id", "string", ""),
    ("EmbedRequest", 2, "tokenized", "TokenizedInput", ""),
    ("EmbedResponse", 1, "embedding", "float", "rep"),
    ("EmbedResponse", 2, "prompt_tokens", "uint32", ""),
    ("EmbedResponse", 3, "embedding_dim", "uint32", ""),
    ("HealthCheckResponse", 1, "healthy", "bool", ""),
    ("HealthCheckResponse", 2, "message", "string", ""),
    ("AbortRequest", 1, "request_ids", "string", "rep"),
    ("GetModelInfoResponse", 1, "model_path", "string", ""),
    ("GetModelInfoResponse", 2, "is_generation", "bool", ""),
    ("GetModelInfoResponse", 3, "max_context_length", "uint32", ""),
    ("GetModelInfoResponse", 4, "vocab_size", "uint32", ""),
    ("GetModelInfoResponse", 5, "supports_vision", "bool", ""),
    ("GetServerInfoResponse", 1, "active_requests", "uint32", ""),
    ("GetServerInfoResponse", 2, "is_paused", "bool", ""),
    ("GetServerInfoResponse", 3, "last_receive_timestamp", "double", ""),
    ("GetServerInfoResponse", 4, "uptime_seconds", "double", ""),
    ("GetServerInfoResponse", 5, "server_type", "string", ""),
]

# The reference's messages without fields; upstream added none to them either.
EMPTY_MESSAGES = [
    "HealthCheckRequest",
    "GetModelInfoRequest",
    "GetServerInfoRequest",
    "AbortResponse",
]

NUMERIC_SCALARS = {"double", "float", "int32", "int64", "uint32", "uint64", "bool"}


def test_descriptor_is_one_file_named_as_the_reference_names_it() -> None:
    file = engine_pb2.DESCRIPTOR
    assert file.name == "pkg/grpc/engine.proto"
    assert file.package == PACKAGE
    # One self-contained file: reflection then serves the whole contract under one name.
    assert list(file.dependencies) == []
    assert list(file.services_by_name) == ["VllmEngine"]


def test_service_declares_every_rpc_in_order_with_its_streaming_kind() -> None:
    service = engine_pb2.DESCRIPTOR.services_by_name["VllmEngine"]
    assert service.full_name == f"{PACKAGE}.VllmEngine"
    declared = [
        (
            method.name,
            method.input_type.full_name,
            method.output_type.full_name,
            method.client_streaming,
            method.server_streaming,
        )
        for method in service.methods
    ]
    expected = [
        (name, f"{PACKAGE}.{request}", f"{PACKAGE}.{response}", False, streamed)
        for name, request, response, streamed in RPCS
    ]
    assert declared == expected


def test_generated_stubs_cover_every_rpc() -> None:
    for name, *_ in RPCS:
        assert callable(getattr(engine_pb2_grpc.VllmEngineServicer, name))
    assert callable(engine_pb2_grpc.add_VllmEngineServicer_to_server)


@pytest.mark.parametrize(
    ("message", "number", "name", "type_", "label_"),
    REFERENCE_FIELDS,
    ids=[f"{m}.{n}" for m, _, n, _, _ in REFERENCE_FIELDS],
)
def test_reference_field(message: str, number: int, name: str, type_: str, label_: str) -> None:
    descriptor = engine_pb2.DESCRIPTOR.message_types_by_name[message]
    field = descriptor.fields_by_number.get(number)
    assert field is not None, f"{message} has no field {number}"
    assert (field.name, type_name(field), label(field)) == (name, type_, label_)
    if label_ == "opt":
        assert field.has_presence
    if label_ == "rep" and type_ in NUMERIC_SCALARS:
        # proto3 packs repeated numbers; an unpacked encoder would send other bytes.
        assert field.is_packed


@pytest.mark.parametrize("message", EMPTY_MESSAGES)
def test_reference_message_without_fields(message: str) -> None:
    assert list(engine_pb2.DESCRIPTOR.message_types_by_name[message].fields) == []


def test_oneofs_of_the_reference_group_exactly_their_fields() -> None:
    messages = engine_pb2.DESCRIPTOR.message_types_by_name
    groups = {
        ("SamplingParams", "constraint"): {16, 17, 18, 19, 20, 21},
        ("GenerateRequest", "input"): {2, 3},
        ("GenerateResponse", "response"): {1, 2},
    }
    for (message, oneof), numbers in groups.items():
        fields = messages[message].oneofs_by_name[oneof].fields
        assert {field.number for field in fields} == numbers, f"{message}.{oneof}"


def test_optional_fields_distinguish_unset_from_zero() -> None:
    params = engine_pb2.SamplingParams()
    assert not params.HasField("max_tokens")
    params.max_tokens = 0
    assert params.HasField("max_tokens")
    parsed = engine_pb2.SamplingParams.FromString(params.SerializeToString())
    assert parsed.HasField("max_tokens") and parsed.max_tokens == 0
