"""`python -m vllm_sim.proto.generate` regenerates the Python code of pkg/grpc/engine.proto.

It compiles the .proto with grpcio-tools' bundled protoc (a dev dependency) into a scratch
folder and writes engine_pb2.py, engine_pb2.pyi and engine_pb2_grpc.py next to this file.
The output depends only on the .proto and on the grpcio-tools release, so a test can run
`generate(tmp)` and compare the result with the committed files byte for byte.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# The path relative to the include root becomes the descriptor's file name, which server
# reflection shows; clients of the original server know the contract by this name.
PROTO_NAME = "pkg/grpc/engine.proto"
GENERATED = ("engine_pb2.py", "engine_pb2.pyi", "engine_pb2_grpc.py")

# protoc names the message module after the .proto's folders; the stubs live in this
# package instead, so the one import of the gRPC module is pointed here.
_PROTOC_IMPORT = "from pkg.grpc import engine_pb2 as "
_PACKAGE_IMPORT = "from vllm_sim.proto import engine_pb2 as "


class GenerationError(RuntimeError):
    """protoc failed, or its output was not shaped as this script expects."""


def generate(out_dir: Path) -> list[Path]:
    """Compile the .proto and write the three generated files into `out_dir`."""
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vllm-sim-proto-") as scratch:
        status = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{PACKAGE_DIR}",
                f"--python_out={scratch}",
                f"--pyi_out={scratch}",
                f"--grpc_python_out={scratch}",
                PROTO_NAME,
            ]
        )
        if status != 0:
            raise GenerationError(f"protoc exited with status {status} on {PROTO_NAME}")
        produced = Path(scratch) / Path(PROTO_NAME).parent
        written = []
        for name in GENERATED:
            content = (produced / name).read_bytes()
            if name == "engine_pb2_grpc.py":
                content = _repoint_import(content)
            target = out_dir / name
            target.write_bytes(content)
            written.append(target)
    return written


def _repoint_import(source: bytes) -> bytes:
    old, new = _PROTOC_IMPORT.encode(), _PACKAGE_IMPORT.encode()
    if source.count(old) != 1:
        raise GenerationError(f"expected one line starting {_PROTOC_IMPORT!r} in the stubs")
    return source.replace(old, new)


def main() -> int:
    for path in generate(PACKAGE_DIR):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
