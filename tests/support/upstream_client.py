"""Upstream's own generated client of the gRPC engine service (smg-grpc-proto), called the
way a gateway calls it, against a running server.

Upstream's generated messages and ours (vllm_sim.proto) define the same full names, and a
process's default descriptor pool refuses a second definition of a name (see
upstream_proto.py): this runs in a process of its own and prints what came back as one
JSON object on stdout.

    python -m tests.support.upstream_client PORT [MAX_TOKENS]
"""

from __future__ import annotations

import json
import sys
from typing import Any

import grpc

PROMPT = [32, 45, 78, 13]
ABORTED_ID = "upstream-abort-1"
TIMEOUT = 30.0


def _complete(message: Any) -> dict[str, Any]:
    complete = message.complete
    return {
        "output_ids": list(complete.output_ids),
        "finish_reason": complete.finish_reason,
        "prompt_tokens": complete.prompt_tokens,
        "completion_tokens": complete.completion_tokens,
    }


def run(port: int, max_tokens: int) -> dict[str, Any]:
    """Every RPC a gateway uses, through upstream's stubs; what they answered."""
    # Upstream's modules, imported here only: never in a process that holds ours.
    from smg_grpc_proto.generated import vllm_engine_pb2 as pb
    from smg_grpc_proto.generated import vllm_engine_pb2_grpc as pb_grpc

    def generate(stream: bool, tokens: int, request_id: str = "") -> Any:
        return pb.GenerateRequest(
            request_id=request_id,
            tokenized=pb.TokenizedInput(original_text="", input_ids=PROMPT),
            sampling_params=pb.SamplingParams(max_tokens=tokens, ignore_eos=True),
            stream=stream,
        )

    result: dict[str, Any] = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.VllmEngineStub(channel)

        streamed = list(stub.Generate(generate(True, max_tokens), timeout=TIMEOUT))
        result["stream"] = {
            "kinds": [m.WhichOneof("response") for m in streamed],
            "chunk_ids": [list(m.chunk.token_ids) for m in streamed[:-1]],
            "chunk_completion_tokens": [m.chunk.completion_tokens for m in streamed[:-1]],
            "chunk_prompt_tokens": [m.chunk.prompt_tokens for m in streamed[:-1]],
            "complete": _complete(streamed[-1]),
        }

        whole = list(stub.Generate(generate(False, max_tokens), timeout=TIMEOUT))
        result["unary"] = {
            "kinds": [m.WhichOneof("response") for m in whole],
            "complete": _complete(whole[-1]),
        }

        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=TIMEOUT)
        result["model_info"] = {
            "model_path": info.model_path,
            "served_model_name": info.served_model_name,
            "is_generation": info.is_generation,
            "max_context_length": info.max_context_length,
        }

        server = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=TIMEOUT)
        result["server_info"] = {
            "server_type": server.server_type,
            "uptime_seconds": server.uptime_seconds,
            "max_num_seqs": server.max_num_seqs,
        }

        health = stub.HealthCheck(pb.HealthCheckRequest(), timeout=TIMEOUT)
        result["health"] = {"healthy": health.healthy, "message": health.message}

        # A long stream, aborted by its id after its first token.
        call = stub.Generate(generate(True, 200, ABORTED_ID), timeout=TIMEOUT)
        first = next(call)
        loads = stub.GetLoads(pb.GetLoadsRequest(), timeout=TIMEOUT)
        result["loads"] = [
            {
                "dp_rank": load.dp_rank,
                "num_running_reqs": load.num_running_reqs,
                "num_waiting_reqs": load.num_waiting_reqs,
                "max_running_requests": load.max_running_requests,
            }
            for load in loads.loads
        ]
        stub.Abort(pb.AbortRequest(request_ids=[ABORTED_ID]), timeout=TIMEOUT)
        rest: list[str] = []
        code = "OK"
        try:
            rest.extend(m.WhichOneof("response") for m in call)
        except grpc.RpcError as error:
            code = error.code().name
        result["abort"] = {"first": first.WhichOneof("response"), "after": rest, "code": code}
    return result


def main(argv: list[str]) -> None:
    port = int(argv[1])
    max_tokens = int(argv[2]) if len(argv) > 2 else 5
    sys.stdout.write(json.dumps(run(port, max_tokens)) + "\n")


if __name__ == "__main__":
    main(sys.argv)
