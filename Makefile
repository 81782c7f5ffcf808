# Everything runs from the project's own virtualenv; `make run` and `make test` create it on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DATA := $(CURDIR)/data

export NAKODO_DATABASE ?= $(DATA)/nakodo.duckdb
export NAKODO_OVERTURE_ROOT ?= $(DATA)/overture
export NAKODO_OVERTURE_RELEASE ?=
export DAGSTER_HOME ?= $(DATA)/dagster_home

.PHONY: run test lint format bench clean

$(BIN)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@

run: $(BIN)/.installed
	$(BIN)/nakodo demo
	mkdir -p $(DAGSTER_HOME)
	ln -sf $(CURDIR)/dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -w workspace.yaml

test: $(BIN)/.installed
	$(BIN)/ruff check nakodo_dagster tests bench scripts
	$(BIN)/ruff format --check nakodo_dagster tests bench scripts
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
