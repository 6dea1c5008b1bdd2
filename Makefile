# Two entry points that work on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The exact torch first, PyPI's build: a looser requirement lets pip pick another
	# version to suit an extra, and the job library's tests ran with this one.
	# torch's CUDA wheels are large: an interrupted download resumes (pip's default
	# gives up after 5 resumes, which a CI run once ran out of on a 200 MB wheel).
	$(BIN)/pip install -q --resume-retries 50 torch==2.13.0
	$(BIN)/pip install -q --resume-retries 50 -e '.[dev]'
	touch $@

.PHONY: install demo test lint typecheck bench services controlplane
install: $(BIN)/.installed

# The dashboard's TypeScript, pinned in web/package-lock.json (Node.js and npm from
# Debian's packages; .ci/run installs them).
web/node_modules/.installed: web/package-lock.json
	cd web && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The dashboard's JSDoc types, checked by tsc (web/tsconfig.json: checkJs, strict).
typecheck: web/node_modules/.installed
	cd web && npm run --silent typecheck

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

lint: $(BIN)/.installed typecheck
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint services controlplane
	$(BIN)/pytest --durations=25

bench: $(BIN)/.installed
	$(BIN)/python bench/replay.py
