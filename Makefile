# Online Softmax: from a recurrence to the kernel.
#
#   make book      set up (once), then build the book into _build/html, executing every chapter
#   make test      set up, CPU test tier (pytest -m "not gpu"), build the book, browser check
#   make gpu-test  the GPU tier (pytest -m gpu), on a machine with a CUDA GPU; it fails where CuPy
#                  sees none (ONLINESOFTMAX_ALLOW_NO_GPU=1: skip the GPU tests instead)
#
# Set-up is done once and redone only when its inputs change: .venv/ from requirements.txt
# (stamp .venv/.requirements-installed), node_modules/ from package-lock.json (npm ci).
# Targets starting with "_" are steps of the above, not entry points.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := book

PYTHON ?= python3
CHROMIUM ?= /usr/bin/chromium
VENV := .venv
VENV_BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.requirements-installed
NODE_STAMP := node_modules/.npm-ci-done

# The venv's tools first on PATH, so the notebook kernel ("python3") is the venv's python.
RUN := PATH="$(CURDIR)/$(VENV_BIN):$$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1

.PHONY: book test gpu-test _setup _chromium _pytest-cpu _book-build _browser-check

book: _setup
	@$(MAKE) --no-print-directory _book-build

test: _setup _chromium
	@status=0; \
	$(MAKE) --no-print-directory _pytest-cpu || status=1; \
	if $(MAKE) --no-print-directory _book-build; then \
	  $(MAKE) --no-print-directory _browser-check || status=1; \
	else \
	  status=1; echo "make test: the book build failed, so the browser check did not run"; \
	fi; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (see above)"; fi; \
	exit $$status

gpu-test: $(PY_STAMP)
	$(RUN) $(VENV_BIN)/python -m pytest -m gpu

# --- set-up -----------------------------------------------------------------------------------

_setup: $(PY_STAMP) $(NODE_STAMP)

$(PY_STAMP): requirements.txt pyproject.toml
	@echo "--- Python environment: $(VENV) from requirements.txt"
	test -x $(VENV_BIN)/python || $(PYTHON) -m venv $(VENV)
	$(RUN) $(VENV_BIN)/python -m pip install -r requirements.txt
	touch $@

$(NODE_STAMP): package.json package-lock.json
	@echo "--- Front-end assets: npm ci (MathJax, require.js, widget manager)"
	npm ci --ignore-scripts --no-audit --no-fund
	touch $@

# Debian's chromium for the browser check (Playwright never downloads a browser here).
_chromium:
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "--- Installing Debian chromium"; \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	  else \
	    echo "$(CHROMIUM) is missing: install Debian's chromium (apt-get install chromium) or set CHROMIUM=..."; \
	    exit 1; \
	  fi; \
	fi

# --- steps ------------------------------------------------------------------------------------

# pytest exits 5 when it collects no test; tolerated (with a warning) while the suite is empty.
_pytest-cpu: _setup
	@echo "--- CPU test tier: pytest -m 'not gpu'"
	@set +e; $(RUN) $(VENV_BIN)/python -m pytest -m "not gpu"; status=$$?; set -e; \
	if [ $$status -eq 5 ]; then echo "WARNING: pytest collected no tests (exit 5)"; status=0; fi; \
	exit $$status

# Strict: any warning or failing cell fails the build (-W --keep-going; raise_on_error and
# execute_notebooks: force in _config.yml). --all re-reads every page, so every chapter
# executes on every build and warnings from unchanged pages are not skipped.
_book-build: _setup
	@echo "--- Building the book: jupyter-book build (strict, every chapter executed)"
	$(RUN) $(VENV_BIN)/jupyter-book build --warningiserror --keep-going --all .

_browser-check: _setup
	@echo "--- Browser check: every page in headless chromium, offline"
	$(RUN) CHROMIUM="$(CHROMIUM)" $(VENV_BIN)/python tests/browser_check.py
