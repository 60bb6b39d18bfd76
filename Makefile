# Two commands do everything on a fresh machine:
#   make run    the main job (meanfield validate: report, data and figures in output/validate)
#   make test   the test suite (what CI runs)
# Set-up (FFTW, the virtual environment, the package) happens once; a second call reuses it.

VENV ?= .venv

.PHONY: run test test-all bench setup
setup:
	@bash scripts/setup.sh

run: setup
	$(VENV)/bin/meanfield validate

test: setup
	$(VENV)/bin/python -m pytest -m "not slow" -q

test-all: setup
	$(VENV)/bin/python -m pytest -q

bench: setup
	$(VENV)/bin/python benchmarks/run.py
