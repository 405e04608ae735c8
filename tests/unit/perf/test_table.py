"""Table mode: step times interpolated from a measured CSV or Dynamo's NPZ, the NPZ read
without numpy, and the errors of malformed files."""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from vllm_sim.perf import StepLoad, StepTimeModel, TableModel

CSV_ROWS = """prefill_tokens,decode_batch,context,ms
256,0,0,20
1024,0,0,50
2048,0,0,100
0,1,1024,12
0,1,9216,14
0,65,1024,24
0,65,9216,90
"""


def write(tmp_path: Path, text: str, name: str = "steps.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def decode(batch: int, context: int) -> StepLoad:
    load = StepLoad()
    for _ in range(batch):
        load.add_decode(context)
    return load


def prefill(tokens: int) -> StepLoad:
    load = StepLoad()
    load.add_prefill(0, tokens, completes=True)
    return load


def ms(model: StepTimeModel, load: StepLoad) -> float:
    return model.step_seconds(load) * 1e3


def test_csv_at_the_measured_points(tmp_path: Path) -> None:
    model = TableModel.from_csv(write(tmp_path, CSV_ROWS))
    assert ms(model, prefill(1024)) == pytest.approx(50)
    assert ms(model, prefill(2048)) == pytest.approx(100)
    assert ms(model, decode(1, 1024)) == pytest.approx(12)
    assert ms(model, decode(65, 9216)) == pytest.approx(90)


def test_csv_between_the_measured_points(tmp_path: Path) -> None:
    model = TableModel.from_csv(write(tmp_path, CSV_ROWS))
    assert ms(model, prefill(640)) == pytest.approx(35)
    # The middle of the grid cell: the mean of its corners.
    assert ms(model, decode(33, 5120)) == pytest.approx((12 + 14 + 24 + 90) / 4)
    # Along one edge.
    assert ms(model, decode(1, 5120)) == pytest.approx(13)


def test_csv_extrapolates_along_the_end_segments(tmp_path: Path) -> None:
    model = TableModel.from_csv(write(tmp_path, CSV_ROWS))
    assert ms(model, prefill(4096)) == pytest.approx(100 + 2048 * 50 / 1024)
    assert ms(model, prefill(16)) == pytest.approx(20 - 240 * 30 / 768)
    assert ms(model, decode(129, 9216)) == pytest.approx(90 + (90 - 14))


def test_a_mixed_step_adds_its_prefill_and_decode_parts(tmp_path: Path) -> None:
    model = TableModel.from_csv(write(tmp_path, CSV_ROWS))
    load = decode(1, 1024)
    load.add_prefill(0, 1024, completes=False)
    assert ms(model, load) == pytest.approx(50 + 12)


def test_the_mean_context_is_the_decode_batch_average(tmp_path: Path) -> None:
    model = TableModel.from_csv(write(tmp_path, CSV_ROWS))
    load = StepLoad()
    load.add_decode(1024)
    load.add_decode(9216)
    assert ms(model, load) == ms(model, decode(2, 5120))


def test_an_empty_step_takes_no_time_and_a_nonempty_one_at_least_a_tenth_ms(
    tmp_path: Path,
) -> None:
    steep = "prefill_tokens,decode_batch,context,ms\n100,0,0,1\n200,0,0,50\n"
    steep += "0,1,1,1\n0,1,2,1\n0,2,1,1\n0,2,2,1\n"
    model = TableModel.from_csv(write(tmp_path, steep))
    assert model.step_seconds(StepLoad()) == 0.0
    # Extrapolated below zero: never negative, and the floor holds.
    assert ms(model, prefill(10)) == pytest.approx(0.1)


def test_csv_ignores_extra_columns_and_column_order(tmp_path: Path) -> None:
    lines = CSV_ROWS.splitlines()
    reordered = ["ms,context,decode_batch,prefill_tokens,note"]
    for line in lines[1:]:
        tokens, batch, context, time = line.split(",")
        reordered.append(f"{time},{context},{batch},{tokens},x")
    model = TableModel.from_csv(write(tmp_path, "\n".join(reordered) + "\n"))
    assert ms(model, decode(33, 5120)) == pytest.approx(35)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "needs a header"),
        ("prefill_tokens,decode_batch,ms\n1,0,2\n", "missing context"),
        (CSV_ROWS + "abc,0,0,5\n", r"steps.csv:9: prefill_tokens 'abc' is not a number"),
        (CSV_ROWS + "10,0,0,-5\n", "ms must be"),
        (CSV_ROWS + "10,0,0,0\n", "ms must be positive"),
        (CSV_ROWS + "10,4,1024,5\n", "a row is either a prefill sample"),
        (CSV_ROWS + "0,0,1024,5\n", "a row is either a prefill sample"),
        (CSV_ROWS + "256,0,0,21\n", "a second row for 256 prefill tokens"),
        (CSV_ROWS + "0,65,1024,25\n", "a second row for batch 65, context 1024"),
        (CSV_ROWS + "0,128,1024,40\n", "not a full grid: no row for batch 128 at context 9216"),
        (CSV_ROWS.replace("256,0,0,20\n", "").replace("2048,0,0,100\n", ""), "two or more"),
        (CSV_ROWS.replace("0,65,1024,24\n0,65,9216,90\n", ""), "two or more batch sizes"),
        (CSV_ROWS + "nan,0,0,5\n", "must be a non-negative number"),
    ],
)
def test_malformed_csv_is_refused(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=message) as error:
        TableModel.from_csv(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_an_unreadable_csv_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be read"):
        TableModel.from_csv(tmp_path / "absent.csv")


# .npy by hand: magic, version, header length, a Python-literal dict padded with spaces
# and a newline to a multiple of 64 bytes, then the elements.
def npy(
    values: Sequence[float],
    shape: tuple[int, ...],
    descr: str = "<f8",
    fortran: bool = False,
    version: int = 1,
) -> bytes:
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape!r}, }}"
    prefix = 10 if version == 1 else 12
    padding = -(prefix + len(header) + 1) % 64
    text = (header + " " * padding + "\n").encode("latin-1")
    length = struct.pack("<H", len(text)) if version == 1 else struct.pack("<I", len(text))
    fmt = {"<f8": "d", "<f4": "f", "<i8": "q", ">f8": "d", "<i4": "i"}[descr]
    order = ">" if descr.startswith(">") else "<"
    cast = int if fmt in "qi" else float
    body = struct.pack(f"{order}{len(values)}{fmt}", *(cast(v) for v in values))
    return b"\x93NUMPY" + bytes([version, 0]) + length + text + body


