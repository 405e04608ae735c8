"""The engine service's RPCs beyond Generate, answered from the engine's own state:
embeddings, the tokenizer's files, KV events as a stream, prefix-cache flushes, profiling."""

from __future__ import annotations

import hashlib
import io
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.support.grpc_client import engine_stub, wait_for_requests
from tests.support.server import SimServer
from vllm_sim.proto import engine_pb2 as pb
from vllm_sim.proto import engine_pb2_grpc as pb_grpc
from vllm_sim.protocols.openai.embeddings import embedding_vector
from vllm_sim.transports.grpc.feeds import signed64


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(["--block-size", "16", "--kv-cache-size", "64"]) as server:
        yield server


@pytest.fixture(scope="module")
def stub(sim: SimServer) -> Iterator[pb_grpc.VllmEngineStub]:
    with grpc.insecure_channel(f"127.0.0.1:{sim.port}") as channel:
        yield engine_stub(channel)


def generate(ids: list[int], max_tokens: int = 2) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        tokenized=pb.TokenizedInput(input_ids=ids),
        sampling_params=pb.SamplingParams(max_tokens=max_tokens, ignore_eos=True),
    )


def test_embed_answers_the_http_api_s_vector(stub: pb_grpc.VllmEngineStub) -> None:
    ids = [5, 6, 7, 8]
    answer = stub.Embed(pb.EmbedRequest(tokenized=pb.TokenizedInput(input_ids=ids)))
    assert answer.prompt_tokens == 4
    assert answer.embedding_dim == len(answer.embedding) > 0
    expected = embedding_vector(ids, answer.embedding_dim)
    assert list(answer.embedding) == pytest.approx(list(expected), rel=1e-6)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Embed(pb.EmbedRequest())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_kv_events_stream_stored_blocks_and_a_flush(stub: pb_grpc.VllmEngineStub) -> None:
    subscription = stub.SubscribeKvEvents(pb.SubscribeKvEventsRequest())
    received: list[pb.KvEventBatch] = []

    def read() -> None:
        for batch in subscription:
            received.append(batch)
            kinds = [e.WhichOneof("data") for b in received for e in b.events]
            if "cleared" in kinds:
                return

    reader = threading.Thread(target=read)
    reader.start()
    prompt = list(range(1000, 1032))  # two full blocks of 16
    # The subscription is live once the first batch arrives: send until it does.
    for _ in range(50):
        list(stub.Generate(generate(prompt)))
        if received:
            break
        reader.join(0.05)
    flushed = stub.FlushCache(pb.FlushCacheRequest())
    assert flushed.success
    reader.join(10)
    subscription.cancel()
    events = [e for b in received for e in b.events]
    stored = [e.stored for e in events if e.WhichOneof("data") == "stored"]
    assert stored, events
    blocks = [block for s in stored for block in s.blocks]
    assert [list(b.token_ids) for b in blocks[:2]] == [prompt[:16], prompt[16:]]
    assert all(b.block_size == 16 for b in blocks)
    assert events[-1].WhichOneof("data") == "cleared"
    ids = [e.event_id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [b.sequence_number for b in received] == list(range(1, len(received) + 1))


def test_flush_is_refused_while_requests_hold_blocks() -> None:
    args = ["--time-to-first-token", "2s"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        held = stub.Generate(generate(list(range(64))))
        wait_for_requests(stub, 1)
        answer = stub.FlushCache(pb.FlushCacheRequest())
        assert not answer.success and answer.message
        held.cancel()


def test_profiling_says_it_is_not_available(stub: pb_grpc.VllmEngineStub) -> None:
    for answer in (
        stub.StartProfile(pb.StartProfileRequest()),
        stub.StopProfile(pb.StopProfileRequest()),
    ):
        assert not answer.success
        assert "no model" in answer.message


def test_the_simulated_tokenizer_has_no_files(stub: pb_grpc.VllmEngineStub) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.GetTokenizer(pb.GetTokenizerRequest()))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_get_tokenizer_sends_the_model_s_files(hf_models: dict[str, Path]) -> None:
    folder = hf_models["llama"]
    server = SimServer([], model=str(folder))
    with server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = engine_stub(channel)
        chunks = list(stub.GetTokenizer(pb.GetTokenizerRequest()))
        # The model's tokenizer bounds the ids a prompt may carry, as in vLLM.
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Generate(generate([5, 999_999])))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "Token id 999999 is out of vocabulary"
    data = b"".join(chunk.data for chunk in chunks)
    assert chunks[-1].sha256 == hashlib.sha256(data).hexdigest()
    assert all(not chunk.sha256 for chunk in chunks[:-1])
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = set(archive.namelist())
        assert "tokenizer.json" in names
        assert archive.read("tokenizer.json") == (folder / "tokenizer.json").read_bytes()


def test_block_hashes_fit_the_contract_s_int64() -> None:
    assert signed64(2**64 - 1) == -1
    assert signed64(2**63) == -(2**63)
    assert signed64(5) == 5
