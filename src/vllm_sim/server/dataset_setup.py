"""The dataset of recorded responses at start-up: downloaded once if it is missing, checked
as the reference checks it (with its messages), then opened read-only or copied into
memory, and indexed.

`prepare_dataset` runs once in the parent process (before data-parallel ranks start) and
`load_dataset` in each rank, since an SQLite connection must not cross a fork.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Final

from vllm_sim.config import Config
from vllm_sim.engine.generation.dataset import COLUMNS, ResponseDataset, quote_name
from vllm_sim.engine.tokenizer import Tokenizer

log = logging.getLogger("vllm_sim")

PREFIX: Final = "dataset initialization error: "
_CHUNK: Final = 1 << 16
# Seconds a download may go without receiving a byte before it fails (the reference waits
# forever; a stalled server should not hold the start-up hostage).
STALL_TIMEOUT: Final = 60.0
_CANCEL_GRACE: Final = 5.0  # seconds a cancelled download gets to clean up


class DatasetSetupError(Exception):
    """The dataset cannot be used; the message is the one line the server exits with."""

    def __init__(self, reason: str) -> None:
        super().__init__(PREFIX + reason)


def prepare_dataset(cfg: Config) -> None:
    """Downloads the dataset if it is configured with a URL and missing, then checks it;
    raises DatasetSetupError. Nothing to do without a dataset or on an encoder-only node."""
    if not cfg.dataset_path or cfg.mm_encoder_only:
        return
    path = Path(cfg.dataset_path)
    if cfg.dataset_url and not path.exists():
        log.info("Downloading dataset from %s to %s", cfg.dataset_url, path)
        fetch(cfg.dataset_url, path)
    check_database(path, cfg.dataset_table_name)


def load_dataset(cfg: Config, tokenizer: Tokenizer) -> ResponseDataset | None:
    """The checked dataset, opened and indexed (None when there is none to use)."""
    if not cfg.dataset_path or cfg.mm_encoder_only:
        return None
    table = cfg.dataset_table_name
    path = Path(cfg.dataset_path)
    if cfg.dataset_in_memory:
        conn = copy_to_memory(path, table)
    else:
        conn = _open_read_only(path, immutable=True)
    # One read transaction for the server's life: a query then skips starting and ending
    # one (reading a row by its key from a file: 3 us instead of 21 us, measured on the
    # development machine). On an immutable file, and in memory, it holds no lock.
    conn.execute("BEGIN")
    try:
        dataset = ResponseDataset(conn, table, tokenizer)
    except (sqlite3.Error, TypeError, OverflowError) as error:  # the last two: odd keys
        conn.close()
        raise DatasetSetupError(f"failed to index table {table}: {error}") from None
    where = "in memory" if cfg.dataset_in_memory else "on disk"
    log.info("Dataset %s: %d responses in table %s, %s", path, len(dataset), table, where)
    return dataset


def check_database(path: Path, table: str) -> None:
    """The reference's checks, in its order: the file exists, no other connection holds it
    locked, and the table has the four columns with their declared types."""
    if not path.is_file():
        raise DatasetSetupError(f"database file does not exist: {path}")
    conn = _open_read_only(path)
    try:
        _check_unlocked(conn)
        _verify_table(conn, table)
    finally:
        conn.close()


def _open_read_only(path: Path, immutable: bool = False) -> sqlite3.Connection:
    """`immutable`: the file is taken not to change while it is open, so SQLite takes no
    locks and never checks for changes (a file changed under the server can give 500s)."""
    # Read by the event loop's thread, opened by another: SQLite serializes the calls.
    return sqlite3.connect(
        _read_only_uri(path, immutable),
        uri=True,
        timeout=0,
        isolation_level=None,
        check_same_thread=False,
    )


def _read_only_uri(path: Path, immutable: bool = False) -> str:
    mode = "?mode=ro&immutable=1" if immutable else "?mode=ro"
    return "file:" + urllib.parse.quote(str(path.resolve())) + mode


def _check_unlocked(conn: sqlite3.Connection) -> None:
    """An exclusive transaction on a read-only connection takes a shared lock: it fails
    only while another connection writes, not while others read (other ranks)."""
    try:
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as error:
        if getattr(error, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED"):
            reason = f"database is locked or has other active connections: {error}"
            raise DatasetSetupError(reason) from None
        # Anything else (not a database at all, say) is for the table check to name.
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _verify_table(conn: sqlite3.Connection, table: str) -> None:
    failed = "failed to verify database: "
    try:
        info = conn.execute(f"PRAGMA table_info({quote_name(table)})").fetchall()
        if not info:
            raise sqlite3.OperationalError(f"no such table: {table}")
    except sqlite3.Error as error:
        reason = f"{failed}failed to query table info for `{table}`: {error}"
        raise DatasetSetupError(reason) from None
    declared = {row[1]: row[2] for row in info}
    expected = dict(COLUMNS)
    for name, kind in declared.items():  # types first, in the table's order, as the reference
        if name in expected and kind != expected[name]:
            reason = f"column {name} has incorrect type: expected {expected[name]}, got {kind}"
            raise DatasetSetupError(failed + reason)
    for name, _kind in COLUMNS:
        if name not in declared:
            raise DatasetSetupError(f"{failed}missing expected column in {table} table: {name}")


def copy_to_memory(path: Path, table: str) -> sqlite3.Connection:
    """The whole table copied into an in-memory database with the reference's schema (so
    the file must hold those four columns, in that order). It costs the table's size in
    memory, once per data-parallel rank."""
    conn = sqlite3.connect("file::memory:", uri=True, isolation_level=None, check_same_thread=False)
    name = quote_name(table)
    columns = ", ".join(
        f"{column} {kind}{' PRIMARY KEY' if column == 'id' else ''}" for column, kind in COLUMNS
    )
    source = _read_only_uri(path)
    steps: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("failed to attach source database", "ATTACH DATABASE ? AS source", (source,)),
        ("failed to create table", f"CREATE TABLE main.{name} ({columns})", ()),
        ("failed to copy data", f"INSERT INTO main.{name} SELECT * FROM source.{name}", ()),
        ("failed to detach source database", "DETACH DATABASE source", ()),
    )
    for failure, sql, parameters in steps:
        try:
            conn.execute(sql, parameters)
        except sqlite3.Error as error:
            conn.close()
            raise DatasetSetupError(f"{failure}: {error}") from None
    return conn


def fetch(url: str, path: Path) -> None:
    """Downloads `url` to `path` on a worker thread, so that Ctrl-C or SIGTERM can stop it
    at once; the file appears whole (a temporary file beside it, renamed) or not at all."""
    part = _part_file(path)
    cancel = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            download(url, path, cancel, part)
        except BaseException as error:  # handed to the waiting thread
            failure.append(error)

    worker = threading.Thread(target=run, name="dataset-download", daemon=True)
    try:
        with _cancel_on_sigterm(cancel):
            worker.start()
            try:
                while worker.is_alive() and not cancel.is_set():
                    worker.join(0.1)
            except KeyboardInterrupt:
                cancel.set()
        if cancel.is_set():
            worker.join(_CANCEL_GRACE)  # a worker stuck in a read is left to its timeout
            raise DatasetSetupError("download cancelled by user")
    finally:
        part.unlink(missing_ok=True)  # a renamed (complete) download is no longer there
    if failure:
        error = failure[0]
        if isinstance(error, DatasetSetupError):
            raise error
        raise DatasetSetupError(f"failed to download dataset: {error}") from None


@contextlib.contextmanager
def _cancel_on_sigterm(cancel: threading.Event) -> Iterator[None]:
    """SIGTERM sets `cancel` while a download runs (signals reach the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: cancel.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _part_file(path: Path) -> Path:
    """A new empty file beside `path` (its folders created) to download into."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(handle)
    return Path(name)


def download(
    url: str, path: Path, cancel: threading.Event | None = None, part: Path | None = None
) -> None:
    """GETs `url` into `part` (a new temporary file beside `path` if not given), then
    renames it to `path`; any failure (a bad status, an empty or truncated body,
    cancellation) leaves no file. Raises DatasetSetupError or OSError."""
    part = part or _part_file(path)
    try:
        with part.open("wb") as out:
            received, expected = _copy_body(url, out, cancel)
            out.flush()
            os.fsync(out.fileno())
        if received == 0:
            raise DatasetSetupError("downloaded file is empty")
        if expected is not None and received < expected:
            reason = f"truncated, {received} of {expected} bytes received"
            raise DatasetSetupError(f"failed to download dataset: {reason}")
        if cancel is not None and cancel.is_set():
            raise DatasetSetupError("download cancelled by user")
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def _copy_body(url: str, out: IO[bytes], cancel: threading.Event | None) -> tuple[int, int | None]:
    """Streams the body into `out`; (bytes received, Content-Length if given)."""
    from tqdm import tqdm  # 13 ms to import: only for a download

    try:
        response = urllib.request.urlopen(url, timeout=STALL_TIMEOUT)
    except urllib.error.HTTPError as error:
        raise _bad_status(error.code, error.reason) from None
    with response:
        if response.status != 200:
            raise _bad_status(response.status, response.reason)
        length = response.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        received = 0
        with tqdm(
            total=expected,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc="Downloading dataset",
            file=sys.stderr,
            mininterval=1.0,
        ) as bar:
            while chunk := response.read1(_CHUNK):
                if cancel is not None and cancel.is_set():
                    raise DatasetSetupError("download cancelled by user")
                out.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    return received, expected


def _bad_status(code: int, reason: str) -> DatasetSetupError:
    return DatasetSetupError(f"dataset download bad status: {code} {reason}")
