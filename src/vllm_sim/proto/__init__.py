"""The wire contract of the gRPC engine service `vllm.grpc.engine.VllmEngine`.

pkg/grpc/engine.proto declares the service and its messages; engine_pb2 (messages, typed
by engine_pb2.pyi) and engine_pb2_grpc (service stubs and servicer base) are generated from
it and committed. Regenerate them after editing the .proto with `make proto`, that is
`python -m vllm_sim.proto.generate` (needs the dev dependency grpcio-tools); a unit test
fails while the committed files differ from what the generator writes.

The field numbers and types match upstream's smg-grpc-proto, whose clients therefore talk
to this service unchanged. This package is the project's bottom layer and imports nothing
else of the project.
"""
