"""Step time from measured timings: a prefill curve and a decode grid, interpolated.

As Dynamo's mocker does with a planner profile, a step's time is its prefill part (a 1-D
curve over the step's new prompt tokens) plus its decode part (a 2-D grid over the
decode batch's size and its mean context), each read by linear interpolation and
extrapolated linearly past the measured range. Adding the two over-predicts a mixed step
a little (a real step runs its prefill and decode tokens through the same matmuls), which
Dynamo accepts for the same reason: the tables measure the two apart.

Two inputs:
- a CSV `prefill_tokens,decode_batch,context,ms`: rows with prefill tokens and no decode
  batch sample the prefill curve; rows without prefill tokens sample the decode grid on
  (decode_batch, mean context) and must cover every pair of the values they use;
- Dynamo's NPZ: `prefill_isl`, `prefill_ttft_ms` (1-D) and `decode_itl`, a 2-D grid with
  `decode_active_kv_tokens` (the batch's summed context) along its rows and
  `decode_context_length` (the mean context) along its columns.
"""

from __future__ import annotations

import ast
import csv
import math
import struct
import sys
import zipfile
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise
from pathlib import Path
from typing import Final

from vllm_sim.perf.roofline import StepLoad

# A non-empty step takes at least this long, so tokens of successive steps never share a
# timestamp even where a table extrapolates to nothing.
MIN_STEP_MS: Final = 0.1
_CSV_COLUMNS: Final = ("prefill_tokens", "decode_batch", "context", "ms")
_NPZ_ARRAYS: Final = (
    "prefill_isl",
    "prefill_ttft_ms",
    "decode_active_kv_tokens",
    "decode_context_length",
    "decode_itl",
)
_NPY_MAGIC: Final = b"\x93NUMPY"
# .npy element types read here, by their descriptor: little-endian doubles, floats and
# 64-bit integers, the types numpy writes for the profiles Dynamo converts.
_NPY_TYPES: Final = {"<f8": "d", "<f4": "f", "<i8": "q"}
# A profile grid is a few hundred points per axis; refuse to allocate for anything much
# larger than that.
_MAX_ELEMENTS: Final = 1 << 22


class DecodeAxis(Enum):
    """What the decode grid's first axis counts."""

    BATCH = "decode_batch"  # sequences decoding (CSV tables)
    ACTIVE_KV_TOKENS = "active_kv_tokens"  # their summed context (Dynamo's NPZ)


@dataclass(frozen=True, slots=True)
class Curve:
    """y over increasing x, linear between the points and along the end segments."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __call__(self, x: float) -> float:
        xs = self.xs
        i = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
        t = (x - xs[i]) / (xs[i + 1] - xs[i])
        return self.ys[i] + t * (self.ys[i + 1] - self.ys[i])


@dataclass(frozen=True, slots=True)
class Grid:
    """z over a rectilinear grid (`z[i][j]` at `xs[i]`, `ys[j]`): bilinear inside a cell,
    and the nearest edge cell's bilinear surface outside the grid."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    z: tuple[tuple[float, ...], ...]

    def __call__(self, x: float, y: float) -> float:
        xs, ys = self.xs, self.ys
        i = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
        j = min(max(bisect_right(ys, y) - 1, 0), len(ys) - 2)
        t = (x - xs[i]) / (xs[i + 1] - xs[i])
        u = (y - ys[j]) / (ys[j + 1] - ys[j])
        low, high = self.z[i], self.z[i + 1]
        near = low[j] + u * (low[j + 1] - low[j])
        far = high[j] + u * (high[j + 1] - high[j])
        return near + t * (far - near)


