"""The structural comparison names each difference by its field path and number."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor

from tests.unit.proto.shapes import message_differences
from vllm_sim.proto import engine_pb2

OURS = engine_pb2.DESCRIPTOR.message_types_by_name["GenerateRequest"]


def _mutated_generate_request() -> Descriptor:
    """Our GenerateRequest in a pool of its own, with a wrong type, name, oneof, field
    and enum value somewhere below it."""
    file = descriptor_pb2.FileDescriptorProto()
    engine_pb2.DESCRIPTOR.CopyToProto(file)
    messages = {message.name: message for message in file.message_type}

    def field(message: str, number: int) -> descriptor_pb2.FieldDescriptorProto:
        return next(f for f in messages[message].field if f.number == number)

    field("TokenizedInput", 2).type = descriptor_pb2.FieldDescriptorProto.TYPE_INT32
    field("GenerateRequest", 5).name = "streaming"
    field("GenerateRequest", 3).ClearField("oneof_index")
    messages["KvTransferParams"].field.remove(field("KvTransferParams", 2))
    modality = next(enum for enum in file.enum_type if enum.name == "Modality")
    modality.value[3].name = "VIDEOS"

    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    descriptor: Descriptor = pool.FindMessageTypeByName("vllm.grpc.engine.GenerateRequest")
    return descriptor


def test_identical_messages_have_no_differences() -> None:
    assert message_differences(OURS, OURS, "GenerateRequest") == []


def test_each_difference_is_named_by_its_path() -> None:
    modality_values = (
        "enum values {0: 'MODALITY_UNSPECIFIED', 1: 'IMAGE', 2: 'AUDIO', 3: 'VIDEOS'} != "
        "upstream's {0: 'MODALITY_UNSPECIFIED', 1: 'IMAGE', 2: 'AUDIO', 3: 'VIDEO'}"
    )
    assert message_differences(_mutated_generate_request(), OURS, "GenerateRequest") == [
        "GenerateRequest.tokenized (field 2).input_ids (field 2): type is 'int32', "
        "upstream's 'uint32'",
        "GenerateRequest.text (field 3): label is '', upstream's 'oneof:input'",
        "GenerateRequest.text (field 3): presence is False, upstream's True",
        "GenerateRequest.text (field 3): oneof is None, upstream's 'input'",
        "GenerateRequest.stream (field 5): name is 'streaming', upstream's 'stream'",
        "GenerateRequest.kv_transfer_params (field 6): field 2 (remote_port) missing from ours",
        f"GenerateRequest.mm_inputs (field 7).modality (field 10): {modality_values}",
        f"GenerateRequest.media_refs (field 10).items (field 1).modality (field 1): "
        f"{modality_values}",
        "GenerateRequest: oneofs {'input': [2], '_kv_transfer_params_json': [8], "
        "'_data_parallel_rank': [9]} != upstream's {'input': [2, 3], "
        "'_kv_transfer_params_json': [8], '_data_parallel_rank': [9]}",
    ]
