# make demo : create .venv, install pipeprof, profile the default scenario, write a report under reports/
# make test : install what is missing, run the whole test suite
# make bench: run the benchmarks (ratios measured side by side)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.pipeprof-installed

.PHONY: install demo test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the project's dependencies change.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/pipeprof run scenarios/quick.toml

test: install
	$(PY) -m pytest

bench: install
	$(PY) benchmarks/overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
