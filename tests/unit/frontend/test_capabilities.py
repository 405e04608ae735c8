"""The capability table: one row per generation endpoint, the same in the code and README."""

from __future__ import annotations

from pathlib import Path

from vllm_sim.frontend.capabilities import Capabilities
from vllm_sim.transports.http.routes import generation_endpoints

README = Path(__file__).resolve().parents[3] / "README.md"


def _readme_rows() -> dict[str, tuple[bool, ...]]:
    rows: dict[str, tuple[bool, ...]] = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 1 + len(Capabilities._fields) and cells[0].startswith("`/"):
            rows[cells[0].strip("`")] = tuple(cell == "yes" for cell in cells[1:])
    return rows


def test_every_generation_endpoint_has_one_row() -> None:
    paths = [endpoint.path for endpoint in generation_endpoints()]
    assert len(set(paths)) == len(paths) == 5
    assert set(_readme_rows()) == set(paths)


def test_readme_table_says_what_the_pipeline_reads() -> None:
    rows = _readme_rows()
    for endpoint in generation_endpoints():
        assert rows[endpoint.path] == tuple(endpoint.capabilities), endpoint.path
