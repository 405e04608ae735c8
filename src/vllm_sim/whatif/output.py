"""A run's files, all inside one output folder whose names are fixed here: nothing a
trace holds ever becomes a path."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from vllm_sim.whatif.results import REQUEST_COLUMNS, SAMPLE_COLUMNS, RunResult, rows

RESULT_JSON = "result.json"
REQUESTS_CSV = "requests.csv"
SAMPLES_CSV = "samples.csv"


def write_run(result: RunResult, folder: Path) -> list[Path]:
    """Writes the run's JSON and CSV files into `folder` (made if missing); their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / RESULT_JSON, folder / REQUESTS_CSV, folder / SAMPLES_CSV]
    written[0].write_text(json.dumps(result.to_json(), indent=1) + "\n")
    with written[1].open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(REQUEST_COLUMNS)
        out.writerows(rows(result.records))
    with written[2].open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow([*SAMPLE_COLUMNS, "running_per_instance"])
        for sample in result.samples:
            out.writerow(
                [
                    *(getattr(sample, name) for name in SAMPLE_COLUMNS),
                    " ".join(map(str, sample.running_per_instance)),
                ]
            )
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
