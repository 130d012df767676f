# Two commands do all set-up on a fresh machine: `make test` and `make bench`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTEST_ARGS ?=
# Two pytest-xdist workers (the CI box has 2 cores); `make test PYTEST_PARALLEL=` runs serially.
PYTEST_PARALLEL ?= -n 2

.PHONY: test lint bench smoke venv install-test install-bench peers debian-data report clean \
	notebooks install-docs docs docs-serve docs-check chromium results plan device-check

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

venv: $(PY)

install-test: $(PY)
	$(PIP) install -q -e '.[tests,data]'

install-bench: $(PY)
	$(PIP) install -q -e '.[bench,peers,data]'

# Peer libraries that need more than pip (runs after install-bench; never fails the bench).
# confseq: C++ extension; needs libboost-dev, current pybind11/scikit-build/cmake/ninja in the
# venv and --no-build-isolation. On failure the benchmark records "not installed" and runs on.
peers: install-bench
	@$(PY) -c "import numpy as np; np.float_ = np.float64; import confseq.betting" >/dev/null 2>&1 && exit 0; \
	if command -v apt-get >/dev/null 2>&1 && ! dpkg -s libboost-dev >/dev/null 2>&1; then \
	  (apt-get install -y -q libboost-dev >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libboost-dev >/dev/null 2>&1)) \
	    || echo "WARNING: could not install libboost-dev (run as root: apt-get install libboost-dev)"; \
	fi; \
	($(PIP) install -q pybind11 scikit-build cmake ninja setuptools wheel \
	  && $(PIP) install -q --no-build-isolation 'confseq>=0.0.11') >/dev/null 2>&1 \
	  || echo "WARNING: could not build the peer confseq; confseq_multivariate records it as not installed"; \
	true

# Optional Debian text corpora (offline benchmark text); a failure only disables those corpora.
debian-data:
	@if command -v apt-get >/dev/null 2>&1; then \
	  missing=""; for p in bible-kjv fortunes dict-jargon; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian corpora:$$missing"; \
	    (apt-get install -y -q $$missing >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q $$missing >/dev/null 2>&1)) \
	      || echo "WARNING: could not install Debian packages$$missing; the corpora they ship are skipped (run as root: apt-get install$$missing)"; \
	  fi; \
	else echo "WARNING: no apt-get; Debian corpora (bible-kjv, fortunes, dict-jargon) are skipped"; fi

# The slowest units are listed in every run (CI logs included) to keep the test budget visible.
test: install-test
	$(PY) -m pytest -q $(PYTEST_PARALLEL) --durations=25 $(PYTEST_ARGS)

# Re-execute the notebooks in place (stored with outputs and figures; tools/notebooks.py records a
# hash of their code cells that the fast test checks). `make notebooks NOTEBOOKS=notebooks/flows`
# runs some; NOTEBOOKS_ARGS=--stale only those whose code changed; NOTEBOOKS_JOBS kernels at a time.
NOTEBOOKS ?=
NOTEBOOKS_ARGS ?=
NOTEBOOKS_JOBS ?= 2
notebooks: install-test
	$(PY) tools/notebooks.py --jobs $(NOTEBOOKS_JOBS) $(NOTEBOOKS_ARGS) $(NOTEBOOKS)

# ruff lint and format check over the code (configuration in pyproject.toml); CI runs it first.
lint: $(PY)
	$(PIP) install -q 'ruff>=0.5'
	$(VENV)/bin/ruff check jaxgen benchmarks tests tools
	$(VENV)/bin/ruff format --check jaxgen benchmarks tests tools

# A benchmark that cannot run is reported (and makes `make bench` exit non-zero), but never
# stops the others or the report.
bench: install-bench peers debian-data
	@status=0; $(PY) -m benchmarks run all --quick || status=$$?; \
	$(PY) -m benchmarks report; exit $$status

# Every benchmark's --full code path at minimal sizes (SMOKE overrides): catches --full bugs on
# a CPU; results go to results/smoke/ and are never reported as results.
smoke: install-bench peers debian-data
	$(PY) -m benchmarks run all --full --smoke

report: $(PY)
	$(PY) -m benchmarks report

# Compile (never run) every benchmark's --full training step on the CPU: FLOPs, peak memory and
# an H100/H200 roofline per run in results/PLAN.md (`make plan BENCH=NAME` for one).
plan: install-bench
	$(PY) -m benchmarks plan $(BENCH)

# One prepared check for a machine with an accelerator (also runs on a CPU): the gpu-marked
# tests, every benchmark's --full --smoke and the three heaviest quick runs, in results/device/.
device-check: install-bench install-test peers debian-data
	$(PY) -m benchmarks device-check

# Committed quick-run results (benchmarks/quick/: NAME.json, NAME.md, NAME_*.png), read by the
# docs' Results pages and the README's methods table. `make results` reruns every benchmark in
# quick mode and refreshes them; `make results BENCH=NAME` refreshes one.
BENCH ?= all
results: install-bench peers debian-data
	@rm -rf results/quick-refresh; status=0; \
	$(PY) -m benchmarks run $(BENCH) --quick --out results/quick-refresh || status=$$?; \
	$(PY) tools/docs_results.py --import-runs results/quick-refresh --readme; exit $$status

# The documentation site (mkdocs.yml, docs/, tools/mkdocs_hooks.py): `make docs` builds it into
# site/ with --strict (a broken link, a missing reference or a docstring that does not parse
# fails); `make docs-serve` serves it on 127.0.0.1:8000; `make docs-check` loads every page in
# headless Chromium (Debian's package; playwright drives it, never downloading a browser).
# KaTeX comes from the npm registry (pinned, cached in .cache/).
install-docs: $(PY)
	$(PIP) install -q -e '.[docs]'

docs: install-docs
	$(PY) -m mkdocs build --strict

docs-serve: install-docs
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q chromium)

docs-check: docs chromium
	$(PY) tools/docs_check.py --site site --out results/docs-check

clean:
	rm -rf $(VENV) results site
