# Two commands: `make demo` and `make test`. Each sets up what it needs on a fresh clone:
# a .venv (python3 -m venv) with the project installed editable, reinstalled only when
# pyproject.toml changed since the last install.
#
#   make test ARGS="-k store -x"     extra pytest arguments

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.sagacity-installed
ARGS   ?=

.DEFAULT_GOAL := help

.PHONY: help demo test

help:
	@echo "make demo   run the Order saga demo (embedded Temporal + Postgres, nothing to set up)"
	@echo "make test   ruff, mypy and pytest (ARGS=\"...\" passes arguments to pytest)"

demo: $(STAMP)
	$(BIN)/sagacity demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest $(ARGS)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar off -e '.[dev]'
	@touch $@
