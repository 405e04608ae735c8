"""A run's files, all inside one output folder whose names are fixed here: nothing a
trace holds ever becomes a path. Every file is created through `OutFolder` (exclusively,
under a temporary name renamed when complete, never through a link); requests.csv is
streamed, a row as each request ends (see `RequestStream`)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vllm_sim.whatif.outdir import OutFolder, Staged
from vllm_sim.whatif.results import REQUEST_COLUMNS, SAMPLE_COLUMNS, RequestRecord, RunResult

RESULT_JSON = "result.json"
REQUESTS_CSV = "requests.csv"
SAMPLES_CSV = "samples.csv"


class RequestStream:
    """requests.csv written as the run goes: a row when a request ends (in the order
    they end; its `index` column is its place in the trace), flushed every quarter of a
    second, kept under its temporary name until `finish` writes the rest and renames it."""

    def __init__(self, folder: OutFolder) -> None:
        self._staged: Staged = folder.stage(REQUESTS_CSV)
        self._out = csv.writer(self._staged.handle)
        self._out.writerow(REQUEST_COLUMNS)
        self._written: set[int] = set()

    def write(self, record: RequestRecord) -> None:
        if record.index in self._written:
            return
        self._written.add(record.index)
        self._out.writerow([getattr(record, name) for name in REQUEST_COLUMNS])
        self._staged.flush_now_and_then()

    def finish(self, records: Iterable[RequestRecord]) -> Path:
        """The rows not written yet (requests that never ended), then the file renamed."""
        for record in records:
            if record.index not in self._written:
                self.write(record)
        return self._staged.commit()

    def abandon(self) -> None:
        self._staged.abandon()


def write_run(
    result: RunResult, folder: Path | OutFolder, stream: RequestStream | None = None
) -> list[Path]:
    """Writes the run's JSON and CSV files into `folder` (made if missing); their paths.
    With `stream`, requests.csv is that stream's file, finished here."""
    out = folder if isinstance(folder, OutFolder) else OutFolder.prepare(folder)
    try:
        stream = stream or RequestStream(out)
        requests = stream.finish(result.records)
        written = [out.write_text(RESULT_JSON, json.dumps(result.to_json(), indent=1) + "\n")]
        written.append(requests)
        with out.stage(SAMPLES_CSV) as handle:
            writer = csv.writer(handle)
            writer.writerow([*SAMPLE_COLUMNS, "running_per_instance"])
            for sample in result.samples:
                writer.writerow(
                    [
                        *(getattr(sample, name) for name in SAMPLE_COLUMNS),
                        " ".join(map(str, sample.running_per_instance)),
                    ]
                )
        written.append(out.path / SAMPLES_CSV)
    finally:
        if out is not folder:
            out.close()
    return written


def read_result(path: Path) -> dict[str, Any]:
    """A run's result.json (or the folder holding it); ValueError if it is not one."""
    if path.is_dir():
        path = path / RESULT_JSON
    try:
        data = json.loads(path.read_text())
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror or error}") from None
    except ValueError:
        raise ValueError(f"{path}: not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("means"), dict):
        raise ValueError(f"{path}: not a vllm-sim run result (no means)")
    return data
