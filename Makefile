# Two commands on a fresh machine: `make demo` (autograde the sample submissions) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.genlab-installed

.PHONY: venv demo demo-all test test-equivalence lab release outputs samples clean audit sentinels bundle docs

$(STAMP): requirements/ci.txt requirements/tests-only.txt pyproject.toml
	bash .ci/system-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/ci.txt
	$(PY) -m pip install -q --no-deps --upgrade --target $(VENV)/tests-only -r requirements/tests-only.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

release: venv  ## regenerate labs/ from solutions/ (nbgrader generate_assignment)
	$(VENV)/bin/genlab release

outputs: venv  ## rerun the solution notebooks and store the outputs nbval compares
	$(VENV)/bin/genlab release --outputs

bundle: venv  ## what students of a graded class receive: out/student (notebooks, a wheel, a README), checked for leaks
	$(VENV)/bin/genlab release --student-bundle out/student

# Offline, from README.md, docs/*.md and labs/<lab>/<lab>.ipynb only; exits 1 if a page holds a solution.
docs: venv  ## the course as a static site (Sphinx, MyST, myst-nb: autograder/release/site.py) in out/site, checked for leaks
	$(PY) -m autograder.release.site out/site

samples: release  ## regenerate autograder/samples/ from each lab's solutions/<lab>/samples.py
	$(PY) -m autograder.release.sample_submissions > /dev/null

demo: venv  ## autograde a representative set of the samples (reference, bugs, attacks, faults); print the gradebook
	$(PY) -m autograder.demo --out out/demo

demo-all: venv  ## autograde every sample submission
	$(PY) -m autograder.demo --all --out out/demo-all

# Two pytest workers, a file each at a time (--dist loadfile keeps a notebook's cells and a module's shared
# fixtures together): the single-threaded parts (nbval, the browser, the cluster) overlap the grading runs.
# --no-loadscope-reorder: the files go out longest first, in the order tests/conftest.py's LONGEST_FIRST gives.
# The student notebooks with the reference filled in are run by the browser tests (tests/test_browser.py).
# One torch thread per process: on 2 shared cores, two threads per kernel made the notebooks up to 8x slower.
test: venv  ## the whole suite: unit tests, grading of the samples, browser and cluster tests, nbval over the solutions
	bash .ci/system-deps.sh  # idempotent: an older venv may predate a system package or the kernel user
	OMP_NUM_THREADS=1 GENLAB_STRICT_READINGS=1 bash .ci/with-postgres.sh \
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder --durations=15 \
		--nbval-lax --nbval-sanitize-with .ci/nbval-sanitize.cfg tests solutions

test-equivalence: venv  ## every sample graded in both modes (default and --full-run): identical grades (~30 min)
	GENLAB_EQUIVALENCE=all OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider \
		tests/test_grading.py -k full_run

# Mutation audit of every lab's own tests (docs/lab-author-guide.md, "Auditing a lab's tests"); ARGS=--max-mutants 20 for a quick look.
audit: venv  ## which small bugs in each reference solution do the lab's tests let through? writes out/audit.json
	OMP_NUM_THREADS=1 $(VENV)/bin/genlab audit all --quiet --json out/audit.json $(ARGS)

# After a lab's tests or reference change: the mutants one assertion alone catches, which make test checks.
sentinels: venv  ## rewrite solutions/<lab>/sentinels.json from a whole audit
	OMP_NUM_THREADS=1 $(VENV)/bin/genlab audit all --quiet --write-sentinels --json out/audit.json

lab: venv  ## JupyterLab on the student notebooks
	$(VENV)/bin/jupyter lab labs/

.PHONY: screenshots
screenshots: venv  ## regenerate docs/screenshots/ (each lab's widget in JupyterLab, the class report's analyses, from the browser tests)
	GENLAB_SCREENSHOTS=$(CURDIR)/docs/screenshots $(PY) -m pytest -q -p no:cacheprovider tests/test_browser.py -k "widget or class_report_page"

.PHONY: gpu-check
# No venv dependency: a GPU machine brings its own CUDA torch (GPU_PYTHON=python in a conda env); the venv's
# CPU torch is enough for ARGS=--dry-run, which lists the checks on any machine.
gpu-check:  ## everything a GPU machine should prove, one command (.ci/gpu-check); writes gpu-report.md
	$(or $(GPU_PYTHON),$(wildcard $(PY)),$(PYTHON)) .ci/gpu-check $(ARGS)

.PHONY: image image-check
# Not part of `make test`: minutes of building (docs/instructor-guide.md, "The grading image"). podman with runc;
# IMAGE_BASE=official|local|<image> (default: the official Python image if a registry gives it, else a local
# Debian base that deploy/image/base.sh builds with mmdebstrap); IMAGE names the result.
image:  ## build the grading image (Dockerfile) with podman: deploy/image/build.sh
	bash deploy/image/build.sh

image-check: venv  ## grade the demo's submissions in the image and outside, compare grades.csv; the platforms' entry points in it
	OMP_NUM_THREADS=1 $(PY) deploy/image/check.py

clean:
	rm -rf out .pytest_cache
