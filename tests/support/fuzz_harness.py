"""Sending fuzzed requests to a real server and checking what every answer must be.

Per example: no 5xx (nor a 5xx error event inside a 200 stream); a 4xx in the route's error
envelope; the whole exchange, stream included, within REQUEST_BOUND; a stream that ends with
its protocol's closing event or an error event, never a dropped connection. Meanwhile a
StallProbe pings /health from a thread: a ping slower than STALL_BOUND means the event loop
was blocked, since the fuzzer itself sends one request at a time.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import pytest
from hypothesis import strategies as st

from tests.support.errors import assert_anthropic_error, assert_openai_error
from tests.support.fuzz import encode, mutated
from tests.support.server import STARTUP_TIMEOUT, SimServer

REQUEST_BOUND = 10.0  # seconds for one whole exchange: longer is a hang
STALL_BOUND = 0.25  # seconds for one /health ping while the fuzzer runs
PROBE_INTERVAL = 0.02
REPORT_ENV = "VLLM_SIM_FUZZ_REPORT"  # a path: the figures of the run are written there as JSON

Envelope = Literal["openai", "anthropic"]
Framing = Literal["openai", "responses", "anthropic", "none"]


@dataclass(frozen=True, slots=True)
class Route:
    """What the checks need to know of one route."""

    path: str
    envelope: Envelope = "openai"
    framing: Framing = "none"
    # A route that answers a client mistake with a 500 on purpose, as the reference does
    # (only the deprecated /fake_metrics): such a 500 must carry this message prefix.
    documented_500: str | None = None
    # Error types a route may answer beside the status's usual one, as vLLM does
    # (`invalid_request_error` for an unknown stored response's 404).
    error_types: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Probe:
    """One request, as hypothesis shows it when an example fails: a reproducer."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    content: bytes

    def describe(self) -> str:
        return f"{self.method} {self.path} headers={dict(self.headers)!r} body={self.content!r}"


# ------------------------------------------------------------------ requests

CONTENT_TYPES = (
    None,
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json; charset=utf-16",
    "APPLICATION/JSON",
    "application/json-patch+json",
    "application/jsonx",
    "",
)
RAW_BODIES = (
    b"",
    b" ",
    b"{",
    b"}",
    b"[]",
    b"null",
    b'"x"',
    b"1e999",
    b"\xef\xbb\xbf{}",  # a UTF-8 byte order mark
    b"\xff\xfe{\x00}\x00",  # UTF-16
    b"{}{}",
    b'{"a":1,}',
    b"{'a': 1}",
    b"\x00" * 64,
)
# X-Return-Error asks for an error on purpose; only values that cannot ask for a 5xx.
RETURN_ERRORS = ("abc", "", "99", "600", "-1", "400", "404", "429", "1e3", "0x190")
# Printable ASCII without surrounding blanks: what the client library lets through.
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=300).map(
    str.strip
)


def extra_headers() -> st.SearchStrategy[dict[str, str]]:
    """Headers a client may add, some of them malformed, none asking for a failure."""
    return st.fixed_dictionaries(
        {},
        optional={
            "x-request-id": header_text,
            "x-return-error": st.sampled_from(RETURN_ERRORS),
            "x-cache-threshold-finish-reason": st.sampled_from(["true", "1", "no", "x"]),
            "anthropic-version": header_text,
            "accept": st.sampled_from(["*/*", "text/event-stream", "application/xml", ""]),
            "origin": st.sampled_from(["http://evil.invalid", "null", ""]),
            "sec-fetch-site": st.sampled_from(["cross-site", "same-origin", "none"]),
        },
    )


@st.composite
def requests(
    draw: st.DrawFn,
    path: str,
    valid: st.SearchStrategy[dict[str, Any]],
    fields: Mapping[str, st.SearchStrategy[Any]],
) -> Probe:
    """A POST to `path`: mostly a mutated JSON body, sometimes with the wrong content type,
    sometimes bytes that are no JSON body at all (truncated, trailing junk, binary)."""
    mode = draw(st.sampled_from(["json"] * 8 + ["content-type", "raw"]))
    headers = {"content-type": "application/json"}
    if draw(st.integers(0, 4)) == 0:
        headers.update(draw(extra_headers()))
    body = encode(draw(mutated(valid, fields)))
    if mode == "content-type":
        content_type = draw(st.sampled_from(CONTENT_TYPES))
        del headers["content-type"]
        if content_type is not None:
            headers["content-type"] = content_type
    elif mode == "raw":
        cut = draw(st.integers(0, len(body)))
        body = draw(
            st.sampled_from(RAW_BODIES)
            | st.binary(max_size=200)
            | st.just(body[:cut])
            | st.just(body + b"junk")
        )
    return Probe("POST", path, tuple(headers.items()), body)


# ------------------------------------------------------------------ the stall probe


