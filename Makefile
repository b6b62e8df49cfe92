# make demo : create .venv, install pipeprof, sweep scenarios/demo-sweep.toml (decode bottleneck and its fixes,
#             about three minutes), write the comparison page and every point's report under reports/
# make test : install what is missing, lint (ruff, mypy: zero findings), build the docs (mkdocs --strict, in
#             tests/test_docs.py), run the whole test suite (the unit tests on every core)
# make docs : build the docs site from docs/ into site/ (mkdocs-material; the command and summary.json references
#             are generated from the argparse parsers and the schema by docs/gen_reference.py, a mkdocs hook)
# make bench: run every benchmark (ratios measured side by side) and write BENCHMARKS.md
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.pipeprof-installed

.PHONY: install browser demo test lint docs bench gpu-check clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the project's dependencies change. The dependencies' modules are byte-compiled at install
# (with PYTHONDONTWRITEBYTECODE set, as on this machine and its CI, nothing compiled later is kept: every process
# the suite starts would compile torch from its sources, and the first pass took 649 s instead of 431 s), by
# compileall on every core rather than by pip on one (a fresh install 1:52 -> 1:15 on 2 cores); a module that does
# not compile (a package's Python 2 example) is left as pip leaves it.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --no-compile -e '.[test,pyspy]'
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null || true
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/pipeprof sweep scenarios/demo-sweep.toml --max-seconds 12

# tests/test_browser.py opens the pages in Debian's chromium, driven by Playwright (the test extra) through
# executable_path: `playwright install` is never run and no browser is downloaded. Chromium is installed here with
# apt when missing if we are root (CI) or have sudo without a password; else that test skips.
BROWSER_PACKAGES := chromium fonts-dejavu-core
browser:
	@if command -v chromium >/dev/null 2>&1 || [ -n "$$PIPEPROF_CHROMIUM" ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES); \
	elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES); \
	else echo "make: no chromium and no root for apt-get: tests/test_browser.py will be skipped (apt-get install $(BROWSER_PACKAGES))"; fi

# ruff (lint and import order) over everything (docs/ too), mypy over the whole pipeprof package; zero findings
lint: install
	$(VENV)/bin/ruff check pipeprof tests benchmarks docs
	$(VENV)/bin/mypy

# tests/test_docs.py runs `mkdocs build --strict` (into a temporary folder) as one of the suite's tests
# The whole suite in two passes. First every test not marked `serial`, unit and integration alike, on TEST_WORKERS
# pytest-xdist workers (one more than the cores this process may use: the workers spend much of their time waiting
# on the subprocesses they start; at most TEST_MAX_WORKERS: each worker holds torch, about 1 GiB; the runs several
# tests read are made once for all the workers, tests/support/shared.py). On 2 cores, the first pass took 469 s on 2
# workers (the lint beside them) and 431 s on 3 (alone), 398 s since. Then, alone, the `serial` tests: timings held to a
# known truth, and premises that need the machine's cores free. Both passes run; make fails if either failed.
# TEST_WORKERS=0 runs the first pass in one process too. A pass's failures are run once more, alone (pytest --lf),
# and fail make only if they fail again: on a shared 2-core machine a timed or sampled check can miss its bound under
# the load of the pass beside it (both lines say so in the output); a real defect fails both times.
# Overlapped where nothing is lost: chromium's packages (apt) install while pip installs the project, and the lint
# (ruff, mypy) runs beside the first pass at a lower priority (nice), in the time its workers wait on their
# subprocesses; its findings are printed after
# the pass and fail make as before. The serial pass starts once the lint is done: it needs the cores free.
PARALLEL := not serial
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(len(os.sched_getaffinity(0)) + 1)" 2>/dev/null || echo auto)
TEST_MAX_WORKERS ?= 8
test:
	@logs=$$(mktemp -d); \
	$(MAKE) --no-print-directory browser > $$logs/browser 2>&1 & browser=$$!; \
	$(MAKE) --no-print-directory install; installed=$$?; \
	wait $$browser; browsed=$$?; cat $$logs/browser; [ $$installed = 0 ] || exit $$installed; \
	[ $$browsed = 0 ] || exit $$browsed; \
	nice -n 10 $(MAKE) --no-print-directory lint > $$logs/lint 2>&1 & lint=$$!; \
	status=0; \
	if [ "$(TEST_WORKERS)" = 0 ]; then $(PY) -m pytest -p no:xdist -m "$(PARALLEL)" || status=$$?; \
	else $(PY) -m pytest -n $(TEST_WORKERS) --maxprocesses $(TEST_MAX_WORKERS) --dist loadgroup -m "$(PARALLEL)" \
	  || status=$$?; fi; \
	if [ $$status != 0 ]; then echo "make: the first pass's failures, again, alone (one that passes now failed under the pass's load)"; \
	  $(PY) -m pytest -p no:xdist --lf --lfnf=none -m "$(PARALLEL)" && status=0; fi; \
	wait $$lint || status=$$?; cat $$logs/lint; \
	serial=0; $(PY) -m pytest -p no:xdist -m "not ($(PARALLEL))" || serial=$$?; \
	if [ $$serial != 0 ]; then echo "make: the serial pass's failures, once more (sampled and timed checks on a shared machine)"; \
	  $(PY) -m pytest -p no:xdist --lf --lfnf=none -m "not ($(PARALLEL))" && serial=0; fi; \
	[ $$serial = 0 ] || status=$$serial; \
	rm -rf $$logs; exit $$status

docs: install
	$(VENV)/bin/mkdocs build --strict --site-dir site

bench: install
	$(PY) benchmarks/publish.py

# every CUDA path on this machine's GPU, invariants checked (about 5 minutes on one GPU; without CUDA every
# check is skipped with the reason and it exits 0): reports/gpu-check.json and a table; exit 1 when a check fails
gpu-check: install
	$(PY) -m pipeprof.gpu_check --out reports/gpu-check.json

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache
