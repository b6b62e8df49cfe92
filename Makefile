# make demo : create .venv, install pipeprof, sweep scenarios/demo-sweep.toml (decode bottleneck and its fixes,
#             about three minutes), write the comparison page and every point's report under reports/
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
	$(PY) -m pip install --quiet -e '.[test,pyspy]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/pipeprof sweep scenarios/demo-sweep.toml --max-seconds 12

test: install
	$(PY) -m pytest

bench: install
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/codeprofile.py
	$(PY) benchmarks/predict.py
	$(PY) benchmarks/tune.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