class StallProbe:
    """Pings /health from a process of its own and keeps the slowest answer, per window and
    overall. Not a thread of the test process: its garbage collections and the time
    hypothesis holds the GIL would count as the server's stalls."""

    def __init__(self, url: str) -> None:
        spawn = multiprocessing.get_context("spawn")
        self._window = spawn.Value("d", 0.0)  # the slowest ping since take_window
        self._since = spawn.Value("d", 0.0)  # when the ping in flight was sent; 0: none
        self._failures = spawn.Value("i", 0)
        self._stop = spawn.Event()
        self._ready = spawn.Event()  # set after the first ping: the probe is watching
        self._process = spawn.Process(
            target=_ping_loop,
            args=(url, self._window, self._since, self._failures, self._stop, self._ready),
            name="stall-probe",
            daemon=True,
        )
        self.worst = 0.0

    def start(self) -> StallProbe:
        self._process.start()
        assert self._ready.wait(STARTUP_TIMEOUT), "the stall probe did not start"
        return self

    def stop(self) -> None:
        self._stop.set()
        self._process.join(REQUEST_BOUND + 5)
        if self._process.is_alive():
            self._process.kill()

    @property
    def failures(self) -> int:
        """Pings that failed or answered other than 200."""
        return int(self._failures.value)

    def take_window(self) -> float:
        """The slowest ping since the last call, a ping still in flight counted by its age."""
        with self._window.get_lock():
            worst = float(self._window.value)
            since = float(self._since.value)
            self._window.value = 0.0
        if since:
            worst = max(worst, time.monotonic() - since)  # one clock for every process
        self.worst = max(self.worst, worst)
        return worst


def _ping_loop(url: str, window: Any, since: Any, failures: Any, stop: Any, ready: Any) -> None:
    """The probe process: a /health ping every PROBE_INTERVAL until told to stop."""
    with httpx.Client(base_url=url, timeout=REQUEST_BOUND) as client:
        while not stop.is_set():
            start = time.monotonic()
            with window.get_lock():
                since.value = start
            try:
                ok = client.get("/health").status_code == 200
            except httpx.HTTPError:
                ok = False
            took = time.monotonic() - start
            with window.get_lock():
                since.value = 0.0
                window.value = max(window.value, took)
            if not ok:
                with failures.get_lock():
                    failures.value += 1
            ready.set()
            stop.wait(PROBE_INTERVAL)


# ------------------------------------------------------------------ figures


@dataclass
class RouteFigures:
    """What the fuzzer saw on one route."""

    examples: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    stream_errors: int = 0
    documented_500: int = 0  # /fake_metrics' deliberate 500s, kept apart from the rest
    spikes: int = 0  # slow /health pings that the same request did not cause again
    worst_health: float = 0.0
    seconds: float = 0.0


FIGURES: dict[str, RouteFigures] = {}


def figures_of(name: str) -> RouteFigures:
    return FIGURES.setdefault(name, RouteFigures())


def write_report(path: str) -> None:
    report = {
        name: {
            "examples": f.examples,
            "statuses": dict(sorted(f.statuses.items())),
            "stream_errors": f.stream_errors,
            "documented_500": f.documented_500,
            "unrepeated_health_spikes": f.spikes,
            "worst_health_ms": round(f.worst_health * 1000, 1),
            "seconds": round(f.seconds, 1),
        }
        for name, f in sorted(FIGURES.items())
    }
    with open(path, "w") as out:
        json.dump(report, out, indent=2)


def summary_lines() -> list[str]:
    lines = [f"{'route':<44}{'examples':>9}  {'statuses':<38}{'health max':>11}{'s':>7}"]
    for name, f in sorted(FIGURES.items()):
        classes = Counter(f"{status[0]}xx" for status in f.statuses.elements())
        shown = " ".join(f"{k}:{v}" for k, v in sorted(classes.items()))
        if f.stream_errors:
            shown += f" in-stream-4xx:{f.stream_errors}"
        if f.documented_500:
            shown += f" 500-by-design:{f.documented_500}"
        if f.spikes:
            shown += f" spikes:{f.spikes}"
        lines.append(
            f"{name:<44}{f.examples:>9}  {shown:<38}"
            f"{f.worst_health * 1000:>8.1f} ms{f.seconds:>7.1f}"
        )
    return lines


# ------------------------------------------------------------------ the target


@dataclass
class Target:
    """A server started for one fuzz module, a client and the stall probe on it."""

    server: SimServer
    client: httpx.Client
    probe: StallProbe


