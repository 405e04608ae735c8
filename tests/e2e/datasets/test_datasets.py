"""Datasets end to end: `vllm-sim dataset` turns 100 conversations into a database, and a
server started on it answers a recorded prompt (completions: a human turn; chat: the
conversation so far) with the recorded answer, and any other prompt with a random recorded
answer that fits, as the reference does; the same with `--dataset-in-memory`. A bad or
missing database stops the start with one line and a non-zero status."""

from __future__ import annotations

import contextlib
import http.server
import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.http import CHAT, COMPLETIONS, chat_body, chat_stream, json_ok, post
from tests.support.http import stream_post as sse_post
from tests.support.native import consecutive_free_ports, wait_healthy
from tests.support.server import SimServer, run_cli

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
         "sierra", "tango", "uniform", "victor", "whiskey", "yankee", "zulu")  # fmt: skip
TABLE = "answers"


@dataclass(frozen=True)
class Answer:
    text: str
    pieces: tuple[str, ...]


@dataclass(frozen=True)
class Built:
    model: str  # the --model both the tool and the server are given
    database: Path
    conversations: list[list[tuple[str, str]]]  # (human, gpt) pairs of each conversation
    answers: dict[str, Answer]  # by answer text


def sentence(rng: random.Random, words: int, end: str) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + end


def make_conversations(count: int) -> list[list[tuple[str, str]]]:
    rng = random.Random(14)
    conversations = []
    for number in range(count):
        pairs = []
        for turn in range(rng.randint(1, 3)):
            question = f"Question {number}.{turn}: " + sentence(rng, rng.randint(3, 8), "?")
            pairs.append((question, sentence(rng, rng.randint(4, 40), ".")))
        conversations.append(pairs)
    return conversations


@pytest.fixture(scope="module", params=["simulated-tokenizer", "model-tokenizer"])
def built(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    hf_models: dict[str, Path],
) -> Built:
    """A dataset made by the tool with the simulated tokenizer (a made-up model name) or
    with a model's own tokenizer and chat template (a model folder)."""
    model = "test-model" if request.param == "simulated-tokenizer" else str(hf_models["qwen"])
    folder = tmp_path_factory.mktemp("dataset")
    conversations = make_conversations(100)
    source = [
        {
            "id": f"c{i}",
            "conversations": [
                {"from": speaker, "value": text}
                for human, gpt in pairs
                for speaker, text in (("human", human), ("gpt", gpt))
            ],
        }
        for i, pairs in enumerate(conversations)
    ]
    (folder / "sharegpt.json").write_text(json.dumps(source), encoding="utf-8")
    tool = ["dataset", "--model", model, "--local-path", str(folder)]
    files = ["--input-file", "sharegpt.json", "--output-path", str(folder / "out")]
    result = run_cli([*tool, *files, "--output-file", "ds", "--table-name", TABLE])
    assert result.returncode == 0, result.stderr
    records = json.loads((folder / "out" / "ds.json").read_text(encoding="utf-8"))
    pairs = sum(len(c) for c in conversations)
    assert len(records) == 2 * pairs
    answers = {
        r["generated"]: Answer(r["generated"], tuple(r["gen_tokens"]["Strings"])) for r in records
    }
    return Built(model, folder / "out" / "ds.sqlite3", conversations, answers)


@pytest.fixture(scope="module", params=["on-disk", "in-memory"])
def served(request: pytest.FixtureRequest, built: Built) -> Iterator[httpx.Client]:
    args = ["--dataset-path", str(built.database), "--dataset-table-name", TABLE]
    if request.param == "in-memory":
        args.append("--dataset-in-memory")
    with (
        SimServer([*args, "--max-model-len", "2048"], model=built.model) as sim,
        httpx.Client(base_url=sim.url, timeout=10) as client,
    ):
        yield client


