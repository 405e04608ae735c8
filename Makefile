# Everything a fresh machine needs: only python3 (3.11+) and make are assumed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= Qwen/Qwen2.5-1.5B-Instruct
PORT ?= 8000
ARGS ?=
FUZZ_EXAMPLES ?= 10000
FUZZ_REPORT ?=
CONFORMANCE_ARGS ?=

.PHONY: run test lint typecheck unit fuzz bench install dev clean docs conformance image proto pure

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The install compiles the hot modules with mypyc (setup.py) when a C compiler is present:
# an edit to one of them takes effect once it is built again, so their sources are
# prerequisites. VLLM_SIM_PURE_PYTHON=1 installs pure Python (`make pure` drops a build).
NATIVE_SOURCES := setup.py $(shell sed -n 's/^    "\(src\/.*\.py\)",$$/\1/p' setup.py)

# A build from before leaves extensions beside the sources, and an extension shadows its
# .py: they go first, so a module dropped from the list is not served from an old build.
$(VENV)/.installed: pyproject.toml $(NATIVE_SOURCES) | $(BIN)/python
	find src -name '*.so' -delete
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml $(NATIVE_SOURCES) | $(BIN)/python
	find src -name '*.so' -delete
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
dev: $(VENV)/.dev-installed

run: install
	$(BIN)/vllm-sim --model $(MODEL) --port $(PORT) $(ARGS)

lint: dev
	$(BIN)/ruff check src tests bench conformance setup.py
	$(BIN)/ruff format --check src tests bench conformance setup.py
	$(BIN)/lint-imports --no-cache

typecheck: dev
	$(BIN)/mypy

unit: dev
	$(BIN)/pytest

test: lint typecheck unit

# The abuse suite alone, FUZZ_EXAMPLES per route (the test run uses a small count); no
# per-test timeout, since one route's examples take minutes. FUZZ_REPORT=file.json saves
# the figures.
fuzz: dev
	VLLM_SIM_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) VLLM_SIM_FUZZ_REPORT=$(FUZZ_REPORT) \
	$(BIN)/pytest tests/fuzz --timeout=0

# The simulator against a real vLLM, on demand (not part of `make test`). The first run
# installs vLLM's CPU build (about 3.5 GB) and a tiny model into .conformance/; later runs
# reuse them. CONFORMANCE_ARGS="--only 'chat*'" runs some cases. Report: .conformance/report.md.
conformance: dev
	$(BIN)/python -m conformance --python $(PYTHON) $(CONFORMANCE_ARGS)

bench: dev
	$(BIN)/python -m bench $(BENCH_ARGS)

# The container image (Dockerfile) with docker or podman; CONTAINER_ENGINE=... picks one.
CONTAINER_ENGINE ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
IMAGE ?= vllm-sim:dev
image:
	@test -n "$(CONTAINER_ENGINE)" || { echo "make image: no docker or podman found" >&2; exit 1; }
	$(CONTAINER_ENGINE) build -t $(IMAGE) .

docs: install
	$(BIN)/python -m vllm_sim.config.reference > docs/flags.md

# The gRPC engine service's generated code (src/vllm_sim/proto), after editing its .proto.
proto: dev
	$(BIN)/python -m vllm_sim.proto.generate

# Back to interpreted modules: the compiled ones removed, reinstalled without compiling.
pure: | $(BIN)/python
	find src -name '*.so' -delete
	VLLM_SIM_PURE_PYTHON=1 $(BIN)/python -m pip install -q -e '.[dev]'

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build
	find src -name '*.so' -delete
