"""`vllm-sim dataset`: turns a ShareGPT-style conversation file into the SQLite dataset the
server answers from (the reference's ds-tool), tokenized in-process with the tokenizer the
server would use for the same model.

Each (human, gpt) pair of a conversation gives two rows with the gpt answer as response:
one keyed by the human text as a completions prompt, one by the whole conversation so far
(as the chat template renders it) as a chat prompt. Beside `<name>.sqlite3` it writes
`<name>.json` (the rows with their prompt text, for reading) and `<name>.md` (a card).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sqlite3
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import msgspec
from tqdm import tqdm

from vllm_sim.engine.generation.dataset import DEFAULT_TABLE, prompt_hash, quote_name
from vllm_sim.engine.tokenizer import ChatTurn, TemplateError, Tokenizer, chat_from_turns
from vllm_sim.engine.tokenizer.select import TokenizerSetupError, tokenizer_in
from vllm_sim.model_files import find_model_folder
from vllm_sim.server.hub import fetch_model_files

PROG: Final = "vllm-sim dataset"
DEFAULT_OUTPUT_FILE: Final = "inference-sim-dataset"
DEFAULT_MAX_RECORDS: Final = 10000
EXTENSIONS: Final = (".sqlite3", ".json", ".md")
HUMAN, GPT = "human", "gpt"


class ToolError(Exception):
    """A reason the conversion cannot run; printed as one line, exit status non-zero."""


class Turn(msgspec.Struct):
    speaker: str = msgspec.field(name="from", default="")
    value: str = ""


class SourceRecord(msgspec.Struct):
    id: str | int | None = None
    conversations: list[Turn] = msgspec.field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """One dataset row, and the texts it was made from."""

    prompt_hash: bytes
    token_ids: list[int]
    pieces: list[str]
    input_text: str
    generated: str


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as stop:  # --help (0) or a malformed command line (2)
        return stop.code if isinstance(stop.code, int) else 2
    try:
        validate(args)
        run(args)
    except (ToolError, OSError, sqlite3.Error) as error:  # the last two: writing the outputs
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Convert a ShareGPT-style JSON file of conversations into the SQLite "
        "dataset `vllm-sim --dataset-path` answers from, tokenized with --model's tokenizer.",
    )
    add = parser.add_argument
    add("--model", default="", help="the model whose tokenizer makes the token ids (required)")
    add("--hf-repo", default="", help="a HuggingFace dataset repository holding --input-file")
    add("--local-path", default="", help="a local folder holding --input-file")
    add("--input-file", default="", help="the conversations file, in --hf-repo or --local-path")
    add("--output-file", default=DEFAULT_OUTPUT_FILE, help="output name, without extension")
    add("--output-path", default="", help="folder of the outputs (default: the current one)")
    add("--table-name", default=DEFAULT_TABLE, help="table of the SQLite dataset")
    add("--max-records", type=int, default=DEFAULT_MAX_RECORDS, help="conversations to read")
    ignored = "accepted for the reference's command lines and ignored: tokenization runs here"
    add("--render-url", default="", help=ignored)
    add("--render-timeout", default="5s", help=ignored)
    add("--mm-render-timeout", default="30s", help=ignored)
    return parser


def validate(args: argparse.Namespace) -> None:
    """The reference's checks and messages (naming --input-file where it says --file)."""
    if not args.model:
        raise ToolError("--model is not defined")
    if not args.hf_repo and not args.local_path:
        raise ToolError("either --hf-repo or --local-path must be specified")
    if args.hf_repo and args.local_path:
        raise ToolError("specify only one of --hf-repo or --local-path")
    if not args.input_file:
        source = "--hf-repo" if args.hf_repo else "--local-path"
        raise ToolError(f"{source} defined but --input-file is empty")
    if args.max_records < 0:
        raise ToolError("--max-records must not be negative")
    for path in output_paths(args):
        if path.exists():
            raise ToolError(f"output file already exists: {path}")


