# Two commands on a fresh machine: `make demo` (autograde the sample submissions) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.genlab-installed

.PHONY: venv demo test lab release outputs samples clean

$(STAMP): requirements/ci.txt pyproject.toml
	bash .ci/system-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/ci.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

release: venv  ## regenerate labs/ from solutions/ (nbgrader generate_assignment)
	$(VENV)/bin/genlab release

outputs: venv  ## rerun the solution notebooks and store the outputs nbval compares
	$(VENV)/bin/genlab release --outputs

samples: release  ## regenerate autograder/samples/ from autograder/sample_defs/
	$(PY) -m autograder.sample_submissions > /dev/null

demo: samples  ## autograde the sample submissions and print the gradebook
	$(VENV)/bin/genlab grade autograder/samples --out out/demo --workers 2 --cell-timeout 20

test: venv  ## the whole suite: unit tests, grading of the samples, nbval over the notebooks
	GENLAB_TEST_PG_URL="$${GENLAB_TEST_PG_URL:-$$(bash .ci/postgres.sh || true)}" \
	$(PY) -m pytest -q -p no:cacheprovider --nbval-lax --nbval-sanitize-with .ci/nbval-sanitize.cfg \
		tests solutions autograder/samples/reference

lab: venv  ## JupyterLab on the student notebooks
	$(VENV)/bin/jupyter lab labs/

clean:
	rm -rf out .pytest_cache
