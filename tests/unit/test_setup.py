"""The build compiles the hot modules with mypyc (setup.py): the suite runs against that
build wherever one could be made, and a compiled module never hides a newer source."""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "setup.py"


def native_sources() -> list[Path]:
    """setup.py's NATIVE list, read without running setup()."""
    for node in ast.parse(SETUP.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "NATIVE" for t in node.targets
        ):
            return [ROOT / path for path in ast.literal_eval(node.value)]
    raise AssertionError("setup.py has no NATIVE list")


def module_name(source: Path) -> str:
    return ".".join(source.relative_to(ROOT / "src").with_suffix("").parts)


def built(source: Path) -> Path | None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    library = source.with_name(source.stem + suffix)
    return library if library.exists() else None


def test_every_native_module_exists_and_defines_no_msgspec_struct() -> None:
    for source in native_sources():
        assert source.exists(), source
        assert "msgspec.Struct" not in source.read_text(), f"{source} cannot be compiled"


def test_every_compiled_module_in_the_tree_is_one_setup_compiles() -> None:
    # An extension shadows its .py: one left by an older build would be imported instead.
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    listed = {str(source.relative_to(ROOT)) for source in native_sources()}
    built_here = {
        str(path.relative_to(ROOT)).removesuffix(suffix) + ".py"
        for path in (ROOT / "src" / "vllm_sim").rglob("*" + suffix)
    }
    assert built_here <= listed, sorted(built_here - listed)


def test_no_compiled_module_is_older_than_its_source() -> None:
    stale = [
        str(source.relative_to(ROOT))
        for source in native_sources()
        if (library := built(source)) is not None
        and library.stat().st_mtime < source.stat().st_mtime
    ]
    assert not stale, f"{stale} changed since they were compiled: run `make dev` (or `make pure`)"


@pytest.mark.skipif(
    bool(os.environ.get("VLLM_SIM_PURE_PYTHON"))
    or shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None,
    reason="a pure-Python install: no C compiler, or VLLM_SIM_PURE_PYTHON set",
)
def test_the_suite_runs_against_the_compiled_build() -> None:
    for source in native_sources():
        module = importlib.import_module(module_name(source))
        assert module.__file__ is not None and not module.__file__.endswith(".py"), (
            f"{module.__name__} is interpreted: the install did not compile it"
        )


# Made for every request or engine step by compiled modules: each writes its own
# __init__, since the one dataclasses writes is interpreted even in a compiled class.
PER_REQUEST_DATACLASSES = [
    ("vllm_sim.engine.request", "Prompt"),
    ("vllm_sim.engine.request", "GenerationRequest"),
    ("vllm_sim.engine.timing.steps", "Step"),
    ("vllm_sim.frontend.usage", "Usage"),
    ("vllm_sim.http.messages", "Response"),
    ("vllm_sim.http.messages", "StreamingResponse"),
    ("vllm_sim.engine.tokenizer.base", "ChatTurn"),
    ("vllm_sim.engine.tokenizer.base", "ChatInput"),
    ("vllm_sim.protocols.common.conversation", "Conversation"),
]


@pytest.mark.parametrize(("module", "name"), PER_REQUEST_DATACLASSES)
def test_dataclasses_made_per_request_write_their_own_init(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert cls.__dataclass_params__.init is False
    # dataclasses writes its __init__ as source it compiles on the spot ("<string>").
    code = getattr(cls.__init__, "__code__", None)
    assert code is None or code.co_filename != "<string>"