PROFILE: dict[str, tuple[list[float], tuple[int, ...]]] = {
    "prefill_isl": ([100, 1000, 4000], (3,)),
    "prefill_ttft_ms": ([10, 40, 160], (3,)),
    "decode_active_kv_tokens": ([0, 10000, 100000], (3,)),
    "decode_context_length": ([0, 1000, 10000], (3,)),
    # rows: active KV tokens; columns: mean context
    "decode_itl": ([5, 6, 8, 9, 10, 12, 30, 32, 40], (3, 3)),
}


def write_npz(
    tmp_path: Path,
    arrays: dict[str, bytes] | None = None,
    compression: int = zipfile.ZIP_STORED,
) -> Path:
    if arrays is None:
        arrays = {name: npy(values, shape) for name, (values, shape) in PROFILE.items()}
    path = tmp_path / "perf_data.npz"
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in arrays.items():
            archive.writestr(f"{name}.npy", data)
    return path


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_npz_at_and_between_the_grid_points(tmp_path: Path, compression: int) -> None:
    model = TableModel.from_npz(write_npz(tmp_path, compression=compression))
    assert ms(model, prefill(1000)) == pytest.approx(40)
    assert ms(model, prefill(2500)) == pytest.approx(100)
    # 10 sequences at context 1000: 10,000 active KV tokens, mean context 1000.
    assert ms(model, decode(10, 1000)) == pytest.approx(10)
    assert ms(model, decode(100, 1000)) == pytest.approx(32)
    # 5 sequences at 1000: half way to the first row, on the middle column.
    assert ms(model, decode(5, 1000)) == pytest.approx((6 + 10) / 2)
    # 11 sequences at 5500: 60,500 tokens (0.5611 of the way from 10,000 to 100,000),
    # mean context half way from 1,000 to 10,000.
    t = (60500 - 10000) / 90000
    expected = (1 - t) * (10 + 12) / 2 + t * (32 + 40) / 2
    assert ms(model, decode(11, 5500)) == pytest.approx(expected)
    mixed = decode(10, 1000)
    mixed.add_prefill(0, 1000, completes=True)
    assert ms(model, mixed) == pytest.approx(40 + 10)