def messages(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    """The chat of `pairs` up to the last question, whose answer is to come."""
    chat: list[dict[str, str]] = []
    for human, gpt in pairs:
        chat += [{"role": "user", "content": human}, {"role": "assistant", "content": gpt}]
    return chat[:-1]


def test_a_recorded_completions_prompt_gets_its_answer(served: httpx.Client, built: Built) -> None:
    for pairs in built.conversations[:30]:
        for human, gpt in pairs:
            reply = json_ok(post(served, COMPLETIONS, {"prompt": human, "max_tokens": 500}))
            [choice] = reply["choices"]
            assert choice["text"] == gpt
            assert choice["finish_reason"] == "stop"
            # Its recorded tokens, and the end of sequence that ends an answer, as in vLLM.
            tokens = len(built.answers[gpt].pieces)
            assert reply["usage"]["completion_tokens"] == tokens + 1


def test_a_recorded_chat_gets_its_answer(served: httpx.Client, built: Built) -> None:
    for pairs in built.conversations[30:60]:
        for turn in range(1, len(pairs) + 1):
            body = {"messages": messages(pairs[:turn]), "max_tokens": 500}
            reply = json_ok(post(served, CHAT, body))
            assert reply["choices"][0]["message"]["content"] == pairs[turn - 1][1]
            assert (
                reply["usage"]["completion_tokens"]
                == len(built.answers[pairs[turn - 1][1]].pieces) + 1
            )


def test_a_recorded_answer_streams_and_is_cut_by_max_tokens(
    served: httpx.Client, built: Built
) -> None:
    pairs = max(built.conversations, key=len)
    body = {"messages": messages(pairs), "stream": True, "max_tokens": 500}
    one_token = built.model == "test-model"  # a simulated token is one word or sign
    [choice] = chat_stream(sse_post(served, CHAT, body), one_token=one_token).choices.values()
    assert choice.text == pairs[-1][1] and choice.finish_reason == "stop"
    human, gpt = pairs[0]
    reply = json_ok(post(served, COMPLETIONS, {"prompt": human, "max_tokens": 3}))
    assert reply["choices"][0]["text"] == "".join(built.answers[gpt].pieces[:3])
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 3


def test_an_unknown_prompt_gets_a_random_answer_that_fits(
    served: httpx.Client, built: Built
) -> None:
    limit = sorted(len(a.pieces) for a in built.answers.values())[9]  # ten answers or more fit
    fitting = {a.text for a in built.answers.values() if len(a.pieces) <= limit}
    assert fitting and len(fitting) < len(built.answers)
    seen = set()
    for attempt in range(20):
        body = chat_body(f"Nobody asked this {attempt} before", max_tokens=limit)
        reply = json_ok(post(served, CHAT, body))
        content = reply["choices"][0]["message"]["content"]
        assert content in fitting
        # An answer as long as the limit ends by length, as the reference decides it.
        ended = "length" if len(built.answers[content].pieces) == limit else "stop"
        assert reply["choices"][0]["finish_reason"] == ended
        seen.add(content)
    assert len(seen) > 1  # a random one each time


def test_an_unknown_prompt_under_ignore_eos_gets_an_answer_of_exactly_that_length(
    served: httpx.Client, built: Built
) -> None:
    lengths = sorted({len(a.pieces) for a in built.answers.values()})
    exact = lengths[len(lengths) // 2]
    body = {"prompt": "no such prompt", "max_tokens": exact, "ignore_eos": True}
    reply = json_ok(post(served, COMPLETIONS, body))
    expected = {a.text for a in built.answers.values() if len(a.pieces) == exact}
    assert reply["choices"][0]["text"] in expected
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == exact


def test_an_unknown_prompt_shorter_than_every_answer_gets_one_cut(
    served: httpx.Client, built: Built
) -> None:
    shortest = min(len(a.pieces) for a in built.answers.values())
    limit = shortest - 1
    prefixes = {"".join(a.pieces[:limit]) for a in built.answers.values()}
    reply = json_ok(post(served, COMPLETIONS, {"prompt": "nothing like it", "max_tokens": limit}))
    assert reply["choices"][0]["text"] in prefixes
    assert reply["choices"][0]["finish_reason"] == "length"


def test_every_data_parallel_rank_answers_from_the_dataset(built: Built) -> None:
    port = consecutive_free_ports(2)
    args = ["--dataset-path", str(built.database), "--dataset-table-name", TABLE]
    with SimServer(["--data-parallel-size", "2", *args], port=port, model=built.model) as sim:
        wait_healthy(port + 1)
        human, gpt = built.conversations[0][0]
        for rank_port in (port, port + 1):
            url = f"http://{sim.host}:{rank_port}{COMPLETIONS}"
            reply = httpx.post(url, json={"prompt": human, "max_tokens": 500}, timeout=10)
            assert reply.json()["choices"][0]["text"] == gpt


# --- start-up failures ------------------------------------------------------------------


def fails_to_start(args: list[str]) -> str:
    """The one line a server that cannot start says; it exits non-zero."""
    result = run_cli(["--model", "m", *args])
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("vllm-sim: ")]
    assert len(lines) == 1, result.stderr
    return lines[0].removeprefix("vllm-sim: ")


def test_a_missing_database(tmp_path: Path) -> None:
    missing = tmp_path / "none.sqlite3"
    assert fails_to_start(["--dataset-path", str(missing)]) == (
        f"dataset initialization error: database file does not exist: {missing}"
    )


def table(folder: Path, columns: str) -> Path:
    path = folder / "d.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE llmd ({columns})")
    conn.commit()
    conn.close()
    return path


