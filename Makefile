# The two set-up commands (README): `make demo` and `make test`. Both build .venv from the project's
# own files first (pyproject.toml + the tested pins in constraints.txt).
PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed

.PHONY: demo test test-cluster test-unit lint venv bytecode bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --upgrade pip
	$(VENV)/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[spark,server,cipher,test]'
	touch $(STAMP)

venv: $(STAMP)

# Bytecode written once: the demo's and the suite's many processes (CLI runs, devices, `serve`, Spark's Python
# workers) then read it, also where PYTHONDONTWRITEBYTECODE is set and no process would write it.
bytecode: $(STAMP)
	$(VENV)/bin/python -m compileall -q src tests bench examples > /dev/null

demo: bytecode
	$(VENV)/bin/sparksync demo --dir demo-run

# The gates first (ruff, mypy, the import layers: seconds), then the whole suite in two processes (pytest-xdist;
# a module and its topology stay in one process), the slowest tests listed at the end; beside it, the tests that
# run on a Spark standalone cluster of their own (test-cluster: JVMs that mostly wait), printed after it
# (scripts/run-suite).
test: lint bytecode
	scripts/ensure-services
	scripts/run-suite

# The Spark standalone cluster's tests alone (run beside the suite by `make test`): a master, two workers with their own
# working directories, the executors' Python shipped by `sparksync cluster-pack`; setup, a merge with a worker
# killed under it, a validation. ~2 min.
test-cluster: bytecode
	$(VENV)/bin/python -m pytest -m cluster tests/cluster --durations=5

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Pure logic: no database server, no JVM (tests/unit/conftest.py refuses both). Seconds.
test-unit: $(STAMP)
	$(VENV)/bin/python -m pytest tests/unit tests/test_docs.py

# Every benchmark (minutes), each writing its tables and chart to docs/benchmarks/, then docs/benchmarks.md.
bench: $(STAMP)
	scripts/ensure-services
	$(VENV)/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[bench]'
	$(VENV)/bin/python bench/tracking_overhead.py
	$(VENV)/bin/python bench/tracking_floor.py
	$(VENV)/bin/python bench/merge_throughput.py --pg
	$(VENV)/bin/python bench/transactional_vs_pg_logical.py
	$(VENV)/bin/python bench/tracer_latency.py
	$(VENV)/bin/python bench/partitions.py
	$(VENV)/bin/python bench/cleanup.py
	$(VENV)/bin/python bench/web_sync.py
	$(VENV)/bin/python bench/device_sync.py
	$(VENV)/bin/python bench/device_download.py
	$(VENV)/bin/python bench/small_rounds.py
	$(VENV)/bin/python bench/service_rounds.py
	$(VENV)/bin/python bench/scale.py
	$(VENV)/bin/python bench/rows_scale.py
	$(VENV)/bin/python bench/results.py

clean:
	rm -rf $(VENV) demo-run .pytest_cache
