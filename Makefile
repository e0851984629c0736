# Two entry points a newcomer needs: `make demo` and `make test`. Both set up .venv first.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: setup prerequisites demo test chromium test-fast bench clean

# What the README lists, checked before anything is built: one line naming what to install.
prerequisites:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { echo "make setup needs Python 3.11 or newer as $(PYTHON): apt-get install python3 python3-venv" >&2; exit 2; }
	@command -v cc >/dev/null || command -v gcc >/dev/null || { echo "make setup needs a C compiler for the compiled engine: apt-get install gcc" >&2; exit 2; }
	@command -v java >/dev/null || { echo "make setup needs Java 17 for Apache Kafka: apt-get install openjdk-17-jdk-headless" >&2; exit 2; }
	@command -v mvn >/dev/null || { echo "make setup needs Maven to fetch Apache Kafka: apt-get install maven" >&2; exit 2; }

# The engine and the pipeline's per-sample modules are compiled in place by the install
# (setup.py, app/engine_build.py), so editing one reinstalls: a stale extension would shadow
# the new source (the tests refuse to run on one).
$(VENV)/.installed: pyproject.toml setup.py app/engine_build.py $(wildcard app/engine/*.py app/intake/*.py app/pipeline/*.py) app/audit/summaries.py app/audit/request_items.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,audit,clients]'
	touch $@

# Apache Kafka (the dev stack's broker, jvm/kafka/pom.xml) from Maven Central, the Java client
# programs (jvm/clients: kafka-clients), the Kafka Streams anchor of the benchmarks
# (jvm/streams-anchor) and the broker plugin (jvm/broker-plugin, docs/broker-plugin.md), their
# unit tests run by the build; Maven checks the jars' checksums (-C). Nothing fetched or built
# is committed.
KAFKA_LIBS := jvm/kafka/target/libs
$(KAFKA_LIBS)/.fetched: jvm/pom.xml jvm/kafka/pom.xml jvm/clients/pom.xml jvm/streams-anchor/pom.xml \
		jvm/broker-plugin/pom.xml \
		$(shell find jvm/clients/src jvm/streams-anchor/src jvm/broker-plugin/src -name '*.java')
	@command -v mvn >/dev/null || { echo "make setup needs Maven to fetch Apache Kafka: apt-get install maven" >&2; exit 2; }
	mvn -q -B -C -f jvm/pom.xml package
	touch $@

setup: prerequisites $(VENV)/.installed $(KAFKA_LIBS)/.fetched

demo: setup   ## local Kafka, a worker, two gateways, real clients, live view (Ctrl-C stops all)
	$(BIN)/quota-streams demo

test: prerequisites chromium setup   ## the whole suite, as CI runs it
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=25

chromium:   # checked before the setup: the console's browser test drives it
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { echo "make test needs Chromium for the console's browser test: apt-get install chromium" >&2; exit 2; }

test-fast: setup   ## unit tests only (no Kafka, no Spark)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

bench: setup
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_subscriber.py
	$(BIN)/python bench/bench_pipeline.py

# Build products (the venv, mypyc's build and cache directories, the compiled extensions beside
# their sources and the group library at the top, the install's egg-info, bytecode, Maven's
# targets), what runs leave in the tree, and the test and lint caches.
clean:
	rm -rf $(VENV) build .mypy_cache *.egg-info jvm/*/target \
		state out sim-results audit-out spark-warehouse metastore_db derby.log \
		.pytest_cache .hypothesis .ruff_cache
	find . -path ./.git -prune -o -name "*.so" -type f -print -exec rm -f {} +
	find . -path ./.git -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
