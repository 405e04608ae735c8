"""The gRPC engine service on the HTTP port, through a real server: a client generated from
our .proto, HTTP answering on the same port during the calls, and the shared engine
(queue, metrics, cancellation, failure injection, API keys)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import pytest

from tests.support.grpc_client import engine_stub, wait_for_requests
from tests.support.metrics import E2E, ITL, TTFT, scrape
from tests.support.server import SimServer
from vllm_sim.engine.tokenizer.simulated import EOS_TOKEN_ID
from vllm_sim.metrics.lag import LAG
from vllm_sim.proto import engine_pb2 as pb
from vllm_sim.proto import engine_pb2_grpc as pb_grpc

IDS = [32, 45, 78, 13]


@pytest.fixture(scope="module")
def echo() -> Iterator[SimServer]:
    args = ["--mode", "echo", "--max-num-seqs", "4", "--max-model-len", "256"]
    with SimServer(args) as server:
        yield server


@pytest.fixture(scope="module")
def stub(echo: SimServer) -> Iterator[pb_grpc.VllmEngineStub]:
    with grpc.insecure_channel(f"127.0.0.1:{echo.port}") as channel:
        yield engine_stub(channel)


def generate(
    ids: list[int], max_tokens: int | None = None, stream: bool = False, request_id: str = ""
) -> pb.GenerateRequest:
    params = pb.SamplingParams() if max_tokens is None else pb.SamplingParams(max_tokens=max_tokens)
    return pb.GenerateRequest(
        request_id=request_id,
        tokenized=pb.TokenizedInput(input_ids=ids),
        sampling_params=params,
        stream=stream,
    )


def running(server: SimServer) -> float:
    with httpx.Client(base_url=server.url) as client:
        return scrape(client).value("vllm:num_requests_running")


def test_generate_and_http_share_the_port(echo: SimServer, stub: pb_grpc.VllmEngineStub) -> None:
    [message] = list(stub.Generate(generate(IDS, 128)))
    complete = message.complete
    assert list(complete.output_ids[: len(IDS)]) == IDS
    assert complete.prompt_tokens == len(IDS)
    assert complete.completion_tokens == len(complete.output_ids)
    assert complete.finish_reason == "stop"
    answer = httpx.get(echo.url + "/v1/models", timeout=10)
    assert answer.status_code == 200
    assert answer.json()["data"][0]["id"] == echo.model


def test_a_stream_is_one_chunk_per_token_then_the_end(stub: pb_grpc.VllmEngineStub) -> None:
    messages = list(stub.Generate(generate(IDS, 128, stream=True)))
    chunks, last = messages[:-1], messages[-1]
    assert all(m.WhichOneof("response") == "chunk" for m in chunks)
    assert [m.chunk.token_ids[0] for m in chunks][: len(IDS)] == IDS
    assert all(len(m.chunk.token_ids) == 1 for m in chunks)
    assert all(m.chunk.completion_tokens == 1 for m in chunks)
    assert all(m.chunk.prompt_tokens == len(IDS) for m in chunks)
    assert last.WhichOneof("response") == "complete"
    assert last.complete.finish_reason == "stop"
    assert last.complete.prompt_tokens == len(IDS)


def test_max_tokens_ends_with_length(stub: pb_grpc.VllmEngineStub) -> None:
    [message] = list(stub.Generate(generate(IDS, 3)))
    assert message.complete.finish_reason == "length"
    # Echo repeats the prompt whole, as on HTTP's token-in endpoint.
    assert list(message.complete.output_ids) == IDS
    assert message.complete.completion_tokens == len(IDS)


def test_text_input_is_tokenized(stub: pb_grpc.VllmEngineStub) -> None:
    request = pb.GenerateRequest(text="This is a test.", sampling_params=pb.SamplingParams())
    [message] = list(stub.Generate(request))
    assert message.complete.prompt_tokens > 0
    assert message.complete.completion_tokens > 0


@pytest.mark.parametrize(
    ("request_", "start"),
    [
        (generate(IDS, 0), "Max completion tokens and max tokens should be positive"),
        (generate(IDS * 40, 200), "This model's maximum context length is 256 tokens"),
        (pb.GenerateRequest(), "The decoder prompt cannot be empty"),
    ],
    ids=["max_tokens 0", "context", "empty"],
)
def test_bad_requests_are_invalid_argument(
    stub: pb_grpc.VllmEngineStub, request_: pb.GenerateRequest, start: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Generate(request_))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(start)


def test_model_and_server_info(echo: SimServer, stub: pb_grpc.VllmEngineStub) -> None:
    info = stub.GetModelInfo(pb.GetModelInfoRequest())
    assert info.model_path == echo.model
    assert info.served_model_name == echo.model
    assert info.is_generation
    assert info.max_context_length == 256
    server = stub.GetServerInfo(pb.GetServerInfoRequest())
    assert server.server_type == "vllm-grpc"
    assert server.uptime_seconds > 0
    assert server.max_num_seqs == 4
    health = stub.HealthCheck(pb.HealthCheckRequest())
    assert health.healthy


def test_loads_count_the_running_requests(echo: SimServer) -> None:
    args = ["--max-num-seqs", "1", "--time-to-first-token", "3s"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        calls = [stub.Generate(generate(IDS, 5)) for _ in range(2)]
        [load] = wait_for_requests(stub, 2).loads
        assert (load.num_running_reqs, load.num_waiting_reqs) == (1, 1)
        assert load.max_running_requests == 1
        assert load.max_total_num_tokens > 0
        for call in calls:
            call.cancel()


def test_cancelling_a_stream_frees_its_slot_at_once() -> None:
    args = ["--time-to-first-token", "10ms", "--inter-token-latency", "200ms"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        call = stub.Generate(generate(IDS, 100, stream=True))
        next(call)  # the first token: it runs
        assert running(server) == 1
        call.cancel()
        deadline = time.monotonic() + 1.0
        while running(server) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running(server) == 0


def test_abort_by_id_ends_the_call_and_frees_its_slot() -> None:
    args = ["--time-to-first-token", "10ms", "--inter-token-latency", "200ms"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        call = stub.Generate(generate(IDS, 100, stream=True, request_id="job-7"))
        next(call)
        stub.Abort(pb.AbortRequest(request_ids=["job-7", "unknown"]))
        with pytest.raises(grpc.RpcError) as caught:
            list(call)
        assert caught.value.code() == grpc.StatusCode.CANCELLED
        assert running(server) == 0


def test_a_duplicate_running_id_is_refused() -> None:
    args = ["--time-to-first-token", "2s"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        first = stub.Generate(generate(IDS, 2, request_id="same"))
        deadline = time.monotonic() + 5
        while running(server) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Generate(generate(IDS, 2, request_id="same")))
        assert caught.value.code() == grpc.StatusCode.ABORTED
        first.cancel()


@pytest.mark.parametrize(
    ("kind", "code", "start"),
    [
        ("server_error", grpc.StatusCode.UNAVAILABLE, "The server is overloaded or not ready yet."),
        ("rate_limit", grpc.StatusCode.RESOURCE_EXHAUSTED, "Rate limit reached for"),
        ("invalid_api_key", grpc.StatusCode.UNAUTHENTICATED, "Incorrect API key provided"),
        ("model_not_found", grpc.StatusCode.NOT_FOUND, "The model"),
        ("context_length", grpc.StatusCode.INVALID_ARGUMENT, "This model's maximum context"),
        ("invalid_request", grpc.StatusCode.INVALID_ARGUMENT, "Invalid request"),
    ],
)
def test_injected_failures_map_to_grpc_status(kind: str, code: grpc.StatusCode, start: str) -> None:
    args = ["--failure-injection-rate", "100", "--failure-types", kind]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Generate(generate(IDS, 4, stream=True)))
        assert caught.value.code() == code
        assert (caught.value.details() or "").startswith(start)
        with httpx.Client(base_url=server.url) as client:
            assert scrape(client).value("vllm:request_success_total", finished_reason="stop") == 0


def test_api_keys_are_read_from_the_metadata() -> None:
    server = SimServer(["--api-key", "sk-test"])
    with server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Generate(generate(IDS, 2)))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        metadata = (("authorization", "Bearer sk-test"),)
        [message] = list(stub.Generate(generate(IDS, 2), metadata=metadata))
        assert message.complete.completion_tokens == 2


def test_a_full_queue_is_resource_exhausted() -> None:
    args = ["--max-num-seqs", "1", "--max-waiting-queue-length", "1", "--time-to-first-token", "3s"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        held = [stub.Generate(generate(IDS, 2)) for _ in range(2)]
        wait_for_requests(stub, 2)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Generate(generate(IDS, 2)))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for call in held:
            call.cancel()


def test_metrics_count_grpc_requests(echo: SimServer, stub: pb_grpc.VllmEngineStub) -> None:
    with httpx.Client(base_url=echo.url) as client:
        before = scrape(client).value("vllm:prompt_tokens_total")
        list(stub.Generate(generate(list(range(1, 22)), 25)))
        after = scrape(client).value("vllm:prompt_tokens_total")
    assert after - before == 21


def test_streamed_and_whole_calls_are_timed_as_written(
    echo: SimServer, stub: pb_grpc.VllmEngineStub
) -> None:
    """A streamed call's TTFT, gaps and end at its message writes, a whole one's end at
    its one message, and the writes' lag in the simulator's own gauge: every call counted
    once, every gap once."""
    with httpx.Client(base_url=echo.url) as client:
        before = scrape(client)
        streamed = list(stub.Generate(generate(IDS, 4, stream=True)))
        [whole] = list(stub.Generate(generate(IDS, 4)))
        after = scrape(client)

    def grown(name: str) -> float:
        return after.value(name) - before.value(name)

    # Echo mode: each answers its prompt's 4 tokens.
    assert len([m for m in streamed if m.HasField("chunk")]) == 4
    assert len(whole.complete.output_ids) == 4
    assert grown(TTFT + "_count") == 2
    assert grown(ITL + "_count") == 2 * 3
    assert grown(E2E + "_count") == 2
    assert 0.0 <= after.value(LAG) < 1.0


def test_the_same_prompt_again_hits_the_prefix_cache(stub: pb_grpc.VllmEngineStub) -> None:
    prompt = list(range(100, 164))  # four full blocks of 16
    list(stub.Generate(generate(prompt, 2)))
    [message] = list(stub.Generate(generate(prompt, 2)))
    assert message.complete.cached_tokens > 0
    assert message.complete.cached_tokens % 16 == 0


def test_http_keeps_answering_during_a_long_call(echo: SimServer) -> None:
    args = ["--time-to-first-token", "10ms", "--inter-token-latency", "50ms"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        received: list[pb.GenerateResponse] = []
        worker = threading.Thread(
            target=lambda: received.extend(stub.Generate(generate(IDS, 20, stream=True)))
        )
        worker.start()
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for _ in range(5):
                assert client.get("/health").status_code == 200
        worker.join(10)
        assert received[-1].WhichOneof("response") == "complete"


def test_logprobs_come_with_each_chunk_and_the_whole_answer(
    stub: pb_grpc.VllmEngineStub,
) -> None:
    request = generate(IDS, 3, stream=True)
    request.sampling_params.logprobs = 2
    chunks = [m.chunk for m in stub.Generate(request) if m.HasField("chunk")]
    assert chunks
    for chunk in chunks:
        logprobs = chunk.output_logprobs
        assert list(logprobs.token_ids) == list(chunk.token_ids)
        assert len(logprobs.token_logprobs) == 1 and logprobs.token_logprobs[0] < 0
        [top] = logprobs.top_logprobs
        assert len(top.values) == 2 and top.token_ids[0] == chunk.token_ids[0]
    request.stream = False
    [message] = list(stub.Generate(request))
    whole = message.complete.output_logprobs
    assert list(whole.token_ids) == list(message.complete.output_ids)


def test_a_stop_string_is_reported_as_matched(stub: pb_grpc.VllmEngineStub) -> None:
    request = pb.GenerateRequest(
        text="one two three four", sampling_params=pb.SamplingParams(stop=["three"])
    )
    [message] = list(stub.Generate(request))
    assert message.complete.finish_reason == "stop"
    assert message.complete.matched_stop_str == "three"


def test_a_prefill_request_returns_where_its_kv_is(stub: pb_grpc.VllmEngineStub) -> None:
    request = generate(IDS * 10, 1)
    request.kv_transfer_params_json = '{"do_remote_decode": true}'
    [message] = list(stub.Generate(request))
    params = json.loads(message.complete.kv_transfer_params_json)
    assert params["do_remote_prefill"] is True
    assert params["remote_block_ids"] == [0, 1, 2]  # 40 tokens in blocks of 16
    assert message.complete.kv_transfer_params.remote_port == params["remote_port"]


def test_a_bad_transfer_json_and_another_rank_are_invalid(
    stub: pb_grpc.VllmEngineStub,
) -> None:
    request = generate(IDS, 2)
    request.kv_transfer_params_json = "{not json"
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Generate(request))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    request = generate(IDS, 2)
    request.data_parallel_rank = 3
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Generate(request))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "data_parallel_rank 3" in (caught.value.details() or "")


def test_an_unknown_method_is_unimplemented(echo: SimServer) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{echo.port}") as channel:
        method = channel.unary_unary(
            "/vllm.grpc.engine.VllmEngine/NoSuchMethod",
            request_serializer=pb.HealthCheckRequest.SerializeToString,
            response_deserializer=pb.HealthCheckResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as caught:
            method(pb.HealthCheckRequest())
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_served_names_are_reported_and_generation_uses_the_first() -> None:
    args = ["--served-model-name", "alias", "other"]
    with SimServer(args, model="org/base") as server:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = engine_stub(channel)
            info = stub.GetModelInfo(pb.GetModelInfoRequest())
            [message] = list(stub.Generate(generate(IDS, 2)))
        with httpx.Client(base_url=server.url) as client:
            metrics = scrape(client)
    assert info.model_path == "org/base"
    assert info.served_model_name == "alias"
    assert message.complete.completion_tokens == 2
    assert metrics.value("vllm:prompt_tokens_total", model_name="alias") == len(IDS)


def test_random_answers_end_by_length_only_at_max_tokens() -> None:
    with SimServer([]) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        for _ in range(10):
            request = pb.GenerateRequest(
                text="Tell me something.", sampling_params=pb.SamplingParams(max_tokens=12)
            )
            [message] = list(stub.Generate(request))
            complete = message.complete
            assert 0 < complete.completion_tokens <= 12
            # A stop ends with the end-of-sequence id (within the 12); a cut fills them.
            ends = complete.output_ids[-1] == EOS_TOKEN_ID
            assert complete.finish_reason == ("stop" if ends else "length")
            assert ends or complete.completion_tokens == 12
        streamed = list(stub.Generate(generate(IDS, 12, stream=True)))
        assert len(streamed) >= 2
        assert streamed[-1].WhichOneof("response") == "complete"


def test_n_asks_for_one_sequence_over_grpc(stub: pb_grpc.VllmEngineStub) -> None:
    request = generate(IDS, 128)
    request.sampling_params.n = 3
    [message] = list(stub.Generate(request))
    assert list(message.complete.output_ids[: len(IDS)]) == IDS


def test_a_cold_prompt_under_a_full_hit_threshold_ends_at_once() -> None:
    args = ["--enable-kvcache", "--global-cache-hit-threshold", "1.0"]
    server = SimServer(args, env={"POD_IP": "10.0.0.1"})
    with server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        messages = list(engine_stub(ch).Generate(generate(list(range(40)), 10, stream=True)))
    [message] = messages  # no chunk: nothing was generated
    assert message.complete.finish_reason == "cache_threshold"
    assert message.complete.completion_tokens == 0


@pytest.mark.timing
def test_generate_follows_the_configured_latencies() -> None:
    args = ["--mode", "echo", "--time-to-first-token", "500ms", "--inter-token-latency", "200ms"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        started = time.monotonic()
        list(stub.Generate(generate(IDS, 4)))
        whole = time.monotonic() - started
        started = time.monotonic()
        arrivals = [time.monotonic() - started for _ in stub.Generate(generate(IDS, 4, True))]
    assert 1.1 < whole < 3.0  # 500 ms, then three gaps of 200 ms
    assert arrivals[0] > 0.45
    assert arrivals[-1] > 1.05


def test_a_message_that_does_not_parse_is_invalid_argument(echo: SimServer) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{echo.port}") as channel:
        raw = channel.unary_stream(
            "/vllm.grpc.engine.VllmEngine/Generate",
            request_serializer=lambda data: data,
            response_deserializer=pb.GenerateResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as caught:
            list(raw(b"\xff\xff\xff\xff"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed vllm.grpc.engine.GenerateRequest" in (caught.value.details() or "")


def test_a_message_over_four_mib_is_refused(stub: pb_grpc.VllmEngineStub) -> None:
    huge = pb.GenerateRequest(text="x" * (5 * 1024 * 1024))
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Generate(huge))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    [message] = list(stub.Generate(generate(IDS, 2)))  # and the server goes on
    assert message.complete.finish_reason == "length"


@pytest.mark.timing
def test_grpc_latencies_land_in_the_right_buckets() -> None:
    """A stream at TTFT 200 ms and ITL 80 ms: nothing in the TTFT buckets up to 0.1 s,
    nothing in the ITL buckets up to 0.075 s."""
    args = ["--time-to-first-token", "200ms", "--inter-token-latency", "80ms"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        list(engine_stub(ch).Generate(generate(IDS, 5, stream=True)))
        with httpx.Client(base_url=server.url) as client:
            metrics = scrape(client)
    ttft = metrics.hist("vllm:time_to_first_token_seconds")
    itl = metrics.hist("vllm:inter_token_latency_seconds")
    assert ttft.count == 1 and ttft.buckets[0.1] == 0
    assert itl.count >= 1 and itl.buckets[0.075] == 0


@pytest.mark.timing
def test_a_queued_grpc_call_counts_its_wait() -> None:
    """One slot, two calls at TTFT 1.2 s: both are timed in the engine, and the second's
    queue time (vLLM observes every request's) is over a second."""
    args = ["--max-num-seqs", "1", "--time-to-first-token", "1200ms", "--inter-token-latency", "0"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: list(stub.Generate(generate(IDS, 2))), range(2)))
        with httpx.Client(base_url=server.url) as client:
            metrics = scrape(client)
    inference = metrics.hist("vllm:request_inference_time_seconds")
    queue = metrics.hist("vllm:request_queue_time_seconds")
    assert inference.count == 2 and inference.buckets[1.0] == 0
    assert queue.count == 2 and queue.buckets[1.0] == 1


def test_kv_usage_follows_running_grpc_calls() -> None:
    args = ["--block-size", "8", "--kv-cache-size", "16", "--time-to-first-token", "2s"]
    with SimServer(args) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = engine_stub(ch)
        calls = [stub.Generate(generate(list(range(8)), 2)) for _ in range(3)]
        wait_for_requests(stub, 3)
        with httpx.Client(base_url=server.url) as client:
            during = scrape(client).value("vllm:kv_cache_usage_perc")
            for call in calls:
                call.cancel()
            deadline = time.monotonic() + 2
            after = scrape(client).value("vllm:kv_cache_usage_perc")
            while after and time.monotonic() < deadline:
                time.sleep(0.02)
                after = scrape(client).value("vllm:kv_cache_usage_perc")
    assert 0 < during <= 1
    assert after == 0


def test_loads_of_another_rank_are_invalid_argument(stub: pb_grpc.VllmEngineStub) -> None:
    assert stub.GetLoads(pb.GetLoadsRequest(dp_rank=0)).loads[0].dp_rank == 0
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetLoads(pb.GetLoadsRequest(dp_rank=3))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "rank 3" in (caught.value.details() or "")
