# The README's commands: `make demo`, `make test` and `make test-fast`. Each sets everything up first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0
TRITON_PIN ?= triton==3.6.0
# The transformers integration's tests and the demo (ircore[transformers]); kernels for its mapping.
TRANSFORMERS_PIN ?= transformers==5.23.0
KERNELS_PIN ?= kernels==0.17.2
# accelerate: the transformers tests offload a patched model with it (cpu_offload after apply)
ACCELERATE_PIN ?= accelerate==1.16.0
# transformers 5.23 accepts only kernels >= 0.18.2 (not on the index); 5.22.2 accepts 0.17.2. A test
# runs the kernels mapping with it, from this folder (not on the venv's path otherwise).
COMPAT_TRANSFORMERS ?= transformers==5.22.2
COMPAT_DIR := $(VENV)/compat/transformers-5.22.2
PROVIDERS := $(wildcard providers/*/pyproject.toml)
STAMP := $(VENV)/.ircore-installed

.PHONY: setup demo test test-fast lint bench dist clean

$(STAMP): pyproject.toml setup.py $(wildcard ircore/csrc/*) $(PROVIDERS) Makefile
	@echo "==> creating $(VENV) and installing $(TORCH_PIN), ircore and its providers"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q $(TORCH_PIN) 'numpy<2.4' ninja
	@# Triton's interpreter runs the triton provider's kernels on the CPU in tests
	@# (numpy<2.4: triton 3.6's interpreter breaks on 2.4, triton-lang/triton#9171).
	$(BIN)/python -m pip install -q $(TRITON_PIN)
	@# --no-build-isolation: setup.py compiles ircore's call-signature helper against this torch
	$(BIN)/python -m pip install -q --no-build-isolation -e '.[dev,transformers]' '$(TRANSFORMERS_PIN)' '$(KERNELS_PIN)' '$(ACCELERATE_PIN)'
	$(BIN)/python -m pip install -q --no-deps --upgrade --target $(COMPAT_DIR) '$(COMPAT_TRANSFORMERS)'
	@for p in $(dir $(PROVIDERS)); do \
		echo "==> installing provider $$p"; \
		$(BIN)/python -m pip install -q --no-build-isolation --no-deps -e $$p || exit 1; \
	done
	@touch $@

setup: $(STAMP)

demo: setup
	$(BIN)/python examples/demo.py

# `make test` runs every test (the CI command; ~700 s of CPU on the 2-core box). `make test-fast`
# leaves out those marked slow (pytest -m "not slow"; markers declared in each pyproject.toml):
# fresh interpreters, Inductor compiles, gloo ranks, wheel and kernel builds, Triton's interpreter
# beyond tiny cases; ~100 s of CPU, under 2 minutes on an idle 2-core box. (The GPU pass,
# benchmarks/gpu_run.sh tests and tests-triton, runs -m "gpu or not slow".) Pytest runs for
# the core and one per provider: the providers' test folders share file names, the triton tests must set
# TRITON_INTERPRET before triton is first imported, and the xpu tests define the torch namespace
# _C that only one library per process may own.
# Two lanes, one per core of the CI box (a pytest keeps about one core busy: tiny tensors, fresh
# interpreters, pip, one Inductor compile thread). The foreground lane runs the core suite but for
# SIDE_CORE_TESTS; the side lane runs mypy, the providers' suites one after another, then
# SIDE_CORE_TESTS (the loader's tests over pip-installed fixture providers, each scenario a fresh
# interpreter: they need nothing the other core tests set up), so that the lanes take about as long.
# The side lane's output is printed when the core suite ends; the target fails if either lane
# failed. The lanes share nothing that one writes while the other reads but the Inductor cache
# (safe across processes): tests that pip-install a project build it from a copy of its sources
# (tests/provider_env.py), never in the folder the release tests build sdists in.
SIDE_CORE_TESTS := tests/test_plugins.py tests/test_isolation.py tests/test_declarative.py tests/test_op_libraries.py
test: PYTEST_MARKS :=
test-fast: PYTEST_MARKS := -m "not slow"
test test-fast: setup
	$(BIN)/python -m ruff check .
	@side=$$(mktemp); \
	( $(BIN)/python -m mypy && \
	  for p in $(dir $(PROVIDERS)); do \
		echo "==> testing provider $$p"; \
		$(BIN)/python -m pytest -q $(PYTEST_MARKS) $${p}tests || exit 1; \
	  done && \
	  echo "==> testing the core's loader tests: $(SIDE_CORE_TESTS)" && \
	  $(BIN)/python -m pytest -q $(PYTEST_MARKS) $(SIDE_CORE_TESTS) ) > $$side 2>&1 & pid=$$!; \
	echo "==> the core suite; beside it, mypy, the providers' suites and the core's loader tests (output below)"; \
	$(BIN)/python -m pytest -q $(PYTEST_MARKS) $(addprefix --ignore=,$(SIDE_CORE_TESTS)) tests; core=$$?; \
	wait $$pid; rest=$$?; \
	echo "==> mypy, the providers' suites and the core's loader tests ($$( [ $$rest -eq 0 ] && echo passed || echo FAILED )):"; \
	cat $$side; rm -f $$side; \
	[ $$core -eq 0 ] && [ $$rest -eq 0 ]

lint: setup
	$(BIN)/python -m ruff check .
	$(BIN)/python -m mypy

bench: setup
	$(BIN)/python benchmarks/dispatch_overhead.py

# Release artifacts: an sdist and a pure-Python wheel for the core and every providers/*/ project,
# into dist/, then the metadata check (tools/release.py says what it requires).
dist: setup
	rm -rf dist
	$(BIN)/python tools/release.py build --out dist

clean:
	rm -rf $(VENV) build dist *.egg-info
