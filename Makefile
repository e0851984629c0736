# Two entry points a newcomer needs: `make demo` and `make test`. Both set up .venv first.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: setup demo test test-fast bench clean

# The engine and the pipeline's per-sample modules are compiled in place by the install
# (setup.py, app/engine_build.py), so editing one reinstalls: a stale extension would shadow
# the new source (the tests refuse to run on one).
$(VENV)/.installed: pyproject.toml setup.py app/engine_build.py $(wildcard app/engine/*.py app/intake/*.py app/pipeline/*.py) app/audit/summaries.py app/audit/request_items.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,audit,clients]'
	touch $@

setup: $(VENV)/.installed

demo: setup   ## embedded broker, workers, simulated cluster, live view (Ctrl-C stops all)
	$(BIN)/quota-streams demo

test: setup   ## the whole suite, as CI runs it
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-fast: setup   ## unit tests only (no broker, no JVM)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

bench: setup
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_subscriber.py
	$(BIN)/python bench/bench_pipeline.py

clean:
	rm -rf $(VENV) state out sim-results audit-out build *.so app/engine/*.so app/pipeline/*.so
