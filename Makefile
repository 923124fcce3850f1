# Online Softmax: from a recurrence to the kernel.
#
#   make help      list the entry points
#   make book      set up (once), then build the book into _build/html (the default goal)
#   make test      set up, CPU test tier (pytest -m "not gpu"), build the book, browser check
#   make serve     serve _build/html on http://127.0.0.1:$(PORT)/ (python -m http.server)
#   make lab       JupyterLab from the venv; chapters/*.md open as notebooks through jupytext
#   make gpu-test  the GPU tier (pytest -m gpu), on a machine with a CUDA GPU; it fails where CuPy
#                  sees none (ONLINESOFTMAX_ALLOW_NO_GPU=1: skip the GPU tests instead)
#   make torch-cpu torch's CPU wheel into .venv/torch-cpu (not on the venv's path: the chapters never
#                  see it), for the two-process gloo test of onlinesoftmax.distributed; `make test` runs it
#   make clean     remove _build/, build/ and the jupyter cache (keeps .venv/ and node_modules/)
#   make distclean clean, and remove .venv/ and node_modules/ too
#
# Execution: under CI=true (and `make test`) every chapter is executed on every build
# (execute_notebooks: force in _config.yml). A local `make book` uses jupyter-cache instead: it
# re-executes only the chapters whose code cells changed (jupyter-cache keys on cell source, so
# after editing only a kernel .cu or the package, use `make book FORCE=1`).
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
# torch for the CPU tier's two-process test (tests/test_distributed_ranks.py), kept outside the venv's
# site-packages so that no chapter or other test sees torch; 2.13.0 is the CPU build pip finds here.
TORCH_CPU := $(VENV)/torch-cpu
TORCH_STAMP := $(TORCH_CPU)/.installed
TORCH_VERSION ?= 2.13.0
NODE_STAMP := node_modules/.npm-ci-done
PORT ?= 8000
LAB_PORT ?= 8888

# force: execute every chapter (CI, `make test`, FORCE=1); cache: only chapters whose cells changed.
ifneq ($(filter true 1 yes,$(CI) $(FORCE)),)
EXECUTE ?= force
else
EXECUTE ?= cache
endif
# The cache build reads a copy of _config.yml with execute_notebooks: cache (jupyter-book 1.x has
# no command-line override); the copy names _ext/ by absolute path, since paths in a config file
# resolve against the file's folder.
CACHE_CONFIG := _build/.config-cache.yml
FORCE_CACHE := _build/.jupyter_cache_force
BROWSER_PROCESSES ?= 2     # the browser check's processes (one Chromium each), pages split between them
FORCE_CONFIG := _build/.config-force.yml

# The venv's tools first on PATH, so the notebook kernel ("python3") is the venv's python.
# One math-library thread a process: the tests and the book's pages run as several processes, one
# a core, and NumPy's OpenBLAS and torch each starting a thread a core besides made the CPU tier's
# NumPy- and torch-heavy files take twice as long (their threads spin while waiting for work).
# MATH_THREADS=<n> (or empty) changes it.
MATH_THREADS ?= 1
RUN := PATH="$(CURDIR)/$(VENV_BIN):$$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1 \
  $(if $(MATH_THREADS),OPENBLAS_NUM_THREADS=$(MATH_THREADS) OMP_NUM_THREADS=$(MATH_THREADS) MKL_NUM_THREADS=$(MATH_THREADS))

.PHONY: help book test test-quick check-data gpu-test torch-cpu serve lab clean distclean _setup _chromium _pytest-cpu _book-build _browser-check

help:
	@echo "Online Softmax: from a recurrence to the kernel"
	@echo ""
	@echo "  make book       set up .venv/ and node_modules/ (once), build the book into _build/html"
	@echo "                  (re-executes only changed chapters; FORCE=1 or CI=true: every chapter)"
	@echo "  make test       CPU tests (pytest -m 'not gpu'), the strict book build, the browser check"
	@echo "  make test-quick the quick CPU tier (about a minute): references, models, API, graders, data,"
	@echo "                  one kernel build per family (no emulator sweeps, no book)"
	@echo "  make check-data list the recorded suites a chapter cites whose kernel sources changed since they"
	@echo "                  were recorded; fails if any (the CPU tier runs it: tests/test_data_check.py)"
	@echo "  make serve      serve the built book on http://127.0.0.1:$(PORT)/ (PORT=...)"
	@echo "  make lab        JupyterLab with the chapters as notebooks (installs jupyterlab on first use)"
	@echo "  make gpu-test   the GPU test tier (pytest -m gpu) on a machine with a CUDA GPU"
	@echo "  make torch-cpu  torch's CPU wheel into .venv/torch-cpu, for the two-process gloo test (make test does it)"
	@echo "  make clean      remove _build/, build/ and the jupyter cache (keeps .venv/, node_modules/)"
	@echo "  make distclean  clean, and remove .venv/ and node_modules/"
	@echo "  make help       this list"

