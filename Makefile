# Everything runs from the project's own virtualenv; `make run` and `make test` create it on first use. Every
# setting has its default in code (nakodo_dagster/settings.py): the variables below only make them explicit.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# dg runs in the project's own virtualenv: named, so that it does not warn that none is active.
DG := VIRTUAL_ENV=$(CURDIR)/$(VENV) $(BIN)/dg
PORT ?= 3000
DATA := $(CURDIR)/data

export NAKODO_DATABASE ?= $(DATA)/nakodo.duckdb
export NAKODO_OVERTURE_ROOT ?= $(DATA)/overture
export NAKODO_OVERTURE_RELEASE ?=
export NAKODO_OVERTURE_INDEX ?=
export DAGSTER_HOME ?= $(DATA)/dagster_home

.PHONY: run test test-long test-dagster-latest lint format bench clean

$(BIN)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# pyproject's package-dir makes the editable install a .pth file for the project folder: no import hook, no
	# warning, and no reliance on setuptools' transitional compat mode.
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@

# The embedded default's Dagster instance (two imports at a time, telemetry off); a DAGSTER_HOME that already
# has its own dagster.yaml keeps it.
$(DAGSTER_HOME)/dagster.yaml:
	mkdir -p $(DAGSTER_HOME)
	ln -sf $(CURDIR)/nakodo_dagster/data/dagster.yaml $@

# workspace.yaml names the code location; `dg dev` takes no workspace file, so Dagster's own `dagster dev` serves
# it (its "superseded" notice, about that, is the one warning left out). Warnings and errors only: the runs' event
# stream is in the UI. exec: make hands a SIGTERM to dagster dev, which stops the webserver, the daemon, the code
# server and the runs it started; nakodo_dagster.interruptible makes sure it hears it, however make was started.
# `nakodo dagster-home` creates Dagster's storage (or migrates it after a Dagster upgrade) before they open it.
run: $(BIN)/.installed $(DAGSTER_HOME)/dagster.yaml
	@$(BIN)/nakodo demo
	@$(BIN)/nakodo dagster-home
	@echo "Dagster UI on http://127.0.0.1:$(PORT) (import_sensor, search_sensor: imports two at a time, then searches); Ctrl-C stops everything."
	@PYTHONWARNINGS='ignore:Function `dev_command` is superseded:FutureWarning' exec $(BIN)/python -m nakodo_dagster.interruptible $(BIN)/dagster dev -w workspace.yaml -p $(PORT) --log-level warning

# One pytest worker a core, each taking the other's queued tests when it runs dry (whole files per worker left one
# worker alone on the slowest files for the last minutes).
test: $(BIN)/.installed $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/ruff check nakodo_dagster tests bench scripts
	$(BIN)/ruff format --check nakodo_dagster tests bench scripts
	$(DG) check defs
	$(BIN)/pytest -n auto --dist worksteal -m "not faults and not long"

# The tests that start a daemon, a fleet or a soak of their own, and those that inject faults: minutes each, so one
# at a time. CI runs both targets.
test-long: $(BIN)/.installed $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/pytest -m "faults or long"

# Is an upgrade safe? The Dagster-level tests on the newest Dagster 1.13 whose packages install together, in a
# scratch virtualenv (the rest at the lock's versions); prints the Dagster versions it installed and the newest out.
test-dagster-latest:
	$(PYTHON) scripts/test_dagster_latest.py

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
