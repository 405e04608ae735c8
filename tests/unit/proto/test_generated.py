"""The committed generated code is what the generator writes, and the package's dependency
floors admit the runtime versions that code checks for."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from vllm_sim.proto import engine_pb2_grpc
from vllm_sim.proto.generate import GENERATED, PACKAGE_DIR, generate

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _floor(requirement_name: str) -> tuple[int, ...]:
    """The `>=` floor of a runtime dependency in pyproject.toml."""
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    for requirement in dependencies:
        found = re.fullmatch(rf"{re.escape(requirement_name)}>=([\d.]+)", requirement)
        if found:
            return _version(found.group(1))
    raise AssertionError(f"no {requirement_name}>=... among the dependencies")


# The grpcio-tools release that wrote the stubs stamps itself into them; a newer release
# writes the same code under another stamp (its runtime floor is checked below).
_TOOL_STAMP = re.compile(rb"^GRPC_GENERATED_VERSION = '[\d.]+'$", re.MULTILINE)


def _unstamped(path: Path) -> bytes:
    return _TOOL_STAMP.sub(b"GRPC_GENERATED_VERSION = ''", path.read_bytes())


def test_generated_files_are_up_to_date(tmp_path: Path) -> None:
    generate(tmp_path)
    stale = [
        name for name in GENERATED if _unstamped(tmp_path / name) != _unstamped(PACKAGE_DIR / name)
    ]
    assert stale == [], (
        f"{stale} differ from what the .proto generates with the installed grpcio-tools: "
        "run `make proto` and commit the result"
    )


def test_protobuf_floor_is_the_gencode_version() -> None:
    # engine_pb2 refuses to load on a protobuf runtime older than the protoc that wrote it.
    source = (PACKAGE_DIR / "engine_pb2.py").read_text()
    found = re.search(
        r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,"
        r"\s*(\d+),\s*(\d+),\s*(\d+),",
        source,
    )
    assert found is not None
    gencode = tuple(int(part) for part in found.groups())
    assert _floor("protobuf") == gencode


def test_grpcio_floor_admits_the_stubs() -> None:
    # engine_pb2_grpc raises at import on a grpcio older than the grpcio-tools that wrote it.
    assert _floor("grpcio") >= _version(engine_pb2_grpc.GRPC_GENERATED_VERSION)
