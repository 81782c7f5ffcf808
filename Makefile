# Everything runs from the project's own virtualenv; `make run` and `make test` create it on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# dg runs in the project's own virtualenv: named, so that it does not warn that none is active.
DG := VIRTUAL_ENV=$(CURDIR)/$(VENV) $(BIN)/dg
DATA := $(CURDIR)/data

export NAKODO_DATABASE ?= $(DATA)/nakodo.duckdb
export NAKODO_OVERTURE_ROOT ?= $(DATA)/overture
export NAKODO_OVERTURE_RELEASE ?=
export NAKODO_OVERTURE_INDEX ?=
export DAGSTER_HOME ?= $(DATA)/dagster_home

.PHONY: run test lint format bench clean

$(BIN)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@

# The embedded default's Dagster instance (two imports at a time, telemetry off); a DAGSTER_HOME that already
# has its own dagster.yaml keeps it.
$(DAGSTER_HOME)/dagster.yaml:
	mkdir -p $(DAGSTER_HOME)
	ln -sf $(CURDIR)/nakodo_dagster/data/dagster.yaml $@

run: $(BIN)/.installed $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/nakodo demo
	$(DG) dev

test: $(BIN)/.installed $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/ruff check nakodo_dagster tests bench scripts
	$(BIN)/ruff format --check nakodo_dagster tests bench scripts
	$(DG) check defs
	$(BIN)/pytest

lint: $(BIN)/.installed
	$(BIN)/ruff check nakodo_dagster tests bench scripts
	$(BIN)/ruff format --check nakodo_dagster tests bench scripts

format: $(BIN)/.installed
	$(BIN)/ruff check --fix nakodo_dagster tests bench scripts
	$(BIN)/ruff format nakodo_dagster tests bench scripts

bench: $(BIN)/.installed
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(DATA)
