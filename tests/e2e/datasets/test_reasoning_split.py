"""A recorded answer's own `</think>` splits its reasoning from its content under a reasoning
parser (the dataset's split, not --reasoning-ratio's); the marker is in neither part."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx

from tests.support.http import CHAT, chat_body, json_ok, post
from tests.support.server import SimServer

RECORDED = ["I", " think", " so", "</think>", " Yes", "."]


def _dataset(folder: Path, strings: list[str] = RECORDED) -> Path:
    path = folder / "answers.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE llmd (id INTEGER PRIMARY KEY, prompt_hash BLOB, gen_tokens JSON, "
        "n_gen_tokens INTEGER)"
    )
    row = (b"\x00" * 32, json.dumps({"strings": strings}), len(strings))
    conn.execute("INSERT INTO llmd (prompt_hash, gen_tokens, n_gen_tokens) VALUES (?, ?, ?)", row)
    conn.commit()
    conn.close()
    return path


def test_the_recorded_marker_splits_the_answer(tmp_path: Path) -> None:
    args = ["--dataset-path", str(_dataset(tmp_path)), "--reasoning-parser", "deepseek_r1"]
    with SimServer(args) as sim, httpx.Client(base_url=sim.url, timeout=30) as client:
        answer = json_ok(post(client, CHAT, chat_body("Hello", model=sim.model, max_tokens=6)))
    message = answer["choices"][0]["message"]
    assert message["reasoning"] == "I think so"
    assert message["content"] == " Yes."
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}
    assert answer["usage"]["completion_tokens"] == len(RECORDED)


THINKING = ["<think>", "\n", "I ", "think ", "so", ".", "</think>", "\n\n", "The ", "answer", "."]


def test_the_recorded_markers_show_in_neither_part(tmp_path: Path) -> None:
    """Both of a recording's markers are dropped from the text, as vLLM's parsers drop
    them, also when a budget ends the thinking before the recorded end."""
    args = ["--dataset-path", str(_dataset(tmp_path, THINKING)), "--reasoning-parser", "qwen3"]
    with SimServer(args) as sim, httpx.Client(base_url=sim.url, timeout=30) as client:
        answer = json_ok(post(client, CHAT, chat_body("Hi", model=sim.model, max_tokens=11)))
        capped = json_ok(
            post(
                client,
                CHAT,
                chat_body("Hi", model=sim.model, max_tokens=11, thinking_token_budget=3),
            )
        )
    message = answer["choices"][0]["message"]
    assert (message["reasoning"], message["content"]) == ("\nI think so.", "\n\nThe answer.")
    message = capped["choices"][0]["message"]
    assert message["reasoning"] == "\nI "
    assert message["content"] == "think so.\n\nThe answer."
    assert capped["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}
