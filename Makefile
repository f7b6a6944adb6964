# The README's two commands: `make demo` and `make test`. Each builds the environment it needs from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck unit bench clean

demo: $(VENV)/.demo-installed
	$(BIN)/python -m harness.demo

test: $(VENV)/.test-installed lint typecheck unit

lint: $(VENV)/.test-installed
	$(BIN)/ruff check emulator harness tests
	$(BIN)/ruff format --check emulator harness tests

typecheck: $(VENV)/.test-installed
	$(BIN)/mypy

unit: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q

bench: $(VENV)/.test-installed
	$(BIN)/sandbox-emulator bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The bare emulator: FastAPI, uvicorn, pydantic, PyYAML.
$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# Tests need verl, which needs torch: the CPU build 2.13.0 first, so no CUDA build is pulled in.
# The limiter tests start their own Debian redis-server on a free loopback port: install it when missing.
$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,verl,daytona,bench,redis,ray]'
	touch $@ $(VENV)/.demo-installed

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .hypothesis