class TableModel:
    """Step time from measured prefill and decode timings (see the module docstring)."""

    __slots__ = ("decode", "decode_axis", "prefill", "source")

    def __init__(self, prefill: Curve, decode: Grid, decode_axis: DecodeAxis, source: str) -> None:
        self.prefill = prefill
        self.decode = decode
        self.decode_axis = decode_axis
        self.source = source

    def admission_delay(self, prompt_tokens: int) -> float:
        """None: a table times the engine's steps alone (its prefill curve, measured as
        time to first token, already holds what the API server adds)."""
        return 0.0

    def step_seconds(self, load: StepLoad) -> float:
        """Seconds one step of `load` takes; 0.0 for a step with nothing scheduled."""
        if load.requests == 0:
            return 0.0
        ms = 0.0
        if load.prefill_tokens:
            ms += max(self.prefill(load.prefill_tokens), 0.0)
        if load.decode_seqs:
            # A verified draft token is read off the grid as one more decode at its own
            # context: the tables measure one-token decodes only, so this over-predicts a
            # little (a real verification reads each sequence's KV once).
            seqs = load.decode_seqs + load.draft_tokens
            context = load.decode_context + load.draft_context
            first = seqs if self.decode_axis is DecodeAxis.BATCH else context
            ms += max(self.decode(first, context / seqs), 0.0)
        return max(ms, MIN_STEP_MS) / 1000.0

    @classmethod
    def from_csv(cls, path: Path) -> TableModel:
        """A table from a CSV with columns `prefill_tokens,decode_batch,context,ms`
        (other columns are ignored). ValueError naming the file and the problem."""
        try:
            with path.open(newline="", encoding="utf-8") as file:
                reader = csv.DictReader(file)
                header = list(reader.fieldnames or ())
                rows = list(reader)
        except (OSError, UnicodeDecodeError, csv.Error) as error:
            raise ValueError(f"{path}: cannot be read: {error}") from None
        missing = [column for column in _CSV_COLUMNS if column not in header]
        if not rows or missing:
            raise ValueError(
                f"{path}: needs a header {','.join(_CSV_COLUMNS)} and rows"
                + (f" (missing {', '.join(missing)})" if rows else "")
            )
        prefill, decode = _csv_samples(path, rows)
        if len(prefill) < 2:
            raise ValueError(f"{path}: needs prefill samples at two or more token counts")
        batches = sorted({batch for batch, _ in decode})
        contexts = sorted({context for _, context in decode})
        if len(batches) < 2 or len(contexts) < 2:
            raise ValueError(
                f"{path}: needs decode samples at two or more batch sizes and contexts"
            )
        for batch in batches:
            for context in contexts:
                if (batch, context) not in decode:
                    raise ValueError(
                        f"{path}: the decode samples are not a full grid: no row for batch "
                        f"{batch:g} at context {context:g}"
                    )
        xs = tuple(sorted(prefill))
        return cls(
            Curve(xs, tuple(prefill[x] for x in xs)),
            Grid(
                tuple(batches),
                tuple(contexts),
                tuple(tuple(decode[b, c] for c in contexts) for b in batches),
            ),
            DecodeAxis.BATCH,
            str(path),
        )

    @classmethod
    def from_npz(cls, path: Path) -> TableModel:
        """A table from Dynamo's mocker NPZ (see the module docstring). ValueError
        naming the file and the problem."""
        arrays = _read_npz(path, _NPZ_ARRAYS)
        isl, ttft = arrays["prefill_isl"], arrays["prefill_ttft_ms"]
        kv_tokens, contexts = arrays["decode_active_kv_tokens"], arrays["decode_context_length"]
        itl = arrays["decode_itl"]
        for name in _NPZ_ARRAYS[:4]:
            if len(arrays[name].shape) != 1:
                raise ValueError(f"{path}: {name} must be 1-D, not of shape {arrays[name].shape}")
        if isl.shape != ttft.shape:
            raise ValueError(
                f"{path}: prefill_isl {isl.shape} and prefill_ttft_ms {ttft.shape} differ in length"
            )
        expected = (kv_tokens.shape[0], contexts.shape[0])
        if itl.shape != expected:
            raise ValueError(
                f"{path}: decode_itl has shape {itl.shape}, not (len(decode_active_kv_tokens), "
                f"len(decode_context_length)) = {expected}"
            )
        for name in _NPZ_ARRAYS:
            if not all(math.isfinite(value) for value in arrays[name].values):
                raise ValueError(f"{path}: {name} holds NaN or infinite values")
        for name in ("prefill_isl", "decode_active_kv_tokens", "decode_context_length"):
            _check_axis(path, name, arrays[name].values)
        columns = expected[1]
        rows = tuple(
            tuple(itl.values[row * columns : (row + 1) * columns]) for row in range(expected[0])
        )
        return cls(
            Curve(tuple(isl.values), tuple(ttft.values)),
            Grid(tuple(kv_tokens.values), tuple(contexts.values), rows),
            DecodeAxis.ACTIVE_KV_TOKENS,
            str(path),
        )


