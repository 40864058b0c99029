# One entry point for users and CI alike: `make test` is what .ci/run calls.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STACK := deploy/local/stack.sh
CONFIG ?= config/worker.example.yaml

.PHONY: venv pushgateway stack-up stack-down stack-status test unit integration lint run demo bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $@

venv: $(VENV)/.installed

# Debian's Prometheus Pushgateway for the nightly jobs' push test; installed only when missing.
pushgateway:
	@command -v prometheus-pushgateway >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-pushgateway; }

stack-up: venv
	bash $(STACK) up

stack-down:
	bash $(STACK) down

stack-status:
	bash $(STACK) status

lint: venv
	$(VENV)/bin/ruff check worker tests bench
	$(VENV)/bin/mypy

unit: venv
	$(VENV)/bin/pytest -q tests/unit

# The whole suite (unit + integration) against the real local stack, started here if it is not up.
test: venv pushgateway stack-up
	$(VENV)/bin/ruff check worker tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q -rfEs tests

run: stack-up
	$(VENV)/bin/ledger-deletion-worker run --config $(CONFIG)

# A newcomer's tour on the local stack: real orphans, scan, the worker deletes them (deploy/local/demo.sh).
demo: venv stack-up
	bash deploy/local/demo.sh

# BENCH_NIGHTLY_ARGS=--quick: 5k dead letters / 20k ledgers instead of 100k / 200k (bench/nightly.py).
bench: venv stack-up
	$(PY) -m bench
	$(PY) -m bench.nightly $(BENCH_NIGHTLY_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
