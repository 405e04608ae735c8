"""Replay on the wall clock: a trace sent over HTTP to any OpenAI-compatible server (this
simulator, or a real vLLM), streamed, each answer timed as a client sees it.

`speedup` X sends the trace X times faster than recorded and reports every time X times
longer than measured, in the trace's own seconds: against a simulator started with
`--time-scale X` (whose simulated time runs X times faster), the run reports what the
trace at its real pace would show, and compares key for key with a replay in simulated
time. Prompts given as lengths go to /v1/completions as token ids (the same ids the
simulated replay uses, so prefix caching sees the same prompts); OpenAI requests go to
their own endpoint as recorded, streamed. The fleet is sampled from /metrics.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

import httpx

from vllm_sim.whatif.prompts import VOCABULARY_SPAN, prompt_ids
from vllm_sim.whatif.results import RequestRecord, RunResult, Sample
from vllm_sim.whatif.trace import Trace, TraceRequest

Progress = Callable[[int], None]
_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:num_preemptions_total": "preemptions",
}


class HttpReplay:
    def __init__(
        self,
        target: str,
        trace: Trace,
        speedup: float = 1.0,
        model: str | None = None,
        sample_interval: float = 1.0,
        timeout: float = 600.0,
        progress: Progress | None = None,
        vocabulary: int = VOCABULARY_SPAN,
    ) -> None:
        self.target = target.rstrip("/")
        self.trace = trace
        self.speedup = speedup
        self.model = model
        self.sample_interval = sample_interval
        self.timeout = timeout
        self.progress = progress
        self.vocabulary = vocabulary
        self.records: list[RequestRecord] = []
        self.samples: list[Sample] = []
        self._start = 0.0
        self._finished = 0

    def run(self) -> RunResult:
        """The run's result; ValueError (one line) when the target cannot be reached."""
        started = time.perf_counter()
        try:
            asyncio.run(self._run())
        except httpx.HTTPError as error:
            raise ValueError(
                f"cannot reach {self.target}: {error or type(error).__name__}"
            ) from None
        return RunResult(
            "http",
            {
                "target": self.target,
                "model": self.model,
                "speedup": self.speedup,
                "sample_interval": self.sample_interval,
            },
            self.records,
            self.samples,
            list(self.trace.problems),
            time.perf_counter() - started,
        )

    def _trace_time(self) -> float:
        """Seconds since the start, in the trace's time."""
        return (time.perf_counter() - self._start) * self.speedup

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        timeout = httpx.Timeout(self.timeout, connect=30.0)
        async with httpx.AsyncClient(
            base_url=self.target, limits=limits, timeout=timeout
        ) as client:
            if self.model is None:
                self.model = await _first_model(client)
            self._start = time.perf_counter()
            sampler = asyncio.create_task(self._sample_until_done(client))
            tasks = []
            for index, traced in enumerate(self.trace.requests):
                delay = traced.arrival / self.speedup - (time.perf_counter() - self._start)
                if delay > 0:
                    await asyncio.sleep(delay)
                record = RequestRecord(index, traced.line, -1, traced.arrival, traced.input_length)
                self.records.append(record)
                tasks.append(asyncio.create_task(self._send(client, index, traced, record)))
            await asyncio.gather(*tasks)
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            await self._sample(client)

    async def _send(
        self, client: httpx.AsyncClient, index: int, traced: TraceRequest, record: RequestRecord
    ) -> None:
        path, body = self._request(index, traced)
        sent = time.perf_counter()
        first = last = None
        usage: dict[str, Any] = {}
        try:
            async with client.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    text = (await response.aread())[:300].decode(errors="replace")
                    record.error = f"{response.status_code}: {text}"
                    return
                tail = b""
                # Bytes, not parsed events: a token is a chunk with text in it, and the
                # usage comes in the last event. Parsing every event would make the
                # client, not the server, set the pace of a fast replay.
                async for data in response.aiter_bytes():
                    if _TOKEN.search(data) is not None:
                        last = time.perf_counter()
                        first = first or last
                    tail = (tail + data)[-_TAIL:]
                usage = _usage(tail)
        except (httpx.HTTPError, ValueError) as error:
            record.error = f"{type(error).__name__}: {error}"
            return
        finally:
            self._finished += 1
            if self.progress is not None:
                self.progress(1)
        self._timed(record, sent, first, last, usage)

    def _timed(
        self,
        record: RequestRecord,
        sent: float,
        first: float | None,
        last: float | None,
        usage: dict[str, Any],
    ) -> None:
        scale = self.speedup
        tokens = int(usage.get("completion_tokens") or 0)
        record.output_tokens = tokens
        record.input_tokens = int(usage.get("prompt_tokens") or record.input_tokens)
        details = usage.get("prompt_tokens_details") or {}
        record.cached_tokens = int(details.get("cached_tokens") or 0)
        if first is None or last is None:
            record.error = "no token"
            return
        record.ttft = (first - sent) * scale
        record.e2e = (last - sent) * scale
        if tokens > 1:
            record.itl = (last - first) * scale / (tokens - 1)
        record.finish_reason = "length" if tokens else None

    def _request(self, index: int, traced: TraceRequest) -> tuple[str, dict[str, Any]]:
        stream = {"stream": True, "stream_options": {"include_usage": True}}
        if traced.body is not None:
            path = "/v1/chat/completions" if traced.endpoint == "chat" else "/v1/completions"
            return path, {**traced.body, **stream}
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt_ids(index, traced, self.vocabulary),
            "max_tokens": traced.output_length,
            "ignore_eos": True,
            **stream,
        }
        return "/v1/completions", body

    async def _sample_until_done(self, client: httpx.AsyncClient) -> None:
        wall_interval = self.sample_interval / self.speedup
        while True:
            await self._sample(client)
            await asyncio.sleep(wall_interval)

    async def _sample(self, client: httpx.AsyncClient) -> None:
        try:
            response = await client.get("/metrics")
        except httpx.HTTPError:
            return
        values = parse_gauges(response.text)
        self.samples.append(
            Sample(
                self._trace_time(),
                int(sum(values.get("running", [0.0]))),
                int(sum(values.get("waiting", [0.0]))),
                _mean(values.get("kv_usage", [0.0])),
                int(sum(values.get("preemptions", [0.0]))),
                self._finished,
                [int(v) for v in values.get("running", [])],
            )
        )


def parse_gauges(text: str) -> dict[str, list[float]]:
    """The fleet gauges of a Prometheus exposition: one value per labelled series."""
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        key = _GAUGES.get(name)
        if key is None:
            continue
        try:
            found.setdefault(key, []).append(float(line.rsplit(" ", 1)[1]))
        except (IndexError, ValueError):
            continue
    return found


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# A streamed token's text, in a completion's chunk or a chat's delta; an empty one (a
# finish chunk's) is no token.
_TOKEN = re.compile(rb'"(?:text|content)":"[^"]')
_TAIL = 4096  # bytes kept from the end of a stream: its usage event is in them


def _usage(tail: bytes) -> dict[str, Any]:
    """The usage of the stream's last event that has one."""
    for line in reversed(tail.split(b"\n")):
        if line.startswith(b"data: {") and b'"usage":{' in line:
            try:
                usage = json.loads(line[6:]).get("usage")
            except ValueError:
                return {}
            return usage if isinstance(usage, dict) else {}
    return {}


async def _first_model(client: httpx.AsyncClient) -> str:
    response = await client.get("/v1/models")
    response.raise_for_status()
    models = response.json().get("data") or []
    if not models:
        raise ValueError("the target serves no model")
    return str(models[0]["id"])