def _csv_samples(
    path: Path, rows: list[dict[str, str | None]]
) -> tuple[dict[float, float], dict[tuple[float, float], float]]:
    """The CSV's prefill samples (ms by token count) and decode samples (ms by batch and
    context); ValueError naming the line of a bad or repeated row."""
    prefill: dict[float, float] = {}
    decode: dict[tuple[float, float], float] = {}
    for line, row in enumerate(rows, start=2):
        tokens, batch, context, ms = (_csv_number(path, line, row, c) for c in _CSV_COLUMNS)
        if ms <= 0:
            raise ValueError(f"{path}:{line}: ms must be positive")
        if tokens > 0 and batch == 0:
            if tokens in prefill:
                raise ValueError(f"{path}:{line}: a second row for {tokens:g} prefill tokens")
            prefill[tokens] = ms
        elif tokens == 0 and batch > 0:
            if (batch, context) in decode:
                raise ValueError(
                    f"{path}:{line}: a second row for batch {batch:g}, context {context:g}"
                )
            decode[batch, context] = ms
        else:
            raise ValueError(
                f"{path}:{line}: a row is either a prefill sample (prefill_tokens > 0, "
                "decode_batch 0) or a decode sample (prefill_tokens 0, decode_batch > 0)"
            )
    return prefill, decode


def _csv_number(path: Path, line: int, row: dict[str, str | None], column: str) -> float:
    text = (row.get(column) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{path}:{line}: {column} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{path}:{line}: {column} must be a non-negative number, not {text!r}")
    return value


def _check_axis(path: Path, name: str, values: Sequence[float]) -> None:
    if len(values) < 2:
        raise ValueError(f"{path}: {name} needs two or more points to interpolate between")
    if any(b <= a for a, b in pairwise(values)):
        raise ValueError(f"{path}: {name} must be strictly increasing")


@dataclass(frozen=True, slots=True)
class NpyArray:
    """An array read from a .npy file: its shape and its elements in C order."""

    shape: tuple[int, ...]
    values: tuple[float, ...]


def _read_npz(path: Path, names: Sequence[str]) -> dict[str, NpyArray]:
    """The named arrays of an .npz (a zip of `<name>.npy` members, stored or deflated)."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = set(archive.namelist())
            missing = [name for name in names if f"{name}.npy" not in members]
            if missing:
                raise ValueError(f"{path}: no array {', '.join(missing)} in the archive")
            arrays = {}
            for name in names:
                info = archive.getinfo(f"{name}.npy")
                if info.file_size > _MAX_ELEMENTS * 8 + 4096:
                    raise ValueError(f"{path}: {name} is too large for a profile table")
                arrays[name] = _parse_npy(archive.read(info), f"{path}: {name}")
            return arrays
    # Besides I/O and zip structure errors: zlib.error for corrupt deflated data,
    # NotImplementedError for a compression method zipfile lacks, RuntimeError for an
    # encrypted member.
    except (
        OSError,
        EOFError,
        zipfile.BadZipFile,
        zlib.error,
        NotImplementedError,
        RuntimeError,
    ) as error:
        raise ValueError(f"{path}: not a readable .npz archive: {error}") from None


def _parse_npy(data: bytes, where: str) -> NpyArray:
    """A .npy file's array (format versions 1-3: magic, version, header length, a
    Python-literal header dict, then the raw elements)."""
    if not data.startswith(_NPY_MAGIC) or len(data) < 10:
        raise ValueError(f"{where}: not a .npy array")
    major = data[6]
    if major == 1:
        (header_length,) = struct.unpack_from("<H", data, 8)
        start = 10
    elif major in (2, 3):
        if len(data) < 12:
            raise ValueError(f"{where}: truncated .npy header")
        (header_length,) = struct.unpack_from("<I", data, 8)
        start = 12
    else:
        raise ValueError(f"{where}: unsupported .npy format version {major}")
    try:
        header = ast.literal_eval(data[start : start + header_length].decode("utf-8"))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        raise ValueError(f"{where}: unreadable .npy header") from None
    if not isinstance(header, dict):
        raise ValueError(f"{where}: unreadable .npy header")
    descr, fortran, shape = header.get("descr"), header.get("fortran_order"), header.get("shape")
    typecode = _NPY_TYPES.get(descr) if isinstance(descr, str) else None
    if typecode is None:
        raise ValueError(
            f"{where}: element type {descr!r} is not little-endian float64, float32 or int64"
        )
    if fortran is not False:
        raise ValueError(f"{where}: only C-order arrays are read, not Fortran order")
    if not (
        isinstance(shape, tuple)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise ValueError(f"{where}: malformed shape {shape!r}")
    count = math.prod(shape)
    if count > _MAX_ELEMENTS:
        raise ValueError(f"{where}: {count} elements is too many for a profile table")
    elements = array(typecode)
    body = data[start + header_length :]
    if len(body) != count * elements.itemsize:
        raise ValueError(
            f"{where}: {len(body)} data bytes for {count} elements of {elements.itemsize}"
        )
    elements.frombytes(body)
    if sys.byteorder == "big":
        elements.byteswap()
    return NpyArray(shape, tuple(float(value) for value in elements))
