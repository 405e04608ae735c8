"""`vllm-sim dataset`: the reference's ds-tool checks (exiting non-zero), the rows it makes
from (human, gpt) pairs, `--table-name` naming the table, and the three output files."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from vllm_sim.engine.generation.dataset import prompt_hash
from vllm_sim.engine.tokenizer import (
    ChatInput,
    ChatTurn,
    SimulatedTokenizer,
    TemplateError,
    chat_from_turns,
)
from vllm_sim.server.dataset_tool import SourceRecord, Turn, convert, main

CONVERSATIONS = [
    {
        "id": "one",
        "conversations": [
            {"from": "human", "value": "What is the capital of France?"},
            {"from": "gpt", "value": "Paris is the capital of France."},
            {"from": "human", "value": "And of Italy?"},
            {"from": "gpt", "value": "Rome, of course."},
        ],
    },
    {
        "id": "two",
        "conversations": [
            {"from": "human", "value": "Hi"},
            {"from": "gpt", "value": "Hello!"},
            {"from": "gpt", "value": "A second answer ends the conversation"},
            {"from": "human", "value": "never read"},
        ],
    },
    {"id": "three", "conversations": [{"from": "gpt", "value": "starts wrong"}]},
]


def write_input(folder: Path, records: Any = CONVERSATIONS) -> Path:
    path = folder / "sharegpt.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def run(tmp_path: Path, *extra: str) -> int:
    write_input(tmp_path)
    args = ["--model", "m", "--local-path", str(tmp_path), "--input-file", "sharegpt.json"]
    return main([*args, "--output-path", str(tmp_path / "out"), *extra])


def rows(db: Path, table: str) -> list[tuple[bytes, dict[str, Any], int]]:
    conn = sqlite3.connect(db)
    found = conn.execute(f"SELECT prompt_hash, gen_tokens, n_gen_tokens FROM {table} ORDER BY id")
    result = [(h, json.loads(g), n) for h, g, n in found]
    conn.close()
    return result


def test_each_pair_gives_a_completions_and_a_chat_row(tmp_path: Path) -> None:
    assert run(tmp_path, "--table-name", "answers", "--output-file", "ds") == 0
    tok = SimulatedTokenizer()
    found = rows(tmp_path / "out" / "ds.sqlite3", "answers")
    assert len(found) == 6  # 2 pairs of "one", 1 of "two", none of "three"
    user_1, user_2 = (
        ChatTurn("user", "What is the capital of France?"),
        ChatTurn("user", "And of Italy?"),
    )
    history = [user_1, ChatTurn("assistant", "Paris is the capital of France."), user_2]
    prompts = [
        tok.encode(user_1.text, add_special_tokens=True),
        tok.encode(tok.render_chat(chat_from_turns([user_1]))),
        tok.encode(user_2.text, add_special_tokens=True),
        tok.encode(tok.render_chat(chat_from_turns(history))),
    ]
    assert [row[0] for row in found[:4]] == [prompt_hash(ids) for ids in prompts]
    ids, pieces = tok.tokenize("Rome, of course.")
    assert found[3][1:] == ({"Tokens": ids, "Strings": pieces}, len(ids))
    assert "".join(found[5][1]["Strings"]) == "Hello!"


def test_json_and_card_files(tmp_path: Path) -> None:
    assert run(tmp_path) == 0
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "inference-sim-dataset.json",
        "inference-sim-dataset.md",
        "inference-sim-dataset.sqlite3",
    ]
    text = (out / "inference-sim-dataset.json").read_text(encoding="utf-8")
    records = json.loads(text)
    assert text.startswith('[\n  {\n    "prompt_hash": ')
    assert [set(r) for r in records] == [
        {"prompt_hash", "n_gen_tokens", "gen_tokens", "input_text", "generated"}
    ] * 6
    db_rows = rows(out / "inference-sim-dataset.sqlite3", "llmd")
    assert [base64.b64decode(r["prompt_hash"]) for r in records] == [r[0] for r in db_rows]
    assert records[0]["input_text"] == "What is the capital of France?"
    assert records[1]["input_text"].endswith("What is the capital of France?\n")
    assert records[1]["generated"] == "Paris is the capital of France."
    card = (out / "inference-sim-dataset.md").read_text(encoding="utf-8")
    assert "Conversations read: 3" in card and "Rows: 6" in card and "`llmd`" in card


def test_max_records(tmp_path: Path) -> None:
    assert run(tmp_path, "--max-records", "1") == 0
    assert len(rows(tmp_path / "out" / "inference-sim-dataset.sqlite3", "llmd")) == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--model is not defined"),
        (["--model", "m"], "either --hf-repo or --local-path must be specified"),
        (
            ["--model", "m", "--hf-repo", "a/b", "--local-path", "."],
            "specify only one of --hf-repo or --local-path",
        ),
        (["--model", "m", "--hf-repo", "a/b"], "--hf-repo defined but --input-file is empty"),
        (["--model", "m", "--local-path", "."], "--local-path defined but --input-file is empty"),
    ],
)
def test_reference_checks_exit_non_zero(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 1
    assert capsys.readouterr().err == f"vllm-sim dataset: {message}\n"


def test_an_existing_output_is_never_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out").mkdir()
    existing = tmp_path / "out" / "inference-sim-dataset.json"
    existing.write_text("keep me", encoding="utf-8")
    assert run(tmp_path) == 1
    assert f"output file already exists: {existing}" in capsys.readouterr().err
    assert existing.read_text(encoding="utf-8") == "keep me"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["inference-sim-dataset.json"]


@pytest.mark.parametrize("content", ["{not json", '{"id": "x"}', '[{"conversations": 3}]'])
def test_a_malformed_input_fails_and_writes_nothing(
    tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.json").write_text(content, encoding="utf-8")
    args = ["--model", "m", "--local-path", str(tmp_path), "--input-file", "bad.json"]
    assert main([*args, "--output-path", str(tmp_path / "out")]) == 1
    assert f"failed to parse {tmp_path / 'bad.json'}: " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_missing_input_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "m", "--local-path", str(tmp_path), "--input-file", "no.json"]) == 1
    assert "failed to read" in capsys.readouterr().err


def test_help_and_the_ignored_render_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--help"]) == 0
    assert "ignored" in capsys.readouterr().out
    assert run(tmp_path, "--render-url", "http://x:1", "--render-timeout", "1s") == 0
    assert main(["--no-such-flag"]) == 2


class RefusingTemplate(SimulatedTokenizer):
    """A template that refuses a second user turn."""

    def render_chat(self, chat: ChatInput) -> str:
        if len(chat.turns) > 1:
            raise TemplateError("roles must alternate")
        return super().render_chat(chat)


def test_a_conversation_the_template_refuses_ends_there() -> None:
    record = SourceRecord(
        "x", [Turn("human", "a"), Turn("gpt", "b"), Turn("human", "c"), Turn("gpt", "d")]
    )
    made = list(convert([record], RefusingTemplate()))
    assert [r.input_text for r in made] == ["a", "### user: a\n"]


def test_an_output_folder_that_cannot_be_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out").write_text("a file where the folder should be", encoding="utf-8")
    assert run(tmp_path) == 1
    assert capsys.readouterr().err.startswith("vllm-sim dataset: ")