def test_npz_extrapolates_and_never_goes_negative(tmp_path: Path) -> None:
    model = TableModel.from_npz(write_npz(tmp_path))
    assert ms(model, prefill(7000)) == pytest.approx(160 + 3000 * 120 / 3000)
    # Below the first point the first segment's slope runs to 0 at -233 tokens: 1 token
    # is still positive.
    assert ms(model, prefill(1)) == pytest.approx(10 - 99 * 30 / 900)


@pytest.mark.parametrize(("descr", "version"), [("<f4", 1), ("<i8", 1), ("<f8", 2), ("<f8", 3)])
def test_npz_element_types_and_format_versions(tmp_path: Path, descr: str, version: int) -> None:
    arrays = {
        name: npy(values, shape, descr=descr, version=version)
        for name, (values, shape) in PROFILE.items()
    }
    model = TableModel.from_npz(write_npz(tmp_path, arrays))
    assert ms(model, decode(10, 1000)) == pytest.approx(10)


def with_array(name: str, data: bytes) -> dict[str, bytes]:
    arrays = {key: npy(values, shape) for key, (values, shape) in PROFILE.items()}
    arrays[name] = data
    return arrays


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        (
            {k: v for k, v in with_array("decode_itl", b"").items() if k != "decode_itl"},
            "no array decode_itl",
        ),
        (with_array("prefill_isl", npy([100, 1000, 4000], (3,), ">f8")), "'>f8' is not little"),
        (with_array("prefill_isl", npy([100, 1000, 4000], (3,), "<i4")), "'<i4' is not little"),
        (with_array("decode_itl", npy([1] * 9, (3, 3), fortran=True)), "Fortran"),
        (with_array("decode_itl", npy([1] * 6, (3, 2))), r"decode_itl has shape \(3, 2\)"),
        (with_array("prefill_ttft_ms", npy([1, 2], (2,))), "differ in length"),
        (with_array("prefill_isl", npy([100, 1000, 1000], (3,))), "strictly increasing"),
        (with_array("decode_context_length", npy([0], (1,))), r"decode_itl has shape"),
        (with_array("prefill_isl", npy([1, 2, 3, 4], (2, 2))), "prefill_isl must be 1-D"),
        (
            with_array("decode_itl", npy([5, 6, float("nan"), 9, 10, 12, 30, 32, 40], (3, 3))),
            "NaN",
        ),
        (with_array("prefill_isl", npy([100, 1000, 4000], (3,))[:-8]), "data bytes"),
        (with_array("prefill_isl", b"not an array at all"), "not a .npy array"),
        (with_array("prefill_isl", npy([1], (1,)).replace(b"'shape'", b"'shapf'")), "shape"),
    ],
)
def test_malformed_npz_is_refused(tmp_path: Path, arrays: dict[str, bytes], message: str) -> None:
    path = write_npz(tmp_path, arrays)
    with pytest.raises(ValueError, match=message) as error:
        TableModel.from_npz(path)
    assert str(path) in str(error.value)


def test_a_file_that_is_not_a_zip_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "prefill_isl", name="perf_data.npz")
    with pytest.raises(ValueError, match=r"not a readable \.npz archive"):
        TableModel.from_npz(path)
    with pytest.raises(ValueError, match=r"not a readable \.npz archive"):
        TableModel.from_npz(tmp_path / "absent.npz")
