# The two commands of the README: `make demo` and `make test`. Both bootstrap .venv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
export DAGSTER_HOME ?= $(CURDIR)/var/dagster_home

.PHONY: demo test test-stack bench-stack ui lint docs install jars check-java stack-deps browser-deps jvm-archive clean

install: $(STAMP) jars

# The jars pinned with SHA-256s in deploy/spark-jars.txt (38 jars, 27.7 MB): Spark's S3A
# connector (hadoop-aws, the AWS SDK v2 modules it needs, spark-hadoop-cloud) and the ledger
# database's JDBC drivers (SQLite, PostgreSQL) for `backfill-assets sql`. Fetched from Maven
# Central with Maven into the virtualenv (backfill_assets/settings.py: BACKFILL_SPARK_JARS);
# remade only when the list changes, so a second `make` downloads nothing.
JARS       := $(VENV)/share/backfill_assets/jars
JARS_STAMP := $(JARS)/.pinned-$(shell cat deploy/spark-jars.txt | cksum | cut -d' ' -f1)
jars: $(JARS_STAMP)

$(JARS_STAMP): deploy/spark-jars.txt | $(STAMP)
	@./deploy/spark-jars.sh $(JARS)
	@rm -f $(JARS)/.pinned-*
	@touch $@

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (found " + sys.version.split()[0] + ")")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

check-java:
	@./deploy/check-java.sh

# The Spark driver's class-data-sharing archive: every later JVM starts in about half the
# time (backfill_assets_dev/jvm_archive.py). Made once, remade when Java changes.
jvm-archive: install check-java
	@$(BIN)/python -c 'import sys; from backfill_assets_dev.jvm_archive import main; sys.exit(main())'

# Postgres + its JDBC driver for the production stack test (apt-get when root and missing).
stack-deps:
	@./deploy/stack-deps.sh

# Chromium for the browser tests (apt-get when root and missing; Playwright drives it).
browser-deps:
	@./deploy/browser-deps.sh

# The demo's day is the partitions' span in the demo and the UI (backfill_assets/core/hours.py):
# the catalog and the launch dialog show its 24 hours. Set them to your data's hours.
demo ui: export BACKFILL_PARTITIONS_START ?= 2026-11-20T00
demo ui: export BACKFILL_PARTITIONS_END ?= 2026-11-21T00

demo: install check-java jvm-archive
	$(BIN)/backfill-assets demo

# The whole suite, the production stack (backfill_assets_tests/stack) and the browser tests
# (backfill_assets_tests/ui) included, in six pytest-xdist workers: the tests that use a
# Spark session in two (a session each, about one core each), the server- and process-bound
# ones (mostly waiting on daemons and run processes) spread over the others, a module at a
# time, the longest first (backfill_assets_tests/conftest.py). TEST_WORKERS=0 runs
# everything in one process.
TEST_WORKERS ?= 6
test: install check-java stack-deps browser-deps jvm-archive
	$(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder) $(PYTEST_ARGS)

# Only the production stack on this machine: Postgres, Hive metastore, Spark master and
# worker, S3 (moto), Dagster on Postgres with its daemon; all on 127.0.0.1 (docs/deployment.md).
test-stack: install check-java stack-deps jvm-archive
	$(BIN)/python -m pytest backfill_assets_tests/stack $(PYTEST_ARGS)

# Scale on the production stack (docs/benchmarks.md): the same release with one and two
# executor cores, backups and warehouse on S3 and on local disk, its servers on 127.0.0.1
# stopped by PID at the end. BENCH_ARGS: --payloads, --hours, --clients, --rounds, --keep.
bench-stack: install check-java stack-deps jvm-archive
	$(BIN)/python -m backfill_assets_dev.stack.bench_scale $(BENCH_ARGS)

ui: install check-java jvm-archive
	$(BIN)/python -c 'from backfill_assets.release.instance import prepare_dagster_home as p; from backfill_assets.settings import Settings as S; print("DAGSTER_HOME:", p(S.from_env()))'
	$(BIN)/python -m backfill_assets.core.spark.driver_host --run $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p $(or $(PORT),3000)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# docs/cli.md from the argument parser (backfill_assets_tests/cli/test_cli_docs.py holds them equal).
docs: install
	$(BIN)/python -m backfill_assets.cli.docs > docs/cli.md

clean:
	rm -rf var
