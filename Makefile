# Two commands: `make demo` and `make test`. Each sets up what it needs on a fresh clone:
# a .venv (python3 -m venv) with the project installed editable, reinstalled only when
# pyproject.toml changed since the last install. `make test` also makes sure Debian's Chromium is at
# /usr/bin/chromium for the browser tests: apt-get installs it when run as root; otherwise one line
# says how, and the browser tests skip.
#
#   make test ARGS="-k store -x"     extra pytest arguments (one pytest run, chaos tests included)

PYTHON   ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.sagacity-installed
CHROMIUM := /usr/bin/chromium
CHROMIUM_STAMP := $(VENV)/.chromium-installed
ARGS     ?=

.DEFAULT_GOAL := help

.PHONY: help demo test

help:
	@echo "make demo   run the Order saga demo (embedded Temporal + Postgres, nothing to set up)"
	@echo "make test   ruff, mypy and pytest (ARGS=\"...\" passes arguments to pytest)"

demo: $(STAMP)
	$(BIN)/sagacity demo

# With no ARGS, tests/chaos runs in a second pytest beside the rest: its tests mostly wait on
# purpose (Postgres outages, killed workers, drains), so both take about as long as the rest
# alone. Its output follows the rest's; either failing fails the target.
test: $(STAMP) $(CHROMIUM_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
ifeq ($(strip $(ARGS)),)
	@chaos_log=$$(mktemp); \
	$(BIN)/pytest tests/chaos -p no:cacheprovider >"$$chaos_log" 2>&1 & chaos_pid=$$!; \
	trap 'kill $$chaos_pid 2>/dev/null' INT TERM; \
	$(BIN)/pytest --ignore=tests/chaos; rest=$$?; \
	wait $$chaos_pid; chaos=$$?; \
	echo "==== tests/chaos, run beside the rest ===="; cat "$$chaos_log"; rm -f "$$chaos_log"; \
	exit $$(( rest ? rest : chaos ))
else
	$(BIN)/pytest $(ARGS)
endif

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar off -e '.[dev]'
	@touch $@

# Stamped only once Chromium is there: without root it is checked (and the line printed) each run.
$(CHROMIUM_STAMP): | $(BIN)/python
	@if [ ! -x $(CHROMIUM) ] && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's chromium for the browser tests (apt-get)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && \
		apt-get install -y -qq --no-install-recommends chromium >/dev/null || exit 1; \
	fi; \
	if [ -x $(CHROMIUM) ]; then touch $@; \
	else echo "browser tests will skip: no $(CHROMIUM); install it as root with: apt-get install --no-install-recommends chromium"; fi