book: _setup
	@$(MAKE) --no-print-directory _book-build

# Ends with one line of each part's wall time (what the README's timings quote).
test: _setup _chromium $(TORCH_STAMP)
	@status=0; t0=$$(date +%s); \
	$(MAKE) --no-print-directory _pytest-cpu || status=1; \
	t1=$$(date +%s); browser="did not run"; \
	if $(MAKE) --no-print-directory _book-build EXECUTE=force; then \
	  t2=$$(date +%s); \
	  $(MAKE) --no-print-directory _browser-check || status=1; \
	  browser="$$(( $$(date +%s) - t2 )) s"; \
	else \
	  t2=$$(date +%s); status=1; echo "make test: the book build failed, so the browser check did not run"; \
	fi; \
	echo "make test: CPU tier $$(( t1 - t0 )) s, book build $$(( t2 - t1 )) s, browser check $$browser"; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (see above)"; fi; \
	exit $$status

# The quick tier: what a change most often breaks, in about a minute on two cores. The full tier
# (make test) adds the emulated kernels, every build for every architecture, the book and the browser.
QUICK_TESTS = tests/test_registry.py tests/test_package.py tests/test_cache.py tests/test_api.py \
  tests/test_monoid.py tests/test_guards.py tests/test_worked_examples.py tests/test_extreme_properties.py \
  tests/test_fast.py tests/test_masked.py tests/test_logsumexp.py tests/test_softmax_topk.py tests/test_attention.py \
  tests/test_distributed.py \
  tests/test_extreme_rows.py tests/test_attention_extremes.py tests/test_graders.py \
  tests/exercises/test_python_graders.py tests/test_data.py tests/test_data_check.py tests/test_bench_command.py \
  tests/test_prose_numbers.py tests/test_readings.py tests/test_gpu_gating.py tests/test_softmax_backward.py \
  $(foreach k,softmax_02_online softmax_08_registers log_softmax_02_registers softmax_topk_04_online_fused attention_05_pipelined softmax_backward_01_rows,\
    "tests/test_kernels_compile.py::test_kernel_compiles_without_spills[$(k)]")

test-quick: $(PY_STAMP)
	$(RUN) $(VENV_BIN)/python -m pytest -m "not gpu" -q -n $(PYTEST_WORKERS) --dist worksteal $(QUICK_TESTS)

# The recorded suites the book cites against the sources they measured (exit 1 if any changed).
check-data: $(PY_STAMP)
	$(RUN) $(VENV_BIN)/python -m onlinesoftmax.measure.check_data

gpu-test: $(PY_STAMP)
	$(RUN) $(VENV_BIN)/python -m pytest -m gpu -n $(GPU_TEST_WORKERS) --dist loadgroup

serve:
	@if [ ! -f _build/html/index.html ]; then \
	  echo "_build/html/index.html does not exist yet: run 'make book' first"; exit 1; \
	fi
	@echo "Serving the book at http://127.0.0.1:$(PORT)/ (Ctrl-C stops it)"
	$(PYTHON) -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

# JupyterLab is not in requirements.txt (CI does not need it): installed into .venv on first use.
# jupytext (pinned in requirements.txt) registers its contents manager with the server, so
# chapters/*.md open as notebooks; LAB_OVERRIDES makes "Jupytext Notebook" the default viewer
# for Markdown files in this venv's JupyterLab (written once, never over an existing file).
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
lab: $(PY_STAMP)
	@if ! $(VENV_BIN)/python -c "import jupyterlab, jupytext" 2>/dev/null; then \
	  echo "--- JupyterLab is not installed in $(VENV) yet (it is not in requirements.txt):"; \
	  echo "--- installing it once with: $(VENV_BIN)/python -m pip install jupyterlab jupytext"; \
	  $(RUN) $(VENV_BIN)/python -m pip install jupyterlab jupytext; \
	fi
	@if [ ! -f $(LAB_OVERRIDES) ]; then \
	  mkdir -p $(dir $(LAB_OVERRIDES)); \
	  echo '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}' > $(LAB_OVERRIDES); \
	fi
	@echo "--- JupyterLab: open chapters/*.md; they open as notebooks (Open With > Editor shows the text)"
	$(RUN) $(VENV_BIN)/jupyter lab --port $(LAB_PORT) --notebook-dir=.

clean:
	rm -rf _build build .jupyter_cache

distclean: clean
	rm -rf $(VENV) node_modules

# --- set-up -----------------------------------------------------------------------------------

_setup: $(PY_STAMP) $(NODE_STAMP)

$(PY_STAMP): requirements.txt pyproject.toml
	@echo "--- Python environment: $(VENV) from requirements.txt"
	test -x $(VENV_BIN)/python || $(PYTHON) -m venv $(VENV)
	$(RUN) $(VENV_BIN)/python -m pip install -r requirements.txt
	touch $@