FOUR = "id INTEGER PRIMARY KEY, prompt_hash BLOB, gen_tokens JSON, n_gen_tokens INTEGER"
VERIFY = "failed to verify database: "


@pytest.mark.parametrize(
    ("columns", "extra", "reason"),
    [
        (None, [], f"{VERIFY}failed to query table info for `llmd`: file is not a database"),
        (FOUR, ["--dataset-table-name", "x"], f"{VERIFY}failed to query table info for `x`: "
         "no such table: x"),
        ("id INTEGER, prompt_hash BLOB, gen_tokens TEXT", [], f"{VERIFY}column gen_tokens has "
         "incorrect type: expected JSON, got TEXT"),
        ("id INTEGER, prompt_hash BLOB, gen_tokens JSON", [], f"{VERIFY}missing expected column "
         "in llmd table: n_gen_tokens"),
        (FOUR + ", note TEXT", ["--dataset-in-memory"], "failed to copy data: "),
    ],
)  # fmt: skip
def test_a_malformed_database_stops_the_start(
    tmp_path: Path, columns: str | None, extra: list[str], reason: str
) -> None:
    if columns is None:
        path = tmp_path / "junk.sqlite3"
        path.write_bytes(b"not a database " * 200)
    else:
        path = table(tmp_path, columns)
    line = fails_to_start(["--dataset-path", str(path), *extra])
    # The end of the in-memory case is SQLite's own wording.
    assert line == f"dataset initialization error: {reason}" or (
        reason.endswith(": ") and line.startswith(f"dataset initialization error: {reason}")
    )


def test_a_database_another_connection_writes_stops_the_start(tmp_path: Path) -> None:
    path = table(tmp_path, FOUR)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        line = fails_to_start(["--dataset-path", str(path)])
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert line == (
        "dataset initialization error: database is locked or has other active connections: "
        "database is locked"
    )


def test_an_empty_table_answers_500(tmp_path: Path) -> None:
    empty = table(tmp_path, FOUR)
    with SimServer(["--dataset-path", str(empty)]) as sim:
        reply = httpx.post(sim.url + COMPLETIONS, json={"prompt": "hi", "max_tokens": 5})
        assert reply.status_code == 500
        assert reply.json()["error"]["message"] == "Dataset is empty"


class Truncating(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"SQLite format 3\x00" + bytes(1000))
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "100000000")
        self.end_headers()
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline:
                self.wfile.write(bytes(100))
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:  # the client went away
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def file_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/ds.sqlite3"
    finally:
        server.shutdown()
        server.server_close()


def test_a_truncated_download_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "ds.sqlite3"
    with file_server(Truncating) as url:
        line = fails_to_start(["--dataset-path", str(target), "--dataset-url", url])
    assert line == (
        "dataset initialization error: failed to download dataset: "
        "truncated, 1016 of 100000 bytes received"
    )
    assert list(target.parent.iterdir()) == []


def test_sigterm_during_a_download_stops_it_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "ds.sqlite3"
    with file_server(Slow) as url:
        dataset = ["--dataset-path", str(target), "--dataset-url", url]
        process = subprocess.Popen(
            [sys.executable, "-m", "vllm_sim", "--model", "m", *dataset],
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 15
        while not (target.parent.exists() and any(target.parent.iterdir())):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        time.sleep(0.3)  # well into the body
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    assert process.returncode != 0
    assert "vllm-sim: dataset initialization error: download cancelled by user" in stderr
    assert list(target.parent.iterdir()) == []


def test_a_damaged_row_is_skipped_with_one_warning_never_a_500(tmp_path: Path) -> None:
    path = table(tmp_path, FOUR)
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO llmd (prompt_hash, gen_tokens, n_gen_tokens) VALUES (?, ?, ?)",
        (b"\0" * 32, '{"Tokens": [1, 2], "Strings": ["only one"]}', 4),
    )
    conn.commit()
    conn.close()
    with SimServer(["--dataset-path", str(path)]) as sim:
        for _ in range(3):
            reply = httpx.post(sim.url + COMPLETIONS, json={"prompt": "hi", "max_tokens": 9})
            assert reply.status_code == 200, reply.text
            # The row's four tokens, generated, and the EOS that ends the answer.
            assert reply.json()["usage"]["completion_tokens"] == 4 + 1
        assert sim.stderr().count("has invalid gen_tokens") == 1
