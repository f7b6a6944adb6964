# The README's two commands: `make demo` and `make test`. Each builds the environment it needs from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# verl 0.7.1, the last release with its own SandboxFusionTool, lives in a second environment for the reference run.
VENV071 := .venv-071
BIN071 := $(VENV071)/bin

.PHONY: demo demo-http demo-trl test lint typecheck unit test-verl071 explore bench clean

# The main job: GSM8K multi-turn rollouts through verl's agent loop on the embedded emulator, dumped and validated.
demo: $(VENV)/.rollout-installed
	$(BIN)/sandbox-emulator rollout --out rollouts

# The bare emulator alone: real programs over HTTP, then under injected faults (standard library client).
demo-http: $(VENV)/.demo-installed
	$(BIN)/python -m harness.demo

# TRL: a GRPO run on CPU (TRL's trainer, a tiny model built locally) scored in a pool of emulated Daytona sandboxes.
demo-trl: $(VENV)/.trl-installed
	$(BIN)/sandbox-emulator grpo --steps 50

test: $(VENV)/.test-installed lint typecheck unit test-verl071

lint: $(VENV)/.test-installed
	$(BIN)/ruff check emulator harness tests
	$(BIN)/ruff format --check emulator harness tests

typecheck: $(VENV)/.test-installed
	$(BIN)/mypy

unit: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q --durations=25 --ignore=tests/reference_v071

# The reference run: only tests/reference_v071, against verl 0.7.1's own SandboxFusionTool (docs/unit-plan.md).
test-verl071: $(VENV071)/.installed
	$(BIN071)/python -m pytest -q tests/reference_v071

# Hypothesis' random search, on purpose: the test files that use hypothesis under the `explore` profile (new examples
# each run; `make test` draws the same ones every run), the Ray limiter search at its full example count. A chaos
# search that breaks an invariant saves the schedule under fixtures/chaos/regressions/ (docs/user-guide.md).
HYPOTHESIS_TESTS = $(shell grep -rlE '^(from|import) hypothesis' tests --include='test_*.py' | sort)
CHAOS_RAY_EXAMPLES ?= 200

explore: $(VENV)/.test-installed
	CHAOS_RAY_EXAMPLES=$(CHAOS_RAY_EXAMPLES) $(BIN)/python -m pytest -q --hypothesis-profile=explore $(HYPOTHESIS_TESTS)

bench: $(VENV)/.test-installed
	$(BIN)/sandbox-emulator bench-throughput

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The bare emulator: FastAPI, uvicorn, pydantic, PyYAML.
$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The rollout needs verl, which needs torch: the CPU build 2.13.0 first, so no CUDA build is pulled in.
$(VENV)/.rollout-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[verl]'
	touch $@ $(VENV)/.demo-installed

# TRL needs torch too: the CPU build 2.13.0 first.
$(VENV)/.trl-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[trl,daytona]'
	touch $@ $(VENV)/.demo-installed

# Tests need verl, which needs torch: the CPU build 2.13.0 first, so no CUDA build is pulled in.
# The limiter tests start their own Debian redis-server on a free loopback port: install it when missing.
$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	command -v redis-server >/dev/null && command -v shellcheck >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq redis-server shellcheck >/dev/null)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,verl,daytona,bench,redis,ray,docs,trl,jupyter]'
	touch $@ $(VENV)/.demo-installed $(VENV)/.rollout-installed $(VENV)/.trl-installed

# verl 0.7.1 pins numpy<2 but not pyarrow, whose newest needs NumPy 2: pyarrow is pinned below 22.
$(VENV071)/.installed: pyproject.toml
	rm -rf $(VENV071)
	$(PYTHON) -m venv $(VENV071)
	$(BIN071)/python -m pip install --quiet --upgrade pip
	$(BIN071)/python -m pip install --quiet torch==2.13.0
	$(BIN071)/python -m pip install --quiet -e . pytest pytest-timeout hypothesis requests \
		'verl==0.7.1' ray cachetools 'numpy<2' 'pyarrow>=19,<22'
	touch $@

clean:
	rm -rf $(VENV) $(VENV071) build *.egg-info .mypy_cache .ruff_cache .hypothesis
