# Two commands from a fresh clone: `make run` serves Loop, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8095

.PHONY: run test lint format migrate

# The stamp is rebuilt whenever a requirements file changes, so a second `make` installs nothing.
$(VENV)/.installed: requirements.txt requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $@

migrate: $(VENV)/.installed
	$(BIN)/python manage.py migrate --noinput

run: migrate
	@echo
	@echo "Loop is starting on http://$(HOST):$(PORT)/  (Ctrl-C stops it; data stays in var/)"
	@echo "No login yet? Create one with:  $(BIN)/python manage.py createsuperuser"
	@echo "Operators' admin: http://$(HOST):$(PORT)/admin/"
	@echo
	$(BIN)/daphne --bind $(HOST) --port $(PORT) loopsite.asgi:application

test: $(VENV)/.installed
	$(BIN)/pytest

lint: $(VENV)/.installed
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: $(VENV)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