def output_paths(args: argparse.Namespace) -> list[Path]:
    return [Path(args.output_path) / (args.output_file + ext) for ext in EXTENSIONS]


def _tool_tokenizer(model: str) -> Tokenizer:
    """The tokenizer the server would choose for `--model` (with its chat template): the
    model's own when its files are here or can be downloaded, else the simulated one. A
    dataset matches only prompts tokenized as the server tokenizes them."""
    fetch_model_files(model)
    try:
        choice = tokenizer_in(model, find_model_folder(model, "", os.environ))
    except TokenizerSetupError as error:
        raise ToolError(str(error)) from None
    print(f"{PROG}: {choice.message}", file=sys.stderr)
    return choice.tokenizer


def run(args: argparse.Namespace) -> None:
    records = load_records(args)
    tokenizer = _tool_tokenizer(args.model)
    database, json_path, card = output_paths(args)
    database.parent.mkdir(parents=True, exist_ok=True)
    bar = tqdm(records, desc="Converting", unit=" conversations", file=sys.stderr)
    rows = write_outputs(convert(bar, tokenizer), database, json_path, args.table_name)
    write_card(card, args, len(records), rows, tokenizer)
    print(f"{PROG}: {rows} rows from {len(records)} conversations in {database}", file=sys.stderr)


def load_records(args: argparse.Namespace) -> list[SourceRecord]:
    """The conversations of the input file, at most --max-records of them."""
    if args.hf_repo:
        source = _hub_file(args.hf_repo, args.input_file)
    else:
        source = Path(args.local_path) / args.input_file
    try:
        data = source.read_bytes()
    except OSError as error:
        raise ToolError(f"failed to read {source}: {error.strerror or error}") from None
    try:
        records = msgspec.json.decode(data, type=list[SourceRecord])
    except msgspec.DecodeError as error:
        raise ToolError(f"failed to parse {source}: {error}") from None
    return records[: args.max_records]


def _hub_file(repo: str, filename: str) -> Path:
    """A file of a HuggingFace dataset repository, from the local cache or downloaded
    (HF_TOKEN, HF_HOME and HF_HUB_OFFLINE are honoured)."""
    from huggingface_hub import hf_hub_download  # slow to import; only this path needs it

    token = os.environ.get("HF_TOKEN") or None
    try:
        return Path(hf_hub_download(repo, filename, repo_type="dataset", token=token))
    except Exception as error:  # the hub client raises many kinds; each is this one failure
        raise ToolError(f"failed to download {filename} from {repo}: {error}") from None


def convert(records: Iterable[SourceRecord], tokenizer: Tokenizer) -> Iterator[OutputRecord]:
    """Two rows per (human, gpt) pair: a completions prompt and a chat prompt. A pair in
    any other order ends its conversation, as in the reference."""
    for record in records:
        turns: list[ChatTurn] = []
        talk = record.conversations
        for index in range(0, len(talk) - 1, 2):
            human, answer = talk[index], talk[index + 1]
            if human.speaker != HUMAN or answer.speaker != GPT:
                break
            turns.append(ChatTurn("user", human.value))
            try:
                chat_text = tokenizer.render_chat(chat_from_turns(turns))
            except TemplateError as error:
                print(f"{PROG}: conversation {record.id}: skipped: {error}", file=sys.stderr)
                break
            ids, pieces = tokenizer.tokenize(answer.value)
            completion_ids = tokenizer.encode(human.value, add_special_tokens=True)
            yield OutputRecord(prompt_hash(completion_ids), ids, pieces, human.value, answer.value)
            chat_ids = tokenizer.encode(chat_text)
            yield OutputRecord(prompt_hash(chat_ids), ids, pieces, chat_text, answer.value)
            turns.append(ChatTurn("assistant", answer.value))


