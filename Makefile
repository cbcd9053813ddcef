# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo compare test prereqs lint typecheck unit bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[all]'
	touch $(STAMP)

## demo: set up, then run the main job: a throwaway Airflow with CarmaExecutor on simulated
## 4xA100-40GB (SQLite), the demo DAG, live progress, a report and out/demo_timeline.png
demo: $(STAMP)
	$(BIN)/carma demo

## compare: every placement policy on the paper's trace, in the simulator (out/compare_t1.png)
compare: $(STAMP)
	mkdir -p out
	$(BIN)/carma compare --trace t1 --gpus 4xA100-40GB --plot out/compare_t1.png

## test: provide what the suite needs (prereqs), set up, then lint, type-check and run the whole test suite
## (what CI runs): the unit tests, then the end-to-end tests (see unit below)
test: prereqs $(STAMP) lint typecheck unit

## prereqs: Debian's chromium + chromedriver and PostgreSQL, Redis, RabbitMQ on loopback: installed or
## started when missing (as root or with passwordless sudo), else one line saying what to do (tools/test-prereqs)
prereqs:
	tools/test-prereqs

lint: $(STAMP)
	$(BIN)/ruff check carma_airflow tests bench dags
	$(BIN)/ruff format --check carma_airflow tests bench dags

typecheck: $(STAMP)
	$(BIN)/mypy

## unit: the unit tests in parallel, then the end-to-end tests (real Airflow: SQLite, PostgreSQL,
## Celery, Chromium) two files at a time, a deployment shared by the tests that can share it
## (tests/e2e/conftest.py); tools/test-suites.  `make unit SUITES_OVERLAP=1 E2E_WORKERS=3` runs
## them side by side (about 20 instead of 31 minutes on 2 cores, but load-sensitive tests failed
## there: docs/measured.md).
UNIT_WORKERS ?= 4
E2E_WORKERS  ?= 2
SUITES_OVERLAP ?= 0
unit: $(STAMP) prereqs
	BIN=$(BIN) UNIT_WORKERS=$(UNIT_WORKERS) E2E_WORKERS=$(E2E_WORKERS) SUITES_OVERLAP=$(SUITES_OVERLAP) tools/test-suites

## bench: the paper's table and the speed figures (prints; not part of the tests)
bench: $(STAMP)
	$(BIN)/python bench/paper_table.py
	$(BIN)/python bench/speed.py
	$(BIN)/python bench/dispatch.py

clean:
	rm -rf $(VENV) out .demo .pytest_cache .mypy_cache .ruff_cache
