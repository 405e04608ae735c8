"""Upstream's own contract of the gRPC engine service (smg-grpc-proto), as an independent
client of ours.

Upstream's generated vllm_engine_pb2 and our vllm_sim.proto.engine_pb2 define the same full
names (vllm.grpc.engine.GenerateRequest, ...), and a process's default descriptor pool
refuses a second definition of a name: importing both in one process fails. So a child
process imports upstream's generated modules and hands back their file descriptors as
upstream compiled them, and this module rebuilds them in a descriptor pool of their own.
Classes built from that pool parse and serialize exactly as upstream's generated classes do,
next to ours.
"""

from __future__ import annotations

import functools
import subprocess
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FileDescriptor, ServiceDescriptor
from google.protobuf.message import Message

UPSTREAM_MODULE = "smg_grpc_proto.generated.vllm_engine_pb2"
UPSTREAM_FILE = "vllm_engine.proto"
SERVICE = "vllm.grpc.engine.VllmEngine"

# Runs in the child: upstream's file and the files it imports, dependencies first, as one
# serialized FileDescriptorSet on stdout.
_DUMP_DESCRIPTORS = f"""
import sys
from google.protobuf import descriptor_pb2
from {UPSTREAM_MODULE} import DESCRIPTOR

files = descriptor_pb2.FileDescriptorSet()
done = set()

def add(file):
    if file.name in done:
        return
    done.add(file.name)
    for dependency in file.dependencies:
        add(dependency)
    file.CopyToProto(files.file.add())

add(DESCRIPTOR)
sys.stdout.buffer.write(files.SerializeToString())
"""


@functools.cache
def upstream_pool() -> descriptor_pool.DescriptorPool:
    """A pool holding upstream's vllm_engine.proto and what it imports, and nothing else."""
    dumped = subprocess.run(
        [sys.executable, "-c", _DUMP_DESCRIPTORS], check=True, capture_output=True, timeout=60
    ).stdout
    files = descriptor_pb2.FileDescriptorSet.FromString(dumped)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool


def upstream_file() -> FileDescriptor:
    return upstream_pool().FindFileByName(UPSTREAM_FILE)


def upstream_files() -> list[FileDescriptor]:
    """Upstream's engine file and the files it imports (its shared common.proto)."""
    main = upstream_file()
    return [main, *main.dependencies]


def upstream_service() -> ServiceDescriptor:
    return upstream_pool().FindServiceByName(SERVICE)


def upstream_descriptor(full_name: str) -> Descriptor:
    return upstream_pool().FindMessageTypeByName(full_name)


def upstream_class(full_name: str) -> type[Message]:
    """The message class of upstream's contract for a full name like vllm.grpc.engine.X."""
    cls: type[Message] = message_factory.GetMessageClass(upstream_descriptor(full_name))
    return cls