def target_fixture(args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Any:
    """A module-scoped Target: zero latencies (the defaults), a queue deep enough that a
    429 is rare, request ids echoed so that hostile X-Request-Id values reach the answer."""
    base = [
        "--max-num-seqs",
        "256",
        "--max-waiting-queue-length",
        "10000",
        "--enable-request-id-headers",
    ]

    @pytest.fixture(scope="module")
    def fixture() -> Iterator[Target]:
        with (
            SimServer([*base, *args], env=env) as server,
            httpx.Client(base_url=server.url, timeout=REQUEST_BOUND) as client,
        ):
            probe = StallProbe(server.url).start()
            try:
                yield Target(server, client, probe)
            finally:
                probe.stop()

    return fixture


def exchange(target: Target, route: Route, probe: Probe, name: str | None = None) -> None:
    """Sends `probe`, reads the whole answer, and checks every invariant."""
    figures = figures_of(name or f"{probe.method} {route.path}")
    start = time.monotonic()
    response = _send(target.client, probe)
    elapsed = time.monotonic() - start
    stall = target.probe.take_window()
    figures.examples += 1
    figures.worst_health = max(figures.worst_health, stall)
    figures.seconds += elapsed
    where = probe.describe()[:2000]
    assert elapsed < REQUEST_BOUND, (f"took {elapsed:.1f}s", where)
    if stall >= STALL_BOUND:
        again = _stall_again(target, probe)
        figures.spikes += 1
        took = f"/health took {stall * 1000:.0f} ms, then {again * 1000:.0f} ms when repeated"
        assert again < STALL_BOUND, (took, where)
    assert not target.probe.failures, (f"{target.probe.failures} /health pings failed", where)
    status = response.status_code
    if status == 500 and route.documented_500 is not None:
        figures.documented_500 += 1
        assert_openai_error(response, 500, prefix=route.documented_500, param=None)
        return
    figures.statuses[str(status)] += 1
    assert status < 500, (status, response.text[:1000], where)
    content_type = response.headers.get("content-type", "")
    if status >= 400 and probe.method != "HEAD":
        _check_envelope(response, route)
    elif status == 200 and content_type.startswith("text/event-stream"):
        figures.stream_errors += check_stream(response.content, route.framing, where)
    elif status == 200 and content_type.startswith("application/json") and response.content:
        response.json()  # (/health answers an empty body labelled JSON)


def _stall_again(target: Target, probe: Probe) -> float:
    """The worst /health ping over two more sends of `probe`. A request that blocks the
    event loop does so every time; a one-off spike (a collection in the server, the machine
    busy elsewhere) does not, and is only counted."""
    worst = 0.0
    for _ in range(2):
        target.probe.take_window()
        _send(target.client, probe)
        worst = max(worst, target.probe.take_window())
    return worst


def _send(client: httpx.Client, probe: Probe) -> httpx.Response:
    """The answer, read whole; a timeout is a hang and a broken connection a dropped one."""
    try:
        with client.stream(
            probe.method, probe.path, content=probe.content or None, headers=dict(probe.headers)
        ) as response:
            response.read()
            return response
    except httpx.TimeoutException as error:
        raise AssertionError(f"hang: {error!r} on {probe.describe()[:2000]}") from None
    except httpx.TransportError as error:
        raise AssertionError(f"dropped: {error!r} on {probe.describe()[:2000]}") from None


def _check_envelope(response: httpx.Response, route: Route) -> None:
    if route.envelope == "anthropic":
        assert_anthropic_error(response, response.status_code)
        return
    also = route.error_types.get(response.status_code)
    if also is not None and _error_type(response) == also:
        assert_openai_error(response, error_type=also)
    else:
        assert_openai_error(response)


def _error_type(response: httpx.Response) -> object:
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("type") if isinstance(error, dict) else None


# ------------------------------------------------------------------ streams


def sse_events(raw: bytes) -> list[tuple[str, str]]:
    """(event name, data) of each event; the body must end with a blank line."""
    assert raw.endswith(b"\n\n"), f"stream cut short: {raw[-300:]!r}"
    events = []
    for block in raw.decode().split("\n\n")[:-1]:
        name, data = "", ""
        for line in block.split("\n"):
            key, _, value = line.partition(": ")
            if key == "event":
                name = value
            elif key == "data":
                data = value
            else:
                raise AssertionError(f"not an SSE line: {line[:200]!r}")
        events.append((name, data))
    return events


def check_stream(raw: bytes, framing: Framing, where: str) -> int:
    """Checks how a 200 stream ended; returns 1 when it ended with an error event."""
    events = sse_events(raw)
    assert events, ("empty stream", where)
    if framing == "openai":
        assert events[-1][1] == "[DONE]", (raw[-300:], where)
        payloads = [json.loads(data) for _, data in events[:-1]]
        errors = [p["error"] for p in payloads if "error" in p]
        for error in errors:
            assert error["code"] < 500, ("5xx error event", error, where)
        return 1 if errors else 0
    name, data = events[-1]
    payload = json.loads(data)
    if framing == "responses":
        assert name in ("response.completed", "error"), (name, where)
        if name == "error":
            assert int(payload["code"]) < 500, ("5xx error event", payload, where)
    else:
        assert name in ("message_stop", "error"), (name, where)
        if name == "error":
            assert payload["error"]["type"] not in ("api_error", "overloaded_error"), where
    return 1 if name == "error" else 0


def report_path() -> str | None:
    return os.environ.get(REPORT_ENV) or None


def assert_still_serving(target: Target, path: str, body: dict[str, Any]) -> None:
    """After the fuzz: a valid request is served, and the server logged no traceback (an
    exception swallowed into a 4xx or a cut stream would show up there)."""
    response = target.client.post(path, json=body)
    assert response.status_code == 200, response.text
    log = target.server.stderr()
    assert "Traceback" not in log, log[log.index("Traceback") - 500 :][:5000]
    assert not target.probe.failures, f"{target.probe.failures} /health pings failed"
