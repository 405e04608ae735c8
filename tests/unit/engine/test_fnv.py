"""FNV-1a-64 on machine integers (fnv.py): the same values as hashing.py's table-driven loop
for any state and data, compiled or interpreted, and the known FNV-1a-64 vectors; the
compiled build hashes with it, the interpreted one with the table-driven loop."""

from __future__ import annotations

import importlib.util
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vllm_sim.engine.kvcache as kvcache_package
from vllm_sim.engine.kvcache import fnv, hashing

FNV_BASIS = 0xCBF29CE484222325
MAX_U64 = 2**64 - 1
SOURCES = Path(hashing.__file__).resolve().parent
Continue = Callable[[int, bytes], int]


def from_source(name: str) -> ModuleType:
    """The kvcache module `name` executed from its .py file (interpreted), whether or not a
    compiled one is installed."""
    spec = importlib.util.spec_from_file_location(f"_interpreted_{name}", SOURCES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INTERPRETED_FNV = from_source("fnv")


def textbook(state: int, data: bytes) -> int:
    for byte in data:
        state = ((state ^ byte) * 0x100000001B3) & MAX_U64
    return state


def implementations() -> Iterator[tuple[str, Continue]]:
    yield "installed", fnv.fnv_continue_native
    yield "interpreted", INTERPRETED_FNV.fnv_continue_native


@pytest.mark.parametrize(("name", "native"), list(implementations()))
@settings(deadline=None, max_examples=300)
@given(state=st.integers(0, MAX_U64), data=st.binary(max_size=70))
def test_native_equals_the_table_loop(name: str, native: Continue, state: int, data: bytes) -> None:
    """From any 64-bit state, over data of 0 to 70 bytes (every remainder modulo 8, and
    several 8-byte folds), the machine-integer loop gives hashing._fnv_tables's value."""
    assert native(state, data) == hashing._fnv_tables(state, data), name


@pytest.mark.parametrize(("name", "native"), list(implementations()))
def test_native_equals_the_table_loop_on_kilobytes(name: str, native: Continue) -> None:
    """Data of a few KB (a long prompt's CBOR) from edge and random states."""
    rng = random.Random(7)
    for size in (1024, 2047, 4096 + 3):
        data = rng.randbytes(size)
        for state in (0, MAX_U64, FNV_BASIS, rng.getrandbits(64)):
            expected = textbook(state, data)
            assert native(state, data) == hashing._fnv_tables(state, data) == expected, (
                name,
                size,
                state,
            )


@pytest.mark.parametrize(("name", "native"), list(implementations()))
@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"", 0xCBF29CE484222325), (b"a", 0xAF63DC4C8601EC8C), (b"foobar", 0x85944171F73967E8)],
)
def test_known_vectors(name: str, native: Continue, data: bytes, expected: int) -> None:
    """FNV-1a-64 of "", "a" and "foobar" from the offset basis, by every path."""
    assert native(FNV_BASIS, data) == expected, name
    assert hashing._fnv_tables(FNV_BASIS, data) == expected
    assert hashing.fnv1a_64(data) == expected


def test_continuing_equals_hashing_the_concatenation() -> None:
    """Continuing from a prefix's hash is hashing prefix + rest."""
    prefix, rest = b"\x83\x1b" + bytes(range(40)), bytes(range(255, 100, -1))
    assert fnv.fnv_continue_native(hashing.fnv1a_64(prefix), rest) == hashing.fnv1a_64(
        prefix + rest
    )


def test_the_result_is_a_64_bit_value() -> None:
    """High bits set in every byte of the state and the data never overflow the 64 bits."""
    value = fnv.fnv_continue_native(MAX_U64, b"\xff" * 100)
    assert 0 <= value <= MAX_U64
    assert value == textbook(MAX_U64, b"\xff" * 100)


def test_the_compiled_build_hashes_with_the_native_loop() -> None:
    """With fnv.py compiled (an extension module, not a .py file) hashing uses
    fnv_continue_native; interpreted, the table-driven loop."""
    compiled = fnv.__file__ is not None and not fnv.__file__.endswith(".py")
    assert hashing._COMPILED is compiled
    if compiled:
        assert hashing._fnv_continue is fnv.fnv_continue_native
    else:
        assert hashing._fnv_continue is hashing._fnv_tables


def hashing_from_source(monkeypatch: pytest.MonkeyPatch, fnv_module: ModuleType) -> ModuleType:
    """hashing.py executed from source with `fnv_module` as its fnv."""
    monkeypatch.setattr(kvcache_package, "fnv", fnv_module)
    monkeypatch.setitem(sys.modules, "vllm_sim.engine.kvcache.fnv", fnv_module)
    return from_source("hashing")


def test_hashing_picks_the_native_loop_only_when_fnv_is_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hashing.py's choice, whatever build is installed: an fnv module loaded from a .py
    file means the table-driven loop; one loaded from an extension means the native loop."""
    interpreted = hashing_from_source(monkeypatch, INTERPRETED_FNV)
    assert not interpreted._COMPILED
    assert interpreted._fnv_continue is interpreted._fnv_tables
    assert interpreted.fnv1a_64(b"foobar") == 0x85944171F73967E8

    compiled = ModuleType("vllm_sim.engine.kvcache.fnv")
    compiled.__file__ = str(SOURCES / "fnv.abi3.so")
    compiled.fnv_continue_native = INTERPRETED_FNV.fnv_continue_native  # type: ignore[attr-defined]
    chosen = hashing_from_source(monkeypatch, compiled)
    assert chosen._COMPILED
    assert chosen._fnv_continue is INTERPRETED_FNV.fnv_continue_native
    assert chosen.fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
