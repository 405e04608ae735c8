"""The dataset at start-up: the reference's checks and messages, the in-memory copy, and
the download, which leaves a whole file or none (files served by a local HTTP server)."""

from __future__ import annotations

import http.server
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.config import load
from vllm_sim.engine.tokenizer import SimulatedTokenizer
from vllm_sim.server.dataset_setup import (
    PREFIX,
    DatasetSetupError,
    check_database,
    copy_to_memory,
    download,
    fetch,
    load_dataset,
    prepare_dataset,
)

GOOD_SCHEMA = (
    "CREATE TABLE {t} (id INTEGER PRIMARY KEY, prompt_hash BLOB NOT NULL, "
    "gen_tokens JSON NOT NULL, n_gen_tokens INTEGER NOT NULL)"
)
ROW = (b"\x01" * 32, '{"Tokens":[1,2],"Strings":["a ","b "]}', 2)


def make_db(path: Path, schema: str = GOOD_SCHEMA, table: str = "llmd", rows: int = 3) -> Path:
    conn = sqlite3.connect(path)
    conn.execute(schema.format(t=table))
    for _ in range(rows):
        conn.execute(
            f"INSERT INTO {table} (prompt_hash, gen_tokens, n_gen_tokens) VALUES (?, ?, ?)", ROW
        )
    conn.commit()
    conn.close()
    return path


def failure(path: Path, table: str = "llmd") -> str:
    with pytest.raises(DatasetSetupError) as caught:
        check_database(path, table)
    message = str(caught.value)
    assert message.startswith(PREFIX)
    return message.removeprefix(PREFIX)


def test_a_good_database_passes(tmp_path: Path) -> None:
    check_database(make_db(tmp_path / "d.sqlite3"), "llmd")


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.sqlite3"
    assert failure(missing) == f"database file does not exist: {missing}"


def test_a_file_another_connection_writes_is_locked(tmp_path: Path) -> None:
    path = make_db(tmp_path / "d.sqlite3")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        assert failure(path).startswith("database is locked or has other active connections: ")
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    reader = sqlite3.connect(path, isolation_level=None)  # readers, e.g. other ranks, are fine
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM llmd").fetchall()
    check_database(path, "llmd")
    reader.close()


def test_not_a_database_or_no_such_table(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"this is not an SQLite file " * 100)
    assert failure(junk) == (
        "failed to verify database: failed to query table info for `llmd`: file is not a database"
    )
    good = make_db(tmp_path / "d.sqlite3")
    assert failure(good, "other") == (
        "failed to verify database: failed to query table info for `other`: no such table: other"
    )


def test_wrong_column_type(tmp_path: Path) -> None:
    schema = (
        "CREATE TABLE {t} (id INTEGER PRIMARY KEY, prompt_hash TEXT, gen_tokens JSON, "
        "n_gen_tokens INTEGER)"
    )
    path = make_db(tmp_path / "d.sqlite3", schema)
    assert failure(path) == (
        "failed to verify database: column prompt_hash has incorrect type: expected BLOB, got TEXT"
    )


def test_missing_column(tmp_path: Path) -> None:
    schema = "CREATE TABLE {t} (id INTEGER PRIMARY KEY, prompt_hash BLOB, gen_tokens JSON)"
    conn = sqlite3.connect(tmp_path / "d.sqlite3")
    conn.execute(schema.format(t="tbl"))
    conn.close()
    assert failure(tmp_path / "d.sqlite3", "tbl") == (
        "failed to verify database: missing expected column in tbl table: n_gen_tokens"
    )


def test_in_memory_copy_holds_every_row(tmp_path: Path) -> None:
    conn = copy_to_memory(make_db(tmp_path / "d.sqlite3", table="t2", rows=5), "t2")
    assert conn.execute("SELECT count(*), sum(n_gen_tokens) FROM t2").fetchone() == (5, 10)
    info = conn.execute("PRAGMA table_info(t2)").fetchall()
    assert [(row[1], row[2]) for row in info] == [
        ("id", "INTEGER"),
        ("prompt_hash", "BLOB"),
        ("gen_tokens", "JSON"),
        ("n_gen_tokens", "INTEGER"),
    ]
    assert conn.execute("PRAGMA database_list").fetchall()[0][2] == ""  # in memory, detached