def write_outputs(
    records: Iterable[OutputRecord], database: Path, json_path: Path, table: str
) -> int:
    """Writes the rows to the database and the JSON file as they come; the number of rows.
    Each file is written under a temporary name and renamed when complete, so a failed run
    leaves neither."""
    db_part, json_part = _part(database), _part(json_path)
    try:
        conn = sqlite3.connect(db_part, isolation_level=None)
        try:
            rows = _write_rows(records, conn, table, json_part)
        finally:
            conn.close()
        os.replace(db_part, database)
        os.replace(json_part, json_path)
    except BaseException:
        db_part.unlink(missing_ok=True)
        json_part.unlink(missing_ok=True)
        raise
    return rows


def _part(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def _write_rows(
    records: Iterable[OutputRecord], conn: sqlite3.Connection, table: str, json_path: Path
) -> int:
    name = quote_name(table)
    conn.execute(
        f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, prompt_hash BLOB NOT NULL, "
        f"gen_tokens JSON NOT NULL, n_gen_tokens INTEGER NOT NULL)"
    )
    insert = f"INSERT INTO {name} (prompt_hash, gen_tokens, n_gen_tokens) VALUES (?, ?, ?)"
    rows = 0
    conn.execute("BEGIN")
    with json_path.open("w", encoding="utf-8") as out:
        out.write("[")
        for record in records:
            gen_tokens = {"Tokens": record.token_ids, "Strings": record.pieces}
            text = json.dumps(gen_tokens, ensure_ascii=False, separators=(",", ":"))
            conn.execute(insert, (record.prompt_hash, text, len(record.token_ids)))
            _write_json_record(out, record, gen_tokens, first=rows == 0)
            rows += 1
        out.write("\n]\n" if rows else "]\n")
    # The reference's server looks rows up by hash with a query; this one has its own index.
    index = quote_name(f"{table}_prompt_hash")
    conn.execute(f"CREATE INDEX {index} ON {name} (prompt_hash)")
    conn.execute("COMMIT")
    return rows


def _write_json_record(
    out: IO[str], record: OutputRecord, gen_tokens: dict[str, object], first: bool
) -> None:
    """One element of the JSON array, indented by two spaces like the reference's file."""
    entry = {
        "prompt_hash": base64.b64encode(record.prompt_hash).decode(),
        "n_gen_tokens": len(record.token_ids),
        "gen_tokens": gen_tokens,
        "input_text": record.input_text,
        "generated": record.generated,
    }
    text = json.dumps(entry, ensure_ascii=False, indent=2).replace("\n", "\n  ")
    out.write(("\n  " if first else ",\n  ") + text)


def write_card(
    path: Path, args: argparse.Namespace, conversations: int, rows: int, tokenizer: Tokenizer
) -> None:
    """A short description of the dataset, for whoever finds the files."""
    if args.hf_repo:
        url = f"https://huggingface.co/datasets/{args.hf_repo}"
        source = f"[{args.hf_repo}]({url}), file `{args.input_file}`"
    else:
        source = f"`{Path(args.local_path) / args.input_file}`"
    lines = [
        f"# {args.output_file}",
        "",
        "Recorded responses for vllm-sim (and llm-d-inference-sim), made by `vllm-sim dataset`.",
        "",
        f"- Model: `{args.model}`; token ids by {tokenizer.description}",
        f"- Source: {source}",
        f"- Conversations read: {conversations}",
        f"- Rows: {rows} (a completions prompt and a chat prompt per answer)",
        f"- Table: `{args.table_name}` (`id INTEGER PRIMARY KEY`, `prompt_hash BLOB`, "
        "`gen_tokens JSON`, `n_gen_tokens INTEGER`)",
        "",
        "`prompt_hash` is the SHA-256 of the prompt's token ids, each as a 4-byte "
        "little-endian integer; `gen_tokens` holds the answer's ids (`Tokens`) and their "
        "text (`Strings`). The prompts match only with the same model's tokenizer.",
        "",
        f"Serve it with `vllm-sim --model {args.model} --dataset-path "
        f"{args.output_file}.sqlite3 --dataset-table-name {args.table_name}`.",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")
