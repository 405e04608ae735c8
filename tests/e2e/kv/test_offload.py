"""CPU KV offloading on a real simulator, seen as llm-d sees it: a real ZMQ subscriber
decodes the CPU tier's BlockStored / BlockRemoved (medium "CPU", vLLM's placeholder
payload, group 0) in the array and the map encodings beside the GPU's; a prefix evicted
from the GPU is found in the CPU, its tokens reported cached; and vLLM's offloading and
external-prefix-cache metrics move as those hits do.

Under the constant timing model a block is taken as Llama-3.1-8B's (128 KiB a token, 2 MiB
a 16-token block), so 16 MiB of offloading holds 8 blocks; the GPU cache holds 8 blocks.
"""

from __future__ import annotations

import time

import pytest

from tests.support.kv import (
    BS,
    Cleared,
    Event,
    Removed,
    Stored,
    Subscriber,
    cached_tokens,
    chain,
    complete,
    distinct,
    kv_server,
)
from tests.support.metrics import (
    EXTERNAL_PREFIX_HITS,
    EXTERNAL_PREFIX_QUERIES,
    PREFIX_HITS,
    PROMPT_BY_SOURCE,
    PROMPT_CACHED_BY_SOURCE,
    scrape,
)
from tests.support.server import run_cli

BLOCK_BYTES = 131_072 * BS
OFFLOAD = ["--kv-cache-size", "8", "--kv-offloading-size", str(16 / 1024)]


def drain(sub: Subscriber, quiet: float = 0.6) -> list[Event]:
    """Every event until none comes for `quiet` seconds, applied to the subscriber's
    contents."""
    events: list[Event] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = sub.recv(quiet)
        if message is None:
            break
        sub.messages.append(message)
        events += message.events
    for event in events:
        sub.apply(event)
    return events


def cpu(events: list[Event]) -> list[Event]:
    return [e for e in events if not isinstance(e, Cleared) and e.medium == "CPU"]


@pytest.mark.parametrize("map_format", [False, True], ids=["array", "map"])
def test_cpu_tier_events_hits_and_metrics(map_format: bool) -> None:
    a = distinct(1, 3, extra=1)  # 3 full blocks and a token
    b = distinct(2, 7, extra=1)  # 8 blocks on the GPU: evicts all of a there
    a_hashes, b_hashes = chain(a), chain(b)
    with kv_server(OFFLOAD, map_format=map_format) as (_, sub, client):
        assert cached_tokens(complete(client, a)) == 0
        events = drain(sub)
        # The GPU's store first, then the CPU's, one placeholder event a block.
        assert events[0] == Stored(a_hashes, None, a[: 3 * BS], BS, None, "GPU", None)
        assert cpu(events) == [
            Stored([h], None, [], 0, None, "CPU", None, None, 0) for h in a_hashes
        ]
        raw = sub.messages[-1].raw_events[-1]
        if map_format:
            assert raw == {
                "type": "BlockStored", "block_hashes": [a_hashes[2]],
                "parent_block_hash": None, "token_ids": [], "block_size": 0, "lora_id": None,
                "medium": "CPU", "lora_name": None, "group_idx": 0,
            }  # fmt: skip
        else:
            assert raw == ["BlockStored", [a_hashes[2]], 0, [], 0, None, "CPU", None, None, 0]
        assert sub.cpu_contents == set(a_hashes)

        assert cached_tokens(complete(client, b)) == 0
        events = drain(sub)
        # b's 7 blocks fill the 8-block tier: a's two least recent go, its tail first.
        removed = [e for e in cpu(events) if isinstance(e, Removed)]
        assert removed == [Removed([a_hashes[2], a_hashes[1]], "CPU", 0)]
        assert sub.cpu_contents == {a_hashes[0], *b_hashes}
        assert not set(a_hashes) & sub.contents  # the GPU holds none of a

        # a again: its first block comes back from the CPU, the rest is computed.
        assert cached_tokens(complete(client, a)) == BS
        drain(sub)
        assert set(a_hashes) <= sub.cpu_contents  # the computed ones stored again

        metrics = scrape(client)
        assert metrics.value(PREFIX_HITS) == 0
        assert metrics.value(EXTERNAL_PREFIX_HITS) == BS
        assert metrics.value(EXTERNAL_PREFIX_QUERIES) == 2 * len(a) + len(b)
        assert metrics.value(PROMPT_CACHED_BY_SOURCE, source="host") == BS
        assert metrics.value(PROMPT_CACHED_BY_SOURCE, source="device") == 0
        assert metrics.value(PROMPT_CACHED_BY_SOURCE, source="p2p") == 0
        assert metrics.value(PROMPT_BY_SOURCE, source="external_kv_transfer") == BS
        assert metrics.value("vllm:kv_offload_load_bytes_total") == BLOCK_BYTES
        assert metrics.value("vllm:kv_offload_load_time_total") == pytest.approx(BLOCK_BYTES / 50e9)
        # Stores: a's 3, b's 7, a's 2 again.
        assert metrics.value("vllm:kv_offload_store_bytes_total") == 12 * BLOCK_BYTES
        assert metrics.hist("vllm:kv_offload_store_size").count == 3
        assert (
            metrics.value("vllm:kv_offload_total_bytes_total", transfer_type="CPU_to_GPU")
            == BLOCK_BYTES
        )
        assert metrics.hist("vllm:kv_offload_cpu_allocation_size").sum == 12
        info = [lbl for lbl, _ in metrics.series("vllm:cache_config_info")]
        assert info[0]["kv_offloading_size"] == str(16 / 1024)
        assert info[0]["kv_offloading_backend"] == "native"


def test_without_offloading_there_are_no_cpu_events_nor_offload_families() -> None:
    a = distinct(3, 3, extra=1)
    with kv_server(["--kv-cache-size", "8"]) as (_, sub, client):
        complete(client, a)
        assert not cpu(drain(sub))
        text = scrape(client).text
        assert "vllm:kv_offload" not in text
        assert 'source="host"' in text  # vLLM's series at 0 all the same


def test_a_self_describing_connector_config_sends_whole_payloads() -> None:
    """The connector in --kv-transfer-config is the same thing as --kv-offloading-size;
    with `self_describing_kv_events` its events carry the blocks' tokens and parents."""
    config = (
        '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", '
        '"kv_connector_extra_config": {"cpu_bytes_to_use": 16777216, '
        '"self_describing_kv_events": true}}'
    )
    a = distinct(4, 2, extra=1)
    hashes = chain(a)
    args = ["--kv-cache-size", "8", "--kv-transfer-config", config]
    with kv_server(args, map_format=True) as (_, sub, client):
        complete(client, a)
        assert cpu(drain(sub)) == [
            Stored([hashes[0]], None, a[:BS], BS, None, "CPU", None, None, 0, "full_attention"),
            Stored(
                [hashes[1]], hashes[0], a[BS : 2 * BS], BS, None, "CPU", None, None, 0,
                "full_attention",
            ),
        ]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--kv-offloading-size", "0"], "cpu_bytes_to_use must be specified"),
        (["--kv-offloading-backend", "disk"], "invalid choice: 'disk'"),
        (
            ["--kv-transfer-config", '{"kv_connector": "OffloadingConnector"}'],
            "Please specify kv_role when kv_connector is set",
        ),
        (
            [
                "--kv-transfer-config",
                '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}',
            ],
            "cpu_bytes_to_use must be specified in kv_connector_extra_config",
        ),
    ],
)
def test_refusals_are_one_line(flags: list[str], reason: str) -> None:
    result = run_cli(["--model", "m", *flags])
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0], result.stderr