def test_in_memory_copy_needs_exactly_the_four_columns(tmp_path: Path) -> None:
    schema = (
        "CREATE TABLE {t} (id INTEGER PRIMARY KEY, prompt_hash BLOB, gen_tokens JSON, "
        "n_gen_tokens INTEGER, note TEXT)"
    )
    path = make_db(tmp_path / "d.sqlite3", schema)
    check_database(path, "llmd")  # an extra column is fine on disk
    with pytest.raises(DatasetSetupError) as caught:
        copy_to_memory(path, "llmd")
    assert str(caught.value).startswith(f"{PREFIX}failed to copy data: ")


def test_load_dataset_on_disk_and_in_memory(tmp_path: Path) -> None:
    path = make_db(tmp_path / "d.sqlite3", rows=4)
    for in_memory in ("false", "true"):
        cfg = load("--model", "m", "--dataset-path", str(path), "--dataset-in-memory", in_memory)
        dataset = load_dataset(cfg, SimulatedTokenizer())
        assert dataset is not None and len(dataset) == 4
    assert load_dataset(load("--model", "m"), SimulatedTokenizer()) is None


# --- download ---------------------------------------------------------------------------

BODY = b"SQLite format 3\x00" + bytes(range(256)) * 40


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/good":
            self._answer(200, BODY, len(BODY))
        elif self.path == "/empty":
            self._answer(200, b"", 0)
        elif self.path == "/truncated":
            self._answer(200, BODY[:1000], len(BODY))  # then the connection closes
        elif self.path == "/forbidden":
            self._answer(403, b"no", 2)
        else:
            self._answer(404, b"missing", 7)

    def _answer(self, status: int, body: bytes, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def files() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def no_files_left(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())


def test_download_writes_the_whole_file_creating_folders(
    files: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "a" / "b" / "d.sqlite3"
    download(f"{files}/good", target)
    assert target.read_bytes() == BODY
    assert "Downloading dataset: 100%" in capsys.readouterr().err  # the progress bar
    assert [p.name for p in target.parent.iterdir()] == ["d.sqlite3"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/missing", "dataset download bad status: 404 Not Found"),
        ("/forbidden", "dataset download bad status: 403 Forbidden"),
        ("/empty", "downloaded file is empty"),
        (
            "/truncated",
            f"failed to download dataset: truncated, 1000 of {len(BODY)} bytes received",
        ),
    ],
)
def test_a_failed_download_leaves_no_file(
    files: str, tmp_path: Path, path: str, message: str
) -> None:
    target = tmp_path / "dl" / "d.sqlite3"
    with pytest.raises(DatasetSetupError) as caught:
        fetch(files + path, target)
    assert str(caught.value) == PREFIX + message
    assert no_files_left(target.parent)


def test_an_unreachable_server_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "dl" / "d.sqlite3"
    with pytest.raises(DatasetSetupError) as caught:
        fetch("http://127.0.0.1:9/nothing", target)
    assert str(caught.value).startswith(f"{PREFIX}failed to download dataset: ")
    assert no_files_left(target.parent)


def test_prepare_downloads_only_a_missing_file(files: str, tmp_path: Path) -> None:
    target = tmp_path / "d.sqlite3"
    make_db(target)
    before = target.read_bytes()
    cfg = load("--model", "m", "--dataset-path", str(target), "--dataset-url", f"{files}/missing")
    prepare_dataset(cfg)  # present: no download (which would fail), and it checks out
    assert target.read_bytes() == before
    target.unlink()
    with pytest.raises(DatasetSetupError, match="bad status: 404"):
        prepare_dataset(cfg)
    assert not target.exists()
