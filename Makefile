# Everything a fresh machine needs: only python3 (3.11+) and make are assumed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= Qwen/Qwen2.5-1.5B-Instruct
PORT ?= 8000
ARGS ?=
FUZZ_EXAMPLES ?= 10000
FUZZ_REPORT ?=

.PHONY: run test lint typecheck unit fuzz bench install dev clean docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
dev: $(VENV)/.dev-installed

run: install
	$(BIN)/vllm-sim --model $(MODEL) --port $(PORT) $(ARGS)

lint: dev
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
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

bench: dev
	$(BIN)/python -m bench $(BENCH_ARGS)

docs: install
	$(BIN)/python -m vllm_sim.config.reference > docs/flags.md

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
