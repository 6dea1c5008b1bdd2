# Two entry points that work on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The exact torch first, PyPI's build: a looser requirement lets pip pick another
	# version to suit an extra, and the job library's tests ran with this one.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

.PHONY: install demo test lint bench services controlplane
install: $(BIN)/.installed

# PostgreSQL (127.0.0.1:5432, database test) and Redis (127.0.0.1:6379), started when
# nothing answers there (installed from Debian's packages when root).
services:
	bash .ci/services.sh

# etcd, kube-apiserver, kube-controller-manager and kube-scheduler from Go modules into .cache/controlplane/bin
# (docs/controlplane.md); a no-op while they are up to date.
controlplane:
	bash controlplane/build.sh

demo: $(BIN)/.installed
	$(BIN)/gpuflow demo --out out/demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint services controlplane
	$(BIN)/pytest

bench: $(BIN)/.installed
	$(BIN)/python bench/replay.py