torch-cpu: $(TORCH_STAMP)

$(TORCH_STAMP): | $(PY_STAMP)
	@echo "--- torch $(TORCH_VERSION) (CPU) into $(TORCH_CPU), outside the venv's path (the gloo test of onlinesoftmax.distributed)"
	$(RUN) $(VENV_BIN)/python -m pip install --quiet --target $(TORCH_CPU) torch==$(TORCH_VERSION)
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

# GPU_TEST_WORKERS: pytest-xdist processes sharing the GPU in `make gpu-test` (tests/gpu/conftest.py
# keeps them within its memory); 12 ran the H200's tier in about five minutes.
GPU_TEST_WORKERS ?= 12

# pytest exits 5 when it collects no test; tolerated (with a warning) while the suite is empty.
# PYTEST_WORKERS: pytest-xdist processes (2: the CI machine's cores; 0 runs in this process).
PYTEST_WORKERS ?= 2
_pytest-cpu: _setup
	@echo "--- CPU test tier: pytest -m 'not gpu'"
	@set +e; $(RUN) $(VENV_BIN)/python -m pytest -m "not gpu" -n $(PYTEST_WORKERS) --dist worksteal; status=$$?; set -e; \
	if [ $$status -eq 5 ]; then echo "WARNING: pytest collected no tests (exit 5)"; status=0; fi; \
	exit $$status

# Strict: any warning or failing cell fails the build (-W --keep-going; raise_on_error in
# _config.yml). --all re-reads every page, so warnings from unchanged pages are not skipped.
# EXECUTE=force (CI, make test): every page executed afresh, as many at once as there are cores
# (jupyter-cache's local-parallel executor into an emptied cache), then the book built from that cache;
# a page whose execution failed is not cached, so the build runs it again and fails on it.
# A cell may run 120 s (the slowest whole page takes about 20 s here). Now and then one page of the
# parallel run stalls for exactly this timeout and then finishes (1,204 s under a 1,200 s timeout,
# 309 s under 300 s): the timeout bounds what such a stall costs.
# EXECUTE=cache: the copy of _config.yml with execute_notebooks: cache; unchanged chapters take their
# outputs from _build/.jupyter_cache.
_book-build: _setup
ifeq ($(EXECUTE),force)
	@echo "--- Executing every page in a fresh cache, as many at once as there are cores (jupyter-cache)"
	rm -rf $(FORCE_CACHE) && mkdir -p _build
	$(RUN) sh -c 'yes | $(VENV_BIN)/jcache notebook -p $(FORCE_CACHE) add -r myst_nb_md intro.md \
	  $$(grep -oE "chapters/[A-Za-z0-9_]+" _toc.yml | sed "s/$$/.md/")' > /dev/null
	$(RUN) $(VENV_BIN)/jcache project -p $(FORCE_CACHE) execute -e local-parallel -t 120 -v WARNING
	@echo "--- Building the book from those executions: jupyter-book build (strict; a page that failed above runs again here and fails the build)"
	$(VENV_BIN)/python -c 'import sys, yaml, pathlib; \
	c = yaml.safe_load(open("_config.yml")); \
	c.setdefault("execute", {}).update(execute_notebooks="cache", cache=str(pathlib.Path(sys.argv[2]).resolve())); \
	ext = c.get("sphinx", {}).get("local_extensions") or {}; \
	[ext.__setitem__(k, str(pathlib.Path(v).resolve())) for k, v in ext.items()]; \
	yaml.safe_dump(c, open(sys.argv[1], "w"), sort_keys=False)' $(FORCE_CONFIG) $(FORCE_CACHE)
	$(RUN) $(VENV_BIN)/jupyter-book build --warningiserror --keep-going --all --config $(FORCE_CONFIG) .
else
	@echo "--- Building the book: jupyter-book build (strict; only chapters whose cells changed are executed)"
	@mkdir -p _build
	$(VENV_BIN)/python -c 'import sys, yaml, pathlib; \
	c = yaml.safe_load(open("_config.yml")); \
	c.setdefault("execute", {})["execute_notebooks"] = "cache"; \
	ext = c.get("sphinx", {}).get("local_extensions") or {}; \
	[ext.__setitem__(k, str(pathlib.Path(v).resolve())) for k, v in ext.items()]; \
	yaml.safe_dump(c, open(sys.argv[1], "w"), sort_keys=False)' $(CACHE_CONFIG)
	$(RUN) $(VENV_BIN)/jupyter-book build --warningiserror --keep-going --all --config $(CACHE_CONFIG) .
endif

_browser-check: _setup
	@echo "--- Browser check: every page in headless chromium, offline"
	$(RUN) CHROMIUM="$(CHROMIUM)" $(VENV_BIN)/python tests/browser_check.py --processes $(BROWSER_PROCESSES)
